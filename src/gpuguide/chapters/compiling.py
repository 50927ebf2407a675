"""Plumbing for the compile and fusion pages: start the compiler, keep its output
off the page, count the passes a call makes, time the first calls, and split a
step's time between the host and the GPU. Each serves more than one page (or, for
:func:`capture_compiler`, :func:`start_compiler` as well as a page); what a single
page teaches, such as printing dynamo's recompilation log, is in that page.

:func:`start_compiler` pays the compiler's one-off costs before a page times
anything: importing inductor, starting its pool of compile workers (processes
that each import torch, which on a machine with few cores slows whatever runs
meanwhile) and a first, one-line compilation. It times each step and keeps the
warnings the import raises. Whether the import warns depends on the torch
release and on whether inductor was imported before in the process: some
releases import ``torch.utils.mkldnn``, which uses the deprecated
``torch.jit.script_method``, a warning about torch's own code.

:func:`capture_compiler` keeps what inductor writes while it compiles off the
page: ``max-autotune`` writes a table per matmul it tunes to ``sys.stderr``
(which sphinx-gallery puts on the page), and inductor logs failed kernel
choices. The block's :class:`CompilerLog` sums them up in one line.

:func:`passes` lists the kernels (or CPU operators) one call runs, from the
profiler; :func:`first_calls_s` times the first calls of a function, where
compilation happens; :func:`host_and_gpu_times` times the host's launch of a
step and the GPU's work for it, from the same calls.

Examples
--------
>>> from gpuguide.chapters.compiling import start_compiler
>>> start = start_compiler("cpu")  # doctest: +SKIP
>>> print(start)  # doctest: +SKIP
compiler ready: import 2.1 s, 2 compile workers 3.2 s, first compilation 1.4 s
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.device import as_device
from gpuguide.env import small_mode
from gpuguide.quiet import ignore_torch_internal_warnings, warning_text
from gpuguide.tables import format_cell
from gpuguide.timing import (
    REP_MS,
    SMALL_REP_MS,
    Measurement,
    benchmark,
    gpu_hold,
)
from gpuguide.units import format_time
from gpuguide.verdicts import compare

if TYPE_CHECKING:
    import torch

__all__ = [
    "Autotune",
    "CompilerLog",
    "CompilerStart",
    "StepTimes",
    "capture_compiler",
    "first_calls_s",
    "host_and_gpu_times",
    "passes",
    "start_compiler",
]

#: Operators that only allocate, left out of a CPU call's passes.
_ALLOCATIONS = ("aten::empty", "aten::empty_strided", "aten::empty_like")


@dataclass(frozen=True)
class CompilerStart:
    """What getting ``torch.compile`` ready cost, step by step.

    Parameters
    ----------
    import_s : float
        Importing inductor, in seconds (near 0 if it was imported before).
    workers : int
        Compile worker processes inductor uses (1: it compiles in-process).
    workers_s : float
        Starting the workers and waiting until they were ready, in seconds.
    first_compile_s : float
        Compiling and running ``torch.sin`` on a small tensor, in seconds.
    caught : tuple of str
        The distinct warnings raised while importing, as ``"Category: message"``.
    logged : str
        What torch wrote or logged meanwhile, summed up in one line by
        :class:`CompilerLog` (``""`` when nothing).
    """

    import_s: float
    workers: int
    workers_s: float
    first_compile_s: float
    caught: tuple[str, ...] = ()
    logged: str = ""

    def __str__(self) -> str:
        """One line of times, then one line per warning caught while importing,
        and one for what torch logged."""
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
    """Import inductor, start its compile workers and compile one line, timed.

    Call it before timing anything that compiles, so that these one-off costs
    land neither in a compile time nor in a steady-state time. Every warning
    raised while importing is caught and returned in
    :attr:`CompilerStart.caught`, and what torch writes or logs meanwhile
    (:func:`capture_compiler`) in :attr:`CompilerStart.logged`, for the page
    to print.

    Parameters
    ----------
    device : torch.device or str or None
        Where the first compilation runs (None picks the default device).

    Returns
    -------
    CompilerStart
        The time of each step and the warnings caught.
    """
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
        torch.compile(torch.sin)(torch.ones(8, device=dev))
        sync()
        t3 = time.perf_counter()
        torch._dynamo.reset()
    texts = dict.fromkeys(f"{w.category.__name__}: {warning_text(w)}" for w in caught)
    return CompilerStart(
        import_s=t1 - t0,
        workers=int(config.compile_threads or 1),
        workers_s=t2 - t1,
        first_compile_s=t3 - t2,
        caught=tuple(texts),
        logged=str(log),
    )


def _inside_aten(event: Any) -> bool:
    """Whether a profiler event was called by an ``aten::`` operator."""
    while (event := event.cpu_parent) is not None:
        if event.name.startswith("aten::"):
            return True
    return False


def passes(fn: Callable[..., Any], *args: Any, device: str | torch.device) -> list[str]:
    """The passes over memory one call ``fn(*args)`` makes, by name, from the profiler.

    On CUDA: every device event that is neither a copy, a memset nor an
    annotation, i.e. each kernel (names cut to 48 characters). On the CPU: every
    ``aten::`` operator that no other operator called, other than allocations,
    and each call into a compiled graph (named by its graph).
    """
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


def first_calls_s(
    fn: Callable[..., Any], *args: Any, device: str | torch.device, calls: int = 3
) -> float:
    """Seconds that the first ``calls`` calls of ``fn(*args)`` take together.

    Synchronized before and after, on a host clock: a first call of a compiled
    function includes its compilation, which CUDA events would not see.
    """
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------
# What the compiler writes and logs while it compiles
# ---------------------------------------------------------------------------

#: ``AUTOTUNE addmm(2048x768, 2048x256, 256x768)``: the head of one table that
#: inductor writes to ``sys.stderr`` per tuned operation (torch 2.11 to 2.15).
_AUTOTUNE_HEAD = re.compile(r"^AUTOTUNE (\w+)\((.*)\)\s*$", re.MULTILINE)
#: ``SingleProcess AUTOTUNE benchmarking takes 12.0574 seconds and 0.5367
#: seconds precompiling for 22 choices``: the last line of a table.
_AUTOTUNE_TAIL = re.compile(
    r"AUTOTUNE benchmarking takes ([\d.]+) seconds and ([\d.]+) seconds "
    r"precompiling for (\d+) choices"
)
#: The loggers whose handlers :func:`capture_compiler` holds back: torch's, but
#: not its structured trace (``torch.__trace``), which writes only to files.
_TORCH_LOGGERS = re.compile(r"torch(\.(?!__trace)|$)")


@dataclass(frozen=True)
class Autotune:
    """One operation that ``max-autotune`` tuned, from inductor's table.

    Attributes
    ----------
    op : str
        The operation and its input sizes, e.g. ``"mm(2048x256, 256x1024)"``.
    choices : int
        Kernels (Triton configurations, cuBLAS, ...) it benchmarked.
    seconds : float
        Benchmarking and precompiling them, in seconds.
    """

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
    """What the compiler wrote, logged and warned inside :func:`capture_compiler`.

    Filled when the block ends. ``str()`` of it is one line for the page, or
    ``""`` when there was nothing.

    Attributes
    ----------
    stderr : str
        Everything written to ``sys.stderr`` (inductor's autotuning tables).
    records : list of logging.LogRecord
        Records of torch's loggers, held back from their handlers.
    warnings : list of str
        Warnings about the reader's code (``"Category: message"``); those that
        torch attributes to its own modules stay ignored.
    """

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

    Inside the block ``sys.stderr`` is a buffer (``max-autotune`` writes a
    table per tuned matmul there, from ``torch._inductor.select_algorithm``,
    and sphinx-gallery would put it on the page), torch's log handlers let no
    record through (inductor logs kernel choices that fail to compile), and
    warnings are recorded (those torch attributes to its own modules, such as
    ``TypedStorage is deprecated`` from autotuning, stay ignored). Everything
    is kept in the :class:`CompilerLog` the block yields, which sums it up in
    one line: ``print(log)`` where it matters.

    Output of compile worker processes, and of C++ code writing to the file
    descriptor directly, does not pass through ``sys.stderr`` and is not
    caught; it goes to the console or build log, not to the page.
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


# ---------------------------------------------------------------------------
# The host's time to launch a step, and the GPU's time to run it
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StepTimes:
    """The host's time to launch each call and the GPU's time to run it.

    Attributes
    ----------
    host : Measurement
        Time from calling to the call's return, with the GPU busy with earlier
        work, so that the host never waits for it: Python, dispatch and the
        kernel launches. On the CPU, where the host does the work, the call's
        whole time.
    gpu : Measurement or None
        CUDA events around the same calls' work, which the GPU ran back to
        back because the host had launched all of it before the GPU got to it:
        the GPU's time alone, launches hidden. None on the CPU and MPS, and
        when the call waits for the GPU itself (``.item()``, a copy to the
        host), so that the launches cannot be hidden.
    waits : bool
        Whether the calls waited for the GPU (the reason ``gpu`` is None on
        CUDA).
    """

    host: Measurement
    gpu: Measurement | None
    waits: bool = False

    @property
    def bound(self) -> str:
        """``"host"`` or ``"GPU"``: which one is measurably slower, else ``"neither"``.

        On the CPU, ``"host"``.
        """
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
    """Host and GPU seconds of ``n`` calls, each launched while the GPU is held.

    Per call: ``synchronize()``, ``hold(hold_s)``, a start event, the call
    between two reads of ``clock`` (its host time), an end event; after a
    ``synchronize()`` the events give the GPU time. A GPU time counts only
    when the host returned from the call before the hold ended, so that the
    GPU found all of the call's work queued; otherwise (a miss) the hold
    doubles for the next call, up to :data:`_MAX_HOLD_S`, and the host time of
    that call (which waited for the hold) is not kept. After
    :data:`_MAX_MISSES` misses in all, in a row or not, the call is taken to
    wait for the GPU itself (a ``.item()``, a copy to the host, every call or
    only some): holding cannot hide its launches, so the remaining calls are
    timed without a hold and no GPU times are returned. The garbage
    collector is paused meanwhile, as :func:`gpuguide.benchmark` does.
    """
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
            if held and host_s >= hold_s:
                misses += 1
                hold_s = min(2 * max(hold_s, host_s), _MAX_HOLD_S)
                held = misses < _MAX_MISSES
                continue
            if len(host) < n:
                host.append(host_s)
            if held:
                gpu.append(start.elapsed_time(end) / 1e3)
    finally:
        if paused:
            gc.enable()
    return host, gpu if held else []


#: Calls (in all) that outlast their hold before _held_times gives up holding.
_MAX_MISSES = 3

#: The longest a GPU is held before one call, in seconds.
_MAX_HOLD_S = 0.5


def host_and_gpu_times(
    fn: Callable[[], Any],
    *,
    device: str | torch.device,
    rep_ms: float | None = None,
    min_reps: int = 5,
    max_reps: int = 200,
    label: str | None = None,
) -> StepTimes:
    """Time the host's launch of ``fn()`` and the GPU's work for it, per call.

    On CUDA, before every call the GPU is held busy (``torch.cuda._sleep``)
    for about twice the host's time to launch the call. The host's time is
    read with ``time.perf_counter`` around the call, without waiting for the
    GPU; CUDA events recorded before and after the call, on the current
    stream, give the GPU's time for its work, run back to back because it was
    all queued before the hold ended. When the GPU's time is the larger, the
    step is GPU-bound (the host runs ahead, as it should); when the host's is,
    the GPU idles between kernels and the step is host-bound.

    On the CPU and MPS only the call's time is measured, as ``host``
    (:func:`gpuguide.benchmark`).

    Parameters
    ----------
    fn : callable
        The step, without arguments, already warmed up (compiled, captured).
    device : str or torch.device
        Where its work runs.
    rep_ms : float, optional
        Time budget in ms (default that of :func:`gpuguide.benchmark`; at most
        10 ms in small mode). Calls are timed one at a time, each after a hold.
    min_reps, max_reps : int
        Bounds on the number of calls timed.
    label : str, optional
        Name for both measurements (default ``"step"``).

    Returns
    -------
    StepTimes
        ``str()`` of it is a line for the page: both times and the verdict.
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
