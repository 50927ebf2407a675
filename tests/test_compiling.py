"""Tests for gpuguide.chapters.compiling: compiler start-up, its output kept off the
page, passes, first calls, and host and GPU times."""

from __future__ import annotations

import logging
import sys
import warnings

import pytest
import torch

from gpuguide.chapters import compiling
from gpuguide.chapters.compiling import (
    CompilerLog,
    CompilerStart,
    capture_compiler,
    start_compiler,
)
from gpuguide.timing import Measurement, StepTimes


def test_compiler_start_summary_names_every_step():
    start = CompilerStart(import_s=2.0, workers=4, workers_s=0.5, first_compile_s=0.012)
    text = str(start)
    assert text.startswith("compiler ready:")
    assert "import 2.00 s" in text
    assert "4 compile worker(s) 500 ms" in text
    assert "first compilation 12.0 ms" in text


def test_compiler_start_is_frozen():
    start = CompilerStart(1.0, 1, 0.0, 1.0)
    with pytest.raises(AttributeError):
        start.workers = 2  # type: ignore[misc]
    assert start.logged == ""


def test_start_compiler_times_each_step_and_leaves_no_graphs():
    start = start_compiler("cpu")
    assert start.workers >= 1
    for seconds in (start.import_s, start.workers_s, start.first_compile_s):
        assert seconds >= 0
    assert start.first_compile_s > 0
    assert "\n" not in start.logged
    # The one-line compilation is forgotten: the next compile starts afresh.
    from torch._dynamo.utils import counters

    before = counters["stats"]["unique_graphs"]
    torch.compile(torch.sin)(torch.ones(8))
    assert counters["stats"]["unique_graphs"] == before + 1
    torch._dynamo.reset()


def test_compiler_start_prints_what_torch_logged_on_one_line():
    start = CompilerStart(1.0, 2, 0.5, 0.25, logged="1 log message(s) (first: x)")
    assert str(start).splitlines()[1:] == [
        "caught while starting the compiler: 1 log message(s) (first: x)"
    ]
    assert len(str(CompilerStart(1.0, 2, 0.5, 0.25)).splitlines()) == 1


def _torch_warning(message, category=UserWarning):
    """A warning as torch raises one about its own code (attributed to torch)."""
    warnings.warn_explicit(
        message, category, "torch/profiler/profiler.py", 1, module="torch.profiler"
    )


_TABLE = """AUTOTUNE addmm(2048x768, 2048x256, 256x768)
strides: [0, 1], [256, 1], [1, 256]
dtypes: torch.float32, torch.float32, torch.float32
  triton_mm_14 0.0110 ms 100.0% BLOCK_K=32
  mm 0.0116 ms 94.8%
SingleProcess AUTOTUNE benchmarking takes 12.0 seconds and 0.5 seconds precompiling for {n} choices
"""


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_capture_compiler_keeps_tables_logs_and_warnings_off_the_page(capsys):
    inductor = logging.getLogger("torch._inductor")
    mine = _Collect()
    inductor.addHandler(mine)
    try:
        with capture_compiler() as log:
            sys.stderr.write(_TABLE.format(n=22) + _TABLE.format(n=21))
            logging.getLogger("torch._inductor.select_algorithm").error(
                "Runtime error during autotuning: \nNo valid triton configs.\nIgnoring."
            )
            logging.getLogger("torch._inductor").error("")  # nothing to show
            _torch_warning("TypedStorage is deprecated")
            warnings.warn("yours", UserWarning, stacklevel=1)
            warnings.warn("yours", UserWarning, stacklevel=1)
        assert capsys.readouterr().err == ""
        inductor.error("after the block")
    finally:
        inductor.removeHandler(mine)
    assert mine.messages == ["after the block"]  # held back inside only
    assert log.stderr.count("AUTOTUNE addmm") == 2
    assert [r.getMessage().splitlines()[1] for r in log.records] == [
        "No valid triton configs."
    ]
    assert log.warnings == ["UserWarning: yours"]
    line = str(log)
    assert "\n" not in line
    assert line.startswith(
        "max-autotune benchmarked 21-22 kernels for each of 2 matmul(s) in 25.0 s; "
        "1 log message(s) (first: Runtime error during autotuning:"
    )
    assert line.endswith("; 1 warning(s): UserWarning: yours")


def test_compiler_log_sums_up_nothing_as_nothing_and_other_output_as_lines():
    assert str(CompilerLog()) == ""
    assert str(CompilerLog(stderr="a\nb\n")) == "the compiler wrote 2 line(s) to stderr"
    one = CompilerLog(stderr=_TABLE.format(n=7))
    assert (
        str(one)
        == "max-autotune benchmarked 7 kernels for each of 1 matmul(s) in 12.5 s"
    )


def test_capture_compiler_restores_stderr_and_handlers_on_error():
    stderr = sys.stderr
    filters = {id(h): list(h.filters) for h in logging.getLogger("torch").handlers}
    with pytest.raises(RuntimeError, match="inside"), capture_compiler():
        raise RuntimeError("inside")
    assert sys.stderr is stderr
    assert {id(h): h.filters for h in logging.getLogger("torch").handlers} == filters


class InvalidCxxCompiler(RuntimeError):
    """Stands in for torch._inductor.exc.InvalidCxxCompiler (matched by name)."""


def _compiled_without_a_compiler(*args):
    # What a compiled call raises: dynamo's error, caused by inductor's.
    try:
        raise InvalidCxxCompiler("No working C++ compiler found")
    except InvalidCxxCompiler as error:
        raise RuntimeError("backend='inductor' raised:\nlong text") from error


@pytest.mark.parametrize(
    "fn",
    [
        _compiled_without_a_compiler,
        lambda x: (_ for _ in ()).throw(
            RuntimeError("Failed to find C compiler. Please specify via CC")
        ),
    ],
    ids=["inductor", "triton"],
)
def test_a_missing_compiler_says_what_to_install(fn):
    with pytest.raises(RuntimeError) as error, compiling._needs_a_compiler():
        fn(torch.ones(2))
    text = str(error.value)
    assert text.startswith(compiling._NO_COMPILER)
    assert "apt install g++" in text
    assert error.value.__cause__ is None  # one error, not torch's chain
    assert text.count("\n") == 0


def test_other_errors_pass_through_unchanged():
    def broken(x):
        raise ValueError("a shape mismatch")

    with (
        pytest.raises(ValueError, match="a shape mismatch"),
        compiling._needs_a_compiler(),
    ):
        broken(torch.ones(2))


@pytest.mark.timeout(600)
def test_torch_compile_without_a_cpp_compiler_fails_with_one_clear_line(tmp_path):
    # torch's own search (CXX, read when inductor's config is imported) finds none.
    import os
    import subprocess

    code = "from gpuguide.chapters.compiling import start_compiler\nstart_compiler('cpu')\n"
    env = {**os.environ, "CXX": str(tmp_path / "no-such-g++"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    env.pop("TORCH_INDUCTOR_INSTALL_GXX", None)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env,
        timeout=540, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"RuntimeError: {compiling._NO_COMPILER} (the error: ")
    assert "no-such-g++" in last


def steps(label: str, median_s: float) -> Measurement:
    return Measurement(label, (median_s * 0.99, median_s, median_s * 1.01), "cpu", "x")


def test_mode_rows_price_each_compiled_modes_warm_up_against_eager():
    timed = {
        "eager": steps("eager", 0.010),
        "default": steps("default", 0.006),
        "slow": steps("slow", 0.012),
    }
    # warm-up calls beyond a steady call: 2.0 + 0 (a faster call counts as none)
    warmup = {"default": [2.006, 0.001], "slow": [1.012]}
    rows = compiling.mode_rows(timed, warmup)
    assert [r["mode"] for r in rows] == ["eager", "default", "slow"]
    assert list(rows[0]) == ["mode", "time per call", "compile", "pays off after"]
    assert rows[0]["compile"] is None
    assert rows[0]["pays off after"] is None
    assert rows[1]["time per call"] is timed["default"]
    assert rows[1]["compile"] == "2.00 s"
    assert rows[1]["pays off after"] == "500 calls"  # 2 s / 4 ms saved per call
    assert rows[2]["compile"] == "1.00 s"
    assert rows[2]["pays off after"] is None  # slower than eager: never


def test_mode_rows_split_host_and_gpu_where_given():
    timed = {"eager": steps("eager", 0.010), "default": steps("default", 0.004)}
    split = {name: StepTimes(m, steps("gpu", 0.001)) for name, m in timed.items()}
    rows = compiling.mode_rows(timed, {"default": [0.004]}, split)
    assert list(rows[1]) == [
        "mode",
        "time per call",
        "host (launch)",
        "GPU (work)",
        "compile",
        "pays off after",
    ]
    assert rows[1]["host (launch)"] is timed["default"]
    assert rows[1]["GPU (work)"].median_s == 0.001
    assert rows[1]["compile"] == "0.00 s"
    assert rows[1]["pays off after"] == "1 calls"


def test_call_times_sums_the_compiling_calls_and_says_so():
    calls = compiling.CallTimes((2.0, 0.5, 0.25, 1.5), (1, 0, 0, 2), 1, 2)
    assert calls.compiling_s == 3.5
    assert str(calls) == (
        "3 compilation(s) (1 from inductor's disk cache, 2 fresh), in calls that "
        "took 3.50 s"
    )


def test_time_each_call_counts_the_graphs_each_call_compiled():
    torch._dynamo.reset()
    fn = torch.compile(lambda x: x.sin() + 1, backend="eager", dynamic=False)
    sizes = [3, 4, 3, 4, 5]
    calls = compiling.time_each_call(
        fn, [(torch.ones(n),) for n in sizes], device="cpu"
    )
    assert calls.compiles == (1, 1, 0, 0, 1)  # a new size recompiles (static)
    assert len(calls.times_s) == len(sizes)
    assert all(t > 0 for t in calls.times_s)
    assert (calls.cache_hits, calls.cache_misses) == (0, 0)  # no inductor
    torch._dynamo.reset()


def test_print_messages_prints_each_line_alone_without_folders(capsys):
    log = logging.getLogger("gpuguide.test.print_messages")
    log.handlers, log.propagate = [compiling.PrintMessages()], False
    log.warning(
        "Recompiling function forward in /home/me/site/models/block.py:57\n"
        "  triggered by: tensor 'x' size mismatch at index 1 (C:\\\\code\\\\page.py)"
    )
    assert capsys.readouterr().out == (
        "    Recompiling function forward in block.py:57\n"
        "    triggered by: tensor 'x' size mismatch at index 1 (page.py)\n"
    )
