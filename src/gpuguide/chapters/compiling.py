"""Plumbing for the pages that compile: start the compiler, keep its output off the
page, time each call and price each mode's warm-up (:func:`host_and_gpu_times`, from
:mod:`gpuguide.timing`, is re-exported for the pages that import it from here).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuguide.device import as_device
from gpuguide.quiet import ignore_torch_internal_warnings, warning_text
from gpuguide.timing import Measurement, first_calls_s
from gpuguide.timing import host_and_gpu_times as host_and_gpu_times
from gpuguide.units import format_time
from gpuguide.verdicts import break_even

if TYPE_CHECKING:
    import torch

    from gpuguide.timing import StepTimes
    from gpuguide.verdicts import Comparison

__all__ = [
    "PrintMessages",
    "capture_compiler",
    "mode_rows",
    "per_round",
    "start_compiler",
    "time_each_call",
]

#: ``AUTOTUNE addmm(2048x768, ...)``: heads a table inductor writes per tuned op.
_AUTOTUNE_HEAD = re.compile(r"^AUTOTUNE (\w+)\((.*)\)\s*$", re.MULTILINE)
#: The last line of a table (torch 2.11 to 2.15).
_AUTOTUNE_TAIL = re.compile(
    r"AUTOTUNE benchmarking takes ([\d.]+) seconds and ([\d.]+) seconds "
    r"precompiling for (\d+) choices"
)
#: torch's loggers but its structured trace (``torch.__trace``: files only).
_TORCH_LOGGERS = re.compile(r"torch(\.(?!__trace)|$)")


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
    its own (:func:`~gpuguide.timing.first_calls_s`, as each may compile) and counting the graphs
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


def per_round(c: Comparison) -> dict[str, Any]:
    """The keywords of a :func:`gpuguide.claim` on the speed-up of a comparison
    ``c`` timed in the same interleaved rounds (:func:`gpuguide.interleave`): the
    median of the rounds' speed-ups as its value, the lowest and highest as its
    spread, ``measured`` saying both, and ``timed``. A burst of load slows both
    sides of a round alike, so the rounds' ratios are steadier than the pooled
    spreads' ratio."""
    subject, baseline = c.subject, c.baseline
    if len(subject.rounds) != len(baseline.rounds) or not subject.rounds:
        msg = (
            f"{subject.label!r} and {baseline.label!r} must be timed in the same "
            f"rounds, got {len(subject.rounds)} and {len(baseline.rounds)} rounds"
        )
        raise ValueError(msg)
    ratios = sorted(
        b / s for s, b in zip(subject.rounds, baseline.rounds, strict=True) if s > 0
    )
    speedup, low, high = statistics.median(ratios), ratios[0], ratios[-1]
    words = f"{speedup:.2f}x, {low:.2f}-{high:.2f}x over the rounds"
    return {"value": speedup, "spread": (low, high), "measured": words, "timed": True}


def mode_rows(
    timed: Mapping[str, Measurement],
    warmup_s: Mapping[str, Sequence[float]],
    split: Mapping[str, StepTimes] | None = None,
) -> list[dict[str, Any]]:
    """A table row per variant of ``timed`` (``"eager"`` and compiled modes): its
    time per call; with ``split`` (:func:`~gpuguide.timing.host_and_gpu_times`), the host's launch
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
