"""gpuguide.chapters.allocator: settings read back, fragmentation, loss memory; and
the hidden-memory page's chunked cross-entropy against the full one."""

from __future__ import annotations

import ast

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from torch.utils.checkpoint import checkpoint

from gpuguide.chapters import allocator

PAGE = ROOT / "examples" / "04_memory" / "plot_hidden_memory.py"


def test_a_snapshots_settings_are_read_back_as_they_are():
    snapshot = {"segments": [], "allocator_settings": {"expandable_segments": True}}
    settings = allocator.allocator_settings(snapshot)
    assert settings == {"expandable_segments": True}
    assert allocator.expandable(settings)


def test_without_a_snapshot_the_parsed_string_is_read_back(monkeypatch):
    text = "expandable_segments:True, max_split_size_mb:128"
    monkeypatch.setattr(
        torch._C, "_accelerator_getAllocatorSettings", lambda: text, raising=False
    )
    settings = allocator.allocator_settings({"segments": []})
    assert settings == {"expandable_segments": "True", "max_split_size_mb": "128"}
    assert allocator.expandable(settings)
    monkeypatch.setattr(torch._C, "_accelerator_getAllocatorSettings", lambda: "")
    assert allocator.allocator_settings() == {}
    assert not allocator.expandable(allocator.allocator_settings())


def test_a_torch_without_the_getter_reads_back_nothing(monkeypatch):
    monkeypatch.delattr(torch._C, "_accelerator_getAllocatorSettings", raising=False)
    assert allocator.allocator_settings() == {}
    assert not allocator.expandable({"expandable_segments": False})


@pytest.mark.parametrize("name", allocator.NAMES)
def test_a_fresh_process_reads_back_the_variable_it_was_given(name, monkeypatch):
    # The other name, set in this process, must not reach the child.
    other = next(n for n in allocator.NAMES if n != name)
    monkeypatch.setenv(other, "expandable_segments:True")
    assert not allocator.expandable(allocator.run_fresh({})["settings"])
    got = allocator.run_fresh({name: "expandable_segments:True"})["settings"]
    assert allocator.expandable(got), got


def test_fragmentation_is_the_unused_share_of_reserved_memory():
    assert allocator.fragmentation(100, 75) == pytest.approx(0.25)
    assert allocator.fragmentation(2**30, 2**30) == 0.0
    for reserved, allocated in ((0, 0), (100, 101), (100, -1)):
        with pytest.raises(ValueError, match="allocated <= reserved"):
            allocator.fragmentation(reserved, allocated)


def test_a_runs_summary_gives_its_peaks_fragmentation_and_median_step():
    run = {
        "settings": {"expandable_segments": True},
        "allocated": [2**20, 3 * 2**20],
        "reserved": [2**21, 4 * 2**20],
        "step_s": [0.001, 0.003, 0.002],
        "retries": 2,
    }
    row = allocator.summary(run)
    assert row["fragmentation"] == "25%"
    assert row["median step (ms)"] == "2.0"
    assert row["retries"] == 2
    assert row["expandable (read back)"] is True


def test_the_cpu_peak_counts_tensors_alive_at_once():
    def two_at_once():
        a = torch.ones(2**20)  # 4 MiB each
        b = torch.ones(2**20)
        del a, b

    def one_at_a_time():
        for _ in range(2):
            torch.ones(2**20)

    assert allocator.tensor_peak_bytes(two_at_once, "cpu") == 8 * 2**20
    assert allocator.tensor_peak_bytes(one_at_a_time, "cpu") == 4 * 2**20


def _page_losses(namespace):
    """The page's loss functions, defined in ``namespace`` (its globals)."""
    tree = ast.parse(PAGE.read_text())
    wanted = {"full_loss", "chunk_loss", "chunked_loss"}
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    assert {d.name for d in defs} == wanted
    exec(compile(ast.Module(defs, type_ignores=[]), str(PAGE), "exec"), namespace)
    return namespace["full_loss"], namespace["chunked_loss"]


def test_the_pages_chunked_loss_equals_the_full_one_with_its_gradients():
    torch.manual_seed(0)
    tokens, width, vocab = 96, 16, 1000  # 8 chunks of 12 tokens
    hidden = torch.randn(tokens, width, requires_grad=True)
    weight = torch.randn(vocab, width, requires_grad=True)
    targets = torch.randint(vocab, (tokens,))
    namespace = {"F": F, "checkpoint": checkpoint, "tokens": tokens}
    namespace |= {"hidden": hidden, "weight": weight, "targets": targets}
    full_loss, chunked_loss = _page_losses(namespace)
    results = []
    for loss_fn in (full_loss, chunked_loss):
        hidden.grad = weight.grad = None
        loss = loss_fn()
        loss.backward()
        results.append((loss.detach(), hidden.grad, weight.grad))
    for full, chunked in zip(*results, strict=True):
        torch.testing.assert_close(chunked, full, rtol=1e-5, atol=1e-6)
    assert results[0][0] > 1.0  # a real loss, not zeros compared with zeros
