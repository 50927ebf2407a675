"""
Timing asynchronous work: synchronize, or use CUDA events
=========================================================

A GPU runs work asynchronously: a CUDA call queues a kernel and returns, and the
kernel runs later. A host clock read right after the call measures the launch, not
the work. This page times one matrix multiplication with a host clock that does not
wait, then with the two fixes, synchronizing before each clock read and CUDA events
recorded on the GPU's stream, each against the median of a careful benchmark.
Last, for a short kernel, it separates the time of a call, launch included, from
the kernel's own time.

The pitfalls that apply on every device (the first call, one sample, inputs made in
the timed call, ``torch.utils.benchmark``'s thread count) are on the next page.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The size is chosen so that one multiplication takes a few milliseconds here.
import time

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Measurement, benchmark, compare, plot_bars, report
from gpuguide.chapters.data import matmul_side

page = gpuguide.setup()
device = page.device
reps = 5 if page.small else 30
n = matmul_side(device=device, call_s=0.005)
a, b, out = (torch.randn(n, n, device=device) for _ in range(3))
print(f"float32 matmul, n = {n}")

# %%
# The reference
# -------------
# :func:`gpuguide.benchmark` warms up, then times each call on its own (CUDA events
# on a GPU, a monotonic clock on the CPU) and reports the median and the IQR. One
# untimed call comes first: the first matmul of a size can pay one-time costs (next
# page), which would inflate the warm-up's estimate of a call and so cut the number
# of calls it times.
torch.matmul(a, b, out=out)
ref = benchmark(torch.matmul, args=(a, b), kwargs={"out": out}, label="the reference")
report("reference matmul", ref, size=n)


# %%
# The pitfall: a host clock that does not wait
# --------------------------------------------
# This is the obvious way to time a call. On a CPU it is right, because the matmul
# is done when the call returns: it should not read measurably faster. On a
# GPU the call only queues a kernel and returns, typically after 5-50 us whatever the
# size, so the clock measures the launch and reads at least 10x too fast.
samples = []
for _ in range(reps):
    t0 = time.perf_counter()
    torch.matmul(a, b, out=out)
    samples.append(time.perf_counter() - t0)
# Drain the queue before going on (torch.cpu.synchronize() does nothing).
getattr(torch, device.type).synchronize()
no_sync = Measurement("host clock, no sync", tuple(samples), str(device), "wall-clock")
report("host clock, no sync", no_sync, size=n)
versus = compare(no_sync, ref)
report("against the reference", versus, size=n, method=no_sync.label)
gpuguide.claim(
    "on a CPU, a host clock without a sync does not read faster than the reference",
    versus,
    verdict="not faster",
    on="cpu",
)
gpuguide.claim(
    "on a GPU, a host clock without a sync reads at least 10x faster than the "
    "reference",
    versus,
    at_least=10,
    on="cuda",
)

# %%
# The fixes: synchronize, or use CUDA events
# ------------------------------------------
# ``torch.cuda.synchronize()`` before starting and before stopping the clock makes
# the host wait for the GPU; each sample then also holds the launch and the
# synchronization's latency, tens of microseconds. CUDA events are timestamps
# recorded on the GPU's stream, so they time what the GPU did, without host overhead.
# On a CPU a call returns when its work is done, so the plain clock above is already
# right there.
gpu_only = {}
if page.needs_cuda("Synchronizing and CUDA events"):
    samples = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t0)
    method = "wall-clock+sync"
    sync = Measurement("host clock + sync", tuple(samples), str(device), method)

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends, strict=True):
        start.record()
        torch.matmul(a, b, out=out)
        end.record()
    torch.cuda.synchronize()
    samples = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends, strict=True)]
    events = Measurement("CUDA events", tuple(samples), str(device), "cuda-events")
    gpu_only = {"host clock + sync": sync, "CUDA events": events}
    report("host clock + sync", sync, size=n)
    report("CUDA events", events, size=n)
    apart = gpuguide.format_time(abs(sync.median_s - events.median_s))
    gpuguide.claim(
        "the host clock with syncs reads at most 100 us more than CUDA events",
        sync.median_s - events.median_s,
        spread=(sync.q25_s - events.q75_s, sync.q75_s - events.q25_s),
        at_most=100e-6,
        timed=True,
        measured=f"{apart} between the medians",
    )

# %%
# A short kernel's time is its launch
# -----------------------------------
# CUDA events around one call time the GPU from the moment the host records the
# start event. When a call's work takes less time than the host needs to launch it
# (a kernel of a few microseconds), the GPU waits for every launch and the events
# measure the launch: the time per call of a loop of such calls, which is what such
# a loop costs. ``benchmark`` asks which time you mean:
# ``measure="call"`` (the default) for that, ``measure="kernel"`` for the GPU's work
# alone, with the launches hidden behind work queued ahead. For calls of more than
# about 50 us of GPU work the two agree, as for the matmul above (the reference is a
# ``"call"`` time); below that, choose the one your question is about, and say which.
# On a CPU there is no launch to hide: both time the same thing. Here an add of 16384
# floats (64 KiB per tensor), both ways.
if page.needs_cuda('measure="call" against measure="kernel"'):
    u, v, w = (torch.randn(16384, device=device) for _ in range(3))
    per_call, kernel = (
        benchmark(torch.add, args=(u, v), kwargs={"out": w}, measure=kind)
        for kind in ("call", "kernel")
    )
    report("add of 16384 floats", per_call, measure="call")
    report("add of 16384 floats", kernel, measure="kernel")
    launch = compare(per_call, kernel)
    gpuguide.claim(
        "a 64 KiB add's time per call is at least 1.05x its kernel's time alone",
        launch,
        at_most=1 / 1.05,
        measured=f"per call {launch.short} the kernel's speed",
    )

# %%
# How wrong is each clock?
# ------------------------
# Each bar is a median with its IQR, labelled with its ratio to the reference: 1.00x
# is right, below 1 underestimates. The y axis turns logarithmic when the clocks
# differ by more than 10x, as the no-sync clock on a GPU does.
methods = {"reference": ref, "host clock, no sync": no_sync, **gpu_only}
fig, ax = plt.subplots()
title = f"host clock, no sync / reference: {compare(ref, no_sync).short}"
plot_bars(ax, methods, ylabel="median time (ms)", title=title)
medians = [m.median_s for m in methods.values()]
if max(medians) > 10 * min(medians):
    ax.set_yscale("log")
plt.show()
