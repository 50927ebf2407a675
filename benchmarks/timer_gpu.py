"""Check gpuguide.benchmark on a CUDA GPU against triton's do_bench and torch's Timer.

For operations from a tiny in-place add (a few microseconds of GPU work) to
large bf16 matmuls (milliseconds), the script times each one with:

* ``triton.testing.do_bench`` (median; it zeroes a 256 MiB buffer before
  every call, so the L2 cache is cold and the GPU is ahead of the host);
* ``gpuguide.benchmark(measure="kernel", flush_l2=True)``: the same
  conditions, and the column the bars apply to;
* ``gpuguide.benchmark(measure="kernel")``: GPU time with a warm L2;
* ``gpuguide.benchmark()`` (``measure="call"``): the time per call of a loop
  that launches call after call, launch included;
* ``torch.utils.benchmark.Timer.blocked_autorange``: block means of a loop of
  calls (launch included), for reference.

Bars: the kernel+flush median is within 5 % of do_bench's for operations of
50 us and more, and within 10 % for those under 50 us (down to ~5 us).

It is a benchmark, not a test: run it by hand on a GPU machine::

    python benchmarks/timer_gpu.py [--rounds 3] [--json out.json]

Without a CUDA GPU, or without triton, it prints why and exits with status 0
(nothing to check); with both, status 1 when a bar fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

import gpuguide
from gpuguide.timing import benchmark

LONG_S = 50e-6  # from here on, the 5 % bar
LONG_TOLERANCE = 0.05
SHORT_TOLERANCE = 0.10


def operations(device: torch.device) -> list[tuple[str, Callable[[], Any]]]:
    """Name and zero-argument call of each operation, inputs made beforehand."""
    ops: list[tuple[str, Callable[[], Any]]] = []
    tiny = torch.zeros(1024, device=device)
    ops.append(("add_ 4 KiB fp32", lambda: tiny.add_(1.0)))
    for mib in (1, 64, 512):
        src = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        ops.append((f"copy {mib} MiB", lambda s=src, d=dst: d.copy_(s)))
    for n in (512, 2048, 4096, 8192):
        a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
        ops.append((f"matmul {n}^2 bf16", lambda a=a, b=b: torch.mm(a, b)))
    return ops


def do_bench_median_s(fn: Callable[[], Any]) -> float:
    """triton's do_bench median, in seconds (older tritons: the 0.5 quantile)."""
    from triton.testing import do_bench

    try:
        ms = do_bench(fn, warmup=25, rep=100, return_mode="median")
    except TypeError:  # a triton without return_mode
        ms = do_bench(fn, warmup=25, rep=100, quantiles=[0.5])
        ms = ms[0] if isinstance(ms, (list, tuple)) else ms
    return float(ms) / 1e3


def timer_median_s(fn: Callable[[], Any]) -> float:
    from torch.utils.benchmark import Timer

    timer = Timer("fn()", globals={"fn": fn})
    return float(timer.blocked_autorange(min_run_time=0.2).median)


@dataclass(frozen=True)
class Row:
    operation: str
    do_bench_us: float
    kernel_flush_us: float
    kernel_us: float
    call_us: float
    timer_us: float

    @property
    def difference(self) -> float:
        """kernel+flush against do_bench, as a fraction."""
        return self.kernel_flush_us / self.do_bench_us - 1

    @property
    def tolerance(self) -> float:
        return LONG_TOLERANCE if self.do_bench_us >= LONG_S * 1e6 else SHORT_TOLERANCE

    @property
    def passes(self) -> bool:
        return abs(self.difference) <= self.tolerance


def measure(name: str, fn: Callable[[], Any], rounds: int) -> Row:
    """Median over rounds of each tool's median, the tools alternating."""
    cols: dict[str, list[float]] = {k: [] for k in ("db", "kf", "k", "c", "t")}
    for _ in range(rounds):
        cols["db"].append(do_bench_median_s(fn))
        cols["kf"].append(
            benchmark(fn, device="cuda", measure="kernel", flush_l2=True).median_s
        )
        cols["k"].append(benchmark(fn, device="cuda", measure="kernel").median_s)
        cols["c"].append(benchmark(fn, device="cuda").median_s)
        cols["t"].append(timer_median_s(fn))
    us = {k: statistics.median(v) * 1e6 for k, v in cols.items()}
    return Row(name, us["db"], us["kf"], us["k"], us["c"], us["t"])


def missing() -> str | None:
    """Why the script cannot run here, or None."""
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    if importlib.util.find_spec("triton") is None:
        return "triton is not installed"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per operation")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    reason = missing()
    if reason is not None:
        print(f"skipped: {reason}")
        return 0
    device = gpuguide.pick_device("cuda")
    print(gpuguide.describe_device(device).provenance())
    rows = [measure(name, fn, args.rounds) for name, fn in operations(device)]
    header = (
        f"{'operation':<18} {'do_bench':>9} {'kern+flush':>10} {'diff':>6} "
        f"{'bar':>4} {'kernel':>9} {'call':>9} {'Timer':>9}  (us)"
    )
    print(header)
    for r in rows:
        print(
            f"{r.operation:<18} {r.do_bench_us:9.1f} {r.kernel_flush_us:10.1f} "
            f"{r.difference:+6.1%} {'ok' if r.passes else 'FAIL':>4} "
            f"{r.kernel_us:9.1f} {r.call_us:9.1f} {r.timer_us:9.1f}"
        )
    failed = [r.operation for r in rows if not r.passes]
    print(
        "bars: within 5% of do_bench from 50 us, 10% below: "
        + ("all pass" if not failed else "FAIL: " + ", ".join(failed))
    )
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
