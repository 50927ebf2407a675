"""
Profiling a training step
=========================

A timer tells you *how long* a training step takes; a profiler tells you *where* the
time goes. This page profiles a training step with :mod:`torch.profiler`, then times
its phases where the step runs, with events on the device's stream. The profile
points at a batch normalised one sample at a time in a Python loop; the page fixes
it and measures the step before and after.

See also :doc:`the roofline and its three regimes </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# A small MLP classifier on random data. The batch arrives as raw features; the step
# standardises every sample (zero mean, unit variance) before the forward pass. On a
# CPU, torch runs one thread, so that other processes take no core from the timings.
import gc
import gzip
import time
from contextlib import nullcontext

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import gpuguide
from gpuguide import Measurement, compare, format_bytes, plot_bars, report, table

page = gpuguide.setup()
device = page.device
sync = getattr(torch, device.type).synchronize  # torch.cpu.synchronize does nothing
if not page.cuda:
    torch.set_num_threads(1)
batch, features, hidden = (64, 256, 512) if page.small else (128, 512, 1024)
if not page.cuda and not page.small:  # a CPU's matmuls weigh more: a smaller MLP
    batch, features, hidden = 256, 256, 256
model = nn.Sequential(
    nn.Linear(features, hidden),
    nn.ReLU(),
    nn.Linear(hidden, hidden),
    nn.ReLU(),
    nn.Linear(hidden, 10),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
raw = torch.randn(batch, features, device=device) * 3 + 1
labels = torch.randint(0, 10, (batch,), device=device)  # 10 classes
print(f"batch {batch} x {features} features")
kernels = page.needs_cuda("Kernel times in the profile")


# %%
# The step, with named phases
# ---------------------------
# ``record_function`` puts a named range around each phase, so the profile groups
# operators by what the step was doing. The normalisation is written the slow way,
# one sample at a time: a handful of small operators per sample, each paying the
# dispatcher's fixed cost (and, on a GPU, a kernel launch).
def normalise_per_sample(x):
    return torch.stack([(row - row.mean()) / (row.std() + 1e-5) for row in x])


def normalise_batched(x):
    mean, std = x.mean(dim=1, keepdim=True), x.std(dim=1, keepdim=True)
    return (x - mean) / (std + 1e-5)


def train_step(normalise, phase=record_function):
    with phase("normalise"):
        x = normalise(raw)
    with phase("forward"):
        loss = nn.functional.cross_entropy(model(x), labels)
    with phase("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with phase("optimizer"):
        optimizer.step()


phases = ("normalise", "forward", "backward", "optimizer")  # train_step's, in order
assert torch.allclose(normalise_per_sample(raw), normalise_batched(raw), atol=1e-5)

# %%
# Recording with a schedule
# -------------------------
# The schedule skips one step (``wait``), runs one whose results it throws away
# (``warmup``: the profiler's own start-up), then records three (``active``), once
# (``acc_events=True`` keeps torch 2.11 from warning that a new cycle drops the
# events). ``prof.step()`` ends each step after a synchronization, so every recorded
# step holds its own kernels.
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kernels else [])
wait, warmup, active = 1, 1, 3
profiled = []  # on_trace_ready gets the profile when the active steps are done
every = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
with profile(
    activities=activities,
    schedule=every,
    acc_events=True,
    on_trace_ready=profiled.append,
) as prof:
    for _ in range(wait + warmup + active):
        train_step(normalise_per_sample)
        sync()
        prof.step()

# %%
# The top operators, and the backward pass's thread
# -------------------------------------------------
# ``key_averages()`` sums the recorded events by name; sorted by self time (in the
# operator itself, not in what it calls), it shows where the step spends its time:
# many calls of small operators near the top are overhead, not arithmetic. (On a GPU
# each ``record_function`` range also gets a device row, from its first kernel to
# its last with the idle gaps, far above the kernels' time: left out here.)
#
# A range belongs to the thread that opened it, and autograd decides which thread
# runs the backward pass: for CPU tensors the thread that called ``backward()``, so
# the main thread's "backward" range holds the pass's operators; for CUDA tensors a
# thread of its own per device, so the range holds none of them (and no range's CPU
# time holds a kernel's GPU time). The last line says which thread ran them here.
averages = profiled[0].key_averages()
averages[:] = [
    e
    for e in averages
    if not (getattr(e, "is_user_annotation", False) and e.device_type != DeviceType.CPU)
]
sort_by = "self_device_time_total" if kernels else "self_cpu_time_total"
print(averages.table(sort_by=sort_by, row_limit=12))
means = sum(e.count for e in averages if e.key == "aten::mean") // active
gpuguide.claim(
    "the per-sample loop calls aten::mean at least once per sample and step",
    holds=means >= batch,
    measured=f"{means} calls per step for a batch of {batch}",
)
events = profiled[0].events()
main_thread = {e.thread for e in events if e.name == "backward"}
backward_ops = [e for e in events if e.name.startswith("autograd::engine::")]
inside = sum(e.thread in main_thread for e in backward_ops)
gpuguide.claim(
    "autograd runs the backward pass's operators on "
    + ("a thread of its own" if page.cuda else "the thread that called backward()"),
    holds=bool(backward_ops) and inside == (0 if page.cuda else len(backward_ops)),
    measured=f"{inside} of {len(backward_ops)} on the thread of the 'backward' range",
)


# %%
# Time per phase, with events on the stream
# -----------------------------------------
# To learn what each phase costs, time it where the step runs: an event recorded on
# the device's stream as each phase begins completes when the work queued before it
# does, whichever thread queued that work, so the time between two events is a
# phase's time on the GPU, waits for the host to launch its kernels included (a CPU
# reads its clock). The per-sample and the batched step (the fix, below) take turns,
# without the profiler; ``normalise``, a few hundred small operators, should lead.
def stamp():
    if not page.cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()  # on the current stream
    return event


def timed_step(normalise):
    """One step: a stamp as each phase begins, and one when the step ends."""
    stamps = []  # each phase appends a stamp, then runs in an empty context
    train_step(normalise, lambda name: stamps.append(stamp()) or nullcontext())
    return [*stamps, stamp()]


variants = {"per sample": normalise_per_sample, "batched": normalise_batched}
for normalise in [*variants.values()] * 2:
    train_step(normalise, lambda name: nullcontext())
steps = {label: [] for label in variants}
gc.disable()  # a collection inside a phase would land in its time
for _ in range(10 if page.small else 100):
    for label, normalise in variants.items():
        steps[label].append(timed_step(normalise))
gc.enable()
sync()  # now every event has completed
seconds = (lambda a, b: a.elapsed_time(b) / 1e3) if page.cuda else (lambda a, b: b - a)
timed, method = {}, "cuda-events" if page.cuda else "wall-clock"
for label, stamps in steps.items():
    times = {n: [seconds(s[i], s[i + 1]) for s in stamps] for i, n in enumerate(phases)}
    times["step"] = [seconds(s[0], s[-1]) for s in stamps]
    timed[label] = {
        n: Measurement(label if n == "step" else n, t, str(device), method)
        for n, t in times.items()
    }
slow, fast = timed["per sample"], timed["batched"]
share = {n: f"{sum(slow[n].times_s) / sum(slow['step'].times_s):.0%}" for n in phases}
print(
    table(
        {
            "phase": n,
            "per sample": slow[n],
            "share of its step": share[n],
            "batched": fast[n],
        }
        for n in phases
    )
)
largest = [
    p
    for p in phases
    if all(compare(slow[q], slow[p]).verdict == "faster" for q in phases if q != p)
]
print(
    f"largest phase: {largest[0]}"
    if largest
    else "no phase is measurably larger than every other"
)
gpuguide.claim(
    "normalise takes the largest share of the per-sample step",
    holds=max(phases, key=lambda n: sum(slow[n].times_s)) == "normalise",
    measured=", ".join(f"{n} {share[n]}" for n in phases),
    timed=True,
)
if kernels:  # no kernels in the profile when CUPTI was not available to it
    kernels_s = (
        sum(
            e.self_device_time_total
            for e in averages
            if e.device_type != DeviceType.CPU
        )
        / 1e6
        / active
    )
    bound = "GPU-bound" if kernels_s >= slow["step"].q25_s else "the GPU waits"
    print(
        f"kernels: {gpuguide.format_time(kernels_s)} of GPU time per step, "
        f"{kernels_s / slow['step'].median_s:.0%} of the step: {bound}"
    )

# %%
# The trace, for Perfetto
# -----------------------
# ``export_chrome_trace`` writes every recorded event with its start and duration
# (gzipped, for a name ending in ``.gz``). Open it at https://ui.perfetto.dev: each
# step is a row of ranges, the per-sample loop a dense comb of tiny operators under
# ``normalise``, and on a GPU the backward pass's operators a thread of their own.
trace = gpuguide.artifact_path("profiler_trace_training_step.json.gz")
profiled[0].export_chrome_trace(str(trace))
print(
    f"trace: {format_bytes(len(gzip.decompress(trace.read_bytes())))} of JSON, "
    f"{format_bytes(trace.stat().st_size)} gzipped"
)
gpuguide.download_link(trace, "profiler trace (gzipped JSON, for ui.perfetto.dev)")

# %%
# The fix, measured
# -----------------
# The gain of the batched version is what the loop's fixed costs were worth beside
# the rest of the step: on a GPU, a few hundred launches take far longer than their
# kernels; on a CPU, an operator costs a few microseconds and the matrix products
# weigh more (hence the smaller MLP there).
for label, t in timed.items():
    report(
        "step time", t["step"], size=f"batch {batch}x{features}", normalisation=label
    )
batching = compare(fast["step"], slow["step"])
print(f"normalisation: {batching}")
gpuguide.claim(
    "the batched normalisation is at least 3x as fast as the per-sample loop",
    compare(fast["normalise"], slow["normalise"]),
    at_least=3,
)
gpuguide.claim(
    "batching it makes the step at least 1.5x as fast", batching, at_least=1.5
)
fig, ax = plt.subplots()
plot_bars(
    ax,
    {"per-sample loop": slow["step"], "batched": fast["step"]},
    ylabel="training step (ms)",
    title=f"Batching the normalisation: {batching.short}",
)
plt.show()

# %%
# What to take away
# -----------------
# Profile first, to see which operators and phases take the time; then time the
# phases where the step runs, and the step before and after a fix.
gpuguide.takeaway()
