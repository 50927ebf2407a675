"""Time a callable on CPU, CUDA or MPS: every call's time, the median and its spread.

:func:`benchmark` follows ``triton.testing.do_bench``: budgets in ms, one CUDA event
pair per call, one synchronization at the end; the CPU and MPS use the host clock.
On CUDA, ``measure="call"`` (default) times a loop launching call after call, as
training does; ``measure="kernel"`` the GPU work alone, each chunk of calls queued
while the GPU is held busy (``torch.cuda._sleep``). They agree past about 50 us.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.device import as_device, pick_device
from gpuguide.env import small_mode
from gpuguide.units import format_time, format_value

if TYPE_CHECKING:
    import torch

__all__ = [
    "Measurement",
    "Rate",
    "benchmark",
    "first_calls_s",
    "host_and_gpu_times",
]

#: A measurement whose IQR is more than this fraction of its median is noisy.
NOISY_RELATIVE_IQR = 0.10
#: :func:`benchmark`'s default budgets in ms (as do_bench's).
WARMUP_MS = 25.0
REP_MS = 100.0

_MAX_WARMUP_CALLS = 1_000_000
#: ``measure="kernel"``: at most this many calls are queued behind one hold.
_KERNEL_CHUNK = 32
#: Entries a stream's launch queue takes before the host blocks (about 1024, less a
#: margin), the fastest host time of one launch, and of one pair of event records.
_QUEUE_DEPTH = 900
_LAUNCH_S = 4e-6
_RECORD_S = 5e-6
_MAX_MISSES = 3  # calls (in all) outlasting their hold before _held_times stops holding
_MAX_HOLD_S = 0.5  # the longest hold before one call, in seconds


@dataclass(frozen=True)
class Measurement:
    """Each call's time in seconds (``times_s``) of one operation, with statistics.

    ``method`` says how it was timed (``"cuda-events"``, ``"wall-clock"``...);
    ``rounds`` holds each round's median when timed in interleaved rounds
    (:func:`gpuguide.interleave`), which comparisons pair.
    """

    label: str
    times_s: tuple[float, ...]
    device: str
    method: str
    warmup_calls: int = 0
    rounds: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        for name in ("times_s", "rounds"):
            values = tuple(float(t) for t in getattr(self, name))
            if not all(math.isfinite(t) and t >= 0 for t in values):
                msg = f"{name} must be finite numbers >= 0, got {values!r}"
                raise ValueError(msg)
            object.__setattr__(self, name, values)
        if not self.times_s:
            msg = "times_s must hold at least one time, got ()"
            raise ValueError(msg)
        checks.integer("warmup_calls", self.warmup_calls, minimum=0)

    @cached_property
    def quartiles_s(self) -> tuple[float, float, float]:
        """The first quartile, median and third quartile (numpy's linear ones), s."""
        if self.n == 1:
            return (self.times_s[0],) * 3
        q25, median, q75 = statistics.quantiles(self.times_s, n=4, method="inclusive")
        return q25, median, q75

    @property
    def n(self) -> int:
        """Number of timed calls."""
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        """Median time per call, in seconds."""
        return self.quartiles_s[1]

    @property
    def min_s(self) -> float:
        """Fastest call, in seconds."""
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        """Slowest call, in seconds."""
        return max(self.times_s)

    @property
    def q25_s(self) -> float:
        """First quartile, in seconds."""
        return self.quartiles_s[0]

    @property
    def q75_s(self) -> float:
        """Third quartile, in seconds."""
        return self.quartiles_s[2]

    @property
    def iqr_s(self) -> float:
        """Interquartile range ``q75_s - q25_s``, in seconds."""
        return self.q75_s - self.q25_s

    @property
    def relative_iqr(self) -> float:
        """IQR over the median (``inf`` for a zero median, 0 if both are 0)."""
        if self.median_s == 0:
            return math.inf if self.iqr_s > 0 else 0.0
        return self.iqr_s / self.median_s

    @property
    def is_noisy(self) -> bool:
        """Whether the IQR is more than ``NOISY_RELATIVE_IQR`` (10%) of the median."""
        return self.relative_iqr > NOISY_RELATIVE_IQR

    def rate(self, work: float, unit: str = "FLOP/s") -> Rate:
        """``work`` per call (FLOP, bytes read plus written...) as a :class:`Rate`."""
        work = checks.non_negative("work", work)
        q25, median, q75 = self.quartiles_s
        if q25 <= 0:
            msg = f"{self.label!r}: a rate needs times > 0, got a first quartile of 0"
            raise ValueError(msg)
        return Rate(
            work / median, unit, work / q75, work / q25, self.label, self.device
        )

    def __str__(self) -> str:
        """``"1.23 ms (1.20-1.31)"``, the median and quartiles (`` NOISY`` if so)."""
        if self.n == 1:
            return f"{format_time(self.median_s)} (one run)"
        text = format_value(self.median_s, "s", (self.q25_s, self.q75_s))
        return f"{text} NOISY" if self.is_noisy else text

    def __repr__(self) -> str:
        runs = "1 run" if self.n == 1 else f"{self.n} runs"
        where = f"{self.label!r} on {self.device}"
        return f"<Measurement {where}: {self}, {runs}, {self.method}>"


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
        ends = [
            checks.non_negative(k, getattr(self, k)) for k in ("low", "value", "high")
        ]
        if ends != sorted(ends):
            msg = f"low <= value <= high must hold, got {', '.join(map(str, ends))}"
            raise ValueError(msg)

    def __str__(self) -> str:
        return format_value(self.value, self.unit, (self.low, self.high))

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def over(self, other: Rate) -> dict[str, Any]:
        """This rate divided by ``other``, as :func:`gpuguide.claim`'s ``value`` and
        ``spread``: the spread runs from the lowest ratio of the two intervals to
        the highest (``low / other.high`` to ``high / other.low``)."""
        if self.unit != other.unit or other.low <= 0:
            msg = f"need another rate in {self.unit} above 0, got {other}"
            raise ValueError(msg)
        value, spread = (
            self.value / other.value,
            (self.low / other.high, self.high / other.low),
        )
        return {"value": value, "spread": spread}


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
    sample_ms: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Time ``fn(*args, **kwargs)`` and return every call's time.

    ``fn`` runs for ``warmup_ms`` (default 25, small mode at most 2), then
    ``ceil(rep_ms / estimate)`` calls are timed (``rep_ms`` default 100, small mode
    at most 10), within ``[min_reps, max_reps]``. ``device`` defaults to the first
    non-CPU tensor argument's, else the CPU: pass it for a closure. CUDA only:
    ``flush_l2`` zeroes 256 MiB before each call; ``measure`` is ``"call"`` or
    ``"kernel"`` (see the module). Host clock only: ``sample_ms`` times blocks of
    calls at least that long, one sample each (as ``blocked_autorange``).
    """
    if not callable(fn):
        msg = f"fn must be callable, got {fn!r}"
        raise TypeError(msg)
    if measure not in ("call", "kernel"):
        msg = f"measure must be one of 'call', 'kernel', got {measure!r}"
        raise ValueError(msg)
    warmup_s, rep_s = _budgets_s(warmup_ms, rep_ms)
    min_reps = checks.integer("min_reps", min_reps, minimum=1)
    max_reps = checks.integer("max_reps", max_reps, minimum=min_reps)
    if not isinstance(args, (tuple, list)):
        msg = f"args must be a tuple or list (args=(x,)), got {type(args).__name__}"
        raise TypeError(msg)
    if not isinstance(kwargs or {}, Mapping):
        msg = f"kwargs must be a mapping, got {type(kwargs).__name__}"
        raise TypeError(msg)
    kwargs = dict(kwargs or {})

    def call() -> None:
        fn(*args, **kwargs)

    resolved = _resolve_device(device, (*args, *kwargs.values()), measure)
    import torch

    cuda = resolved.type == "cuda"
    sync = {"cuda": torch.cuda.synchronize, "mps": torch.mps.synchronize}
    synchronize = sync.get(resolved.type)
    with torch.cuda.device(resolved) if cuda else contextlib.nullcontext():
        if synchronize is not None:
            synchronize()
        calls, estimate = _warmup(call, warmup_s, clock, synchronize)
        if cuda:
            n = _rep_count(estimate, rep_s, min_reps, max_reps)
            kernel_s = estimate if measure == "kernel" else None
            times = _cuda_times(call, n, flush=flush_l2, kernel_estimate_s=kernel_s)
            method = "cuda-events" if measure == "call" else "cuda-events-queued"
        else:
            block = 1
            if sample_ms is not None:
                sample_s = checks.positive("sample_ms", sample_ms) / 1e3
                block = max(1, math.ceil(sample_s / estimate)) if estimate > 0 else 1
            n = _rep_count(estimate * block, rep_s, min_reps, max_reps)
            times = _host_times(call, n, clock, synchronize, block=block)
            method = "wall-clock" if synchronize is None else "wall-clock+sync"
    label = _default_label(fn) if label is None else label
    return Measurement(label, tuple(times), str(resolved), method, calls)


def _budgets_s(warmup_ms: float | None, rep_ms: float | None) -> tuple[float, float]:
    """The warm-up and repetition budgets in s (small mode: 2 and 10 ms at most)."""
    warmup = WARMUP_MS if warmup_ms is None else checks.positive("warmup_ms", warmup_ms)
    rep = REP_MS if rep_ms is None else checks.positive("rep_ms", rep_ms)
    if small_mode():
        warmup, rep = min(warmup, 2.0), min(rep, 10.0)
    return warmup / 1e3, rep / 1e3


def _default_label(fn: Callable[..., Any]) -> str:
    """``fn``'s qualified name, past a private class its name, else its type's."""
    qualname = getattr(fn, "__qualname__", "")
    if qualname and not any(p.startswith("_") for p in qualname.split(".")[:-1]):
        return str(qualname)
    return str(getattr(fn, "__name__", None) or type(fn).__name__)


def _tensor_device(values: Iterable[Any], depth: int = 3) -> torch.device | None:
    """The first non-CPU tensor's device among ``values``, ``depth`` levels deep."""
    import torch

    for value in values:
        if isinstance(value, torch.Tensor) and value.device.type != "cpu":
            return value.device
        if depth > 0 and isinstance(value, (list, tuple, dict)):
            inner = value.values() if isinstance(value, dict) else value
            found = _tensor_device(inner, depth - 1)
            if found is not None:
                return found
    return None


def _resolve_device(
    device: str | torch.device | None, values: Sequence[Any], measure: str = "call"
) -> torch.device:
    """``device``, else the arguments', else the CPU (refused for kernel mode)."""
    import torch

    found = device if device is not None else _tensor_device(values)
    if found is not None:
        return pick_device(found)
    if (
        measure == "kernel"
        and torch.cuda.is_available()
        and torch.cuda.is_initialized()
    ):
        msg = (
            'measure="kernel" times GPU work, but no argument is a CUDA tensor, so '
            "it would be timed on the host clock; pass device='cuda'"
        )
        raise ValueError(msg)
    return torch.device("cpu")


def _warmup(
    call: Callable[[], None],
    warmup_s: float,
    clock: Callable[[], float],
    synchronize: Callable[[], None] | None,
) -> tuple[int, float]:
    """Call until ``warmup_s`` has passed: (calls, mean seconds after the first)."""
    start, first, elapsed, calls = clock(), 0.0, 0.0, 0
    while calls < _MAX_WARMUP_CALLS and (calls == 0 or elapsed < warmup_s):
        call()
        if synchronize is not None:
            synchronize()
        calls += 1
        elapsed = clock() - start
        first = elapsed if calls == 1 else first
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


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Keep the garbage collector off while timing (as ``timeit`` does)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _host_times(
    call: Callable[[], None],
    n: int,
    clock: Callable[[], float],
    synchronize: Callable[[], None] | None = None,
    *,
    block: int = 1,
) -> list[float]:
    """``n`` times per call, each of ``block`` calls back to back, the GC paused."""
    times = []
    with _gc_paused():
        for _ in range(n):
            t0 = clock()
            for _ in range(block):
                call()
            if synchronize is not None:
                synchronize()
            times.append((clock() - t0) / block)
    return times


def _l2_flush_buffer() -> Any:
    """A 256 MiB int32 buffer on the current CUDA device (more than any L2)."""
    import torch

    return torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")


def _host_call_s(
    call: Callable[[], None],
    estimate_s: float,
    synchronize: Callable[[], None],
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """The host's time to launch one call (mean of up to 8 launched back to back), s."""
    calls = min(8, max(1, math.ceil(2e-3 / max(estimate_s, 1e-9))))
    synchronize()
    launched = _host_times(call, 1, clock, block=calls)[0]  # not waiting for the GPU
    synchronize()
    return max(launched, 0.0)


_SLEEP_RATES: dict[int, float] = {}  # cycles per second of torch.cuda._sleep, by GPU


def gpu_hold(stream: Any) -> Callable[[float], None]:
    """``hold(seconds)``: keep the GPU busy on ``stream`` (``torch.cuda._sleep``, its
    rate the best of three runs once per GPU) so that work queued behind it runs
    back to back."""
    import torch

    index = torch.cuda.current_device()
    cycles = 1 << 20
    with torch.cuda.stream(stream):  # _sleep runs on the current stream
        if index not in _SLEEP_RATES:
            torch.cuda._sleep(8 * cycles)  # a few ms of work: the clocks ramp up
            rates = []
            for _ in range(3):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                torch.cuda._sleep(cycles)
                end.record(stream)
                end.synchronize()
                seconds = max(float(start.elapsed_time(end)) / 1e3, 1e-9)
                rates.append(cycles / seconds)
            _SLEEP_RATES[index] = max(rates)
    rate = _SLEEP_RATES[index]

    def hold(seconds: float) -> None:
        with torch.cuda.stream(stream):
            torch.cuda._sleep(max(1, round(seconds * rate)))

    return hold


def _kernel_chunk(host_call_s: float) -> int:
    """Calls to queue behind one hold without filling the launch queue."""
    entries = max(host_call_s, 0.0) / _LAUNCH_S + 2
    return max(1, min(_KERNEL_CHUNK, int(_QUEUE_DEPTH // entries)))


def _cuda_times(
    call: Callable[[], None],
    n: int,
    *,
    flush: bool = False,
    kernel_estimate_s: float | None = None,
) -> list[float]:
    """Time ``n`` calls with one CUDA event pair each; given the time per call of
    ``measure="kernel"``, each chunk of calls is queued behind a hold."""
    import torch

    stream = torch.cuda.current_stream()
    hold, host_call_s = None, 0.0
    if kernel_estimate_s is not None:
        host_call_s = _host_call_s(call, kernel_estimate_s, torch.cuda.synchronize)
        hold = gpu_hold(stream)
    buffer = _l2_flush_buffer() if flush else None
    pairs = [
        (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
        for _ in range(n)
    ]
    chunk = _kernel_chunk(host_call_s) if hold is not None else n
    per_call_s = host_call_s + _RECORD_S
    for first in range(0, n, chunk):
        batch = pairs[first : first + chunk]
        if hold is not None:
            hold(2 * len(batch) * per_call_s + 20e-6)
        for start, end in batch:
            if buffer is not None:
                buffer.zero_()
            start.record(stream)
            call()
            end.record(stream)
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in pairs]


def first_calls_s(
    fn: Callable[..., Any], *args: Any, device: str | torch.device, calls: int = 3
) -> float:
    """Seconds the first ``calls`` calls of ``fn(*args)`` take, compilation included
    (a host clock between synchronizations)."""
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return time.perf_counter() - t0


@dataclass(frozen=True)
class StepTimes:
    """The host's time to launch each call (on the CPU: to run it) and the GPU's
    work (None off CUDA, and where the calls wait for the GPU: ``waits``)."""

    host: Measurement
    gpu: Measurement | None
    waits: bool = False

    @property
    def bound(self) -> str:
        """``"host"`` or ``"GPU"``, whichever is slower with their IQRs apart, else
        ``"neither"`` (also where either is NOISY)."""
        host, gpu = self.host, self.gpu
        if gpu is None:
            return "host"
        if host.is_noisy or gpu.is_noisy:
            return "neither"
        if host.q25_s > gpu.q75_s:
            return "host"
        return "GPU" if gpu.q25_s > host.q75_s else "neither"

    def __str__(self) -> str:
        if self.gpu is None and self.waits:
            return f"host {self.host} per call, waiting for the GPU inside the call"
        if self.gpu is None:
            return f"host {self.host} per call (the host does the work)"
        text = f"host {self.host} to launch, GPU {self.gpu} of work: "
        if self.bound == "host":
            idle = 1 - self.gpu.median_s / self.host.median_s
            return text + f"host-bound (the GPU idles {idle:.0%} of a step)"
        if self.bound == "GPU":
            return text + "GPU-bound (the host runs ahead)"
        return text + "no measurable difference between the two"


def _held_times(
    call: Callable[[], Any],
    n: int,
    hold: Callable[[float], None],
    hold_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[list[float], list[float]]:
    """Host and GPU seconds of ``n`` calls, each launched while the GPU is held."""
    import torch

    host: list[float] = []
    gpu: list[float] = []
    held, misses = True, 0
    with _gc_paused():
        while len(host) < n or (held and len(gpu) < min(n, 3)):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            if held:
                hold(hold_s)
            start.record()
            t0 = clock()
            call()
            t1 = clock()
            end.record()
            torch.cuda.synchronize()
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
    return host, gpu if held else []


def host_and_gpu_times(
    fn: Callable[[], Any], *, device: str | torch.device, label: str = "step"
) -> StepTimes:
    """Time the host's launch of ``fn()`` and the GPU's work for it.

    On CUDA the GPU is held busy before each call, about twice its launch time, so
    that CUDA events time its work back to back while ``perf_counter`` times the
    launch; elsewhere the call is timed, as ``host``, in blocks of at least 5 ms.
    """
    dev = as_device(device)
    if dev.type != "cuda":
        m = benchmark(fn, device=dev, label=label, max_reps=200, sample_ms=5)
        return StepTimes(host=m, gpu=None)
    import torch

    rep_s = _budgets_s(None, None)[1]
    with torch.cuda.device(dev):
        name = f"cuda:{torch.cuda.current_device()}"
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        launched = time.perf_counter() - t0
        torch.cuda.synchronize()
        whole = time.perf_counter() - t0
        hold_s = 2 * launched + 100e-6
        n = min(max(math.ceil(rep_s / (hold_s + whole)), 5), 200)
        hold = gpu_hold(torch.cuda.current_stream())
        host, gpu = _held_times(fn, n, hold, hold_s)
    host_m = Measurement(label, tuple(host), name, "host-clock, GPU held")
    if not gpu:
        return StepTimes(host=host_m, gpu=None, waits=True)
    gpu_m = Measurement(label, tuple(gpu), name, "cuda-events, launches hidden")
    return StepTimes(host=host_m, gpu=gpu_m)
