"""Helpers of the memory (``04_memory``), dtypes (``05_dtypes``) and mixed precision
(``06_mixed_precision``) chapters."""

from __future__ import annotations

import contextlib
import itertools
import os
import pathlib
import pickle
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

from gpuguide import checks
from gpuguide.memory import release_host_memory, track_memory
from gpuguide.peaks import device_peaks
from gpuguide.sizes import size_budget, sweep
from gpuguide.timing import Measurement, benchmark

if TYPE_CHECKING:
    from gpuguide.sizes import SizeBudget

__all__ = [
    "Block",
    "allocated_over_events",
    "block_width",
    "child_stages",
    "cpu_has",
    "gpu_memory",
    "kept_for_backward",
    "mib",
    "mlp",
    "mlp_batch",
    "peak_rise",
    "probe_rate",
    "rerun_in_backward",
    "search_matmul_shapes",
    "tf32_matmuls",
]

Shape = tuple[int, int, int]


def cpu_has(instructions: str) -> bool:
    """Whether torch reports this CPU has ``instructions`` ("amx_fp16", ...)."""
    return bool(getattr(torch.cpu, f"_is_{instructions}_supported", lambda: False)())


@contextlib.contextmanager
def tf32_matmuls(enabled: bool) -> Iterator[None]:
    """``torch.backends.cuda.matmul.allow_tf32 = enabled`` inside the block only."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _matmul_bytes(m: int, n: int, k: int, dtype: torch.dtype) -> int:
    """Bytes of an ``(m, k) @ (k, n)`` product's two inputs and its output."""
    return (m * k + k * n + m * n) * dtype.itemsize


def _time_matmul(
    dtype: torch.dtype, shape: Shape, *, device: torch.device | str, **options: Any
) -> Measurement:
    """:func:`gpuguide.benchmark` of ``torch.mm`` on random ``(m, n, k)`` inputs."""
    m, n, k = shape
    a, b, out = (
        torch.randn(*rows_cols, device=device).to(dtype)
        for rows_cols in ((m, k), (k, n), (m, n))
    )
    return benchmark(torch.mm, args=(a, b), kwargs={"out": out}, **options)


def _flop(m: int, n: int, k: int) -> int:
    """FLOP of an (m x k) @ (k x n) matmul: a multiply and an add per term."""
    return 2 * m * n * k


def probe_rate(dtype: torch.dtype, device: torch.device | str) -> float:
    """FLOP/s of a 64 x 64 matmul's fastest call: to plan sizes without a peak."""
    shape = (64, 64, 64)
    times = (_time_matmul(dtype, shape, device=device, rep_ms=5.0) for _ in range(2))
    return _flop(*shape) / min(t.min_s for t in times)


def _matmul_shapes(
    dtype: torch.dtype,
    flop_per_s: float,
    budget: SizeBudget,
    *,
    lo: int,
    levels: int,
    hi: int = 16384,
) -> list[Shape]:
    """Every ``(m, n, k)`` of the ``levels`` largest doubling sizes from ``lo`` that
    fits ``budget`` at half of ``flop_per_s``, cheapest first (else one square)."""
    sizes = sweep(
        lo,
        hi,
        memory_at=lambda s: _matmul_bytes(s, s, s, dtype),
        flop_at=lambda s: _flop(s, s, s),
        peaks=None,
        budget=budget,
        flop_per_s=flop_per_s,
        multiple_of=lo,
    )[-levels:]
    fits = [
        (m, n, k)
        for m, n, k in itertools.product(sizes, repeat=3)
        if _matmul_bytes(m, n, k, dtype) <= budget.memory_bytes
        and 2 * _flop(m, n, k) / flop_per_s <= budget.call_s
    ]
    first = (sizes[0], sizes[0], sizes[0])
    return sorted(fits or [first], key=lambda s: (_flop(*s), s))


def _mamf(measurement: Measurement, flop: float) -> Measurement:
    """The five fastest calls per FLOP (``.rate(1)``: MAMF's rate)."""
    per_flop = sorted(t / flop for t in measurement.times_s)[:5]
    return Measurement(
        measurement.label, tuple(per_flop), measurement.device, measurement.method
    )


def search_matmul_shapes(
    dtype: torch.dtype,
    flop_per_s: float,
    *,
    device: torch.device | str,
    label: str,
    levels: int | None = None,
    tf32: bool = False,
    timed: Mapping[Shape, Measurement] | None = None,
) -> tuple[Shape, Measurement, int]:
    """The fastest matmul shape in ``dtype``, after Stas Bekman's MAMF finder: the
    best shape, its five fastest calls per FLOP and how many shapes were scouted.

    ``levels``: sizes per dimension (default 4 on CUDA, 3 elsewhere, one fewer in
    small mode). ``timed``: shapes timed already, which compete too.
    """
    budget = size_budget(device)
    lo, most = (256, 4) if torch.device(device).type == "cuda" else (32, 3)
    if levels is None:
        levels = most - budget.small
    levels = checks.integer("levels", levels, minimum=1)
    checks.positive("flop_per_s", flop_per_s)
    shapes = _matmul_shapes(dtype, flop_per_s, budget, lo=lo, levels=levels)

    def per_flop(shape: Shape, **budgets: float) -> Measurement:
        name = f"{label} {'x'.join(map(str, shape))}"
        m = _time_matmul(
            dtype, shape, device=device, label=name, flush_l2=True, **budgets
        )
        return _mamf(m, _flop(*shape))

    scouted: dict[Shape, Measurement] = {}
    with tf32_matmuls(tf32):
        for shape in shapes:  # short bursts
            scouted[shape] = per_flop(shape, warmup_ms=5, rep_ms=20, max_reps=100)
            if scouted[shape].min_s * _flop(*shape) > 2 * budget.call_s:
                break  # larger shapes would take longer still
        top = sorted(scouted, key=lambda s: scouted[s].median_s)[:3]
        full = {s: per_flop(s) for s in top}  # the full budget
    full |= {s: _mamf(m, _flop(*s)) for s, m in (timed or {}).items()}
    best = min(full, key=lambda s: full[s].median_s)
    return best, full[best], len(scouted)


def mib(sizes: Mapping[str, float]) -> dict[str, float]:
    """The same mapping, bytes in MiB."""
    return {name: size / 2**20 for name, size in sizes.items()}


def gpu_memory(device: torch.device | str) -> dict[str, int]:
    """Allocated, reserved and driver-used bytes of ``device`` right now."""
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return {
        "allocated": torch.cuda.memory_allocated(device),
        "reserved": torch.cuda.memory_reserved(device),
        "driver used": total - free,
    }


class Stage(NamedTuple):
    """One stage of :func:`child_stages`, in bytes."""

    child: str
    driver_used: int
    reserved: int
    allocated: int


def _child_rss(pid: int) -> int:
    """A child process's resident memory, from Linux's /proc."""
    statm = pathlib.Path(f"/proc/{pid}/statm").read_text()
    return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE")


def child_stages(code: str, target: str) -> tuple[list[Stage], int | None]:
    """Run ``code`` with ``target`` (a device) as argument; at each ``reserved
    allocated name`` line it prints (then waits on stdin) read the driver's used
    memory (on a CPU: the child's RSS). Returns the stages and the exit code."""
    cuda = torch.device(target).type == "cuda"
    before = gpu_memory(target)["driver used"] if cuda else 0
    stages: list[Stage] = []
    command, pipe = [sys.executable, "-c", code, target], subprocess.PIPE
    with subprocess.Popen(command, stdin=pipe, stdout=pipe, text=True) as child:
        assert child.stdin is not None
        assert child.stdout is not None
        for line in child.stdout:
            reserved, allocated, name = line.rstrip("\n").split(" ", 2)
            used = gpu_memory(target)["driver used"] if cuda else _child_rss(child.pid)
            stages.append(Stage(name, used - before, int(reserved), int(allocated)))
            child.stdin.write("\n")
            child.stdin.flush()
    return stages, child.returncode


def mlp(width: int, depth: int) -> nn.Sequential:
    """``depth`` transformer feed-forward blocks, ``width -> 4 width -> width``."""
    blocks = [
        nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        for _ in range(depth)
    ]
    return nn.Sequential(*blocks)


def mlp_batch(width: int, depth: int, *, device: torch.device | str) -> int:
    """The largest batch (64 to 65536) for a 50 ms fp32 Adam step of :func:`mlp`."""
    width = checks.integer("width", width, minimum=1)
    depth = checks.integer("depth", depth, minimum=1)
    params = depth * (8 * width * width + 5 * width)
    cuda = torch.device(device).type == "cuda"
    return sweep(
        64,
        2**16,
        memory_at=lambda b: 16 * params + 4 * 9 * width * depth * b,
        flop_at=lambda b: 6 * params * b,
        device=device,
        call_s=0.05,
        peaks=device_peaks(device) if cuda else None,
    )[-1]


def rerun_in_backward(
    model: nn.Module, loss: Callable[[], torch.Tensor]
) -> tuple[int, int]:
    """``nn.Linear`` calls that ``loss()``'s backward runs again, of ``model``'s."""
    layers = [m for m in model.modules() if isinstance(m, nn.Linear)]
    calls: list[nn.Module] = []
    hooks = [m.register_forward_hook(lambda m, *_: calls.append(m)) for m in layers]
    try:
        value = loss()
        forward = len(calls)
        value.backward()
    finally:
        for hook in hooks:
            hook.remove()
    return len(calls) - forward, len(layers)


def allocated_over_events(
    path: str | os.PathLike[str], device: torch.device | str, *, start: int
) -> list[int]:
    """Bytes allocated on ``device`` after each event of the memory snapshot at
    ``path``, from ``start`` (the bytes allocated when recording began)."""
    device = torch.device(device)
    index = device.index if device.index is not None else torch.cuda.current_device()
    snapshot = pickle.loads(pathlib.Path(path).read_bytes())
    sign = {"alloc": 1, "free_completed": -1}
    events = snapshot["device_traces"][index]
    steps: list[int] = [sign.get(e["action"], 0) * e["size"] for e in events]
    return list(itertools.accumulate(steps, initial=start))


def peak_rise(fn: Callable[[], Any], device: torch.device | str) -> int:
    """The lowest of three peak memory rises of ``fn()``, in bytes, by
    :func:`gpuguide.track_memory` (on a CPU, what glibc kept only adds to one)."""
    rises: list[int] = []
    for _ in range(3):
        release_host_memory()
        with track_memory(device) as tracked:
            fn()
        assert tracked.report is not None  # set when the block ends
        rise = tracked.report.peak_increase_bytes
        if rise is None:
            msg = f"peak memory cannot be measured on {device}"
            raise RuntimeError(msg)
        rises.append(rise)
    return min(rises)


def kept_for_backward(
    fn: Callable[[], Any], *, resident: Iterable[torch.Tensor] = ()
) -> int:
    """Bytes autograd saves for backward while ``fn()`` runs, once per storage,
    leaving out ``resident``'s (weights and batch, held anyway)."""
    held = {t.untyped_storage().data_ptr() for t in resident}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in held:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved.values())


def block_width(
    device: torch.device | str, *, batch: int, seq: int, step_s: float
) -> int:
    """The widest :class:`Block` whose AdamW step on ``batch`` sequences of ``seq``
    tokens takes about ``step_s`` at the bf16 peak and fits half the memory budget."""
    cuda = torch.device(device).type == "cuda"
    tokens = batch * seq
    peaks = device_peaks(device) if cuda else None
    return sweep(
        16,
        4096 if cuda else 1024,
        per_octave=2,
        multiple_of=64 if cuda else 16,
        budget=size_budget(device, memory_fraction=0.5, call_s=step_s),
        memory_at=lambda d: 4 * (144 * d * d + 24 * tokens * d + batch * seq * seq),
        flop_at=lambda d: 6 * tokens * 12 * d * d + 12 * batch * seq * seq * d,
        peaks=peaks,
        flop_per_s=peaks.flops.get("bf16") if peaks is not None else None,
    )[-1]


class Block(nn.Module):
    """A pre-norm transformer block (its softmax a module, to be watched) with a
    head that classifies a sequence's mean into ``classes``."""

    def __init__(self, width: int, classes: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.softmax = nn.Softmax(dim=-1)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        weights = self.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5)
        x = x + self.proj(weights @ v)
        x = x + self.mlp(self.norm2(x))
        logits: torch.Tensor = self.head(x.mean(dim=1))
        return logits
