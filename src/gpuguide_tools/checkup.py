"""``python -m gpuguide``: a one-screen check-up of this machine against the guide.

Measures, with the same helpers as the pages that teach them:

- matmul throughput per dtype, the best of a small shape search
  (:func:`gpuguide_tools.mamf.best_matmul`, as on the dtypes page);
- device memory bandwidth, a large ``x + y`` (the roofline page's streaming
  size, :func:`gpuguide.chapters.roofline.streaming_elements`);
- host-device bandwidth, pageable and pinned (CUDA only, as on the transfers page);
- the time of one tiny call, the launch overhead (as on the roofline page);
- the cost per operation of a chain of small kernels, launched one by one and
  replayed from a CUDA graph (CUDA only, as on the CUDA graphs page).

Each figure is printed with its share of the device's peak (the datasheet for
a GPU, the measured ceiling for a CPU) and beside the same figure of every
recorded device (``GPUGUIDE_RESULTS_DIR`` or ``--results``), with how it
compares with this device's own recording (:func:`against_recording`, which
the site's "Recorded results" sections use too). ``--json`` prints a results
file instead (:mod:`gpuguide.results`, the same schema), whose figures carry
the pages' names, so that it can be compared with, or merged into, a
recording.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timezone
from functools import partial
from pathlib import Path

import torch

from gpuguide.chapters.roofline import streaming_elements
from gpuguide.device import DeviceInfo, GpuState, describe_device, pick_device
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.quiet import ignore_torch_internal_warnings
from gpuguide.results import DeviceRecord, Result
from gpuguide.tables import Table
from gpuguide.timing import Measurement, benchmark
from gpuguide.units import format_bytes, format_ratio, format_value
from gpuguide.verdicts import interleave
from gpuguide.version import describe_version
from gpuguide_tools.mamf import best_matmul
from gpuguide_tools.recorder import peak_figures, with_measured_ceilings
from gpuguide_tools.results_files import (
    RESULTS_DIR_ENV,
    ResultsFile,
    device_key,
    dumps,
    load_dir,
)

__all__ = [
    "MATMUL_DTYPES", "against_recording", "checkup", "main", "provenance_line",
    "report", "versions",
]  # fmt: skip

#: name -> (dtype, TF32 allowed), as the dtypes page names its variants.
MATMUL_DTYPES: dict[str, tuple[torch.dtype, bool]] = {
    "fp64": (torch.float64, False),
    "fp32": (torch.float32, False),
    "tf32": (torch.float32, True),
    "fp16": (torch.float16, False),
    "bf16": (torch.bfloat16, False),
}
#: Bytes per host-device copy.
COPY_BYTES = 2**26
#: Elements of the tiny add (the roofline page's).
TINY = 128
#: Chain lengths whose difference gives the cost per operation.
CHAINS = (8, 64)


def _spread(nbytes: float, m: Measurement) -> tuple[float, float]:
    return (nbytes / m.q75_s, nbytes / m.q25_s)


def _dtypes(device: torch.device) -> list[str]:
    names = list(MATMUL_DTYPES)
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
        names.remove("tf32")
    if device.type == "mps":
        names.remove("fp64")
    return names


def matmul_figures(device: torch.device, levels: int, peaks: Peaks) -> list[Result]:
    """The best rate per dtype from a search over ``levels ** 3`` shapes."""
    return [
        best_matmul(
            name, *MATMUL_DTYPES[name], device=device, levels=levels, peaks=peaks
        )
        for name in _dtypes(device)
    ]


def memory_figures(device: torch.device) -> list[Result]:
    """A large ``x + y`` (bandwidth) and a tiny one (the time of one call)."""
    n = streaming_elements(device=device)
    x, y, out = (torch.randn(n, device=device) for _ in range(3))
    big = benchmark(torch.add, args=(x, y), kwargs={"out": out}, device=device)
    del x, y, out
    a, b, c = (torch.randn(TINY, device=device) for _ in range(3))
    tiny = benchmark(torch.add, args=(a, b), kwargs={"out": c}, device=device)
    moved = 12 * n
    return [
        Result(
            "plot_roofline",
            "x + y bandwidth",
            moved / big.median_s,
            "B/s",
            spread=_spread(moved, big),
            size=n,
            peak="memory",
        ),
        Result(
            "plot_roofline",
            "tiny add call",
            tiny.median_s,
            "s",
            spread=(tiny.q25_s, tiny.q75_s),
            size=TINY,
        ),
    ]


def _copy(dst: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
    return dst.copy_(src)


def transfer_figures(device: torch.device) -> list[Result]:
    """Host-to-device and back, from pageable and from pinned memory (CUDA only)."""
    if device.type != "cuda":
        return []
    numel = COPY_BYTES // 4
    pageable, on_device = torch.randn(numel), torch.empty(numel, device=device)
    pinned, pinned_out = pageable.pin_memory(), torch.empty(numel, pin_memory=True)
    pageable_out = torch.empty(numel)
    plans = {
        ("H2D", "pageable"): (on_device, pageable),
        ("H2D", "pinned"): (on_device, pinned),
        ("D2H", "pageable"): (pageable_out, on_device),
        ("D2H", "pinned"): (pinned_out, on_device),
    }
    timed = interleave(
        {" ".join(k): partial(_copy, *p) for k, p in plans.items()},
        device=device,
        warmup_ms=10,
        rep_ms=50,
    )
    return [
        Result(
            "plot_transfer_bandwidth",
            f"{way} bandwidth",
            COPY_BYTES / m.median_s,
            "B/s",
            spread=_spread(COPY_BYTES, m),
            config={"memory": memory, "copy": format_bytes(COPY_BYTES)},  # the page's
            size=COPY_BYTES,
            peak="host_link",
        )
        for (way, memory), m in zip(plans, timed.values(), strict=True)
    ]


def _chain(x: torch.Tensor, n_ops: int) -> torch.Tensor:
    for _ in range(n_ops):
        x = torch.sin(x)
    return x


def _capture(x: torch.Tensor, n_ops: int) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            _chain(x, n_ops)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _chain(x, n_ops)
    return graph


def launch_figures(device: torch.device) -> list[Result]:
    """Cost per operation of a chain of sines, eager and replayed (CUDA only)."""
    if device.type != "cuda":
        return []
    x = torch.randn(1024, device=device)
    short, long = CHAINS
    graphs = {n: _capture(x, n) for n in CHAINS}
    timed = interleave(
        {
            "eager short": partial(_chain, x, short),
            "eager long": partial(_chain, x, long),
            "graph short": graphs[short].replay,
            "graph long": graphs[long].replay,
        },
        device=device,
        measure="call",
    )
    figures = []
    for mode in ("eager", "graph"):
        a, b = timed[f"{mode} short"], timed[f"{mode} long"]
        per_op = (b.median_s - a.median_s) / (long - short)
        if per_op <= 0:  # lost in the noise: no cost to report, as on the page
            continue
        low = max((b.q25_s - a.q75_s) / (long - short), 0.0)
        high = max((b.q75_s - a.q25_s) / (long - short), per_op)
        figures.append(
            Result(
                "plot_cuda_graphs",
                "per-op cost",
                per_op,
                "s",
                spread=(min(low, per_op), high),
                config={"mode": mode},
                size=f"{short}-{long} ops",
            )
        )
    return figures


def checkup(device: torch.device, *, levels: int = 2) -> ResultsFile:
    """Measure every figure on ``device``; the device's peaks come with them."""
    info = describe_device(device)
    peaks = device_peaks(info)
    figures = [
        *matmul_figures(device, levels, peaks),
        *memory_figures(device),
        *transfer_figures(device),
        *launch_figures(device),
    ]
    end = describe_device(device).gpu_state  # NVML's after the run, or None
    if end is not None and info.gpu_state is not None:
        seen = (*(info.gpu_state.clock_limits or ()), *(end.clock_limits or ()))
        end = replace(end, clock_limits=tuple(dict.fromkeys(seen)))
        info = replace(info, gpu_state=end)
    record = DeviceRecord.from_info(info, peaks=peak_figures(peaks))
    return with_measured_ceilings(ResultsFile(device=record, results=tuple(figures)))


def _bounds(result: Result) -> tuple[float, float]:
    return result.spread if result.spread is not None else (result.value, result.value)


def _direction(unit: str, up: bool) -> str:
    """The word for a figure that grew (``up``) or fell: a time that grew is slower."""
    if unit == "s":
        return "slower" if up else "faster"
    if unit.endswith("/s"):
        return "faster" if up else "slower"
    return "higher" if up else "lower"


def against_recording(live: Result, recording: Result, *, sizes: bool = True) -> str:
    """How a figure of this run compares with the same device's recording.

    ``"within its spread"`` when the two interquartile ranges overlap, else
    the difference with its direction: ``"12% slower"`` for a time that grew or
    a rate that fell, ``"3.1x faster"`` for a multiple, ``"higher"``/
    ``"lower"`` for other units. A time or an amount (``"s"``, ``"B"``)
    measured at another size is not compared; a rate or a ratio is, marked
    "(other size)", unless ``sizes`` is False (the check-up's rates, which do
    not depend on the size once it is large enough).
    """
    if live.unit != recording.unit:
        return f"not comparable: {live.unit} here, {recording.unit} recorded"
    other_size = sizes and live.size != recording.size
    if other_size and live.unit in ("s", "B"):  # a time or an amount grows with size
        return "not comparable: other size"
    note = " (other size)" if other_size else ""
    (low, high), (rec_low, rec_high) = _bounds(live), _bounds(recording)
    if low <= rec_high and rec_low <= high:
        return "within its spread" + note
    up = live.value > recording.value
    ratio = live.value / recording.value if recording.value else 0.0
    if ratio <= 0:  # a zero, or opposite signs: a direction, not a factor
        return _direction(live.unit, up) + note
    factor = max(ratio, 1 / ratio)
    amount = f"{abs(ratio - 1) * 100:.0f}%" if factor < 2 else format_ratio(factor)
    return f"{amount} {_direction(live.unit, up)}{note}"


def _label(result: Result) -> str:
    config = " ".join(str(v) for v in result.config.values())
    return f"{result.name} {config}".strip()


def report(measured: ResultsFile, recorded: Sequence[ResultsFile] = ()) -> str:
    """The one-screen report: each figure, its % of peak, the recorded devices'."""
    device = measured.device
    shown = [f for f in recorded if f.results]
    own = next((f for f in shown if device_key(f.device) == device_key(device)), None)
    header = ["figure", "this machine", "size", "% of peak"]
    header += [f"{f.device.short_name} [rec]" for f in shown]
    if own is not None:
        header.append("against its recording")
    rows = []
    for result in measured.results:
        peak = device.peaks.get(result.peak or "")
        pct = f"{100 * result.value / peak:.0f}%" if peak else "-"
        row = [
            _label(result),
            format_value(result.value, result.unit),
            "-" if result.size is None else str(result.size),
            pct,
        ]
        for f in shown:
            match = next((r for r in f.results if r.key == result.key), None)
            row.append(format_value(match.value, match.unit) if match else "-")
        if own is not None:
            match = next((r for r in own.results if r.key == result.key), None)
            row.append(against_recording(result, match, sizes=False) if match else "-")
        rows.append(tuple(row))
    kind = "measured ceiling" if device.kind == "cpu" else "datasheet"
    lines = [
        f"gpuguide check-up on {device.short_name}",
        str(Table(header=tuple(header), rows=tuple(rows))),
        f"% of peak: of this device's {kind} figure; [rec]: recorded, not measured now.",
    ]
    if not shown:
        lines.append(
            f"No recorded devices to compare with (--results or {RESULTS_DIR_ENV})."
        )
    if device.kind != "cuda":
        lines.append(
            "Host-device copies and CUDA graphs need a CUDA GPU: not measured."
        )
    return "\n".join(lines)


def versions() -> str:
    """``"gpuguide 0.1.0 (f4b16f4) | torch 2.13.0 | CUDA 12.8"``: what ``--version``
    prints (``CUDA: none`` for a CPU-only build of torch)."""
    cuda = torch.version.cuda
    return " | ".join(
        (describe_version().label, f"torch {torch.__version__}",
         f"CUDA {cuda}" if cuda else "CUDA: none"),
    )  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpuguide",
        formatter_class=argparse.RawDescriptionHelpFormatter,  # one --version line
        description=(
            "Check this machine: matmul rate per dtype (a small shape search), "
            "memory and host-device bandwidth, launch overhead and CUDA-graph "
            "replay, against the datasheet peak and the recorded devices."
        ),
    )
    parser.add_argument(
        "--version", action="version", version=versions(),
        help="print the versions of gpuguide (and its commit), torch and CUDA",
    )  # fmt: skip
    parser.add_argument(
        "--device", help="cpu, cuda, cuda:1, mps (default: the best one)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print a results file (JSON)"
    )
    parser.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help=f"recorded results to compare with (default: ${RESULTS_DIR_ENV})",
    )
    parser.add_argument(
        "--levels",
        type=int,
        default=2,
        metavar="N",
        help="sizes per matmul dimension in the shape search (default 2: 8 shapes)",
    )
    return parser


def _clean(text: str) -> str:
    return " ".join(text.split())


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def describe_gpu_state(state: GpuState) -> str:
    """What NVML said about a GPU in a few words: ``"SM clock 1755 of 1980 MHz,
    ..., PCIe gen 1 x16 now (up to gen 5 x16), clocks limited by: software power
    cap"``."""
    parts = []
    for what, now, most in (
        ("SM clock", state.sm_clock_mhz, state.sm_clock_max_mhz),
        ("memory clock", state.memory_clock_mhz, state.memory_clock_max_mhz),
    ):
        if now is not None and most is not None:
            parts.append(f"{what} {now} of {most} MHz")
        elif now is not None or most is not None:
            parts.append(f"{what} {now} MHz" if now else f"{what} max {most} MHz")
    if state.power_limit_w is not None:
        parts.append(f"power limit {state.power_limit_w:.0f} W")
    if state.pcie_generation and state.pcie_width:
        link = f"PCIe gen {state.pcie_generation} x{state.pcie_width} now"
        top = (state.pcie_max_generation, state.pcie_max_width)
        if all(top) and top != (state.pcie_generation, state.pcie_width):
            link += f" (up to gen {top[0]} x{top[1]})"
        parts.append(link)
    elif state.link_label:
        parts.append(state.link_label)
    if state.clock_limits:
        parts.append(f"clocks limited by: {', '.join(state.clock_limits)}")
    return ", ".join(parts)


def provenance_line(
    device: str | torch.device | DeviceInfo | None = None,
    *,
    now: datetime | None = None,
) -> str:
    """The check-up's line that says what a measurement ran on, and when (``now``, in UTC):
    ``"Measured on NVIDIA H100 80GB HBM3 [H100 SXM5] (132 SMs, ...) | torch 2.13.0 |
    CUDA 12.8 | driver 570.86.15 | gpuguide 0.1.0 (f4b16f4) | 2026-11-21 10:42 UTC"``.

    """
    info = device if isinstance(device, DeviceInfo) else describe_device(device)
    parts: list[str] = []
    if info.type == "cuda":
        head = f"Measured on {_clean(info.name)}"
        if info.variant:
            head += f" [{info.variant}]"
        details = []
        if info.sm_count is not None:
            details.append(_count(info.sm_count, "SM"))
        if info.total_memory_bytes is not None:
            details.append(format_bytes(info.total_memory_bytes))
        if info.compute_capability is not None:
            major, minor = info.compute_capability
            details.append(f"compute capability {major}.{minor}")
        if details:
            head += f" ({', '.join(details)})"
        parts.append(head)
        parts.append(f"torch {info.torch_version}")
        parts.append(
            f"CUDA {info.cuda_version}" if info.cuda_version else "CUDA: unknown"
        )
        parts.append(f"driver {info.driver_version or 'unknown'}")
        if info.memory_cap_bytes is not None:
            parts.append(f"GPU memory capped at {format_bytes(info.memory_cap_bytes)}")
        if info.gpu_state is not None and (state := describe_gpu_state(info.gpu_state)):
            parts.append(state)
    else:
        counts = []
        if info.cpu_cores is not None:
            counts.append(_count(info.cpu_cores, "core"))
        counts.append(_count(info.cpu_threads, "thread"))
        if info.cpu_isa:
            counts.append(info.cpu_isa)
        threads = (
            f"{', '.join(counts)}; torch uses {_count(info.torch_threads, 'thread')}"
        )
        if info.type == "mps":
            parts.append(f"Measured on {_clean(info.name)} (host CPU: {threads})")
        else:
            parts.append(f"Measured on CPU {_clean(info.cpu_model)} ({threads})")
        parts.append(f"torch {info.torch_version}")
        if info.cuda_version:
            parts.append(f"CUDA {info.cuda_version} build, not used")
        elif info.type == "mps":
            parts.append("CUDA: none (MPS run)")
        else:
            parts.append("CUDA: none (CPU-only run)")
    parts.append(info.gpuguide_label)
    now = datetime.now(timezone.utc) if now is None else now
    if now.tzinfo is not None:  # naive means UTC
        now = now.astimezone(timezone.utc)
    parts.append(now.strftime("%Y-%m-%d %H:%M UTC"))
    return " | ".join(_clean(part) for part in parts)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check-up; returns the exit status (2 for bad arguments or devices)."""
    ignore_torch_internal_warnings()
    parser = _parser()
    args = parser.parse_args(argv)
    if args.levels < 1:
        parser.error(f"--levels must be >= 1, got {args.levels}")
    try:
        device = pick_device(args.device)
        folder = args.results or os.environ.get(RESULTS_DIR_ENV, "").strip()
        recorded = tuple(load_dir(folder).values()) if folder else ()
    except (RuntimeError, ValueError) as error:  # ResultsFileError is a ValueError
        print(f"python -m gpuguide: error: {error}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    measured = checkup(device, levels=args.levels)
    if args.json:
        sys.stdout.write(dumps(measured))
        return 0
    print(provenance_line(device))
    print(report(measured, recorded))
    print(f"({time.perf_counter() - start:.0f} s)")
    return 0
