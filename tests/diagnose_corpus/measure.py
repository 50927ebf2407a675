"""The corpus's own measurements: diagnose a broken step and its fixed twin, then
measure the fix's gain the way the prediction is made, apart from the diagnosis.

- time (a loop to batch, a wait for data): the two twins in paired, alternating
  rounds (:func:`gpuguide.interleave`); the gain of a round is broken minus fixed.
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
from dataclasses import dataclass
from pathlib import Path

import torch

from gpuguide import interleave
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
ROUNDS = 7


@dataclass(frozen=True)
class Row:
    """One cause of the corpus: what the diagnoses found and what the fix gained
    (per step, in seconds or bytes), round by round."""

    cause: str
    found: bool
    page: str
    fixed_findings: tuple[str, ...]
    predicted: float
    gains: tuple[float, ...]
    unit: str
    seconds: float
    fixed_seconds: float

    @property
    def low(self) -> float:
        """The rounds' first quartile: a preempted round does not count."""
        return statistics.quantiles(self.gains, n=4)[0]

    @property
    def high(self) -> float:
        """The rounds' third quartile."""
        return statistics.quantiles(self.gains, n=4)[2]

    def within(self, tolerance: float) -> bool:
        """Whether the prediction lies within ``tolerance`` of the measured range
        (the rounds' quartiles), which must show a gain."""
        low, high = (1 - tolerance) * self.low, (1 + tolerance) * self.high
        return self.low > 0 and low <= self.predicted <= high


def diagnosed(name: str) -> tuple[tool.Diagnosis, float]:
    start = time.perf_counter()
    found = tool.diagnose(tool.load_step(CORPUS / f"{name}.py"))
    return found, time.perf_counter() - start


def _twins(cause: str) -> dict[str, object]:
    return {k: tool.load_step(CORPUS / f"{cause}_{k}.py") for k in ("broken", "fixed")}


def _paired_gains(cause: str) -> list[float]:
    times = interleave(_twins(cause), rounds=ROUNDS, rep_ms=30 * ROUNDS)
    rounds = zip(times["broken"].rounds, times["fixed"].rounds, strict=True)
    return [broken - fixed for broken, fixed in rounds]


def _compile_gains(cause: str, warmup: int = 2, steps: int = 5) -> list[float]:
    gains = []
    for r in range(ROUNDS):
        mean = {}
        for kind in ("broken", "fixed")[:: 1 if r % 2 else -1]:
            step = tool.load_step(CORPUS / f"{cause}_{kind}.py")
            for _ in range(warmup):
                step()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            mean[kind] = (time.perf_counter() - start) / steps
        gains.append(mean["broken"] - mean["fixed"])
    return gains


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


def _memory_gains(cause: str, steps: int = 20) -> list[float]:
    gains = []
    for _ in range(ROUNDS):
        grown = {}
        for kind, step in _twins(cause).items():
            step()
            before = _heap_bytes()
            for _ in range(steps):
                step()
            grown[kind] = (_heap_bytes() - before) / steps
        gains.append(grown["broken"] - grown["fixed"])
    return gains


def _predicted(cause: str) -> tuple[tool.Finding | None, float]:
    broken, seconds = diagnosed(f"{cause}_broken")
    findings = [f for f in broken.findings if f.cause == cause]
    return (findings[0] if findings else None), seconds


def measure(cause: str) -> Row:
    """Diagnose ``cause``'s twins and measure the fix's gain. The broken step is
    diagnosed before and after the measurement, and the prediction is the mean of
    the two: a shared machine's load changes from one second to the next."""
    before, seconds = _predicted(cause)
    fixed, fixed_seconds = diagnosed(f"{cause}_fixed")
    if cause == "kept_losses":
        gains, unit = _memory_gains(cause), "bytes"
    else:
        compiles = cause in ("recompilation", "growing_cache")
        gains = _compile_gains(cause) if compiles else _paired_gains(cause)
        unit = "s"
    after, after_seconds = _predicted(cause)
    found = [f for f in (before, after) if f is not None]
    amounts = [(f.gain_bytes or 0.0) if unit == "bytes" else f.gain_s for f in found]
    return Row(
        cause,
        len(found) == 2,
        found[0].page if found else "",
        tuple(f.cause for f in fixed.findings),
        statistics.mean(amounts) if amounts else 0.0,
        tuple(gains),
        unit,
        max(seconds, after_seconds),
        fixed_seconds,
    )


def _amount(value: float, unit: str) -> str:
    return f"{value / 1e6:.3g} MB" if unit == "bytes" else f"{value * 1e3:.3g} ms"


def table(rows: list[Row]) -> str:
    """The corpus as a Markdown table."""
    lines = [
        "| cause | found | fixed clean | predicted | measured (rounds' quartiles) "
        "| predicted / measured median | diagnosis s (broken, fixed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        low, high = _amount(row.low, row.unit), _amount(row.high, row.unit)
        ratio = row.predicted / statistics.median(row.gains)
        lines.append(
            f"| {row.cause} | {'yes' if row.found else 'NO'} "
            f"| {'yes' if not row.fixed_findings else 'NO'} "
            f"| {_amount(row.predicted, row.unit)} | {low} to {high} | {ratio:.2f} "
            f"| {row.seconds:.1f}, {row.fixed_seconds:.1f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    from gpuguide.quiet import ignore_torch_internal_warnings

    ignore_torch_internal_warnings()
    start = time.perf_counter()
    print(table([measure(cause) for cause in sorted(CPU_CAUSES)]))
    print(f"{time.perf_counter() - start:.0f} s in all, torch {torch.__version__}")
