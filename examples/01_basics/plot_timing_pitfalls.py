"""
Timing pitfalls
===============

A timing is only as good as what it actually measures. This page times one matrix
multiplication several wrong ways and one right way, and shows how far off each
wrong way is, as a ratio to the median from :func:`gpuguide.benchmark`.

On a GPU the largest error comes from asynchronous execution: a host clock read
right after a CUDA call measures the launch, not the work. Other pitfalls apply to
every device: the first call, trusting one sample, creating the inputs inside the
timed region, and ``torch.utils.benchmark.Timer``'s default of one CPU thread.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The size is chosen so that one multiplication takes a few milliseconds here.
import math
import subprocess
import sys
import time

import matplotlib.pyplot as plt
import torch
from torch.utils import benchmark as torch_benchmark

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
reps = 5 if small else 30

n = gpuguide.largest_size(
    64,
    16384,
    memory_at=lambda n: 12 * n * n,
    flop_at=lambda n: gpuguide.matmul_flop(n, n, n),
    traffic_at=lambda n: 12 * n * n,
    call_s=0.005,
    multiple_of=64,
)
a, b, out = (torch.randn(n, n, device=device) for _ in range(3))
print(f"float32 matmul, n = {n}")

# %%
# The reference
# -------------
# :func:`gpuguide.benchmark` warms up, then times each call on its own (CUDA events
# on a GPU, a monotonic clock on the CPU) and reports the median and the IQR. Every
# ratio below is relative to this median. One untimed call first: the first matmul
# of a size pays one-time costs (pitfall 2), which would make the warm-up's estimate
# of a call, and with it the number of timed calls, far too small.
torch.matmul(a, b, out=out)
ref = gpuguide.benchmark(
    torch.matmul, args=(a, b), kwargs={"out": out}, label="reference"
)
print(ref)
gpuguide.record("reference matmul", ref, size=n)


def as_measurement(label, times_s, method):
    return gpuguide.Measurement(label, tuple(times_s), str(device), method)


# %%
# Pitfall 1: a host clock that does not wait
# ------------------------------------------
# This is the obvious way to time a call. On a CPU it is right, because the matmul
# is done when the call returns. On a GPU the call only queues a kernel and returns,
# typically after 5-50 us whatever the size, so the clock measures the launch.
samples = []
for _ in range(reps):
    t0 = time.perf_counter()
    torch.matmul(a, b, out=out)
    samples.append(time.perf_counter() - t0)
# Drain the queue before going on (torch.cpu.synchronize() does nothing).
getattr(torch, device.type).synchronize()
no_sync = as_measurement("host clock, no sync", samples, "wall-clock")
print(no_sync)

# %%
# The fixes: synchronize, or use CUDA events
# ------------------------------------------
# ``torch.cuda.synchronize()`` before starting and before stopping the clock makes
# the host wait for the GPU; each sample then also holds the launch and the
# synchronization's latency, tens of microseconds. CUDA events are timestamps
# recorded on the GPU's stream, so they time what the GPU did, without host overhead.
gpu_only = {}
if device.type == "cuda":
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    label = "host clock + sync"
    gpu_only[label] = as_measurement(label, samples, "wall-clock+sync")

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        start.record()
        torch.matmul(a, b, out=out)
        end.record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
    gpu_only["CUDA events"] = as_measurement("CUDA events", samples, "cuda-events")
    for m in gpu_only.values():
        print(m)
    extra_s = gpu_only[label].median_s - gpu_only["CUDA events"].median_s
    noisy = any(m.is_noisy for m in gpu_only.values())
    versus = gpuguide.compare(gpu_only["CUDA events"], gpu_only[label])
    if versus.measurable:
        print(
            f"the host clock + sync adds {gpuguide.format_time(extra_s)} per sample"
            f"{' (NOISY)' if noisy else ''}: {versus}"
        )
    else:
        print(f"the host clock + sync adds nothing measurable here: {versus}")
else:
    print(
        "Asynchronous execution (no-sync clock, synchronize, CUDA events) needs a "
        "CUDA GPU; on a CPU, where a call returns when its work is done, the plain "
        "clock above is correct."
    )

# %%
# Pitfall 2: the first call
# -------------------------
# The first matmul in a process pays one-time costs: on a GPU, creating the cuBLAS
# handle and workspace and loading kernels; on a CPU, starting the thread pool.
# Earlier pages of this gallery ran in this process and paid them already, so the
# first call is timed in a fresh process, after making the inputs there.
FIRST_CALLS = """
import sys, time, torch
device, n = torch.device(sys.argv[1]), int(sys.argv[2])
sync = getattr(torch, device.type).synchronize  # torch.cuda / mps / cpu
a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
for _ in range(3):
    sync()
    t0 = time.perf_counter()
    torch.matmul(a, b)
    sync()
    print(time.perf_counter() - t0)
"""
run = subprocess.run(
    [sys.executable, "-c", FIRST_CALLS, str(device), str(n)],
    capture_output=True,
    text=True,
    check=True,
)
first, second, third = (float(s) for s in run.stdout.split())
cold = as_measurement("first call", [first], "wall-clock+sync")
print(
    f"fresh process: first call {gpuguide.format_time(first)}, then "
    f"{gpuguide.format_time(second)} and {gpuguide.format_time(third)}; "
    f"the first is {gpuguide.format_ratio(first / ref.median_s)} the reference"
)

# %%
# Pitfall 3: trusting one sample
# ------------------------------
# Even warm, single calls differ (other processes, clock changes, page faults, the
# GPU's power state). The reference's calls, in order, show the spread a one-shot
# timing draws from: expect a few percent on a quiet GPU, more on a shared CPU.
print(
    f"{ref.n} single calls: min {gpuguide.format_time(ref.min_s)}, median "
    f"{gpuguide.format_time(ref.median_s)}, max {gpuguide.format_time(ref.max_s)}"
)
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    list(range(1, ref.n + 1)),
    {"one call": [t * 1e3 for t in ref.times_s]},
    xlabel="call (index)",
    ylabel="time (ms)",
    title=f"Single calls vary: the slowest is "
    f"{gpuguide.format_ratio(ref.max_s / ref.median_s)} the median",
    logx=False,
    logy=False,
)
ax.axhline(ref.median_ms, color="0.3", linestyle="--", label="median")
ax.set_ylim(bottom=0)
ax.legend()
plt.show()

# %%
# Pitfall 4: creating the inputs inside the timed call
# ----------------------------------------------------
# A popular notebook timed functions that call ``torch.randn`` for their own inputs,
# so every timing included the random number generator and the allocator. The error
# shrinks as the operation grows relative to its inputs: a few percent for a large
# matmul on a GPU, up to several times the real cost for cheap operations.


def matmul_with_fresh_inputs():
    x = torch.randn(n, n, device=device)
    y = torch.randn(n, n, device=device)
    return torch.matmul(x, y)


inside = gpuguide.benchmark(
    matmul_with_fresh_inputs, device=device, label="randn inside"
)
print(inside)

# %%
# A second opinion: ``torch.utils.benchmark.Timer``
# -------------------------------------------------
# ``Timer`` synchronizes CUDA and reports the median over blocks of calls, so with
# the same thread count it should agree with :func:`gpuguide.benchmark` to within
# about a percent (on a GPU its host clock also counts one launch and one
# synchronize per block, so it may read slightly higher). A shared
# machine drifts between two measurements taken one after the other, so the two tools
# take turns for a few rounds and each one's times are pooled. ``Timer`` uses one
# thread unless told otherwise: on a CPU expect it to be slower then, by up to the
# number of cores; on a GPU it makes little difference. ``Timer``'s IQR is the spread
# of block means, not of single calls, so expect it to look smaller.
method = "wall-clock" if device.type == "cpu" else "wall-clock+sync"


def make_timer(num_threads):
    return torch_benchmark.Timer(
        "torch.matmul(a, b, out=out)",
        globals={"torch": torch, "a": a, "b": b, "out": out},
        num_threads=num_threads,
    )


all_threads = make_timer(torch.get_num_threads())
ours_s, theirs_s = [], []
for _ in range(1 if small else 3):
    ours = gpuguide.benchmark(torch.matmul, args=(a, b), kwargs={"out": out})
    ours_s += ours.times_s
    theirs_s += all_threads.blocked_autorange(min_run_time=ref.n * ref.median_s).times
ours = as_measurement("gpuguide, taking turns", ours_s, ref.method)
timer_stats = {
    "Timer, all threads": as_measurement("Timer, all threads", theirs_s, method),
    "Timer, 1 thread": as_measurement(
        "Timer, 1 thread",
        make_timer(1).blocked_autorange(min_run_time=0.02 if small else 0.2).times,
        method,
    ),
}
for m in (ours, *timer_stats.values()):
    print(m)
verdict = gpuguide.compare(timer_stats["Timer, all threads"], ours)
gap = 1 / verdict.speedup - 1
print(
    f"Timer ({torch.get_num_threads()} threads) vs gpuguide, same rounds: medians "
    f"differ by {gap:+.1%}; {verdict}"
)

# %%
# Pitfall 5: a short kernel's time is its launch
# ----------------------------------------------
# CUDA events around one call time the GPU from the moment the host records the
# start event. When a call's work takes less time than the host needs to launch it
# (a kernel of a few microseconds), the GPU waits for every launch and the events
# measure the launch: the time per call of a loop of such calls, which is what such
# a loop costs. :func:`gpuguide.benchmark` asks which time you mean:
# ``measure="call"`` (the default) for that, ``measure="kernel"`` for the GPU's
# work alone, with the launches hidden behind work queued ahead. For calls of more
# than about 50 us of GPU work the two agree, as for the matmul above (the reference
# is a ``"call"`` time); below that, choose the one your question is about, and say
# which. Here an add of 16384 floats (64 KiB per tensor), both ways.
if device.type == "cuda":
    u, v, w = (torch.randn(16384, device=device) for _ in range(3))
    labels = {"call": "time per call (launch included)", "kernel": "the kernel alone"}
    per_call, kernel = (
        gpuguide.benchmark(
            torch.add, args=(u, v), kwargs={"out": w}, measure=kind, label=label
        )
        for kind, label in labels.items()
    )
    print(f"{per_call}\n{kernel}\n{gpuguide.compare(per_call, kernel)}")
else:
    print(
        "On a CPU a call returns when its work is done, so there is no launch to hide "
        'and measure="kernel" times the same thing as measure="call".'
    )

# %%
# How wrong is each method?
# -------------------------
# Ratios to the reference median: 1.00x is right, below 1 underestimates, above 1
# overestimates. The y axis turns logarithmic when the methods differ by more than
# 10x, as the no-sync clock on a GPU does. Three ratios are recorded, each with the
# range its quartiles allow: the no-sync clock (a GPU's pitfall), the first call
# (every device's) and ``Timer`` with one thread (a CPU's).
methods = {
    "reference": ref,
    "host clock, no sync": no_sync,
    **gpu_only,
    "first call": cold,
    "randn inside": inside,
    **timer_stats,
}
for label, m in methods.items():
    ratio = gpuguide.format_ratio(m.median_s / ref.median_s)
    print(f"{label}: {ratio} the reference")
    if label in ("host clock, no sync", "first call", "Timer, 1 thread"):
        gpuguide.record(
            "time / reference", m.median_s / ref.median_s, unit="x", size=n,
            spread=(m.q25_s / ref.q75_s, m.q75_s / ref.q25_s), method=label,
        )  # fmt: skip
worst = max(methods, key=lambda k: abs(math.log(methods[k].median_s / ref.median_s)))
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    methods,
    ylabel="median time (ms)",
    title=f"Worst method here: {worst}, "
    f"{gpuguide.format_ratio(methods[worst].median_s / ref.median_s)} the real time",
)
medians = [m.median_s for m in methods.values()]
if max(medians) > 10 * min(medians):
    ax.set_yscale("log")
plt.show()
