"""Tests for gpuguide.chapters.compiling: compiler start-up, its output kept off the
page, passes, first calls, and host and GPU times."""

from __future__ import annotations

import gc
import logging
import sys
import time
import warnings

import pytest
import torch

from gpuguide.chapters import compiling
from gpuguide.chapters.compiling import (
    Autotune,
    CompilerLog,
    CompilerStart,
    StepTimes,
    _held_times,
    capture_compiler,
    first_calls_s,
    host_and_gpu_times,
    passes,
    start_compiler,
)
from gpuguide.timing import Measurement


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


def test_compiler_start_prints_what_torch_logged_on_one_line():
    start = CompilerStart(1.0, 2, 0.5, 0.25, logged="1 log message(s) (first: x)")
    assert str(start).splitlines()[1:] == [
        "caught while starting the compiler: 1 log message(s) (first: x)"
    ]
    assert len(str(CompilerStart(1.0, 2, 0.5, 0.25)).splitlines()) == 1


def test_compiler_start_prints_the_warnings_it_caught():
    start = CompilerStart(1.0, 2, 0.5, 0.25, caught=("DeprecationWarning: old",))
    first, second = str(start).splitlines()
    assert first.startswith("compiler ready: import 1.00 s")
    assert second == "caught while importing inductor (torch's own code): " + (
        "DeprecationWarning: old"
    )


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
    assert log.autotunes == [
        Autotune("addmm(2048x768, 2048x256, 256x768)", 22, 12.5),
        Autotune("addmm(2048x768, 2048x256, 256x768)", 21, 12.5),
    ]
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


class _FakeGPU:
    """Events, a hold and a clock for _held_times: the GPU takes ``gpu_s`` per call,
    the host ``host_s[i]`` for call ``i``."""

    def __init__(self, host_s, gpu_s):
        self.host_s, self.gpu_s = list(host_s), gpu_s
        self.now, self.holds, self.calls, self.syncs = 0.0, [], 0, 0

    def clock(self):
        return self.now

    def call(self):
        self.now += self.host_s[self.calls % len(self.host_s)]
        self.calls += 1

    def hold(self, seconds):
        self.holds.append(seconds)

    def synchronize(self):
        self.syncs += 1

    def event(self, enable_timing):
        assert enable_timing
        gpu_s = self.gpu_s

        class Event:
            def record(self):
                pass

            def elapsed_time(self, end):
                return gpu_s * 1e3  # ms, as CUDA events

        return Event()


def _held(fake, n, hold_s):
    return _held_times(
        fake.call,
        n,
        hold=fake.hold,
        hold_s=hold_s,
        clock=fake.clock,
        event_factory=fake.event,
        synchronize=fake.synchronize,
    )


def test_held_times_pairs_host_and_gpu_times_of_each_call():
    fake = _FakeGPU(host_s=[1e-3], gpu_s=0.25e-3)
    host, gpu = _held(fake, 4, hold_s=3e-3)
    assert host == pytest.approx([1e-3] * 4)
    assert gpu == pytest.approx([0.25e-3] * 4)
    assert fake.holds == [3e-3] * 4  # one hold per call
    assert fake.syncs == 8  # before each hold, and before reading the events


def test_held_times_grows_a_hold_the_host_outlasted_and_drops_that_gpu_time():
    fake = _FakeGPU(host_s=[1e-3, 5e-3, 1e-3, 1e-3], gpu_s=2e-3)
    host, gpu = _held(fake, 4, hold_s=3e-3)
    # The second call ended after its hold: neither of its times is kept (its
    # host time includes waiting for the hold), and the hold grows.
    assert host == pytest.approx([1e-3] * 4)
    assert len(gpu) == 4
    assert fake.holds == pytest.approx([3e-3, 3e-3, 10e-3, 10e-3, 10e-3])


def test_held_times_gives_no_gpu_times_for_a_call_that_waits_for_the_gpu():
    fake = _FakeGPU(host_s=[1.0], gpu_s=1e-3)  # e.g. .item(): waits out the hold

    def hold(seconds):  # the host waits for the hold to end, however long
        fake.holds.append(seconds)
        fake.host_s = [seconds + 1e-3]

    fake.hold = hold
    host, gpu = _held(fake, 5, hold_s=1e-3)
    assert len(host) == 5
    assert gpu == []
    # It stops holding after three misses in a row, instead of doubling the
    # hold for every call (which would grow without bound).
    assert len(fake.holds) == 3


def test_held_times_finishes_a_step_that_waits_for_the_gpu_every_other_call():
    # Like a step that calls .item() every other call: the odd calls wait out the
    # hold, the even ones return at once. Misses that are not in a row count too,
    # and the hold never grows past its bound.
    fake = _FakeGPU(host_s=[1e-3], gpu_s=1e-3)
    waits = []

    def hold(seconds):
        fake.holds.append(seconds)
        waits.append(seconds)

    def call():
        fake.now += (waits[-1] + 1e-3) if fake.calls % 2 else 1e-3
        fake.calls += 1

    fake.hold, fake.call = hold, call
    host, gpu = _held(fake, 50, hold_s=2e-3)
    assert len(host) == 50
    assert gpu == []  # holding cannot hide launches that wait for the GPU
    assert fake.calls < 60
    assert max(fake.holds) <= compiling._MAX_HOLD_S


def test_held_times_bounds_the_hold_and_pauses_the_garbage_collector():
    fake = _FakeGPU(host_s=[2.0, 1e-3, 1e-3], gpu_s=1e-3)  # one call of 2 s
    enabled = []
    call = fake.call

    def watched():
        enabled.append(gc.isenabled())
        call()

    fake.call = watched
    host, gpu = _held(fake, 3, hold_s=1e-3)
    assert len(host) == 3
    assert len(gpu) == 3
    assert max(fake.holds) == compiling._MAX_HOLD_S
    assert not any(enabled)
    assert gc.isenabled()


def _m(label, center, spread=0.01):
    return Measurement(
        label, (center * (1 - spread), center, center * (1 + spread)), "cuda:0", "x"
    )


@pytest.mark.parametrize(
    ("host_s", "gpu_s", "bound", "words"),
    [
        (2e-3, 0.5e-3, "host", "host-bound (the GPU idles 75% of a step)"),
        (0.5e-3, 2e-3, "GPU", "GPU-bound (the host runs ahead)"),
        (1e-3, 1.005e-3, "neither", "no measurable difference between the two"),
    ],
)
def test_step_times_names_the_side_that_is_measurably_slower(
    host_s, gpu_s, bound, words
):
    times = StepTimes(host=_m("step", host_s), gpu=_m("step", gpu_s))
    assert times.bound == bound
    assert str(times).startswith("host ")
    assert str(times).endswith(words)


def test_step_times_marks_a_noisy_time_and_reads_the_cpu_as_the_host():
    noisy = StepTimes(host=_m("step", 1e-3, spread=0.3), gpu=_m("step", 0.1e-3))
    assert "NOISY" in str(noisy).split(", GPU")[0]
    cpu = StepTimes(host=_m("step", 1e-3), gpu=None)
    assert cpu.bound == "host"
    assert str(cpu).endswith("per call (the host does the work)")
    waited = StepTimes(host=_m("step", 1e-3), gpu=None, waits=True)
    assert str(waited).endswith("per call, waiting for the GPU inside the call")


def test_host_and_gpu_times_on_the_cpu_times_the_call():
    calls = []
    times = host_and_gpu_times(
        lambda: calls.append(time.sleep(1e-3)), device="cpu", rep_ms=20, label="nap"
    )
    assert times.gpu is None
    assert times.host.label == "nap"
    assert times.host.n >= 5
    assert times.host.median_s >= 1e-3
    assert len(calls) >= times.host.n


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
    with pytest.raises(RuntimeError) as error:
        first_calls_s(fn, torch.ones(2), device="cpu")
    text = str(error.value)
    assert text.startswith(compiling.NO_COMPILER)
    assert "apt install g++" in text
    assert error.value.__cause__ is None  # one error, not torch's chain
    assert text.count("\n") == 0


def test_other_errors_pass_through_unchanged():
    def broken(x):
        raise ValueError("a shape mismatch")

    with pytest.raises(ValueError, match="a shape mismatch"):
        first_calls_s(broken, torch.ones(2), device="cpu")


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
    assert last.startswith(f"RuntimeError: {compiling.NO_COMPILER} (the error: ")
    assert "no-such-g++" in last


def test_round_speedups_pairs_the_rounds_and_needs_the_same_rounds():
    from gpuguide.chapters.compiling import round_speedups
    from gpuguide.timing import Measurement

    fast = Measurement("fast", (1.0,) * 4, "cpu", "wall-clock", rounds=(1, 2, 1, 3))
    slow = Measurement("slow", (2.0,) * 4, "cpu", "wall-clock", rounds=(2, 4, 3, 3))
    assert round_speedups(fast, slow) == (2.0, (1.0, 3.0))
    alone = Measurement("alone", (1.0,) * 4, "cpu", "wall-clock")
    with pytest.raises(ValueError, match="same rounds"):
        round_speedups(fast, alone)


def test_per_round_gives_a_claims_value_spread_and_words_from_the_rounds():
    from gpuguide.verdicts import compare

    fast = Measurement("fast", (1.0,) * 4, "cpu", "wall-clock", rounds=(1, 2, 1, 3))
    slow = Measurement("slow", (2.0,) * 4, "cpu", "wall-clock", rounds=(2, 4, 3, 3))
    got = compiling.per_round(compare(fast, slow))
    assert got == {
        "value": 2.0,
        "spread": (1.0, 3.0),
        "measured": "2.00x, 1.00-3.00x over the rounds",
        "timed": True,
    }


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


def test_pass_rows_give_passes_first_calls_rate_share_and_what_ran():
    times = {
        "eager": Measurement("eager", (1e-3,) * 3, "cpu", "x"),
        "fused": Measurement("fused", (0.25e-3,) * 3, "cpu", "x"),
    }
    firsts = {"eager": 0.0025, "fused": 1.5}
    names = {"eager": ["aten::sin"] * 4, "fused": ["graph_0"]}
    rows = compiling.pass_rows(
        times, firsts, names, pass_bytes=1e6, peak_bytes_per_s=10e9
    )
    eager, fused = rows
    assert list(eager) == [
        "way",
        "median ± IQR/2",
        "passes",
        "first 3 calls, beyond steady",
        "moved, % of peak",
        "what ran",
    ]
    assert (eager["way"], eager["passes"], fused["passes"]) == ("eager", 4, 1)
    assert eager["median ± IQR/2"] is times["eager"]
    assert eager["first 3 calls, beyond steady"] == "0.00 s"  # faster: none beyond
    assert fused["first 3 calls, beyond steady"] == "1.50 s"
    assert eager["moved, % of peak"].endswith(", 40%")  # 4 MB in 1 ms: 4 GB/s
    assert fused["moved, % of peak"].endswith(", 40%")
    assert eager["what ran"] == "4 x aten::sin"
    faster = compiling.pass_rows(
        times, firsts, names, pass_bytes=1e6, peak_bytes_per_s=1e9, calls=1
    )
    assert faster[0]["moved, % of peak"].endswith(", > peak: cached")
    assert "first 1 calls, beyond steady" in faster[0]
    unknown = compiling.pass_rows(
        times, firsts, names, pass_bytes=1e6, peak_bytes_per_s=None
    )
    assert unknown[0]["moved, % of peak"].endswith(", n/a")


def test_pass_rows_list_each_name_once_in_order_with_its_count():
    times = {"mixed": Measurement("mixed", (1e-3,) * 3, "cpu", "x")}
    names = {"mixed": ["aten::sin", "aten::cos", "aten::sin"]}
    (row,) = compiling.pass_rows(
        times, {"mixed": 0.0}, names, pass_bytes=1.0, peak_bytes_per_s=None
    )
    assert row["what ran"] == "2 x aten::sin, 1 x aten::cos"
