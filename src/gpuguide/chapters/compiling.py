"""Plumbing for the pages that compile: start the compiler, keep its output off the
page, time each call and price each mode's warm-up."""

from __future__ import annotations

import contextlib
import io
import logging
import re
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuguide.device import as_device
from gpuguide.quiet import ignore_torch_internal_warnings, warning_text
from gpuguide.timing import Measurement, first_calls_s
from gpuguide.units import format_time
from gpuguide.verdicts import break_even

if TYPE_CHECKING:
    import torch

    from gpuguide.timing import StepTimes

__all__ = [
    "PrintMessages",
    "capture_compiler",
    "mode_rows",
    "start_compiler",
    "time_each_call",
]

#: The last line of a table ``max-autotune`` writes per tuned op (torch 2.11-2.15).
_AUTOTUNE_TAIL = re.compile(
    r"AUTOTUNE benchmarking takes ([\d.]+) seconds and ([\d.]+) seconds "
    r"precompiling for (\d+) choices"
)
#: torch's loggers but its structured trace (``torch.__trace``: files only).
_TORCH_LOGGERS = re.compile(r"torch(\.(?!__trace)|$)")
#: A Python file's folders in a log message (cut off by :class:`PrintMessages`).
_FOLDERS = re.compile(r"[^\s'(]*[/\\](?=[^/\\\s']+\.py\b)")
#: What a page that compiles says when the machine has no compiler for torch.compile.
_NO_COMPILER = (
    "torch.compile needs a compiler on this machine, and found none: on a CPU, "
    "inductor builds the C++ it writes with $CXX, else g++ (clang++ on macOS); on a "
    "CUDA GPU, Triton builds its launcher with $CC, else gcc or clang. Install one "
    "(Debian, Ubuntu: apt install g++; Fedora: dnf install gcc-c++; macOS: "
    "xcode-select --install) and run the page again"
)
#: What torch (InvalidCxxCompiler) and Triton say when they find no compiler.
_NO_COMPILER_TEXTS = ("InvalidCxxCompiler", "Failed to find C compiler")


@contextlib.contextmanager
def _needs_a_compiler() -> Iterator[None]:
    """Turn an error from a missing compiler into one line saying what to install."""
    try:
        yield
    except Exception as error:
        cause: BaseException | None = error
        while cause is not None:
            if any(t in f"{type(cause).__name__}: {cause}" for t in _NO_COMPILER_TEXTS):
                first = (str(error).strip().splitlines() or [repr(error)])[0].strip('"')
                msg = f"{_NO_COMPILER} (the error: {first})"
                raise RuntimeError(msg) from None
            cause = cause.__cause__ or cause.__context__
        raise


@dataclass(frozen=True)
class CompilerStart:
    """Seconds to import inductor, start its ``workers`` and compile ``torch.sin``,
    and what the compiler ``logged`` meanwhile."""

    import_s: float
    workers: int
    workers_s: float
    first_compile_s: float
    logged: str = ""

    def __str__(self) -> str:
        text = (
            f"compiler ready: import {format_time(self.import_s)}, "
            f"{self.workers} compile worker(s) {format_time(self.workers_s)}, "
            f"first compilation {format_time(self.first_compile_s)}"
        )
        if self.logged:
            text += f"\ncaught while starting the compiler: {self.logged}"
        return text


def start_compiler(device: str | torch.device | None = None) -> CompilerStart:
    """Import inductor, start its workers and compile one line on ``device``, timed:
    call it before timing anything that compiles, to keep these one-off costs out."""
    import torch

    dev = as_device(device)
    with capture_compiler() as log:  # torch's own warnings stay ignored
        t0 = time.perf_counter()
        import torch._inductor.compile_fx
        from torch._inductor import config
        from torch._inductor.async_compile import AsyncCompile

        t1 = time.perf_counter()
        AsyncCompile.warm_pool()
        AsyncCompile.wait_pool_ready()
        t2 = time.perf_counter()
        with _needs_a_compiler():
            torch.compile(torch.sin)(torch.ones(8, device=dev))
            getattr(torch, dev.type).synchronize()
        t3 = time.perf_counter()
        torch._dynamo.reset()
    workers = int(config.compile_threads or 1)
    return CompilerStart(t1 - t0, workers, t2 - t1, t3 - t2, str(log))


@dataclass(frozen=True)
class CallTimes:
    """Each call's seconds and graphs compiled, and the FX graph cache's hits and
    misses over all the calls."""

    times_s: tuple[float, ...]
    compiles: tuple[int, ...]
    cache_hits: int
    cache_misses: int

    @property
    def compiling_s(self) -> float:
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
    """Call ``fn(*args)`` for each ``args`` of ``calls``, timing each on its own (as
    each may compile) and counting the graphs dynamo compiled in it."""
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


class PrintMessages(logging.Handler):
    """A logging handler that prints each message alone, indented, with each Python
    file's folders cut off."""

    def emit(self, record: logging.LogRecord) -> None:
        for line in record.getMessage().splitlines():
            print("    " + _FOLDERS.sub("", line.strip()))


def mode_rows(
    timed: Mapping[str, Measurement],
    warmup_s: Mapping[str, Sequence[float]],
    split: Mapping[str, StepTimes] | None = None,
) -> list[dict[str, Any]]:
    """A table row per variant of ``timed`` (``"eager"`` and modes): time per call,
    host and GPU time (``split``), and for a variant in ``warmup_s`` (seconds per
    warm-up call) their cost beyond steady calls and when it pays off."""
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


@dataclass
class CompilerLog:
    """What the compiler wrote, logged and warned in :func:`capture_compiler`;
    ``str()`` of it is one line, ``""`` for nothing."""

    stderr: str = ""
    records: list[logging.LogRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        parts = []
        if tuned := _AUTOTUNE_TAIL.findall(self.stderr):
            low, high = min(int(n) for *_, n in tuned), max(int(n) for *_, n in tuned)
            seconds = sum(float(bench) + float(pre) for bench, pre, _ in tuned)
            parts.append(
                f"max-autotune benchmarked {low if low == high else f'{low}-{high}'} "
                f"kernels for each of {len(tuned)} matmul(s) in {format_time(seconds)}"
            )
        elif self.stderr.strip():
            lines = len(self.stderr.strip().splitlines())
            parts.append(f"the compiler wrote {lines} line(s) to stderr")
        if self.records:
            text = " ".join(self.records[0].getMessage().strip().splitlines()[:2])
            text = text if len(text) <= 70 else text[:67] + "..."
            parts.append(f"{len(self.records)} log message(s) (first: {text})")
        if self.warnings:
            parts.append(f"{len(self.warnings)} warning(s): {'; '.join(self.warnings)}")
        return "; ".join(parts)


@contextlib.contextmanager
def capture_compiler() -> Iterator[CompilerLog]:
    """Keep what the compiler writes to ``sys.stderr``, logs and warns in the block
    off the page, in the yielded :class:`CompilerLog` (compile workers' and C++
    output bypass ``sys.stderr``)."""
    log, buffer = CompilerLog(), io.StringIO()

    def holdback(record: logging.LogRecord) -> bool:  # keeps each record once
        if record.getMessage().strip() and all(record is not r for r in log.records):
            log.records.append(record)
        return False  # and lets none through

    handlers = {
        id(h): h
        for name, logger in logging.root.manager.loggerDict.items()
        if _TORCH_LOGGERS.match(name) and isinstance(logger, logging.Logger)
        for h in logger.handlers
    }
    for handler in handlers.values():
        handler.addFilter(holdback)
    try:
        with (
            contextlib.redirect_stderr(buffer),
            warnings.catch_warnings(record=True) as got,
        ):
            warnings.simplefilter("always")
            ignore_torch_internal_warnings()
            yield log
    finally:
        for handler in handlers.values():
            handler.removeFilter(holdback)
        log.stderr = buffer.getvalue()
        texts = (f"{w.category.__name__}: {warning_text(w)}" for w in got)
        log.warnings = list(dict.fromkeys(texts))
