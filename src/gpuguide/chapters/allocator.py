"""The hidden-memory page's helpers. ``python -m gpuguide.chapters.allocator [STEPS
TOKENS]`` (started by :func:`run_fresh`) prints the allocator settings it read back
and, on CUDA, :func:`varying_length_steps`'s trace, as JSON."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gpuguide.memory import track_memory
from gpuguide.units import format_bytes

__all__ = [
    "NAMES",
    "allocator_settings",
    "draw_segments",
    "expandable",
    "read_back",
    "run_fresh",
    "summary",
    "tensor_peak_bytes",
    "varying_length_steps",
]

#: Starts the child's line of JSON.
MARK = "gpuguide-result: "
#: The variables torch reads allocator settings from: CUDA's, and the newer one.
NAMES = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def allocator_settings(snapshot: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """This process's allocator settings as torch reads them back: a CUDA memory
    snapshot's, else the string torch parsed, else {}."""
    import torch

    if snapshot is not None and isinstance(snapshot.get("allocator_settings"), dict):
        return dict(snapshot["allocator_settings"])
    getter = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    pairs = (item.partition(":") for item in (getter() if getter else "").split(","))
    return {key.strip(): value.strip() for key, _, value in pairs if key.strip()}


def expandable(settings: Mapping[str, Any]) -> bool:
    """Whether ``settings`` turn expandable segments on."""
    return str(settings.get("expandable_segments", "")).strip().lower() == "true"


def summary(run: Mapping[str, Any]) -> dict[str, object]:
    """A :func:`run_fresh` training run's row: settings read back, peaks, retries,
    median step time, and fragmentation: (reserved - allocated) / reserved."""
    allocated, reserved = max(run["allocated"]), max(run["reserved"])
    return {
        "expandable (read back)": expandable(run["settings"]),
        "peak allocated": format_bytes(allocated),
        "peak reserved": format_bytes(reserved),
        "fragmentation": f"{(reserved - allocated) / reserved:.0%}",
        "retries": run["retries"],
        "median step (ms)": f"{1e3 * statistics.median(run['step_s']):.1f}",
    }


def draw_segments(axes: Any, runs: Mapping[str, Any]) -> None:
    """Each training run's ``segments`` on one of ``axes``, a row each, their blocks
    in MiB: blue where they hold a tensor, grey where free."""
    for ax, (label, run) in zip(axes, runs.items(), strict=False):
        for row, blocks in enumerate(run["segments"]):
            bars = [(offset / 2**20, size / 2**20) for offset, size, _ in blocks]
            colors = ["C0" if used else "0.8" for *_, used in blocks]
            ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colors)
        title = f"{label}: {len(run['segments'])} segments"
        ax.set(title=title, xlabel="offset (MiB)", ylabel="segment (by address)")


def varying_length_steps(
    steps: int, max_tokens: int, *, width: int = 1024, depth: int = 8
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Train a bf16 MLP on CUDA on ``steps`` batches of random lengths, then one of
    ``max_tokens``: each step's peak allocated and reserved bytes and seconds, and a
    memory snapshot after the last forward pass."""
    import torch

    from gpuguide.chapters.precision import mlp

    device = torch.device("cuda")
    model = mlp(width, depth).to(device, torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    seed = torch.Generator().manual_seed(0)
    lengths = torch.randint(max_tokens // 8, max_tokens, (steps,), generator=seed)
    trace: dict[str, list[float]] = {"allocated": [], "reserved": [], "step_s": []}
    for tokens in [*lengths.tolist(), max_tokens]:
        x = torch.randn(tokens, width, device=device, dtype=torch.bfloat16)
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        loss = model(x).float().square().mean()
        if tokens == max_tokens:
            snapshot = torch.cuda.memory._snapshot(device)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        torch.cuda.synchronize(device)
        trace["step_s"].append(time.perf_counter() - start)
        stats = torch.cuda.memory_stats(device)
        trace["allocated"].append(stats["allocated_bytes.all.peak"])
        trace["reserved"].append(stats["reserved_bytes.all.peak"])
    return trace, snapshot


def tensor_peak_bytes(fn: Callable[[], object], device: Any) -> int:
    """How far tensor memory rises while ``fn()`` runs: the CUDA allocator's
    counters, elsewhere the allocations and frees torch's profiler records."""
    import torch

    if torch.device(device).type == "cuda":
        with track_memory(device) as tracked:
            fn()
        return int(tracked.report.peak_increase_bytes or 0)  # type: ignore[union-attr]
    with torch.profiler.profile(profile_memory=True) as prof:
        fn()
    events = sorted(prof.profiler.kineto_results.events(), key=lambda e: e.start_ns())
    sizes = [e.nbytes() for e in events if e.name() == "[memory]"]
    return int(max(itertools.accumulate(sizes, initial=0)))


def run_fresh(conf: Mapping[str, str], *train: int) -> dict[str, Any]:
    """This module's result in a fresh Python whose only allocator variables are
    ``conf``; ``train`` (steps, tokens): :func:`varying_length_steps`'s, on CUDA."""
    env = {k: v for k, v in os.environ.items() if k not in NAMES} | dict(conf)
    command = [sys.executable, "-m", "gpuguide.chapters.allocator", *map(str, train)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode or not lines:
        msg = f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return dict(json.loads(lines[-1].removeprefix(MARK)))


def read_back(conf: str) -> dict[str, dict[str, Any]]:
    """The settings a fresh process reads back when given ``conf`` under each of
    :data:`NAMES`; the processes (no training) run at once."""
    with ThreadPoolExecutor(len(NAMES)) as pool:
        runs = list(pool.map(lambda name: run_fresh({name: conf}), NAMES))
    return {name: run["settings"] for name, run in zip(NAMES, runs, strict=True)}


def _main(args: list[str]) -> None:
    import torch

    from gpuguide.device import apply_memory_cap

    result: dict[str, Any] = {"settings": allocator_settings()}
    if torch.cuda.is_available():
        apply_memory_cap("cuda")
        torch.empty(1, device="cuda")  # the allocator starts with its settings
        result["settings"] = allocator_settings(torch.cuda.memory._snapshot())
        if args:
            trace, snapshot = varying_length_steps(int(args[0]), int(args[1]))
            used = "active_allocated"
            result |= trace
            result["retries"] = torch.cuda.memory_stats()["num_alloc_retries"]
            segments = sorted(snapshot["segments"], key=lambda s: s["address"])
            result["segments"] = [  # each block's (offset, size, holds a tensor)
                [(b["address"] - at, b["size"], b["state"] == used) for b in blocks]
                for at, blocks in ((s["address"], s["blocks"]) for s in segments)
            ]
    print(MARK + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    _main(sys.argv[1:])
