"""Check gpuguide.benchmark against torch.utils.benchmark.Timer on the CPU.

For fp32 matmuls of a few sizes (the largest taking a few ms on a 2-core
machine), this script times the same operation with both tools in one process,
with the same number of threads, and checks two bars:

* the medians agree within 5 %;
* gpuguide's IQR/median is below 5 % for operations of 1 ms or more.

The two tools are run in alternating rounds (A B, B A, A B, ...) and each
tool's times are pooled over the rounds, so slow drifts of the machine (clock
frequency, other processes) affect both alike. A case that fails is measured
again, up to ``--attempts`` times, and every attempt is printed: on a shared
machine another process can take a core for a while, and no timer can hide that.

Run it as a script; it exits with status 1 if a bar fails::

    python benchmarks/timer_accuracy.py [--rounds 6] [--round-ms 150] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
from torch.utils.benchmark import Timer

from gpuguide.timing import Measurement, benchmark
from gpuguide.units import format_time

#: Matmul sizes: ~0.3, ~1.5 and ~3 ms for fp32 on 2 cores of a recent x86 CPU.
SIZES = (256, 512, 640)
MEDIAN_TOLERANCE = 0.05
IQR_TOLERANCE = 0.05
IQR_MIN_OP_S = 1e-3


class OtherLoad:
    """CPU time used by *other* processes, in cores, from Linux ``/proc``.

    ``None`` where ``/proc`` cannot be read (not Linux).
    """

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                fields = [float(x) for x in f.readline().split()[1:]]
            with open("/proc/self/stat") as f:
                own = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait
        own_ticks = float(own[11]) + float(own[12])  # utime + stime
        return time.monotonic(), busy, own_ticks

    def cores(self) -> float | None:
        """Cores' worth of CPU used by other processes since construction."""
        end = self._read()
        if self.start is None or end is None:
            return None
        elapsed = end[0] - self.start[0]
        others = (end[1] - self.start[1]) - (end[2] - self.start[2])
        return max(others, 0.0) / os.sysconf("SC_CLK_TCK") / max(elapsed, 1e-9)


def wait_until_quiet(max_wait_s: float, limit_cores: float = 0.1) -> float | None:
    """Wait (up to ``max_wait_s``) until other processes use < ``limit_cores``.

    Returns the load seen in the last 0.5 s window, in cores.
    """
    deadline = time.monotonic() + max_wait_s
    while True:
        load = OtherLoad()
        time.sleep(0.5)
        cores = load.cores()
        if cores is None or cores < limit_cores or time.monotonic() > deadline:
            return cores


def time_gpuguide(a: torch.Tensor, b: torch.Tensor, round_ms: float) -> list[float]:
    """Per-call times (s) of ``torch.mm(a, b)`` from gpuguide.benchmark."""
    m = benchmark(torch.mm, args=(a, b), warmup_ms=10, rep_ms=round_ms, min_reps=10)
    return list(m.times_s)


def time_torch(
    a: torch.Tensor, b: torch.Tensor, round_ms: float, threads: int
) -> list[float]:
    """Per-call times (s) of ``torch.mm(a, b)`` from torch.utils.benchmark.

    ``blocked_autorange`` times *blocks* of ``number_per_run`` calls and
    reports each block's mean per call, so its median is a median of block
    means, not of single calls: for a right-skewed distribution it sits a
    little above the per-call median, and its IQR is narrower.
    """
    timer = Timer(
        "torch.mm(a, b)",
        globals={"torch": torch, "a": a, "b": b},
        num_threads=threads,
    )
    return list(timer.blocked_autorange(min_run_time=round_ms / 1e3).times)


def measure(
    size: int, rounds: int, round_ms: float, threads: int
) -> tuple[Measurement, float]:
    """Alternate the two tools for ``rounds`` rounds; pool each tool's times."""
    generator = torch.Generator().manual_seed(size)
    a = torch.randn(size, size, generator=generator)
    b = torch.randn(size, size, generator=generator)
    ours: list[float] = []
    theirs: list[float] = []
    for index in range(rounds):
        if index % 2 == 0:
            ours += time_gpuguide(a, b, round_ms)
            theirs += time_torch(a, b, round_ms, threads)
        else:
            theirs += time_torch(a, b, round_ms, threads)
            ours += time_gpuguide(a, b, round_ms)
    pooled = Measurement(
        label=f"fp32 matmul {size}",
        times_s=tuple(ours),
        device="cpu",
        method="wall-clock",
    )
    return pooled, statistics.median(theirs)


def check(m: Measurement, torch_median_s: float) -> tuple[float, bool, bool | None]:
    """Relative difference of the medians and the two bars (None: not applied)."""
    difference = m.median_s / torch_median_s - 1
    medians_agree = abs(difference) <= MEDIAN_TOLERANCE
    precise = m.relative_iqr < IQR_TOLERANCE if m.median_s >= IQR_MIN_OP_S else None
    return difference, medians_agree, precise


def verdict(ok: bool | None) -> str:
    return "n/a " if ok is None else ("PASS" if ok else "FAIL")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds")
    parser.add_argument(
        "--round-ms", type=float, default=100.0, help="budget per tool and round"
    )
    parser.add_argument("--attempts", type=int, default=5, help="tries per case")
    parser.add_argument(
        "--max-wait-s",
        type=float,
        default=30.0,
        help="how long to wait for other processes to go quiet before a try",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (default: torch's)"
    )
    options = parser.parse_args(argv)
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    threads = torch.get_num_threads()

    print(f"torch {torch.__version__}, {threads} threads for both tools")
    print(
        f"bars: medians within {MEDIAN_TOLERANCE:.0%}; gpuguide IQR/median < "
        f"{IQR_TOLERANCE:.0%} for ops >= {format_time(IQR_MIN_OP_S)}"
    )
    print("'others': CPU used by other processes during the try, in cores")
    header = (
        f"{'op':<18} {'try':>3} {'gpuguide':>10} {'torch Timer':>11} "
        f"{'diff':>7} {'IQR/med':>8} {'runs':>5} {'others':>6}  medians  IQR"
    )
    print(header)
    print("-" * len(header))
    failed = False
    for size in SIZES:
        for attempt in range(1, options.attempts + 1):
            wait_until_quiet(options.max_wait_s)
            load = OtherLoad()
            m, torch_median = measure(size, options.rounds, options.round_ms, threads)
            others = load.cores()
            difference, medians_agree, precise = check(m, torch_median)
            print(
                f"{m.label:<18} {attempt:>3} {format_time(m.median_s):>10} "
                f"{format_time(torch_median):>11} {difference:>+7.1%} "
                f"{m.relative_iqr:>8.1%} {m.n:>5} "
                f"{'?' if others is None else f'{others:.2f}':>6}  "
                f"{verdict(medians_agree)}     {verdict(precise)}",
                flush=True,
            )
            if medians_agree and precise is not False:
                break
        else:
            failed = True
    print("FAIL: a bar failed on every try" if failed else "PASS: all bars met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
