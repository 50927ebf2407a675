"""Plumbing for the compile, fusion, mixed-precision and CUDA-graph pages: start the
compiler, keep its output off the page, list a call's passes, time first calls, and
time a step's launch on the host beside the GPU's work for it.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import math
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.peaks import percent_of_peak
from gpuguide.quiet import ignore_torch_internal_warnings, warning_text
from gpuguide.tables import format_cell
from gpuguide.timing import REP_MS, SMALL_REP_MS, Measurement, benchmark, gpu_hold
from gpuguide.units import format_time
from gpuguide.verdicts import break_even, compare

if TYPE_CHECKING:
    import torch

    from gpuguide.verdicts import Comparison

__all__ = [
    "NO_COMPILER",
    "Autotune",
    "CallTimes",
    "CompilerLog",
    "CompilerStart",
    "PrintMessages",
    "StepTimes",
    "capture_compiler",
    "first_calls_s",
    "host_and_gpu_times",
    "mode_rows",
    "pass_rows",
    "passes",
    "per_round",
    "round_speedups",
    "start_compiler",
    "time_each_call",
]

#: Operators that only allocate, left out of a CPU call's passes.
_ALLOCATIONS = ("aten::empty", "aten::empty_strided", "aten::empty_like")
#: ``AUTOTUNE addmm(2048x768, ...)``: heads a table inductor writes per tuned op.
_AUTOTUNE_HEAD = re.compile(r"^AUTOTUNE (\w+)\((.*)\)\s*$", re.MULTILINE)
#: The last line of a table (torch 2.11 to 2.15).
_AUTOTUNE_TAIL = re.compile(
    r"AUTOTUNE benchmarking takes ([\d.]+) seconds and ([\d.]+) seconds "
    r"precompiling for (\d+) choices"
)
#: torch's loggers but its structured trace (``torch.__trace``: files only).
_TORCH_LOGGERS = re.compile(r"torch(\.(?!__trace)|$)")
_MAX_MISSES = 3  # calls (in all) outlasting their hold before _held_times stops holding
_MAX_HOLD_S = 0.5  # the longest hold before one call, in seconds


#: What a page that compiles says when the machine has no compiler for torch.compile.
NO_COMPILER = (
    "torch.compile needs a compiler on this machine, and found none: on a CPU, "
    "inductor builds the C++ it writes with $CXX, else g++ (clang++ on macOS); on a "
    "CUDA GPU, Triton builds its launcher with $CC, else gcc or clang. Install one "
    "(Debian, Ubuntu: apt install g++; Fedora: dnf install gcc-c++; macOS: "
    "xcode-select --install) and run the page again"
)
#: What torch (InvalidCxxCompiler) and Triton say when they find no compiler.
_NO_COMPILER_TEXTS = ("InvalidCxxCompiler", "Failed to find C compiler")


def _lacks_compiler(error: BaseException | None) -> bool:
    """Whether ``error``, or an error that caused it, says no compiler was found."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = f"{type(error).__name__}: {error}"
        if any(what in text for what in _NO_COMPILER_TEXTS):
            return True
        error = error.__cause__ or error.__context__
    return False


@contextlib.contextmanager
def _needs_a_compiler() -> Iterator[None]:
    """Turn torch's or Triton's long error for a missing compiler into one that says
    what to install (:data:`NO_COMPILER`, with the first line of the error)."""
    try:
        yield
    except Exception as error:
        if not _lacks_compiler(error):
            raise
        said = str(error).strip().splitlines()
        first = said[0].strip('"') if said else repr(error)
        msg = f"{NO_COMPILER} (the error: {first})"
        raise RuntimeError(msg) from None


@dataclass(frozen=True)
class CompilerStart:
    """Seconds to import inductor, start its ``workers`` and compile ``torch.sin``; the
    distinct warnings ``caught`` while importing, and what torch ``logged``, in a line.
    """

    import_s: float
    workers: int
    workers_s: float
    first_compile_s: float
    caught: tuple[str, ...] = ()
    logged: str = ""

    def __str__(self) -> str:
        """One line of times, then a line per warning and one for what was logged."""
        lines = [
            f"compiler ready: import {format_time(self.import_s)}, "
            f"{self.workers} compile worker(s) {format_time(self.workers_s)}, "
            f"first compilation {format_time(self.first_compile_s)}",
            *(
                f"caught while importing inductor (torch's own code): {text}"
                for text in self.caught
            ),
        ]
        if self.logged:
            lines.append(f"caught while starting the compiler: {self.logged}")
        return "\n".join(lines)


def start_compiler(device: str | torch.device | None = None) -> CompilerStart:
    """Import inductor, start its compile workers and compile one line on ``device``,
    timed: call it before timing anything that compiles, so that these one-off costs
    land in no compile or steady-state time."""
    import torch

    dev = as_device(device)
    sync = getattr(torch, dev.type).synchronize
    with capture_compiler() as log:
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            import torch._inductor.compile_fx
            from torch._inductor import config
            from torch._inductor.async_compile import AsyncCompile
        t1 = time.perf_counter()
        AsyncCompile.warm_pool()
        AsyncCompile.wait_pool_ready()
        t2 = time.perf_counter()
        with _needs_a_compiler():
            torch.compile(torch.sin)(torch.ones(8, device=dev))
            sync()
        t3 = time.perf_counter()
        torch._dynamo.reset()
    texts = dict.fromkeys(f"{w.category.__name__}: {warning_text(w)}" for w in caught)
    workers = int(config.compile_threads or 1)
    return CompilerStart(t1 - t0, workers, t2 - t1, t3 - t2, tuple(texts), str(log))


def _inside_aten(event: Any) -> bool:
    """Whether a profiler event was called by an ``aten::`` operator."""
    while (event := event.cpu_parent) is not None:
        if event.name.startswith("aten::"):
            return True
    return False


def passes(fn: Callable[..., Any], *args: Any, device: str | torch.device) -> list[str]:
    """The passes over memory one call ``fn(*args)`` makes, by name, from the profiler:
    on CUDA each kernel (names cut to 48 characters); on the CPU each top-level
    ``aten::`` operator but allocations, and each call into a compiled graph."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    on_cuda = as_device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        fn(*args)
        getattr(torch, as_device(device).type).synchronize()
    events = prof.events()
    if on_cuda:
        return [
            e.name[:48]
            for e in events
            if e.device_type == DeviceType.CUDA
            and not e.is_user_annotation
            and not e.name.startswith(("Memcpy", "Memset"))
        ]
    return [
        e.name.split(" ")[2] if "CompiledFxGraph" in e.name else e.name
        for e in events
        if "CompiledFxGraph" in e.name
        or (
            e.name.startswith("aten::")
            and e.name not in _ALLOCATIONS
            and not _inside_aten(e)
        )
    ]


def pass_rows(
    times: Mapping[str, Measurement],
    firsts_s: Mapping[str, float],
    names: Mapping[str, Sequence[str]],
    *,
    pass_bytes: float,
    peak_bytes_per_s: float | None,
    calls: int = 3,
) -> list[dict[str, Any]]:
    """A table row per way of running the same work (``times``, its steady state):
    the passes over memory one call made (``names``, from :func:`passes`); what its
    first ``calls`` calls (``firsts_s``, :func:`first_calls_s`) took beyond as many
    steady-state calls; the rate of ``pass_bytes`` per pass, with its share of
    ``peak_bytes_per_s`` (``"n/a"`` without one, ``"> peak: cached"`` above it);
    and what ran, each name once with its count."""
    rows = []
    for way, m in times.items():
        ran = names[way]
        rate = m.rate(len(ran) * pass_bytes, "B/s")
        share = percent_of_peak(rate.value, peak_bytes_per_s)
        of_peak = "n/a" if share is None else f"{share:.0f}%"
        if share is not None and share > 100:
            of_peak = "> peak: cached"
        beyond = max(firsts_s[way] - calls * m.median_s, 0)
        what_ran = ", ".join(f"{ran.count(n)} x {n}" for n in dict.fromkeys(ran))
        rows.append(
            {
                "way": way,
                "median ± IQR/2": m,
                "passes": len(ran),
                f"first {calls} calls, beyond steady": f"{beyond:.2f} s",
                "moved, % of peak": f"{rate}, {of_peak}",
                "what ran": what_ran,
            }
        )
    return rows


def first_calls_s(
    fn: Callable[..., Any], *args: Any, device: str | torch.device, calls: int = 3
) -> float:
    """Seconds the first ``calls`` calls of ``fn(*args)`` take, compilation included
    (a host clock between synchronizations: CUDA events would miss compilation).
    Raises ``RuntimeError`` saying what to install where no compiler is found."""
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    t0 = time.perf_counter()
    with _needs_a_compiler():
        for _ in range(calls):
            fn(*args)
        sync()
    return time.perf_counter() - t0


@dataclass(frozen=True)
class CallTimes:
    """What :func:`time_each_call` found: each call's seconds (``times_s``), the
    graphs dynamo compiled in it (``compiles``), and the hits and misses of
    inductor's FX graph cache (on disk) over all the calls."""

    times_s: tuple[float, ...]
    compiles: tuple[int, ...]
    cache_hits: int
    cache_misses: int

    @property
    def compiling_s(self) -> float:
        """The seconds of the calls that compiled."""
        pairs = zip(self.times_s, self.compiles, strict=True)
        return sum(t for t, compiled in pairs if compiled)

    def __str__(self) -> str:
        return (
            f"{sum(self.compiles)} compilation(s) ({self.cache_hits} from inductor's "
            f"disk cache, {self.cache_misses} fresh), in calls that took "
            f"{self.compiling_s:.2f} s"
        )


def time_each_call(
    fn: Callable[..., Any],
    calls: Sequence[Sequence[Any]],
    *,
    device: str | torch.device,
) -> CallTimes:
    """Call ``fn(*args)`` for each ``args`` of ``calls`` in turn, timing each call on
    its own (:func:`first_calls_s`, as each may compile) and counting the graphs
    dynamo compiled in it (its ``unique_graphs`` counter) and the FX graph cache's
    hits and misses over them all."""
    from torch._dynamo.utils import counters

    cache = dict(counters["inductor"])
    times, compiles = [], []
    for args in calls:
        before = counters["stats"]["unique_graphs"]
        times.append(first_calls_s(fn, *args, device=device, calls=1))
        compiles.append(counters["stats"]["unique_graphs"] - before)
    hits, misses = (
        counters["inductor"][k] - cache.get(k, 0)
        for k in ("fxgraph_cache_hit", "fxgraph_cache_miss")
    )
    return CallTimes(tuple(times), tuple(compiles), hits, misses)


#: A Python file's folders in a log message (cut off by :class:`PrintMessages`).
_FOLDERS = re.compile(r"[^\s'(]*[/\\](?=[^/\\\s']+\.py\b)")


class PrintMessages(logging.Handler):
    """A logging handler that prints each record's message alone, line by line and
    indented, without the level, time, process, file and line that torch's own
    handler puts before it, and with each Python file's folders cut off."""

    def emit(self, record: logging.LogRecord) -> None:
        for line in record.getMessage().splitlines():
            print("    " + _FOLDERS.sub("", line.strip()))


def round_speedups(
    subject: Measurement, baseline: Measurement
) -> tuple[float, tuple[float, float]]:
    """The speed-up of ``subject`` over ``baseline`` round by round, for two
    measurements timed in the same interleaved rounds (:func:`gpuguide.interleave`):
    ``(median, (lowest, highest))`` over the rounds. A burst of load on the machine
    slows both sides of a round alike, so the rounds' ratios stay steadier than the
    ratio of the two pooled spreads.

    >>> a = Measurement("a", (1.0,) * 3, "cpu", "wall-clock", rounds=(1.0, 2.0, 1.0))
    >>> b = Measurement("b", (2.0,) * 3, "cpu", "wall-clock", rounds=(2.0, 4.4, 2.2))
    >>> round_speedups(a, b)
    (2.2, (2.0, 2.2))
    """
    if len(subject.rounds) != len(baseline.rounds) or not subject.rounds:
        msg = (
            f"{subject.label!r} and {baseline.label!r} must be timed in the same "
            f"rounds, got {len(subject.rounds)} and {len(baseline.rounds)} rounds"
        )
        raise ValueError(msg)
    ratios = sorted(
        b / s for s, b in zip(subject.rounds, baseline.rounds, strict=True) if s > 0
    )
    if not ratios:
        msg = f"{subject.label!r}: every round took 0 s"
        raise ValueError(msg)
    middle = len(ratios) // 2
    median = (
        ratios[middle] if len(ratios) % 2 else (ratios[middle - 1] + ratios[middle]) / 2
    )
    return median, (ratios[0], ratios[-1])


def per_round(c: Comparison) -> dict[str, Any]:
    """The keywords of a :func:`gpuguide.claim` on the speed-up of a comparison
    ``c`` timed in paired rounds: the median of the rounds' speed-ups
    (:func:`round_speedups`) as its value, the lowest and highest as its spread,
    ``measured`` saying both, and ``timed``."""
    speedup, (low, high) = round_speedups(c.subject, c.baseline)
    words = f"{speedup:.2f}x, {low:.2f}-{high:.2f}x over the rounds"
    return {"value": speedup, "spread": (low, high), "measured": words, "timed": True}


def mode_rows(
    timed: Mapping[str, Measurement],
    warmup_s: Mapping[str, Sequence[float]],
    split: Mapping[str, StepTimes] | None = None,
) -> list[dict[str, Any]]:
    """A table row per variant of ``timed`` (``"eager"`` and compiled modes): its
    time per call; with ``split`` (:func:`host_and_gpu_times`), the host's launch
    and the GPU's work; and for a variant with warm-up calls in ``warmup_s`` (the
    seconds of each), its "compile" cost, what those calls took beyond as many
    steady-state calls, and after how many calls that pays off against eager
    (:func:`gpuguide.break_even`: None where it is not measurably faster)."""
    rows = []
    for name, m in timed.items():
        row: dict[str, Any] = {"mode": name, "time per call": m}
        if split:
            row |= {"host (launch)": split[name].host, "GPU (work)": split[name].gpu}
        cost = even = None
        if name in warmup_s:
            cost = sum(max(t - m.median_s, 0.0) for t in warmup_s[name])
            even = break_even(cost, timed["eager"], m)
        row["compile"] = None if cost is None else f"{cost:.2f} s"
        rows.append(row | {"pays off after": even and f"{even:,} calls"})
    return rows


@dataclass(frozen=True)
class Autotune:
    """An op ``max-autotune`` tuned (``"mm(2048x256, 256x1024)"``), the kernels it
    benchmarked and the seconds it took."""

    op: str
    choices: int
    seconds: float


class _Holdback(logging.Filter):
    """A handler filter that keeps every record and lets none through."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        fresh = all(record is not r for r in self.records)
        if fresh and record.getMessage().strip():
            self.records.append(record)
        return False


@dataclass
class CompilerLog:
    """What the compiler wrote, logged and warned inside :func:`capture_compiler`
    (filled when the block ends); ``str()`` of it is one line, ``""`` for nothing."""

    stderr: str = ""
    records: list[logging.LogRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def autotunes(self) -> list[Autotune]:
        """The operations ``max-autotune`` tuned, from its tables in ``stderr``."""
        heads = [f"{m[1]}({m[2]})" for m in _AUTOTUNE_HEAD.finditer(self.stderr)]
        tails = _AUTOTUNE_TAIL.findall(self.stderr)
        return [
            Autotune(op, int(n), float(bench) + float(pre))
            for op, (bench, pre, n) in zip(heads, tails, strict=False)
        ]

    def __str__(self) -> str:
        parts = []
        tuned = self.autotunes
        if tuned:
            counts = sorted({a.choices for a in tuned})
            choices = (
                str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
            )
            seconds = sum(a.seconds for a in tuned)
            parts.append(
                f"max-autotune benchmarked {choices} kernels for each of "
                f"{len(tuned)} matmul(s) in {format_time(seconds)}"
            )
        elif self.stderr.strip():
            lines = len(self.stderr.strip().splitlines())
            parts.append(f"the compiler wrote {lines} line(s) to stderr")
        if self.records:
            first = self.records[0].getMessage().strip().splitlines()
            text = " ".join(first[:2])
            text = text if len(text) <= 70 else text[:67] + "..."
            parts.append(f"{len(self.records)} log message(s) (first: {text})")
        if self.warnings:
            parts.append(f"{len(self.warnings)} warning(s): {'; '.join(self.warnings)}")
        return "; ".join(parts)


@contextlib.contextmanager
def capture_compiler() -> Iterator[CompilerLog]:
    """Keep what the compiler writes, logs and warns inside the block off the page.

    ``sys.stderr`` is buffered (``max-autotune``'s tables), torch's log handlers
    let nothing through, and warnings are recorded (torch's own stay ignored), all
    into the yielded :class:`CompilerLog`. Compile workers' and C++ output, which
    bypass ``sys.stderr``, still reach the console.
    """
    log = CompilerLog()
    holdback = _Holdback()
    handlers = {
        id(h): h
        for name, logger in logging.root.manager.loggerDict.items()
        if _TORCH_LOGGERS.match(name) and isinstance(logger, logging.Logger)
        for h in logger.handlers
    }
    buffer = io.StringIO()
    recorded: list[warnings.WarningMessage] = []
    for handler in handlers.values():
        handler.addFilter(holdback)
    try:
        with (
            contextlib.redirect_stderr(buffer),
            warnings.catch_warnings(record=True) as got,
        ):
            recorded = got
            warnings.simplefilter("always")
            ignore_torch_internal_warnings()
            yield log
    finally:
        for handler in handlers.values():
            handler.removeFilter(holdback)
        log.stderr = buffer.getvalue()
        log.records = holdback.records
        texts = (f"{w.category.__name__}: {warning_text(w)}" for w in recorded)
        log.warnings = list(dict.fromkeys(texts))


@dataclass(frozen=True)
class StepTimes:
    """The host's time to launch each call (on the CPU: run it) and the GPU's work.

    ``gpu`` is None off CUDA, and when the calls wait for the GPU (``waits``:
    ``.item()``, a copy to the host), which leaves no launches to hide.
    """

    host: Measurement
    gpu: Measurement | None
    waits: bool = False

    @property
    def bound(self) -> str:
        """``"host"`` or ``"GPU"``, whichever is measurably slower, or ``"neither"``."""
        if self.gpu is None:
            return "host"
        verdict = compare(self.gpu, self.host).verdict
        return {"faster": "host", "slower": "GPU"}.get(verdict, "neither")

    def __str__(self) -> str:
        host = format_cell(self.host)
        if self.gpu is None and self.waits:
            return f"host {host} per call, waiting for the GPU inside the call"
        if self.gpu is None:
            return f"host {host} per call (the host does the work)"
        gpu = format_cell(self.gpu)
        text = f"host {host} to launch, GPU {gpu} of work: "
        if self.bound == "host":
            idle = 1 - self.gpu.median_s / self.host.median_s
            return text + f"host-bound (the GPU idles {idle:.0%} of a step)"
        if self.bound == "GPU":
            return text + "GPU-bound (the host runs ahead)"
        return text + "no measurable difference between the two"


def _held_times(
    call: Callable[[], Any],
    n: int,
    *,
    hold: Callable[[float], None],
    hold_s: float,
    clock: Callable[[], float],
    event_factory: Callable[..., Any],
    synchronize: Callable[[], None],
) -> tuple[list[float], list[float]]:
    """Host and GPU seconds of ``n`` calls, each launched while the GPU is held."""
    host: list[float] = []
    gpu: list[float] = []
    held, misses = True, 0
    paused = gc.isenabled()
    gc.disable()
    try:
        while len(host) < n or (held and len(gpu) < min(n, 3)):
            start = event_factory(enable_timing=True)
            end = event_factory(enable_timing=True)
            synchronize()
            if held:
                hold(hold_s)
            start.record()
            t0 = clock()
            call()
            t1 = clock()
            end.record()
            synchronize()
            host_s = max(t1 - t0, 0.0)
            if held and host_s >= hold_s:  # a miss: the GPU did not find it all queued
                misses += 1
                hold_s = min(2 * max(hold_s, host_s), _MAX_HOLD_S)
                held = misses < _MAX_MISSES  # else it waits for the GPU: stop holding
                continue
            if len(host) < n:
                host.append(host_s)
            if held:
                gpu.append(start.elapsed_time(end) / 1e3)
    finally:
        if paused:
            gc.enable()
    return host, gpu if held else []


def host_and_gpu_times(
    fn: Callable[[], Any],
    *,
    device: str | torch.device,
    rep_ms: float | None = None,
    min_reps: int = 5,
    max_reps: int = 200,
    label: str | None = None,
) -> StepTimes:
    """Time the host's launch of ``fn()`` (warmed up) and the GPU's work for it.

    On CUDA the GPU is held busy before each call, for about twice its launch time,
    so that CUDA events time its work back to back while ``perf_counter`` times the
    launch; elsewhere only the call is timed, as ``host``, in blocks of calls of at
    least 5 ms (``sample_ms``), so that a preempted call does not read a whole
    scheduler tick. ``rep_ms``: the budget (default :func:`gpuguide.benchmark`'s, at
    most 10 ms in small mode).
    """
    label = label or "step"
    min_reps = checks.integer("min_reps", min_reps, minimum=1)
    max_reps = checks.integer("max_reps", max_reps, minimum=min_reps)
    rep = REP_MS if rep_ms is None else checks.positive("rep_ms", rep_ms)
    if small_mode():
        rep = min(rep, SMALL_REP_MS)
    dev = as_device(device)
    if dev.type != "cuda":
        m = benchmark(
            fn,
            device=dev,
            label=label,
            rep_ms=rep,
            min_reps=min_reps,
            max_reps=max_reps,
            sample_ms=5.0,
        )
        return StepTimes(host=m, gpu=None)
    import torch

    with torch.cuda.device(dev):
        index = torch.cuda.current_device()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        launched = time.perf_counter() - t0
        torch.cuda.synchronize()
        whole = time.perf_counter() - t0
        hold_s = 2 * launched + 100e-6
        n = min(max(math.ceil(rep / 1e3 / (hold_s + whole)), min_reps), max_reps)
        hold = gpu_hold(torch.cuda.current_stream())
        host, gpu = _held_times(
            fn,
            n,
            hold=hold,
            hold_s=hold_s,
            clock=time.perf_counter,
            event_factory=torch.cuda.Event,
            synchronize=torch.cuda.synchronize,
        )
    name = f"cuda:{index}"
    return StepTimes(
        host=Measurement(label, tuple(host), name, "host-clock, GPU held"),
        gpu=Measurement(label, tuple(gpu), name, "cuda-events, launches hidden")
        if gpu
        else None,
        waits=not gpu,
    )
