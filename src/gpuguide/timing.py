"""Time a callable on CPU, CUDA or MPS: every call's time, the median and its spread.

:func:`benchmark` follows ``triton.testing.do_bench`` (warm-up and repetitions are
budgets in ms). CUDA times each call with its own pair of events (an optional L2
flush queued before the pair) and synchronizes once at the end; the CPU uses a host
clock, MPS the host clock and ``torch.mps.synchronize()``. On CUDA, ``measure`` is
``"call"`` (default): the time per call of a loop launching call after call, as
training does (the launch time when the GPU work is shorter than a launch), or
``"kernel"``: the GPU work alone, the GPU held busy (``torch.cuda._sleep``) while
each chunk of calls is queued so the launches are hidden, as ``do_bench`` reports
short kernels. They agree past about 50 us of GPU work.

>>> import torch
>>> a = torch.randn(256, 256)
>>> m = benchmark(torch.mm, args=(a, a), label="fp32 matmul 256")
>>> print(m.rate(matmul_flop(256, 256, 256)))  # doctest: +SKIP
1.52 TFLOP/s (1.49-1.53)
"""

from __future__ import annotations

import functools
import gc
import itertools
import math
import time
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.device import as_device, pick_device
from gpuguide.env import small_mode
from gpuguide.units import format_rate, format_time, significant, time_unit

if TYPE_CHECKING:
    import torch

__all__ = [
    "Measurement",
    "Rate",
    "StepTimes",
    "benchmark",
    "first_calls_s",
    "host_and_gpu_times",
    "matmul_flop",
]

#: A measurement whose IQR is more than this fraction of its median is noisy.
NOISY_RELATIVE_IQR = 0.10
#: :func:`benchmark`'s budgets in ms (as do_bench), and their small-mode caps.
WARMUP_MS = 25.0
REP_MS = 100.0
SMALL_WARMUP_MS = 2.0
SMALL_REP_MS = 10.0

#: Bytes zeroed before each CUDA call with ``flush_l2=True``: more than any L2.
_L2_FLUSH_BYTES = 256 * 1024 * 1024
_MAX_WARMUP_CALLS = 1_000_000
_MEASURES = ("call", "kernel")
#: ``measure="kernel"``: at most this many calls are queued behind one hold.
_KERNEL_CHUNK = 32
#: Entries a stream's launch queue takes before the host blocks (about 1024, less a
#: margin), and the fastest host time of one launch.
_QUEUE_DEPTH = 900
_LAUNCH_S = 4e-6
#: Host time of one pair of event records, allowed for in the hold.
_RECORD_S = 5e-6


@dataclass(frozen=True)
class Measurement:
    """Times of repeated calls of one operation (``label``), with statistics.

    ``times_s`` holds each call's time in seconds; ``method`` is ``"cuda-events"``,
    ``"cuda-events-queued"``, ``"wall-clock"`` or ``"wall-clock+sync"`` (MPS).
    ``rounds`` holds the median time of each round when the operation was timed
    in rounds interleaved with others (:func:`gpuguide.interleave`), in seconds;
    empty otherwise. Comparisons pair the rounds of two such measurements.
    """

    label: str
    times_s: tuple[float, ...]
    device: str
    method: str
    warmup_calls: int = 0
    rounds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        times = tuple(float(t) for t in self.times_s)
        if not times:
            msg = "times_s must hold at least one time, got ()"
            raise ValueError(msg)
        if not all(math.isfinite(t) and t >= 0 for t in times):
            msg = f"times_s must be finite numbers >= 0, got {times!r}"
            raise ValueError(msg)
        checks.integer("warmup_calls", self.warmup_calls, minimum=0)
        object.__setattr__(self, "times_s", times)
        rounds = tuple(float(t) for t in self.rounds)
        if not all(math.isfinite(t) and t >= 0 for t in rounds):
            msg = f"rounds must be finite numbers >= 0, got {rounds!r}"
            raise ValueError(msg)
        object.__setattr__(self, "rounds", rounds)

    @cached_property
    def _sorted(self) -> tuple[float, ...]:
        return tuple(sorted(self.times_s))

    def quantile(self, q: float) -> float:
        """The ``q`` quantile of the times (``0 <= q <= 1``), in seconds."""
        if not 0 <= q <= 1:
            msg = f"q must be in [0, 1], got {q!r}"
            raise ValueError(msg)
        data = self._sorted
        position = q * (len(data) - 1)
        lower = math.floor(position)
        upper = min(lower + 1, len(data) - 1)
        fraction = position - lower
        return data[lower] + (data[upper] - data[lower]) * fraction

    @property
    def n(self) -> int:
        """Number of timed calls."""
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        """Median time per call, in seconds."""
        return self.quantile(0.5)

    @property
    def min_s(self) -> float:
        """Fastest call, in seconds."""
        return self._sorted[0]

    @property
    def max_s(self) -> float:
        """Slowest call, in seconds."""
        return self._sorted[-1]

    @property
    def q25_s(self) -> float:
        """First quartile, in seconds."""
        return self.quantile(0.25)

    @property
    def q75_s(self) -> float:
        """Third quartile, in seconds."""
        return self.quantile(0.75)

    @property
    def iqr_s(self) -> float:
        """Interquartile range ``q75_s - q25_s``, in seconds."""
        return self.q75_s - self.q25_s

    @property
    def relative_iqr(self) -> float:
        """IQR as a fraction of the median (``inf`` for a zero median, 0 if both are 0)."""
        median, iqr = self.median_s, self.iqr_s
        if median == 0:
            return math.inf if iqr > 0 else 0.0
        return iqr / median

    @property
    def median_ms(self) -> float:
        """Median time per call, in milliseconds."""
        return self.median_s * 1e3

    @property
    def is_noisy(self) -> bool:
        """Whether the IQR is more than ``NOISY_RELATIVE_IQR`` (10%) of the median."""
        return self.relative_iqr > NOISY_RELATIVE_IQR

    def rate(self, work: float, unit: str = "FLOP/s") -> Rate:
        """``work`` per call (FLOP, bytes read plus written...) as a :class:`Rate`.

        >>> m = Measurement("mm", (1e-3, 1e-3, 2e-3), "cpu", "wall-clock")
        >>> str(m.rate(2e9))
        '2.00 TFLOP/s (1.33-2.00)'
        """
        work = checks.non_negative("work", work)
        q25, median, q75 = self.q25_s, self.median_s, self.q75_s
        if q25 <= 0:
            msg = f"{self.label!r}: a rate needs times > 0, got a first quartile of 0"
            raise ValueError(msg)
        return Rate(
            work / median, unit, work / q75, work / q25, self.label, self.device
        )

    def __repr__(self) -> str:
        median = self.median_s
        scale, unit = time_unit(median)
        runs = "1 run" if self.n == 1 else f"{self.n} runs"
        relative = self.relative_iqr
        percent = "inf" if math.isinf(relative) else significant(relative * 100, 2)
        text = (
            f"<Measurement {self.label!r} on {self.device}: "
            f"median {format_time(median)}, "
            f"IQR {significant(self.iqr_s / scale, 2)} {unit} ({percent}%), "
            f"{runs}, {self.method}"
        )
        if self.is_noisy:
            limit = significant(NOISY_RELATIVE_IQR * 100, 2)
            text += f", NOISY (IQR > {limit}% of median)"
        return text + ">"


@dataclass(frozen=True)
class Rate:
    """A rate: ``value`` (the median call's) in ``unit``, between ``low`` and ``high``
    (the quartile calls'); prints as ``"41.2 TFLOP/s (40.8-41.5)"``."""

    value: float
    unit: str
    low: float
    high: float
    label: str = ""
    device: str = "cpu"

    def __post_init__(self) -> None:
        for name in ("value", "low", "high"):
            checks.non_negative(name, getattr(self, name))
        if not self.low <= self.value <= self.high:
            msg = f"low <= value <= high must hold, got {self.low}, {self.value}, {self.high}"
            raise ValueError(msg)

    @property
    def spread(self) -> str:
        """``"40.8-41.5"``: the interval in the value's prefix, without the unit."""
        prefix = format_rate(self.value, self.unit).split()[-1][: -len(self.unit)]
        scale = 1000.0 ** ("kMGTPE".find(prefix) + 1) if prefix else 1.0
        return f"{significant(self.low / scale)}-{significant(self.high / scale)}"

    def __str__(self) -> str:
        return f"{format_rate(self.value, self.unit)} ({self.spread})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def matmul_flop(m: int, n: int, k: int, batch: int = 1) -> int:
    """FLOP of a (batched) matmul ``(m x k) @ (k x n)``: ``2 * m * n * k * batch``."""
    sizes = {"m": m, "n": n, "k": k, "batch": batch}
    return 2 * math.prod(
        checks.integer(name, v, minimum=0) for name, v in sizes.items()
    )


def benchmark(
    fn: Callable[..., Any],
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    label: str | None = None,
    device: str | torch.device | None = None,
    warmup_ms: float | None = None,
    rep_ms: float | None = None,
    min_reps: int = 5,
    max_reps: int = 1000,
    flush_l2: bool = False,
    measure: str = "call",
    clock: Callable[[], float] | None = None,
    sample_ms: float | None = None,
) -> Measurement:
    """Time ``fn(*args, **kwargs)`` and return every call's time.

    ``fn`` runs for ``warmup_ms`` (default 25, small mode 2; at least once), then
    ``ceil(rep_ms / estimate)`` calls are timed (``rep_ms`` default 100, small mode
    10), within ``[min_reps, max_reps]``. ``device`` decides how: by default the
    first non-CPU tensor's in the arguments, else in what ``fn`` carries (bound
    object, ``partial`` arguments, defaults, closure, module-level names it reads),
    else the CPU. CUDA only: ``flush_l2`` zeroes a 256 MiB buffer before each call,
    outside the events; ``measure`` is explained in the module. ``clock`` replaces
    ``time.perf_counter`` (tests; not on CUDA). On a host clock (CPU, MPS),
    ``sample_ms`` times blocks of back-to-back calls that last at least that long,
    each block one sample of the time per call (as ``torch.utils.benchmark``'s
    ``blocked_autorange``): a call shorter than a scheduler tick then no longer
    reads a whole tick when the OS preempts it. Ignored on CUDA, whose events time
    each call on the GPU.

    Raises ``ValueError`` for bad budgets or bounds, ``measure="kernel"`` with no
    CUDA tensor in reach while CUDA is in use, or a ``clock`` on CUDA, and
    ``RuntimeError`` if the device is not available.
    """
    if not callable(fn):
        msg = f"fn must be callable, got {fn!r}"
        raise TypeError(msg)
    if clock is not None and not callable(clock):
        msg = f"clock must be callable, got {clock!r}"
        raise TypeError(msg)
    if measure not in _MEASURES:
        msg = (
            f"measure must be one of {', '.join(map(repr, _MEASURES))}, got {measure!r}"
        )
        raise ValueError(msg)
    warmup_s, rep_s = _budgets_s(warmup_ms, rep_ms)
    min_reps = checks.integer("min_reps", min_reps, minimum=1)
    max_reps = checks.integer("max_reps", max_reps, minimum=min_reps)
    if not isinstance(args, (tuple, list)):
        msg = (
            f"args must be a tuple or list of arguments, got {type(args).__name__} "
            "(write args=(x,) for a single argument)"
        )
        raise TypeError(msg)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        msg = f"kwargs must be a mapping, got {type(kwargs).__name__}"
        raise TypeError(msg)
    args = tuple(args)
    kwargs = dict(kwargs or {})
    if label is None:
        label = _default_label(fn)

    def call() -> None:
        fn(*args, **kwargs)

    resolved = _resolve_device(device, args, kwargs, fn)
    _check_kernel_mode(measure, resolved)
    device_name = str(resolved)

    if resolved.type == "cuda":
        if clock is not None:
            msg = (
                "clock must be None on a CUDA device, got a clock: a host clock "
                "does not see when GPU work ends; CUDA events time it"
            )
            raise ValueError(msg)
        import torch

        with torch.cuda.device(device_name):
            torch.cuda.synchronize()
            calls, estimate = _warmup(
                call, warmup_s, time.perf_counter, torch.cuda.synchronize
            )
            n = _rep_count(estimate, rep_s, min_reps, max_reps)
            stream = torch.cuda.current_stream()
            hold = host_call_s = None
            if measure == "kernel":
                host_call_s = _host_call_s(call, estimate, torch.cuda.synchronize)
                hold = gpu_hold(stream)
            times = _cuda_times(
                call,
                n,
                flush=flush_l2,
                stream=stream,
                hold=hold,
                host_call_s=host_call_s,
            )
        method = "cuda-events" if measure == "call" else "cuda-events-queued"
    else:
        clock = time.perf_counter if clock is None else clock
        synchronize = None
        method = "wall-clock"
        if resolved.type == "mps":
            import torch

            synchronize = torch.mps.synchronize
            synchronize()
            method = "wall-clock+sync"
        calls, estimate = _warmup(call, warmup_s, clock, synchronize)
        block = 1
        if sample_ms is not None:
            sample_s = checks.positive("sample_ms", sample_ms) / 1e3
            block = max(1, math.ceil(sample_s / estimate)) if estimate > 0 else 1
        n = _rep_count(estimate * block, rep_s, min_reps, max_reps)
        times = _host_times(call, n, clock, synchronize, block=block)

    return Measurement(
        label=label,
        times_s=tuple(times),
        device=device_name,
        method=method,
        warmup_calls=calls,
    )


def _budgets_s(warmup_ms: float | None, rep_ms: float | None) -> tuple[float, float]:
    """The warm-up and repetition budgets in seconds."""
    warmup = WARMUP_MS if warmup_ms is None else checks.positive("warmup_ms", warmup_ms)
    rep = REP_MS if rep_ms is None else checks.positive("rep_ms", rep_ms)
    if small_mode():
        warmup, rep = min(warmup, SMALL_WARMUP_MS), min(rep, SMALL_REP_MS)
    return warmup / 1e3, rep / 1e3


def _default_label(fn: Callable[..., Any]) -> str:
    """``fn``'s qualified name, or its plain name past a private class (``torch.mm``)."""
    qualname = getattr(fn, "__qualname__", None)
    name = getattr(fn, "__name__", None)
    if isinstance(qualname, str) and not any(
        part.startswith("_") for part in qualname.split(".")[:-1]
    ):
        return qualname
    if isinstance(name, str):
        return name
    text = repr(fn)
    return text if len(text) <= 60 and "\n" not in text else type(fn).__name__


def _tensor_device(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> torch.device | None:
    """The first non-CPU tensor's device in the arguments (3 levels deep), else any's."""
    import torch

    found = None
    queue = [(value, 0) for value in (*args, *kwargs.values())]
    while queue:
        value, level = queue.pop(0)
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                return value.device
            if found is None:
                found = value.device
        elif level < 3 and isinstance(value, (list, tuple)):
            queue.extend((item, level + 1) for item in value)
        elif level < 3 and isinstance(value, dict):
            queue.extend((item, level + 1) for item in value.values())
    return found


def _bound_values(fn: Callable[..., Any]) -> list[Any]:
    """What ``fn`` carries besides its arguments (see :func:`benchmark`)."""
    import torch

    values: list[Any] = []
    seen: set[int] = set()
    pending = [fn]
    while pending:
        f = pending.pop(0)
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, torch.nn.Module):
            tensors = itertools.chain(f.parameters(), f.buffers())
            values.extend(itertools.islice(tensors, 1))
            continue
        if isinstance(f, functools.partial):
            values.extend([*f.args, *f.keywords.values()])
            pending.append(f.func)
            continue
        owner = getattr(f, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            pending.append(owner)
        elif owner is not None and not isinstance(owner, types.ModuleType):
            values.append(owner)
        values.extend(getattr(f, "__defaults__", None) or ())
        values.extend((getattr(f, "__kwdefaults__", None) or {}).values())
        for cell in getattr(f, "__closure__", None) or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        code, names = getattr(f, "__code__", None), getattr(f, "__globals__", None)
        if code is not None and isinstance(names, dict):
            values.extend(names[n] for n in code.co_names if n in names)
    return values


def _resolve_device(
    device: str | torch.device | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    fn: Callable[..., Any] | None = None,
) -> torch.device:
    """The device given, else the work's, else the CPU; checked by ``pick_device``."""
    import torch

    if device is None:
        found = _tensor_device(args, kwargs)
        if (found is None or found.type == "cpu") and fn is not None:
            carried = _tensor_device(tuple(_bound_values(fn)), {})
            if carried is not None and carried.type != "cpu":
                found = carried
        if found is None or found.type == "cpu":
            return torch.device("cpu")
        device = found
    return pick_device(device)


def _check_kernel_mode(measure: str, resolved: torch.device) -> None:
    """Refuse ``measure="kernel"`` on the host clock while CUDA is in use."""
    if measure != "kernel" or resolved.type != "cpu":
        return
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        msg = (
            'measure="kernel" times GPU work, but neither the arguments nor what '
            "fn carries (the object of a bound method, defaults, closure, the "
            "names its code reads) hold a CUDA tensor, so it would be timed on "
            "the host clock; pass device='cuda'"
        )
        raise ValueError(msg)


def _warmup(
    call: Callable[[], None],
    warmup_s: float,
    clock: Callable[[], float],
    synchronize: Callable[[], None] | None,
) -> tuple[int, float]:
    """Call until ``warmup_s`` has passed: (calls, mean seconds after the first)."""
    calls = 0
    start = clock()
    first = 0.0
    while True:
        call()
        if synchronize is not None:
            synchronize()
        calls += 1
        elapsed = clock() - start
        if calls == 1:
            first = elapsed
        if elapsed >= warmup_s or calls >= _MAX_WARMUP_CALLS:
            break
    if calls > 1:
        return calls, max(elapsed - first, 0.0) / (calls - 1)
    return calls, max(elapsed, 0.0)


def _rep_count(estimate_s: float, rep_s: float, min_reps: int, max_reps: int) -> int:
    """``ceil(rep_s / estimate_s)`` clamped to ``[min_reps, max_reps]``."""
    if estimate_s <= 0:
        return max_reps
    # The tolerance keeps an exact ratio (100 ms / 1 ms) from rounding up to 101.
    wanted = math.ceil(rep_s / estimate_s - 1e-9)
    return min(max(wanted, min_reps), max_reps)


def _host_times(
    call: Callable[[], None],
    n: int,
    clock: Callable[[], float],
    synchronize: Callable[[], None] | None = None,
    *,
    block: int = 1,
) -> list[float]:
    """Time ``n`` samples on a host clock, each ``block`` calls back to back (the
    time per call), the GC paused."""
    times = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(n):
            t0 = clock()
            for _ in range(block):
                call()
            if synchronize is not None:
                synchronize()
            t1 = clock()
            times.append((t1 - t0) / block)
    finally:
        if gc_was_enabled:
            gc.enable()
    return times


def _l2_flush_buffer() -> Any:
    """A 256 MiB int32 buffer on the current CUDA device, zeroed to flush L2."""
    import torch

    return torch.empty(_L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")


def _host_call_s(
    call: Callable[[], None],
    estimate_s: float,
    synchronize: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """The host's time to launch one call (mean of up to 8 launched back to back), s."""
    calls = min(8, max(1, math.ceil(2e-3 / max(estimate_s, 1e-9))))
    synchronize()
    start = clock()
    for _ in range(calls):
        call()
    elapsed = clock() - start
    synchronize()
    return max(elapsed, 0.0) / calls


def _sleep_rate(sleep: Callable[[int], None], stream: Any) -> float:
    """Cycles per second of ``torch.cuda._sleep`` on ``stream`` (best of three)."""
    import torch

    cycles = 1 << 20
    with torch.cuda.stream(stream):
        sleep(8 * cycles)  # a few ms of work: the clocks ramp up
        rates = []
        for _ in range(3):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record(stream)
            sleep(cycles)
            end.record(stream)
            end.synchronize()
            rates.append(cycles / max(float(start.elapsed_time(end)) / 1e3, 1e-9))
    return float(max(rates))


_SLEEP_RATES: dict[int, float] = {}


def gpu_hold(stream: Any = None) -> Callable[[float], None]:
    """A function ``hold(seconds)`` that keeps the GPU busy on ``stream`` (default:
    the current one), so work queued behind it runs back to back."""
    import torch

    stream = torch.cuda.current_stream() if stream is None else stream
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        index = torch.cuda.current_device()
        if index not in _SLEEP_RATES:
            _SLEEP_RATES[index] = _sleep_rate(sleep, stream)
        rate = _SLEEP_RATES[index]

        def hold(seconds: float) -> None:
            # _sleep runs on the current stream: make that the hold's stream.
            with torch.cuda.stream(stream):
                sleep(max(1, round(seconds * rate)))

        return hold
    buffer = _l2_flush_buffer()  # pragma: no cover - every supported torch has _sleep
    per_zero = _time_on_gpu(buffer.zero_, stream)  # pragma: no cover

    def fill(seconds: float) -> None:  # pragma: no cover
        with torch.cuda.stream(stream):
            for _ in range(max(1, math.ceil(seconds / max(per_zero, 1e-9)))):
                buffer.zero_()

    return fill  # pragma: no cover


def _time_on_gpu(call: Callable[[], Any], stream: Any) -> float:  # pragma: no cover
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        call()
        start.record(stream)
        call()
        end.record(stream)
    end.synchronize()
    return float(start.elapsed_time(end)) / 1e3


def _kernel_chunk(host_call_s: float) -> int:
    """Calls to queue behind one hold without filling the launch queue."""
    entries = max(host_call_s, 0.0) / _LAUNCH_S + 2
    return max(1, min(_KERNEL_CHUNK, int(_QUEUE_DEPTH // entries)))


def _cuda_times(
    call: Callable[[], None],
    n: int,
    *,
    flush: bool = False,
    stream: Any = None,
    hold: Callable[[float], None] | None = None,
    host_call_s: float | None = None,
    event_factory: Callable[..., Any] | None = None,
    synchronize: Callable[[], None] | None = None,
    flush_buffer: Any = None,
) -> list[float]:
    """Time ``n`` calls with one CUDA event pair each (a chunk behind each ``hold``)."""
    if event_factory is None or synchronize is None:
        import torch

        event_factory = event_factory or torch.cuda.Event
        synchronize = synchronize or torch.cuda.synchronize
    if flush and flush_buffer is None:
        flush_buffer = _l2_flush_buffer()
    pairs = [
        (event_factory(enable_timing=True), event_factory(enable_timing=True))
        for _ in range(n)
    ]
    chunk = _kernel_chunk(host_call_s or 0.0) if hold is not None else n
    per_call_s = (host_call_s or 0.0) + _RECORD_S
    for first in range(0, n, chunk):
        batch = pairs[first : first + chunk]
        if hold is not None:
            hold(2 * len(batch) * per_call_s + 20e-6)
        for start, end in batch:
            if flush:
                flush_buffer.zero_()
            start.record(stream)
            call()
            end.record(stream)
    synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in pairs]


def first_calls_s(
    fn: Callable[..., Any], *args: Any, device: str | torch.device, calls: int = 3
) -> float:
    """Seconds the first ``calls`` calls of ``fn(*args)`` take, compilation included
    (a host clock between synchronizations: CUDA events would miss compilation)."""
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return time.perf_counter() - t0


_MAX_MISSES = 3  # calls (in all) outlasting their hold before _held_times stops holding
_MAX_HOLD_S = 0.5  # the longest hold before one call, in seconds


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
        """``"host"`` or ``"GPU"``, whichever is slower with their interquartile
        ranges apart, or ``"neither"`` (also where either is NOISY)."""
        if self.gpu is None:
            return "host"
        host, gpu = self.host, self.gpu
        if host.is_noisy or gpu.is_noisy:
            return "neither"
        if host.q25_s > gpu.q75_s:
            return "host"
        return "GPU" if gpu.q25_s > host.q75_s else "neither"

    def __str__(self) -> str:
        host = _spread_text(self.host)
        if self.gpu is None and self.waits:
            return f"host {host} per call, waiting for the GPU inside the call"
        if self.gpu is None:
            return f"host {host} per call (the host does the work)"
        text = f"host {host} to launch, GPU {_spread_text(self.gpu)} of work: "
        if self.bound == "host":
            idle = 1 - self.gpu.median_s / self.host.median_s
            return text + f"host-bound (the GPU idles {idle:.0%} of a step)"
        if self.bound == "GPU":
            return text + "GPU-bound (the host runs ahead)"
        return text + "no measurable difference between the two"


def _spread_text(m: Measurement) -> str:
    """``"1.23 ms ± 45.6 us"``, with `` NOISY`` where it is."""
    text = f"{format_time(m.median_s)} ± {format_time(m.iqr_s / 2)}"
    return text + " NOISY" if m.is_noisy else text


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
    scheduler tick. ``rep_ms``: the budget (default :func:`benchmark`'s, at most
    10 ms in small mode).
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
    times = Measurement(label, tuple(gpu), name, "cuda-events, launches hidden")
    return StepTimes(
        host=Measurement(label, tuple(host), name, "host-clock, GPU held"),
        gpu=times if gpu else None,
        waits=not gpu,
    )
