"""gpuguide.chapters.allocator: settings read back, fragmentation, loss memory; and
the hidden-memory page's chunked cross-entropy against the full one."""

from __future__ import annotations

import ast

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT

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


def test_a_runs_summary_gives_its_peaks_fragmentation_and_median_step():
    run = {
        "settings": {"expandable_segments": True},
        "allocated": [2**20, 3 * 2**20],
        "reserved": [2**21, 4 * 2**20],
        "step_s": [0.001, 0.003, 0.002],
        "retries": 2,
    }
    row = allocator.summary(run)
    assert row["fragmentation"] == "25%"  # (4 - 3) / 4 MiB, at the peaks
    assert row["peak reserved"] == "4.00 MiB"
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


def _page_losses():
    """The page's ``ChunkedCrossEntropy.apply`` and ``full_loss``, defined here."""
    tree = ast.parse(PAGE.read_text())
    wanted = {"ChunkedCrossEntropy", "full_loss"}
    defs = [n for n in tree.body if getattr(n, "name", None) in wanted]
    assert {d.name for d in defs} == wanted
    namespace = {"torch": torch, "F": F}
    exec(compile(ast.Module(defs, type_ignores=[]), str(PAGE), "exec"), namespace)
    return namespace["ChunkedCrossEntropy"].apply, namespace["full_loss"]


def _loss_and_grads(loss_fn, hidden, weight, targets, scale=1.0):
    leaves = [x.detach().requires_grad_() for x in (hidden, weight)]
    loss = loss_fn(*leaves, targets)
    (loss * scale).backward()
    return loss.detach(), leaves[0].grad, leaves[1].grad


def _problem(tokens, width, vocab, dtype=torch.float32):
    torch.manual_seed(0)
    hidden = torch.randn(tokens, width, dtype=dtype)
    weight = (torch.randn(vocab, width) / width**0.5).to(dtype)
    return hidden, weight, torch.randint(vocab, (tokens,))


@pytest.mark.parametrize("tokens", [96, 101])  # 4 equal chunks; 3 of 26 and 23
def test_the_pages_chunked_loss_equals_the_full_one_with_its_gradients(tokens):
    chunked_loss, full_loss = _page_losses()
    problem = _problem(tokens, 16, 1000)
    full = _loss_and_grads(full_loss, *problem)
    chunked = _loss_and_grads(chunked_loss, *problem)
    for got, want in zip(chunked, full, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert full[0] > 1.0  # a real loss, not zeros compared with zeros
    assert full[2].abs().max() > 1e-4


def test_a_confident_wrong_guess_gives_a_finite_loss():
    # Per-token losses of hundreds: a softmax probability underflows to 0 there,
    # so a loss taken as log(softmax) would be infinite; log_softmax's is not.
    chunked_loss, full_loss = _page_losses()
    hidden, weight, targets = _problem(32, 16, 500)
    full = _loss_and_grads(full_loss, 100 * hidden, weight, targets)
    chunked = _loss_and_grads(chunked_loss, 100 * hidden, weight, targets)
    assert full[0] > 100
    for got, want in zip(chunked, full, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_its_backward_scales_the_gradients_by_the_incoming_one():
    chunked_loss, _ = _page_losses()
    problem = _problem(64, 8, 500)
    once = _loss_and_grads(chunked_loss, *problem)
    thrice = _loss_and_grads(chunked_loss, *problem, scale=3.0)
    for got, want in zip(thrice[1:], once[1:], strict=True):
        torch.testing.assert_close(got, 3 * want)


def test_in_bf16_it_agrees_with_the_full_loss_to_bf16_precision():
    # The GPU run's dtype: the gradients come back in bf16, close to float32's.
    chunked_loss, full_loss = _page_losses()
    problem = _problem(128, 32, 2000, torch.bfloat16)
    chunked = _loss_and_grads(chunked_loss, *problem)
    exact = _loss_and_grads(full_loss, *(x.float() for x in problem[:2]), problem[2])
    assert [g.dtype for g in chunked[1:]] == [torch.bfloat16, torch.bfloat16]
    for got, want in zip(chunked, exact, strict=True):
        torch.testing.assert_close(
            got.float(), want, rtol=2e-2, atol=2e-2 * want.abs().max().item()
        )


def test_its_peak_memory_is_a_fraction_of_the_full_ones():
    chunked_loss, full_loss = _page_losses()
    problem = _problem(256, 16, 8192)  # logits: 8 MiB; the weight: 0.5 MiB
    peaks = [
        allocator.tensor_peak_bytes(lambda f=f: _loss_and_grads(f, *problem), "cpu")
        for f in (chunked_loss, full_loss)
    ]
    assert peaks[1] >= 3 * 8 * 2**20  # logits, their log-softmax and gradient
    assert peaks[0] <= peaks[1] / 3  # two chunks' worth of the logits, and grads


def test_each_runs_segment_map_has_a_row_per_segment_and_a_bar_per_block():
    import matplotlib.pyplot as plt

    runs = {
        "default": {"segments": [[(0, 2**21, True), (2**21, 2**20, False)]]},
        "expandable": {"segments": [[(0, 2**20, True)], [(0, 2**22, False)]]},
    }
    fig, axes = plt.subplots(1, 2)
    allocator.draw_segments(axes, runs)
    assert [ax.get_title() for ax in axes] == [
        "default: 1 segments",
        "expandable: 2 segments",
    ]
    bars = axes[0].collections[0].get_paths()
    assert len(bars) == 2  # two blocks in the one segment
    assert [len(ax.collections) for ax in axes] == [1, 2]
    plt.close(fig)


def test_read_back_gives_each_names_settings_from_its_own_process():
    got = allocator.read_back("expandable_segments:True")
    assert list(got) == list(allocator.NAMES)
    assert all(allocator.expandable(settings) for settings in got.values()), got
