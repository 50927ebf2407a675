"""The corpus's own measurements: diagnose a broken step and its fixed twin, then
measure the fix's gain the way the prediction is made, apart from the diagnosis.

Each round diagnoses the broken step (a prediction), then measures the fix's gain
right after it, so that a prediction meets a gain measured under the same load of
a shared machine; the rounds alternate which twin runs first.

- time (a loop to batch, a wait for data): both twins timed in the round
  (:func:`gpuguide.benchmark`); the gain is broken minus fixed.
- compile time: recompiling steps cannot be rerun (the compiler stops at its cache
  limit), so each round loads both twins afresh (new code, new compile cache), runs
  the diagnosis's warm-up steps, then times as many steps as it times.
- memory: the C heap's bytes in use (glibc's ``mallinfo2``: torch allocates host
  tensors with ``malloc``) over steps of each twin; the gain is broken minus fixed.

``python tests/diagnose_corpus/measure.py`` prints the corpus's table.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from gpuguide import benchmark
from gpuguide_tools import diagnose as tool

CORPUS = Path(__file__).resolve().parent
#: Causes whose broken step shows on a CPU, with the page that teaches the fix.
CPU_CAUSES = {
    "data_wait": "plot_dataloader",
    "growing_cache": "plot_decode_overhead",
    "kept_losses": "plot_kept_losses",
    "per_sample_loop": "plot_batching",
    "recompilation": "plot_recompilation",
}
ROUNDS = 5
_COMPILES = ("recompilation", "growing_cache")


@dataclass(frozen=True)
class Row:
    """One cause of the corpus: what the diagnoses found, and round by round the
    gain predicted and the gain measured (per step, in seconds or bytes)."""

    cause: str
    found: bool
    page: str
    fixed_findings: tuple[str, ...]
    predictions: tuple[float, ...]
    gains: tuple[float, ...]
    unit: str
    seconds: float
    fixed_seconds: float

    @property
    def ratios(self) -> list[float]:
        """Predicted over measured, round by round (sorted)."""
        pairs = zip(self.predictions, self.gains, strict=True)
        return sorted(p / g if g > 0 else float("inf") for p, g in pairs)

    def within(self, tolerance: float) -> bool:
        """Whether the rounds' median prediction lies within ``tolerance`` of the
        gain measured beside it."""
        return abs(statistics.median(self.ratios) - 1) <= tolerance


def diagnosed(name: str) -> tuple[tool.Diagnosis, float]:
    start = time.perf_counter()
    found = tool.diagnose(tool.load_step(CORPUS / f"{name}.py"))
    return found, time.perf_counter() - start


def _load(cause: str, kind: str) -> Callable[[], object]:
    return tool.load_step(CORPUS / f"{cause}_{kind}.py")


def _order(r: int) -> tuple[str, str]:
    return ("broken", "fixed") if r % 2 else ("fixed", "broken")


def _timed_gain(twins: dict[str, Callable[[], object]], r: int) -> float:
    median = {}
    for kind in _order(r):
        timed = benchmark(twins[kind], label=kind, warmup_ms=5, rep_ms=40)
        median[kind] = timed.median_s
    return median["broken"] - median["fixed"]


def _compile_gain(cause: str, r: int, warmup: int = 2, steps: int = 5) -> float:
    mean = {}
    for kind in _order(r):
        step = _load(cause, kind)
        for _ in range(warmup):
            step()
        start = time.perf_counter()
        for _ in range(steps):
            step()
        mean[kind] = (time.perf_counter() - start) / steps
    return mean["broken"] - mean["fixed"]


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _heap_bytes() -> int:
    """Bytes the C heap has handed out: small blocks plus mmapped ones."""
    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = _Mallinfo2
    info = mallinfo2()
    return int(info.uordblks + info.hblkhd)


def _memory_gain(cause: str, r: int, steps: int = 20) -> float:
    grown = {}
    for kind in _order(r):
        step = _load(cause, kind)
        step()
        before = _heap_bytes()
        for _ in range(steps):
            step()
        grown[kind] = (_heap_bytes() - before) / steps
    return grown["broken"] - grown["fixed"]


def measure(cause: str) -> Row:
    """Diagnose ``cause``'s fixed twin once, then in each round the broken step and
    the fix's gain measured beside it."""
    fixed, fixed_seconds = diagnosed(f"{cause}_fixed")
    unit = "bytes" if cause == "kept_losses" else "s"
    twins = {kind: _load(cause, kind) for kind in _order(0)}
    pages, predictions, gains, seconds, missed = set(), [], [], [], 0
    for r in range(ROUNDS):
        broken, spent = diagnosed(f"{cause}_broken")
        seconds.append(spent)
        found = [f for f in broken.findings if f.cause == cause]
        pages |= {f.page for f in found}
        missed += not found
        amounts = [f.gain_bytes if unit == "bytes" else f.gain_s for f in found]
        predictions.append((amounts[0] or 0.0) if amounts else 0.0)  # 0: not found
        if unit == "bytes":
            gains.append(_memory_gain(cause, r))
        elif cause in _COMPILES:
            gains.append(_compile_gain(cause, r))
        else:
            gains.append(_timed_gain(twins, r))
    return Row(
        cause,
        missed == 0,
        ", ".join(sorted(pages)),
        tuple(f.cause for f in fixed.findings),
        tuple(predictions),
        tuple(gains),
        unit,
        max(seconds),
        fixed_seconds,
    )


def _amount(value: float, unit: str) -> str:
    return f"{value / 1e6:.3g} MB" if unit == "bytes" else f"{value * 1e3:.3g} ms"


def _spread(values: list[float] | tuple[float, ...], unit: str) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{_amount(mid, unit)} ({_amount(low, unit)} to {_amount(high, unit)})"


def table(rows: list[Row]) -> str:
    """The corpus as a Markdown table: medians over the rounds (lowest to highest)."""
    lines = [
        "| cause | found | fixed clean | predicted | measured "
        "| predicted / measured | diagnosis s (broken, fixed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratios = row.ratios
        ratio = f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
        lines.append(
            f"| {row.cause} | {'yes' if row.found else 'NO'} "
            f"| {'yes' if not row.fixed_findings else 'NO'} "
            f"| {_spread(row.predictions, row.unit)} | {_spread(row.gains, row.unit)} "
            f"| {ratio} | {row.seconds:.1f}, {row.fixed_seconds:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    from gpuguide.quiet import ignore_torch_internal_warnings

    ignore_torch_internal_warnings()
    start = time.perf_counter()
    print(table([measure(cause) for cause in sorted(CPU_CAUSES)]))
    print(f"{time.perf_counter() - start:.0f} s in all, torch {torch.__version__}")
