"""``python -m gpuguide diagnose SCRIPT``: where one training step's time goes, and
which page of the guide teaches the fix.

SCRIPT defines ``step()``, one training step with no arguments that fetches its own
batch (``--step NAME`` picks another function). The script is loaded in a namespace
of its own, so its ``if __name__ == "__main__":`` block does not run. The tool runs
warm steps, times steps, then profiles as many with one ``torch.profiler`` run
(shapes and memory recorded, no stacks) on the device the script uses, and reads
torch's counters (dynamo's compilations, the CUDA allocator's statistics).

The report holds the step's time budget (:mod:`gpuguide.breakdown`), the counters,
and one finding per cause it recognizes, each with its evidence from this run, the
gain it predicts for this step (from the budget, scaled down to the unprofiled step;
it can still run high where the profiler slows many small operators) and the page
that teaches the fix, quoting that page's recorded figures on this device where the
results folder holds a recording. ``--json FILE`` writes the same as JSON that
follows ``diagnose.schema.json`` (published beside the results files' schema).
From Python (a notebook): ``gpuguide.diagnose(step)`` returns a :class:`Diagnosis`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import runpy
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "BUDGET_ENV",
    "CAUSES",
    "DiagnoseError",
    "Diagnosis",
    "Finding",
    "diagnose",
    "load_step",
    "main",
    "schema",
    "write_json",
]

#: The environment variable that sets the time budget of one step, in seconds.
BUDGET_ENV = "GPUGUIDE_DIAGNOSE_BUDGET_S"
#: The default time budget of one step, in seconds.
DEFAULT_BUDGET_S = 20.0
#: cause -> (the page that teaches the fix, the advice).
CAUSES: dict[str, tuple[str, str]] = {
    "sync_in_loop": (
        "plot_sync_in_loop",
        "read values back (loss.item(), print, `if t > 0:`) every N steps, not every "
        "step, so the host can queue the next step while the GPU runs this one",
    ),
    "kept_losses": (
        "plot_kept_losses",
        "keep loss.item() or loss.detach(), not loss: a kept loss keeps its graph",
    ),
    "pageable_copies": (
        "plot_transfer_bandwidth",
        "copy from pinned memory (DataLoader(pin_memory=True), tensor.pin_memory()); "
        "non_blocking=True from pageable memory does not overlap",
    ),
    "per_sample_loop": (
        "plot_batching",
        "replace the loop of small identical calls by one batched call "
        "(torch.bmm, a batch dimension, torch.vmap)",
    ),
    "data_wait": (
        "plot_dataloader",
        "prepare batches in DataLoader worker processes (num_workers > 0) where "
        "cores are free beside the model; else decode the samples once, before "
        "training, and fetch a batch at a time",
    ),
    "fp32_matmul": (
        "plot_dtype_throughput",
        "allow TF32 (torch.set_float32_matmul_precision('high')) or use "
        "torch.autocast with bf16/fp16",
    ),
    "misaligned_gemm": (
        "plot_alignment",
        "pad matmul dimensions to multiples of 8",
    ),
    "recompilation": (
        "plot_recompilation",
        "give varying shapes to the compiler as dynamic (dynamic=True, "
        "torch._dynamo.mark_dynamic) or pad them to a few bucket sizes",
    ),
    "growing_cache": (
        "plot_decode_overhead",
        "preallocate the key-value cache at its largest size and write into it, so "
        "the compiled step keeps one shape",
    ),
    "allocator": (
        "plot_allocator",
        "keep shapes steady, free what you no longer need, or set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    ),
}
_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
#: The name of the tool's own wait for the GPU after each step.
_SYNC_LABEL = "gpuguide.diagnose: end of step"
_SYNCS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize")
#: A call repeated this many times per step with one shape is a loop to batch.
_LOOP_CALLS = 16
#: Calls that split a batch into samples or stack a loop's outputs back.
_GLUE = ("aten::unbind", "aten::split", "aten::chunk", "aten::stack", "aten::cat")
#: Shares of the step below which a time cause is not worth a finding.
_MIN_SHARE = 0.05
#: The share of the step waiting for workers that shows they cannot keep up.
_WORKERS_SHARE = 0.25
_WORKER_FETCH = ("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",)
#: Bytes per step of growth that make a memory finding.
_MIN_GROWTH_BYTES = 64 * 1024


class DiagnoseError(Exception):
    """Bad input or a failing step: the message says what and how to fix it."""


@dataclass(frozen=True)
class Finding:
    """One cause found: its evidence (numbers from this run), the predicted gain
    per step (``gain_s``, and ``gain_bytes`` per step for memory) and the page."""

    cause: str
    title: str
    evidence: dict[str, float]
    gain_s: float
    gain_share: float
    gain_bytes: float | None = None
    quote: str = ""

    @property
    def page(self) -> str:
        """The file name of the page that teaches the fix."""
        return CAUSES[self.cause][0]

    @property
    def advice(self) -> str:
        """What to change, in one sentence."""
        return CAUSES[self.cause][1]

    def to_json(self) -> dict[str, Any]:
        """The finding as one entry of the JSON's ``findings``."""
        gain: dict[str, float] = {"seconds": self.gain_s, "share": self.gain_share}
        if self.gain_bytes is not None:
            gain["bytes_per_step"] = self.gain_bytes
        return {
            "cause": self.cause,
            "page": self.page,
            "title": self.title,
            "evidence": dict(self.evidence),
            "gain": gain,
            "advice": self.advice,
            "quote": self.quote,
        }


@dataclass(frozen=True)
class Diagnosis:
    """What one diagnosis measured: the step's median time, its breakdown in
    seconds per category, the counters, the findings (largest gain first) and the
    tool's own cost."""

    device: str
    step_s: float
    steps: int
    warmup: int
    breakdown: dict[str, float]
    counters: dict[str, float]
    findings: tuple[Finding, ...]
    overhead: dict[str, float]
    provenance: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The diagnosis as ``diagnose.schema.json`` describes it."""
        return {
            "schema": 1,
            "provenance": dict(self.provenance),
            "step_s": self.step_s,
            "steps": self.steps,
            "warmup": self.warmup,
            "breakdown": dict(self.breakdown),
            "counters": dict(self.counters),
            "overhead": dict(self.overhead),
            "findings": [f.to_json() for f in self.findings],
        }

    def __str__(self) -> str:
        lines = [
            f"step: {self.step_s * 1e3:.2f} ms on {self.device} (median of "
            f"{self.steps} timed steps after {self.warmup} warm-up; {self.steps} "
            "more profiled)"
        ]
        lines += ["breakdown (ms per step, share):"]
        lines += [
            f"  {name:<12} {s * 1e3:9.2f} {s / self.step_s:7.1%}"
            for name, s in self.breakdown.items()
        ]
        lines += [f"counters: {_numbers(self.counters)}"]
        if not self.findings:
            lines.append(
                "findings: none (nothing here matches a cause the guide teaches)"
            )
        for i, f in enumerate(self.findings, 1):
            gain = f"{f.gain_s * 1e3:.2f} ms per step ({f.gain_share:.0%})"
            if f.gain_bytes is not None:
                gain = f"{f.gain_bytes / 2**20:.2f} MiB per step"
            lines += [
                f"{i}. {f.title}  [page: {f.page}]",
                f"   evidence: {_numbers(f.evidence)}",
                f"   predicted gain: {gain}",
                f"   fix: {f.advice}",
            ]
            if f.quote:
                lines.append(f"   recorded: {f.quote}")
        lines.append(f"overhead: {_numbers(self.overhead)}")
        return "\n".join(lines)


def _numbers(values: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:.4g}" for k, v in values.items()) or "none"


def schema() -> dict[str, Any]:
    """The JSON Schema of ``--json``'s file (``diagnose.schema.json``)."""
    text = resources.files("gpuguide_tools").joinpath("diagnose.schema.json")
    loaded: dict[str, Any] = json.loads(text.read_text())
    return loaded


# -- running the step --------------------------------------------------------------


class _OverBudget(BaseException):  # not an Exception: the step cannot swallow it
    pass


@contextmanager
def _alarm(budget_s: float) -> Iterator[None]:
    """Interrupt the step after ``budget_s`` (main thread on Unix; checked after
    the step elsewhere)."""
    armed = hasattr(signal, "setitimer") and _main_thread()
    if armed:

        def _ring(signum: int, frame: object) -> None:
            raise _OverBudget

        previous = signal.signal(signal.SIGALRM, _ring)
        signal.setitimer(signal.ITIMER_REAL, budget_s)
    start = time.perf_counter()
    try:
        yield
    finally:
        if armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    if time.perf_counter() - start > budget_s:
        raise _OverBudget


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _asks_for_cuda(error: BaseException) -> bool:
    return not torch.cuda.is_available() and "cuda" in str(error).lower()


def _failure(error: BaseException, doing: str) -> DiagnoseError:
    if _asks_for_cuda(error):
        msg = (
            f"{doing} asks for CUDA, but torch sees no CUDA device here "
            f"(torch {torch.__version__}): {type(error).__name__}: {error}"
        )
        return DiagnoseError(msg)
    tail = "".join(traceback.format_exception(error)[-6:]).rstrip()
    return DiagnoseError(f"{doing} raised {type(error).__name__}: {error}\n{tail}")


def _runner(
    step: Callable[[], object], budget_s: float, sync: Callable[[], None]
) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        try:
            with _alarm(budget_s):
                step()
                sync()
        except _OverBudget:
            msg = (
                f"one step took longer than the time budget of {budget_s:g} s per "
                f"step; raise it with --budget-s or {BUDGET_ENV}"
            )
            raise DiagnoseError(msg) from None
        except Exception as error:
            raise _failure(error, "the step") from None
        return time.perf_counter() - start

    return run


def _no_sync() -> None:
    pass


def _cuda_sync() -> None:
    with torch.profiler.record_function(_SYNC_LABEL):
        torch.cuda.synchronize()


def load_step(
    script: str | os.PathLike[str], name: str = "step"
) -> Callable[[], object]:
    """The function ``name`` of ``script``, run in a namespace of its own (not as
    ``__main__``). Raises :class:`DiagnoseError`."""
    path = Path(script)
    if not path.is_file():
        msg = f"no such script: {path}"
        raise DiagnoseError(msg)
    sys.path.insert(0, str(path.resolve().parent))
    try:
        namespace = runpy.run_path(str(path), run_name="__gpuguide_diagnose__")
    except Exception as error:
        raise _failure(error, f"loading {path}") from None
    finally:
        sys.path.remove(str(path.resolve().parent))
    function = namespace.get(name)
    if not callable(function):
        msg = (
            f"{path} defines no function {name!r}: define `def {name}():`, one "
            "training step that fetches its own batch, or pass --step NAME"
        )
        raise DiagnoseError(msg)
    return function  # type: ignore[no-any-return]


# -- counters ----------------------------------------------------------------------


def _compile_state() -> dict[str, Any]:
    """Dynamo's compile seconds, graph breaks and guard failures so far."""
    try:
        from torch._dynamo import utils
    except ImportError:  # pragma: no cover - a torch without dynamo
        return {"compiles": [], "breaks": 0, "failures": {}}
    metrics = getattr(utils, "compilation_time_metrics", {})
    failures = getattr(utils, "guard_failures", {})
    return {
        "compiles": [float(s) for s in metrics.get("_compile.compile_inner", [])],
        "breaks": sum(utils.counters["graph_break"].values()),
        "failures": {code: list(reasons) for code, reasons in failures.items()},
    }


_SIZE = re.compile(r"expected (\d+), actual (\d+)")


def _new_failures(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    new = []
    for code, reasons in after["failures"].items():
        new += reasons[len(before["failures"].get(code, [])) :]
    return new


def _all_grow(reasons: list[str]) -> bool:
    """Whether every size guard that failed saw a larger size than it expected."""
    sizes = [tuple(map(int, m.groups())) for r in reasons for m in _SIZE.finditer(r)]
    return bool(sizes) and all(actual > expected for expected, actual in sizes)


def _cuda_memory() -> dict[str, float]:
    stats = torch.cuda.memory_stats()
    return {
        "allocated": float(torch.cuda.memory_allocated()),
        "retries": float(stats.get("num_alloc_retries", 0)),
        "reserved": float(stats.get("reserved_bytes.all.current", 0)),
        "inactive_split": float(stats.get("inactive_split_bytes.all.current", 0)),
    }


# -- reading the profile -------------------------------------------------------------


def _cpu_events(events: list[Any]) -> list[Any]:
    return [e for e in events if e.device_type.name == "CPU"]


def _gemm_dims(event: Any) -> tuple[int, int, int, int] | None:
    """``(batch, m, k, n)`` of a GEMM operator from its recorded shapes."""
    shapes = [s for s in event.input_shapes if s]
    if event.name in ("aten::addmm", "aten::baddbmm"):
        shapes = shapes[1:]
    if len(shapes) < 2 or len(shapes[0]) != len(shapes[1]):
        return None
    a, b = shapes[0], shapes[1]
    if len(a) == 2:
        return (1, a[0], a[1], b[1])
    if len(a) == 3:
        return (a[0], a[1], a[2], b[2])
    return None


def _dtype_of(event: Any) -> str:
    dtypes = [d for d in getattr(event, "input_dtypes", []) or [] if d]
    return str(dtypes[-1]) if dtypes else ""


@dataclass
class _Profile:
    """What the detectors read from the profile, per step."""

    events: list[Any]
    steps: int
    scale: float = 1.0  # unprofiled time per profiled second (<= 1)

    def top_level(self) -> list[Any]:
        return [e for e in _cpu_events(self.events) if e.cpu_parent is None]

    def named(self, *names: str) -> list[Any]:
        return [e for e in self.events if e.name in names]

    def seconds(self, events: list[Any]) -> float:
        spans = sum(e.time_range.end - e.time_range.start for e in events)
        return float(spans) * 1e-6 * self.scale

    def per_step(self, value: float) -> float:
        return value / self.steps

    def cpu_growth_bytes(self) -> float:
        return self.per_step(sum(e.cpu_memory_usage for e in self.top_level()))

    def gemms(self) -> list[tuple[Any, tuple[int, int, int, int]]]:
        found = []
        for event in self.named(*_GEMMS):
            dims = _gemm_dims(event)
            if dims is not None and event.device_type.name == "CPU":
                found.append((event, dims))
        return found


def _flops(dims: tuple[int, int, int, int]) -> float:
    batch, m, k, n = dims
    return 2.0 * batch * m * k * n


# -- the detectors -------------------------------------------------------------------


@dataclass
class _Context:
    device: str
    step_s: float
    breakdown: dict[str, float]
    profile: _Profile
    compile_before: dict[str, Any]
    compile_after: dict[str, Any]
    timed_steps: int
    memory_before: dict[str, float]
    memory_after: dict[str, float]
    counters: dict[str, float] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")

    def finding(
        self,
        cause: str,
        title: str,
        evidence: dict[str, float],
        gain_s: float,
        gain_bytes: float | None = None,
    ) -> Finding:
        gain_s = max(0.0, min(gain_s, self.step_s))
        return Finding(cause, title, evidence, gain_s, gain_s / self.step_s, gain_bytes)


def _syncs(c: _Context) -> list[Finding]:
    reads = len(c.profile.named("aten::_local_scalar_dense"))
    ours = [e.time_range for e in c.profile.named(_SYNC_LABEL)]
    waits = [  # leave out the tool's own wait after each step
        e
        for e in c.profile.named(*_SYNCS)
        if not any(r.start <= e.time_range.start <= r.end for r in ours)
    ]
    wait_s = c.profile.per_step(c.profile.seconds(waits))
    c.counters["syncs_per_step"] = c.profile.per_step(reads + len(waits))
    c.counters["sync_wait_s"] = wait_s
    if not c.cuda or wait_s < _MIN_SHARE * c.step_s:
        return []
    # the host waits `wait` while the GPU finishes; without the wait the two overlap,
    # so the step gains at most the wait and at most the host's own time
    gain = min(wait_s, c.step_s - wait_s)
    evidence = {
        "reads_per_step": c.profile.per_step(reads),
        "syncs_per_step": c.profile.per_step(len(waits)),
        "wait_ms_per_step": wait_s * 1e3,
    }
    return [c.finding("sync_in_loop", "the host waits for the GPU", evidence, gain)]


def _copies(c: _Context) -> list[Finding]:
    pageable = [
        e
        for e in c.profile.events
        if e.device_type.name == "CUDA" and "Pageable" in e.name
    ]
    seconds = c.profile.per_step(c.profile.seconds(pageable))
    c.counters["pageable_copy_s"] = seconds
    if seconds < _MIN_SHARE * c.step_s:
        return []
    evidence = {
        "copies_per_step": c.profile.per_step(len(pageable)),
        "copy_ms_per_step": seconds * 1e3,
    }
    # pinned copies run about twice as fast: half the time, conservatively
    title = "copies from pageable host memory"
    return [c.finding("pageable_copies", title, evidence, seconds / 2)]


def _loops(c: _Context) -> list[Finding]:
    groups: dict[tuple[str, str], list[Any]] = {}
    top = sorted(
        (e for e in c.profile.top_level() if e.name != "[memory]"),
        key=lambda e: e.time_range.start,
    )
    for event in top:
        key = (event.name, str(event.input_shapes))
        groups.setdefault(key, []).append(event)
    c.counters["ops_per_step"] = c.profile.per_step(len(top))
    looped = [g for g in groups.values() if len(g) >= _LOOP_CALLS * c.profile.steps]
    if not looped:
        return []
    calls = sum(len(g) for g in looped)
    # each call at its group's median, so that a preempted call does not count
    typical = [
        c.profile.scale
        * statistics.median(e.time_range.end - e.time_range.start for e in g)
        * 1e-6
        for g in looped
    ]
    op_s = c.profile.per_step(
        sum(t * len(g) for t, g in zip(typical, looped, strict=True))
    )
    loop = {id(e) for g in looped for e in g}
    glue = _glue(top, loop)
    glue_s = c.profile.per_step(sum(_without_views(e) for e in glue) * c.profile.scale)
    gaps = _gaps(top, loop, loop | {id(e) for e in glue})
    idle_s = c.profile.per_step(gaps * c.profile.scale)
    # the batched call costs at least one call of the loop; the host's gaps between
    # the calls go too, and so do the calls that split the input into samples and
    # stack the outputs back
    kept = sum(typical)
    gain = idle_s + op_s + glue_s - kept
    if gain < _MIN_SHARE * c.step_s:
        return []
    evidence = {
        "repeated_calls_per_step": c.profile.per_step(calls),
        "distinct_repeated_ops": float(len(looped)),
        "ops_ms_per_step": op_s * 1e3,
        "host_gaps_ms_per_step": idle_s * 1e3,
        "split_stack_ms_per_step": glue_s * 1e3,
    }
    title = "a loop of small identical calls (per-sample work)"
    return [c.finding("per_sample_loop", title, evidence, gain)]


def _gaps(top: list[Any], loop: set[int], around: set[int]) -> float:
    """Seconds between consecutive calls of the loop (the host's Python between
    them), and between the loop and its split or stack."""
    gaps = 0.0
    for a, b in itertools.pairwise(top):
        ours = id(a) in around and id(b) in around and {id(a), id(b)} & loop
        if ours and b.time_range.start > a.time_range.end:
            gaps += (b.time_range.start - a.time_range.end) * 1e-6
    return gaps


def _without_views(event: Any) -> float:
    """An event's seconds less its children repeated once per sample (the views that
    unbinding makes): each costs the profiler an event and almost nothing without."""
    names = [child.name for child in event.cpu_children]
    views = [
        child for child in event.cpu_children if names.count(child.name) >= _LOOP_CALLS
    ]
    span = event.time_range.end - event.time_range.start
    return (
        float(span - sum(v.time_range.end - v.time_range.start for v in views)) * 1e-6
    )


def _glue(top: list[Any], looped: set[int]) -> list[Any]:
    """The calls right before and right after a loop that split its input into
    samples (iterating a tensor unbinds it) or stack its outputs back."""
    glue = []
    for i, event in enumerate(top):
        if event.name not in _GLUE or id(event) in looped:
            continue
        around = top[max(0, i - 1) : i] + top[i + 1 : i + 2]
        if any(id(e) in looped for e in around):
            glue.append(event)
    return glue


def _data(c: _Context) -> list[Finding]:
    fetches = [e for e in c.profile.top_level() if "dataloader" in e.name.lower()]
    # each fetch at their median (a preempted one does not count), not scaled down:
    # the profiler's cost is per event it records, and samples decoded in Python
    # record few
    seconds = c.breakdown.get("data", 0.0)
    if fetches:
        typical = statistics.median(
            e.time_range.end - e.time_range.start for e in fetches
        )
        seconds = c.profile.per_step(typical * 1e-6 * len(fetches))
    # taking a batch from workers costs a few tenths of a millisecond even when
    # they keep up: with workers, only a large wait means they cannot
    workers = bool(c.profile.named(*_WORKER_FETCH)) or any(
        "MultiProcessing" in e.name for e in c.profile.top_level()
    )
    if seconds < (_WORKERS_SHARE if workers else _MIN_SHARE) * c.step_s:
        return []
    evidence = {"data_ms_per_step": seconds * 1e3, "share": seconds / c.step_s}
    # workers hide the loading at best: the wait is the most the step gains
    title = "the step waits for its batch"
    return [c.finding("data_wait", title, evidence, seconds)]


def _compiles(c: _Context) -> list[Finding]:
    before, after = c.compile_before, c.compile_after
    new = after["compiles"][len(before["compiles"]) :]
    # each compilation at their median, so that a preempted one does not count
    seconds = statistics.median(new) * len(new) / c.timed_steps if new else 0.0
    breaks = after["breaks"] - before["breaks"]
    reasons = _new_failures(before, after)
    c.counters["compile_s_per_step"] = seconds
    c.counters["graph_breaks"] = float(breaks)
    c.counters["recompiles"] = float(len({r.split(":")[0] for r in reasons}))
    if seconds < _MIN_SHARE * c.step_s:
        return []
    evidence = {
        "compile_ms_per_step": seconds * 1e3,
        "guard_failures": float(len(reasons)),
        "graph_breaks": float(breaks),
    }
    if _all_grow(reasons):
        title = "the compiled step recompiles as a tensor grows"
        return [c.finding("growing_cache", title, evidence, seconds)]
    title = "the compiled step recompiles for new shapes"
    return [c.finding("recompilation", title, evidence, seconds)]


def _memory(c: _Context) -> list[Finding]:
    if c.cuda:
        grown = c.memory_after["allocated"] - c.memory_before["allocated"]
        growth = grown / c.timed_steps
    else:
        growth = c.profile.cpu_growth_bytes()
    c.counters["memory_growth_bytes_per_step"] = growth
    if growth < _MIN_GROWTH_BYTES:
        return []
    evidence = {"growth_bytes_per_step": growth}
    title = "memory grows every step"
    return [c.finding("kept_losses", title, evidence, 0.0, gain_bytes=growth)]


def _allocator(c: _Context) -> list[Finding]:
    if not c.cuda:
        return []
    retries = c.memory_after["retries"] - c.memory_before["retries"]
    reserved = c.memory_after["reserved"]
    split = c.memory_after["inactive_split"] / reserved if reserved else 0.0
    c.counters["alloc_retries"] = retries
    c.counters["fragmentation"] = split
    if retries <= 0:
        return []
    malloc = c.profile.named("cudaMalloc", "cudaFree")
    seconds = c.profile.per_step(c.profile.seconds(malloc))
    evidence = {
        "retries_per_step": retries / c.timed_steps,
        "inactive_split_share": split,
        "malloc_free_ms_per_step": seconds * 1e3,
    }
    title = "the caching allocator frees its cache to retry"
    return [c.finding("allocator", title, evidence, seconds)]


def _matmuls(c: _Context) -> list[Finding]:
    gemms = c.profile.gemms()
    flops = c.profile.per_step(sum(_flops(d) for _, d in gemms))
    c.counters["gemm_flops_per_step"] = flops
    c.counters["model_flop_rate"] = flops / c.step_s
    if not c.cuda or not gemms:
        return []
    found = []
    fp32 = [(e, d) for e, d in gemms if _dtype_of(e) == "float"]
    capable = torch.cuda.get_device_capability() >= (8, 0)
    if capable and fp32 and torch.get_float32_matmul_precision() == "highest":
        share = sum(_flops(d) for _, d in fp32) / max(1.0, flops * c.profile.steps)
        gemm_s = c.breakdown.get("gemm", 0.0) * share
        evidence = {"fp32_gemm_share": share, "fp32_gemm_ms_per_step": gemm_s * 1e3}
        # TF32 runs fp32 matmuls several times faster; count half of their time
        title = "fp32 matmuls without TF32"
        if gemm_s >= _MIN_SHARE * c.step_s:
            found.append(c.finding("fp32_matmul", title, evidence, gemm_s / 2))
    odd = [(e, d) for e, d in gemms if any(x % 8 for x in d[1:])]
    odd_share = sum(_flops(d) for _, d in odd) / max(1.0, flops * c.profile.steps)
    odd_s = c.breakdown.get("gemm", 0.0) * odd_share
    if odd and odd_s >= _MIN_SHARE * c.step_s:
        evidence = {"misaligned_gemm_share": odd_share, "ms_per_step": odd_s * 1e3}
        title = "matmul sizes that are not multiples of 8"
        found.append(c.finding("misaligned_gemm", title, evidence, odd_s / 4))
    return found


_DETECTORS = (_syncs, _copies, _loops, _data, _compiles, _memory, _allocator, _matmuls)


# -- quotes from the recorded results --------------------------------------------------


def _default_results_dir() -> Path | None:
    folder = os.environ.get("GPUGUIDE_RESULTS_DIR", "").strip()
    if folder:
        return Path(folder)
    beside = Path(__file__).resolve().parents[2] / "docs" / "results"
    return beside if beside.is_dir() else None


def _quote(page: str, device: str, folder: Path | None) -> str:
    """The page's recorded figures on this device class ("" when none)."""
    if folder is None or not device.startswith("cuda"):
        return ""  # docs/results holds GPU recordings only
    from gpuguide.units import format_value
    from gpuguide_tools.results_files import load_dir

    name = torch.cuda.get_device_name()
    for recording in load_dir(folder).values():
        short = recording.device.short_name.split()[0]
        if recording.device.kind == "cuda" and short in name:
            figures = recording.for_page(page)[:3]
            texts = [f"{r.name} {format_value(r.value, r.unit)}" for r in figures]
            where = recording.device.short_name
            return f"{page} on {where}: " + "; ".join(texts) if texts else ""
    return ""


# -- the diagnosis -------------------------------------------------------------------


def _budget_s(budget_s: float | None) -> float:
    text = os.environ.get(BUDGET_ENV, "").strip()
    given = f"got {budget_s!r}" if budget_s is not None else f"{BUDGET_ENV}={text!r}"
    if budget_s is None:
        try:
            budget_s = float(text) if text else DEFAULT_BUDGET_S
        except ValueError:
            budget_s = math.nan
    if not 0 < budget_s < math.inf:
        msg = f"the time budget must be a positive number of seconds, {given}"
        raise DiagnoseError(msg)
    return budget_s


def _provenance(device: str) -> dict[str, str]:
    from gpuguide.version import __version__

    name = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    return {
        "device": device,
        "device_name": name,
        "torch": torch.__version__,
        "gpuguide": __version__,
        "python": sys.version.split()[0],
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def diagnose(
    step: Callable[[], object],
    *,
    warmup: int = 2,
    steps: int = 5,
    budget_s: float | None = None,
    ceiling: bool = False,
    results: str | os.PathLike[str] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Diagnosis:
    """Diagnose ``step``: ``warmup`` steps, ``steps`` timed, ``steps`` profiled.

    ``budget_s`` is the most one step may take (default ``GPUGUIDE_DIAGNOSE_BUDGET_S``
    or 20 s); ``ceiling`` also measures the device's matmul ceiling (the check-up's,
    :func:`gpuguide.peaks.device_peaks`) to hold the model-FLOP rate against;
    ``results`` is the folder of recordings to quote (default
    ``GPUGUIDE_RESULTS_DIR``, else the guide's ``docs/results``); ``progress``
    receives a line per phase. Raises :class:`DiagnoseError`.
    """
    from torch.profiler import ProfilerActivity, profile

    from gpuguide.breakdown import budget_from_events, linked_events

    if warmup < 1 or steps < 1:
        msg = f"warmup and steps must be >= 1, got warmup={warmup}, steps={steps}"
        raise DiagnoseError(msg)
    say = progress or (lambda line: None)
    start = time.perf_counter()
    limit = _budget_s(budget_s)
    run = _runner(step, limit, _no_sync)
    say(f"warming up: {warmup} step(s)")
    first = [run() for _ in range(warmup)]
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    device = f"cuda:{torch.cuda.current_device()}" if cuda else "cpu"
    run = _runner(step, limit, _cuda_sync if cuda else _no_sync)
    say(f"timing {steps} step(s) on {device}")
    memory = _cuda_memory if cuda else dict
    compile_before, memory_before = _compile_state(), memory()
    times = [run() for _ in range(steps)]
    compile_after, memory_after = _compile_state(), memory()
    say(f"profiling {steps} step(s)")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(
        activities=activities, record_shapes=True, profile_memory=True, with_stack=False
    ) as prof:
        profiled = [run() for _ in range(steps)]
    events = linked_events(prof)  # kernels know their operator, also on torch 2.11
    step_s = statistics.median(times)
    budget = budget_from_events(events, step_s=step_s, steps=steps, device=device)
    window_s = sum(budget.seconds.values())  # one profiled step
    # the profiler slows what it records: scale its times down to the unprofiled
    # step (never up, so that a noisy timed step cannot inflate a gain)
    scale = min(1.0, step_s / window_s) if window_s > 0 else 1.0
    breakdown = {name: s * scale for name, s in budget.seconds.items()}
    # single events scale with the median profiled step: one preempted step (a
    # shared machine) inflates the window's mean, not its median
    event_scale = min(1.0, step_s / statistics.median(profiled))
    say("reading the profile")
    context = _Context(
        device=device,
        step_s=step_s,
        breakdown=breakdown,
        profile=_Profile(events, steps, event_scale),
        compile_before=compile_before,
        compile_after=compile_after,
        timed_steps=steps,
        memory_before=memory_before,
        memory_after=memory_after,
    )
    findings = [f for detect in _DETECTORS for f in detect(context)]
    folder = Path(results) if results is not None else _default_results_dir()
    findings = [
        replace(f, quote=_quote(f.page, device, folder))
        for f in sorted(findings, key=lambda f: (-f.gain_s, -(f.gain_bytes or 0)))
    ]
    if ceiling:
        say("measuring the matmul ceiling")
        from gpuguide.peaks import device_peaks

        peak = device_peaks(device).flops_for(torch.float32)
        if peak:
            context.counters["matmul_ceiling_flop_rate"] = peak
            context.counters["model_flop_share"] = (
                context.counters["model_flop_rate"] / peak
            )
    spent = sum(first) + sum(times) + sum(profiled)
    total = time.perf_counter() - start
    overhead = {
        "total_s": total,
        "steps_s": spent,
        "tool_s": total - spent,
        "profiled_step_s": statistics.median(profiled),
        "profiler_overhead_share": statistics.median(profiled) / step_s - 1,
        "budget_gap": budget.gap,
    }
    return Diagnosis(
        device=device,
        step_s=step_s,
        steps=steps,
        warmup=warmup,
        breakdown=breakdown,
        counters=context.counters,
        findings=tuple(findings),
        overhead=overhead,
        provenance=_provenance(device),
    )


# -- the command line ----------------------------------------------------------------


def _check_output(path: Path, script: Path) -> None:
    """Refuse to write onto the script or onto an existing file that is not JSON."""
    if path.resolve() == script.resolve():
        msg = f"refusing to write --json onto the script itself: {path}"
        raise DiagnoseError(msg)
    if path.exists():
        try:
            json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError, OSError):
            msg = f"refusing to overwrite {path}: it exists and is not a JSON file"
            raise DiagnoseError(msg) from None


def write_json(data: dict[str, Any], path: Path) -> None:
    """Validate ``data`` against the schema and write it atomically to ``path``."""
    import jsonschema

    jsonschema.validate(data, schema())
    fd, temporary = tempfile.mkstemp(dir=path.parent or ".", suffix=".json.tmp")
    with os.fdopen(fd, "w") as file:
        json.dump(data, file, indent=1)
        file.write("\n")
    Path(temporary).replace(path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpuguide diagnose",
        description=(
            "Diagnose one training step: where its time goes, and which page of "
            "the guide teaches the fix for each cause found. SCRIPT defines step(), "
            "one training step with no arguments that fetches its own batch; it is "
            "loaded in a namespace of its own (its `if __name__ == '__main__':` "
            "block does not run). The tool runs --warmup steps, times --steps steps "
            "and profiles --steps more on the device the script uses, then prints "
            "the breakdown, the counters, the findings (evidence, predicted gain "
            "per step, page, advice) and its own overhead."
        ),
        epilog=(
            f"A step that takes longer than the time budget ({DEFAULT_BUDGET_S:g} s "
            f"by default; --budget-s or {BUDGET_ENV}) stops the diagnosis. Exit "
            "status: 0 diagnosed, 2 bad input or a failing step."
        ),
    )
    parser.add_argument("script", type=Path, help="a Python file that defines step()")
    parser.add_argument(
        "--step", default="step", help="the function to diagnose (default: step)"
    )
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps (2)")
    parser.add_argument(
        "--steps", type=int, default=5, help="steps timed, and as many profiled (5)"
    )
    parser.add_argument(
        "--budget-s", type=float, default=None, help="the most one step may take"
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also measure the matmul ceiling to hold the model-FLOP rate against",
    )
    parser.add_argument(
        "--results", default=None, help="the folder of recordings to quote"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write the diagnosis as JSON (diagnose.schema.json) to FILE",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m gpuguide diagnose``; returns the exit status."""
    from gpuguide.quiet import ignore_torch_internal_warnings

    ignore_torch_internal_warnings()
    parser = _parser()
    args = parser.parse_args(argv)
    if args.warmup < 1 or args.steps < 1:
        parser.error("--warmup and --steps must be >= 1")
    try:
        if args.json is not None:
            _check_output(args.json, args.script)
        step = load_step(args.script, args.step)
        found = diagnose(
            step,
            warmup=args.warmup,
            steps=args.steps,
            budget_s=args.budget_s,
            ceiling=args.ceiling,
            results=args.results,
            progress=lambda line: print(f"diagnose: {line}", flush=True),
        )
        if args.json is not None:
            write_json(
                found.to_json() | {"script": str(args.script), "step": args.step},
                args.json,
            )
    except DiagnoseError as error:
        print(f"python -m gpuguide diagnose: error: {error}", file=sys.stderr)
        return 2
    print(found)
    return 0
