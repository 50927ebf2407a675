"""Tests for gpuguide.chapters.compiling: compiler start-up and the recompilation log."""

from __future__ import annotations

import logging
import time

import pytest
import torch

from gpuguide.chapters.compiling import (
    CompilerStart,
    first_calls_s,
    passes,
    print_recompiles,
    recording,
    start_compiler,
)


def test_compiler_start_summary_names_every_step():
    start = CompilerStart(
        import_s=2.0, workers=4, workers_s=0.5, first_compile_s=0.012, caught=()
    )
    text = str(start)
    assert text.startswith("compiler ready:")
    assert "import 2.00 s" in text
    assert "4 compile worker(s) 500 ms" in text
    assert "first compilation 12.0 ms" in text


def test_compiler_start_is_frozen():
    start = CompilerStart(1.0, 1, 0.0, 1.0)
    with pytest.raises(AttributeError):
        start.workers = 2  # type: ignore[misc]
    assert start.caught == ()


def test_start_compiler_times_each_step_and_leaves_no_graphs():
    start = start_compiler("cpu")
    assert start.workers >= 1
    for seconds in (start.import_s, start.workers_s, start.first_compile_s):
        assert seconds >= 0
    assert start.first_compile_s > 0
    assert all(": " in text for text in start.caught)
    assert len(set(start.caught)) == len(start.caught)
    # The one-line compilation is forgotten: the next compile starts afresh.
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    torch.compile(torch.sin)(torch.ones(8))
    assert counters["stats"]["unique_graphs"] == before + 1
    torch._dynamo.reset()


def test_print_recompiles_prints_the_guard_that_failed(capsys):
    def double(x):
        return x * 2

    compiled = torch.compile(double, dynamic=False)
    torch._dynamo.reset()
    try:
        with print_recompiles(prefix="LOG: "):
            compiled(torch.ones(3))
            compiled(torch.ones(5))
    finally:
        torch._dynamo.reset()
    out = capsys.readouterr().out
    assert "LOG: Recompiling function double" in out
    assert "size mismatch at index 0. expected 3, actual 5" in out


def _printers(log):
    return [h for h in log.handlers if h.__class__.__name__ == "_PrintHandler"]


def test_print_recompiles_keeps_other_handlers_and_cleans_up_on_error():
    dynamo_log = logging.getLogger("torch._dynamo")
    mine = logging.NullHandler()
    dynamo_log.addHandler(mine)
    seen = []

    def fail_inside():
        with print_recompiles():
            seen.append((mine in dynamo_log.handlers, len(_printers(dynamo_log))))
            raise RuntimeError("inside")

    try:
        before = len(dynamo_log.handlers)
        with pytest.raises(RuntimeError, match="inside"):
            fail_inside()
        assert seen == [(True, 1)]
        assert mine in dynamo_log.handlers
        assert len(dynamo_log.handlers) == before
        assert _printers(dynamo_log) == []
    finally:
        dynamo_log.removeHandler(mine)


def _chain(x, depth):
    for _ in range(depth):
        x = torch.sin(x)
    return x


@pytest.mark.parametrize("depth", [1, 3])
def test_passes_counts_top_level_operators_on_the_cpu(depth):
    names = passes(_chain, torch.ones(64), depth, device="cpu")
    assert names == ["aten::sin"] * depth
    # Operators called by other operators, and allocations, are not passes.
    assert passes(
        torch.nn.functional.linear, torch.ones(2, 4), torch.ones(3, 4), device="cpu"
    ) in (["aten::linear"],)


def test_first_calls_s_times_that_many_calls():
    calls = []

    def slow(x):
        calls.append(x)
        time.sleep(0.01)

    seconds = first_calls_s(slow, 7, device="cpu", calls=4)
    assert calls == [7] * 4
    assert 0.04 <= seconds < 1.0


def test_recording_keeps_warnings_by_phase():
    import warnings

    caught = {}
    with recording(caught, "one"):
        warnings.warn("first", DeprecationWarning, stacklevel=1)
        warnings.warn("first", DeprecationWarning, stacklevel=1)  # both are kept
    with recording(caught, "two"):
        pass
    with recording(caught, "one"):
        warnings.warn("again", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught["one"]] == ["first", "first", "again"]
    assert caught["two"] == []


def test_compiler_start_prints_the_warnings_it_caught():
    start = CompilerStart(1.0, 2, 0.5, 0.25, caught=("DeprecationWarning: old",))
    first, second = str(start).splitlines()
    assert first.startswith("compiler ready: import 1.00 s")
    assert second == "caught while importing inductor (torch's own code): " + (
        "DeprecationWarning: old"
    )
