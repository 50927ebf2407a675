"""Time the phases of a training step on the device, and read a profile cleanly.

Phases
    :func:`time_phases` gives a :class:`PhaseTimer`: ``with timer.step():``
    brackets one step and ``with timer.phase("forward"):`` each phase inside
    it. On CUDA both are timing events recorded on the current stream (through
    :func:`~gpuguide.chapters.timeline.record_timeline`); elsewhere the host
    clock is read after synchronizing. A phase's time is then the time the
    device's stream spends on it: its kernels *and* any time the GPU waits for
    the host to launch them. That holds for work that autograd runs on its own
    thread too, because the events sit on the stream, not on a thread; a
    ``record_function`` range on the main thread covers none of the backward
    pass's kernels. :class:`PhaseTimes` gives each phase's median with its
    spread, its share of the step, and checks that the phases add up to the
    step timed as one span. :func:`time_steps` times several variants of a
    step in interleaved rounds.

Profiles
    :func:`operator_table` prints a profile's operators and kernels without
    the device-side rows of ``record_function`` ranges (on a GPU such a row
    spans from the range's first kernel to its last, idle gaps included, and
    reads as far more than 100% of the kernel time). :func:`kernel_time_s`
    sums the device time of the kernels. :func:`torch_messages` collects what
    torch says meanwhile (warnings, log records, the lines its C++ profiler
    writes to stderr) instead of letting it reach the page.

Examples
--------
>>> import torch
>>> timer = time_phases("cpu")
>>> with timer:
...     for _ in range(3):
...         with timer.step():
...             with timer.phase("matmul"):
...                 _ = torch.ones(64, 64) @ torch.ones(64, 64)
>>> timer.times.names
('matmul',)
>>> timer.times.step.n
3
"""

from __future__ import annotations

import faulthandler
import logging
import math
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.chapters.timeline import Span, TimelineRecorder, synchronize
from gpuguide.device import as_device
from gpuguide.quiet import warning_text
from gpuguide.timing import Measurement
from gpuguide.units import format_time

if TYPE_CHECKING:
    import torch

__all__ = [
    "PhaseTimer",
    "PhaseTimes",
    "TorchMessages",
    "kernel_time_s",
    "operator_table",
    "synchronize",
    "time_phases",
    "time_steps",
    "torch_messages",
]

#: Lanes of the underlying timeline.
_STEP, _PHASE = "step", "phase"
#: Two times closer than this count as equal: about the resolution of a CUDA
#: event (0.5 us), so intervals of spread 0 still compare sensibly.
_RESOLUTION_S = 1e-6


def _overlap(a: Measurement, b: Measurement) -> bool:
    """Whether the IQR intervals of ``a`` and ``b`` overlap (within the resolution)."""
    return a.q25_s <= b.q75_s + _RESOLUTION_S and b.q25_s <= a.q75_s + _RESOLUTION_S


@dataclass(frozen=True)
class PhaseTimes:
    """The times of the phases of repeated steps, and of the steps themselves.

    Attributes
    ----------
    phases : tuple of Measurement
        One per phase, labelled with its name, in order of first appearance;
        entry ``i`` of each is the phase's time in step ``i`` (a phase entered
        twice in a step counts with its total, one missing counts 0). Phases
        do not nest: each is a separate part of the step.
    step : Measurement
        Each step timed as one span, from before its first phase to after its
        last.
    phase_sum : Measurement
        Each step's phases added up.
    """

    phases: tuple[Measurement, ...]
    step: Measurement
    phase_sum: Measurement

    def __repr__(self) -> str:
        phases = ", ".join(
            f"{m.label} {format_time(m.median_s)} ({_percent(self.share(m.label))})"
            for m in self.phases
        )
        return (
            f"<PhaseTimes: {self.step.n} steps of {format_time(self.step.median_s)} "
            f"(median); {phases}>"
        )

    @property
    def names(self) -> tuple[str, ...]:
        """The phases' names, in order."""
        return tuple(m.label for m in self.phases)

    def __getitem__(self, name: str) -> Measurement:
        for measurement in self.phases:
            if measurement.label == name:
                return measurement
        msg = f"name must be one of {self.names}, got {name!r}"
        raise KeyError(msg)

    def share(self, name: str) -> float:
        """The phase's share of the steps' time: its total over all steps
        divided by theirs.

        Each phase lies inside its step and phases do not overlap, so each
        share is at most 1 and the shares add up to at most 1 (the rest is
        time between phases). A share of medians would not add up: the sum
        of the phases' medians need not be the median of their sums.
        """
        total = math.fsum(self.step.times_s)
        return math.fsum(self[name].times_s) / total if total > 0 else 0.0

    @property
    def unaccounted_s(self) -> float:
        """Median step minus median sum of the phases, in seconds: the time
        between phases (and the timer's own), when it is more than the spread."""
        return self.step.median_s - self.phase_sum.median_s

    @property
    def adds_up(self) -> bool:
        """Whether the phases add up to the step: their sums' IQR interval
        overlaps the step's."""
        return _overlap(self.step, self.phase_sum)

    def largest(self) -> str | None:
        """The phase clearly larger than every other (its first quartile above
        their third), or None when no phase is."""
        for candidate in self.phases:
            others = [m for m in self.phases if m is not candidate]
            if all(candidate.q25_s > m.q75_s + _RESOLUTION_S for m in others):
                return candidate.label
        return None

    def rows(self) -> list[dict[str, object]]:
        """One row per phase and one for their sum, for :func:`gpuguide.table`:
        the phase, its time per step (median ± half the IQR, NOISY when the
        IQR is more than 10% of the median) and its :meth:`share` of the
        steps' time."""
        rows: list[dict[str, object]] = [
            {
                "phase": m.label,
                "time per step": m,
                "of the step": _percent(self.share(m.label)),
            }
            for m in self.phases
        ]
        rows.append(
            {"phase": "all phases", "time per step": self.phase_sum, "of the step": "-"}
        )
        rows.append(
            {"phase": "step (one span)", "time per step": self.step, "of the step": "-"}
        )
        return rows

    def check(self) -> str:
        """One sentence: do the phases add up to the step, within the spread?"""
        total, step = self.phase_sum, self.step
        difference = format_time(abs(self.unaccounted_s))
        head = (
            f"The phases add up to {format_time(total.median_s)} per step, the step timed as "
            f"one span takes {format_time(step.median_s)} (IQRs {format_time(total.iqr_s)} and "
            f"{format_time(step.iqr_s)}): a difference of {difference}"
        )
        if self.adds_up:
            return head + ", within the spread, so the phases account for the step."
        return (
            head + ", more than the spread: the phases do not account for the whole "
            "step (the rest is time between the phases)."
        )


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f}%" if fraction >= 0.01 else f"{fraction * 100:.1g}%"


class PhaseTimer:
    """Times the phases of repeated steps; made by :func:`time_phases`.

    Use it as a context manager around the steps, with ``step()`` around each
    step and ``phase(name)`` around each phase inside it; :attr:`times` is
    filled when the ``with`` block ends.

    Parameters
    ----------
    device : str or torch.device or None
        Where the steps run; None picks the default device.
    enabled : bool
        False makes :meth:`step` and :meth:`phase` do nothing (for warm-up
        steps of a function that takes a timer).
    clock, event_factory, synchronize : callable, optional
        Stand-ins, as for :class:`~gpuguide.chapters.timeline.TimelineRecorder`.

    Attributes
    ----------
    times : PhaseTimes or None
        The result; None before the block ends, when disabled, or when no step
        was timed.
    """

    def __init__(
        self,
        device: str | torch.device | None = None,
        *,
        enabled: bool = True,
        clock: Callable[[], float] | None = None,
        event_factory: Callable[..., Any] | None = None,
        synchronize: Callable[[], None] | None = None,
    ) -> None:
        self.device = as_device(device)
        self.enabled = enabled
        self.times: PhaseTimes | None = None
        self._recorder = TimelineRecorder(
            self.device,
            enabled=enabled,
            clock=clock,
            event_factory=event_factory,
            synchronize=synchronize,
        )

    def __repr__(self) -> str:
        state = "" if self.enabled else ", disabled"
        steps = 0 if self.times is None else self.times.step.n
        return f"<PhaseTimer on {self.device}{state}: {steps} steps>"

    def __enter__(self) -> PhaseTimer:
        self.times = None
        self._recorder.__enter__()
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        self._recorder.__exit__(exc_type, *exc_info)
        if exc_type is None and self.enabled:
            self.times = _phase_times(
                self._recorder.spans, str(self.device), self._method()
            )

    def _method(self) -> str:
        if self.device.type == "cuda":
            return "cuda-events"
        return "wall-clock" if self.device.type == "cpu" else "wall-clock+sync"

    @contextmanager
    def step(self) -> Iterator[None]:
        """Time the block as one step."""
        with self._recorder.span(_STEP, _STEP):
            yield

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as the phase ``name`` of the current step."""
        with self._recorder.span(_PHASE, name):
            yield


def _phase_times(spans: list[Span], device: str, method: str) -> PhaseTimes | None:
    """Group the recorder's spans into steps. Each span is listed when it ends,
    so a step's phases come just before the step."""
    steps: list[tuple[Span, list[Span]]] = []
    pending: list[Span] = []
    for span in spans:
        if span.lane == _PHASE:
            pending.append(span)
            continue
        outside = [
            p.label
            for p in pending
            if p.start_s < span.start_s - _RESOLUTION_S
            or p.end_s > span.end_s + _RESOLUTION_S
        ]
        if outside:
            msg = f"every phase must lie inside a step, got {outside} outside one"
            raise ValueError(msg)
        steps.append((span, pending))
        pending = []
    if pending:
        names = [p.label for p in pending]
        msg = f"every phase must lie inside a step, got {names} after the last step"
        raise ValueError(msg)
    if not steps:
        return None
    names = list(dict.fromkeys(p.label for _, phases in steps for p in phases))
    per_phase: dict[str, list[float]] = {name: [] for name in names}
    for _, phases in steps:
        for name in names:
            per_phase[name].append(sum(p.duration_s for p in phases if p.label == name))
    return PhaseTimes(
        phases=tuple(
            Measurement(name, tuple(times), device, method)
            for name, times in per_phase.items()
        ),
        step=Measurement("step", tuple(s.duration_s for s, _ in steps), device, method),
        phase_sum=Measurement(
            "all phases",
            tuple(sum(p.duration_s for p in phases) for _, phases in steps),
            device,
            method,
        ),
    )


def time_phases(
    device: str | torch.device | None = None, *, enabled: bool = True
) -> PhaseTimer:
    """Time the phases of repeated steps on the device's stream.

    Parameters
    ----------
    device : str or torch.device or None
        Where the steps run; None picks the default device.
    enabled : bool
        False gives a timer whose ``step`` and ``phase`` do nothing.

    Returns
    -------
    PhaseTimer
        A context manager; its ``times`` are filled when the block ends.
    """
    return PhaseTimer(device, enabled=enabled)


def time_steps(
    variants: Mapping[str, Callable[[PhaseTimer], object]],
    *,
    steps: int,
    warmup_steps: int = 2,
    device: str | torch.device | None = None,
) -> dict[str, PhaseTimes]:
    """Time the phases of several variants of a step, in interleaved rounds.

    Each variant is a function that runs one step and marks its phases with
    the timer it is given (``with timer.phase("forward"): ...``). First every
    variant runs ``warmup_steps`` untimed steps (with a disabled timer); then
    ``steps`` rounds each run one timed step of every variant in turn, so that
    a drift of the machine (clocks, other processes) touches all variants
    alike. The steps follow each other as in a training loop: on CUDA nothing
    waits for the GPU between them.

    Parameters
    ----------
    variants : mapping of str to callable
        Label -> function taking a :class:`PhaseTimer`.
    steps : int
        Timed steps of each variant (at least 1).
    warmup_steps : int
        Untimed steps of each variant first (at least 0).
    device : str or torch.device or None
        Where the steps run; None picks the default device.

    Returns
    -------
    dict of str to PhaseTimes
        Label -> the variant's times.

    Raises
    ------
    ValueError
        For no variants, a bad count, or a phase outside a step.
    """
    if not variants:
        msg = "variants must hold at least one step function, got none"
        raise ValueError(msg)
    checks.integer("steps", steps, minimum=1)
    checks.integer("warmup_steps", warmup_steps, minimum=0)
    idle = PhaseTimer(device, enabled=False)
    for _ in range(warmup_steps):
        for run in variants.values():
            run(idle)
    timers = {label: PhaseTimer(device) for label in variants}
    with ExitStack() as stack:
        for timer in timers.values():
            stack.enter_context(timer)
        for _ in range(steps):
            for label, run in variants.items():
                timer = timers[label]
                with timer.step():
                    run(timer)
    results: dict[str, PhaseTimes] = {}
    for label, timer in timers.items():
        if timer.times is None:  # pragma: no cover - steps >= 1 always times one
            msg = f"no step of {label!r} was timed"
            raise RuntimeError(msg)
        results[label] = timer.times
    return results


# -- profiles ------------------------------------------------------------------


def _is_device_range(event: Any) -> bool:
    """A ``record_function`` range's row on the device (not a kernel, not an op)."""
    from torch.autograd import DeviceType

    return bool(getattr(event, "is_user_annotation", False)) and (
        event.device_type != DeviceType.CPU
    )


def operator_table(prof: Any, *, sort_by: str, row_limit: int = 12) -> str:
    """The profile's operators and kernels as torch's table, without ranges' device rows.

    On a GPU the profiler gives each ``record_function`` range (and each
    ``ProfilerStep``) a device-side row that spans from the range's first
    kernel to its last, idle gaps included; its "Self CUDA %" is that span
    over the kernels' total time and can read far above 100%. This table
    leaves those rows out, so every percentage is a share of the kernels'
    time (or of the CPU time); the ranges' host-side rows stay.

    Parameters
    ----------
    prof : torch.profiler.profile
        A finished profile.
    sort_by : str
        As for ``key_averages().table()``: ``"self_device_time_total"``,
        ``"self_cpu_time_total"``, ...
    row_limit : int
        Rows to print.

    Returns
    -------
    str
        The table, as ``EventList.table`` prints it.
    """
    averages = prof.key_averages()
    averages[:] = [e for e in averages if not _is_device_range(e)]
    return str(averages.table(sort_by=sort_by, row_limit=row_limit))


def kernel_time_s(prof: Any) -> float:
    """Total device time of the profile's kernels (and copies), in seconds.

    Sums the device rows that are not ranges (see :func:`operator_table`):
    what ``table()`` prints as "Self CUDA time total". 0 for a profile
    without device activity (a CPU run).
    """
    from torch.autograd import DeviceType

    total_us = sum(
        e.self_device_time_total
        for e in prof.key_averages()
        if e.device_type != DeviceType.CPU and not _is_device_range(e)
    )
    return float(total_us) / 1e6


# -- what torch says -----------------------------------------------------------

#: Lines that Kineto (torch's C++ profiler) writes to stderr that say nothing
#: about the profile: in torch 2.12 and later a line on every start and stop of
#: a profile, at any log level; and, in a CUDA build of torch on a machine
#: without a GPU, that it found none (a GPU run that lost its GPU shows as a
#: profile without kernels instead).
_KINETO_NOISE = re.compile(
    r"^USDT:.*\] profiler_(start|stop)\s*$"
    r"|^ERROR:.*\] gpuGetDeviceCount failed with code \d+\s*$"
)


class TorchMessages:
    """What torch said inside a :func:`torch_messages` block, one line each.

    Attributes
    ----------
    lines : list of str
        Warnings (one line each, without torch's C++ source location), log
        records of torch's loggers, and lines written to stderr, in that order.
    dropped : int
        Known noise left out of ``lines`` (Kineto's ``profiler_start`` and
        ``profiler_stop`` lines, and its note that a CUDA build found no GPU).
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.lines)

    def __repr__(self) -> str:
        return f"<TorchMessages: {len(self.lines)} lines, {self.dropped} dropped>"

    def summary(self) -> str:
        """One line for the page, or ``""`` when torch said nothing that matters."""
        if not self.lines:
            return ""
        first = self.lines[0]
        if len(first) > 160:
            first = first[:157] + "..."
        more = f" (and {len(self.lines) - 1} more)" if len(self.lines) > 1 else ""
        return f"torch said meanwhile: {first}{more}"


class _Collect(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.NOTSET)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(" ".join(record.getMessage().split()))


def _torch_loggers() -> list[logging.Logger]:
    """torch's loggers that print themselves (have handlers or do not propagate)."""
    found = [logging.getLogger("torch")]
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if (
            isinstance(logger, logging.Logger)
            and name.startswith("torch.")
            and (logger.handlers or not logger.propagate)
        ):
            found.append(logger)
    return found


@contextmanager
def _logs_to(sink: list[str]) -> Iterator[None]:
    """Route the records of torch's loggers to ``sink`` instead of their handlers."""
    collect = _Collect(sink)
    saved = [(lg, lg.handlers[:], lg.propagate) for lg in _torch_loggers()]
    for logger, _, _ in saved:
        logger.handlers = [collect]
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate


@contextmanager
def _stderr_to(sink: list[str]) -> Iterator[None]:
    """Send what is written to file descriptor 2 (C++ code included) to ``sink``.

    A fault handler that was on keeps writing to the real stderr meanwhile, so
    a crash inside the block still shows its Python stack.
    """
    fd = 2
    for stream in (sys.stderr, sys.__stderr__):
        if stream is not None:
            stream.flush()
    saved = os.dup(fd)
    crash_report = faulthandler.is_enabled()
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), fd)
        if crash_report:
            faulthandler.enable(file=saved)
        try:
            yield
        finally:
            for stream in (sys.stderr, sys.__stderr__):
                if stream is not None:
                    stream.flush()
            os.dup2(saved, fd)
            if crash_report:
                faulthandler.enable(file=fd)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace")
    sink.extend(line.rstrip() for line in text.splitlines() if line.strip())


@contextmanager
def torch_messages(*, stderr: bool = True) -> Iterator[TorchMessages]:
    """Collect what torch says inside the block instead of printing it.

    Collects every warning (even those that ``-W error`` or gpuguide's filter
    would raise or hide), the records of torch's loggers, and, with
    ``stderr=True``, what is written to the process's stderr (file
    descriptor 2), where torch's C++ code (Kineto, CUPTI) logs. Known noise is
    dropped (see :class:`TorchMessages`).

    Parameters
    ----------
    stderr : bool
        Also capture file descriptor 2.

    Yields
    ------
    TorchMessages
        Filled when the block ends (also when it raises).
    """
    said = TorchMessages()
    warned: list[warnings.WarningMessage] = []
    logged: list[str] = []
    printed: list[str] = []
    try:
        with ExitStack() as stack:
            if stderr:
                stack.enter_context(_stderr_to(printed))
            stack.enter_context(_logs_to(logged))
            warned = stack.enter_context(warnings.catch_warnings(record=True))
            warnings.simplefilter("always")
            yield said
    finally:
        kept = [line for line in printed if not _KINETO_NOISE.match(line)]
        said.dropped = len(printed) - len(kept)
        said.lines = [warning_text(w) for w in warned] + logged + kept
