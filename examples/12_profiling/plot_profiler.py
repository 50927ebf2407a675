"""
Profiling a training step
=========================

A timer tells you *how long* a training step takes; a profiler tells you *where* the
time goes. This page profiles a training step with :mod:`torch.profiler`, then times
its phases where the step runs, with events on the device's stream. The profile
points at a batch normalised one sample at a time in a Python loop; the page fixes
it and measures the step before and after.

See also the concept pages
:doc:`the roofline and its three regimes </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# A small MLP classifier on random data. The batch arrives as raw features; the step
# standardises every sample (zero mean, unit variance) before the forward pass.
import gzip
import itertools
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import gpuguide

page = gpuguide.setup()
device = page.device
sync = getattr(torch, device.type).synchronize  # torch.cpu.synchronize does nothing
batch, features, hidden = (64, 256, 512) if page.small else (128, 512, 1024)
model = nn.Sequential(
    nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
    nn.Linear(hidden, 10),
).to(device)  # fmt: skip
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
raw = torch.randn(batch, features, device=device) * 3 + 1
labels = torch.randint(0, 10, (batch,), device=device)  # 10 classes
print(f"batch {batch} x {features} features")
kernels = page.needs_cuda("Kernel times in the profile")

# %%
# The step, with named phases
# ---------------------------
# ``record_function`` puts a named range around each phase, so the profile groups
# operators by what the step was doing (the phase timer below passes its own
# ``phase``). The normalisation is written the slow way, one sample at a time: each
# sample costs a handful of small operators, and each of them pays the dispatcher's
# fixed cost (and, on a GPU, a kernel launch).


def normalise_per_sample(x):
    rows = [(row - row.mean()) / (row.std() + 1e-5) for row in x]
    return torch.stack(rows)


def normalise_batched(x):
    mean = x.mean(dim=1, keepdim=True)
    std = x.std(dim=1, keepdim=True)
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


assert torch.allclose(normalise_per_sample(raw), normalise_batched(raw), atol=1e-5)

# %%
# Recording with a schedule
# -------------------------
# The schedule skips one step (``wait``), runs one with its results thrown away
# (``warmup``: the profiler's own start-up), then records three (``active``), once
# (``repeat=1``; ``acc_events=True`` keeps torch 2.11 from warning that a new cycle
# drops the last one's events). ``prof.step()`` ends each step, after a
# synchronization, so every recorded step holds its own kernels.
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if kernels else [])
wait, warmup, active = 1, 1, 3
profiled = []  # on_trace_ready gets the profile when the active steps are done
every = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
with profile(activities=activities, schedule=every, acc_events=True,
             on_trace_ready=profiled.append) as prof:  # fmt: skip
    for _ in range(wait + warmup + active):
        train_step(normalise_per_sample)
        sync()
        prof.step()

# %%
# The top operators, and the backward pass's thread
# -------------------------------------------------
# ``key_averages()`` sums the recorded events by name; sorted by self time (in the
# operator itself, not in what it calls), it shows where the step spends its time.
# Many calls of small operators near the top are overhead, not arithmetic. On a GPU
# each ``record_function`` range also gets a device row from its first kernel to
# its last, idle gaps included, far above 100% of the kernels' time: left out here.
#
# A range belongs to the thread that opened it, and autograd decides which thread
# runs the backward pass: for CPU tensors the thread that called ``backward()``, so
# the main thread's "backward" range holds the pass's operators; for CUDA tensors a
# thread of its own per device, so the range holds none of them (and no range's CPU
# time holds a kernel's GPU time). The last line says which thread ran them here.
averages = profiled[0].key_averages()
averages[:] = [
    e for e in averages
    if not (getattr(e, "is_user_annotation", False) and e.device_type != DeviceType.CPU)
]  # fmt: skip
sort_by = "self_device_time_total" if kernels else "self_cpu_time_total"
print(averages.table(sort_by=sort_by, row_limit=12))
calls = {e.key: e.count for e in averages}
print(f"aten::mean ran {calls.get('aten::mean', 0) // active} times per step "
      f"for a batch of {batch}")  # fmt: skip
kernels_s = sum(
    e.self_device_time_total for e in averages if e.device_type != DeviceType.CPU
) / 1e6 / active  # fmt: skip
events = profiled[0].events()
main_thread = {e.thread for e in events if e.name == "backward"}
backward_ops = [e for e in events if e.name.startswith("autograd::engine::")]
inside = sum(e.thread in main_thread for e in backward_ops)
print(f"backward's operators on the thread of the 'backward' range: {inside} of "
      f"{len(backward_ops)}")  # fmt: skip

# %%
# Time per phase, with events on the stream
# -----------------------------------------
# To learn what each phase costs, time it where the step runs: an event recorded on
# the device's stream as each phase begins completes when the work queued before it
# does, whichever thread queued that work, so the time between two events is a
# phase's time on the GPU, waits for the host to launch its kernels included (a CPU
# reads its clock). The per-sample and the batched step (the fix, below) run in
# interleaved rounds without the profiler, after two untimed steps each. On a GPU,
# expect ``normalise`` to lead: each of its few hundred small operators costs the
# host more than its kernel costs the GPU. On a CPU an operator's fixed cost is
# smaller and the matrix products weigh more: the cores and the batch decide.
phases = ("normalise", "forward", "backward", "optimizer")


def stamp():
    if not page.cuda:
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()  # on the current stream
    return event


def seconds(start, end):
    return start.elapsed_time(end) / 1e3 if page.cuda else end - start


def timed_step(normalise):
    """One step: a stamp as each phase begins, and one when the step ends."""
    stamps = []

    def phase(name):
        stamps.append(stamp())
        return nullcontext()

    train_step(normalise, phase)
    return [*stamps, stamp()]


variants = {"per sample": normalise_per_sample, "batched": normalise_batched}
for normalise in [*variants.values()] * 2:
    train_step(normalise, lambda name: nullcontext())
steps = {label: [] for label in variants}
for _ in range(10 if page.small else 30):
    for label, normalise in variants.items():
        steps[label].append(timed_step(normalise))
sync()  # now every event has completed
timed, method = {}, "cuda-events" if page.cuda else "wall-clock"
for label, stamps in steps.items():
    durations = [[seconds(a, b) for a, b in itertools.pairwise(s)] for s in stamps]
    timed[label] = {n: gpuguide.Measurement(n, [d[i] for d in durations], str(device),
                                            method) for i, n in enumerate(phases)}  # fmt: skip
    step_s = [seconds(s[0], s[-1]) for s in stamps]
    timed[label]["step"] = gpuguide.Measurement(label, step_s, str(device), method)
slow = timed["per sample"]
share = {
    n: f"{sum(m.times_s) / sum(slow['step'].times_s):.0%}" for n, m in slow.items()
}
print(gpuguide.table({"phase": n, "time per step": m, "of the step": share[n]}
                     for n, m in slow.items()))  # fmt: skip
largest = [p for p in phases if all(
    gpuguide.compare(slow[q], slow[p]).verdict == "faster" for q in phases if q != p)]  # fmt: skip
print(f"largest phase: {largest[0]}" if largest else "no phase is measurably larger "
      "than every other")  # fmt: skip
if kernels:  # no kernels in the profile when CUPTI was not available to it
    bound = "GPU-bound" if kernels_s >= slow["step"].q25_s else "the GPU waits"
    print(f"kernels: {gpuguide.format_time(kernels_s)} of GPU time per step, "
          f"{kernels_s / slow['step'].median_s:.0%} of the step: {bound}")  # fmt: skip

# %%
# The trace, for Perfetto
# -----------------------
# ``export_chrome_trace`` writes every recorded event with its start and duration.
# Open it at https://ui.perfetto.dev (drag it onto the page, gzipped or not): each
# step is a row of ranges, the per-sample loop a dense comb of tiny operators under
# ``normalise``, and on a GPU the backward pass's operators a thread of their own.
with tempfile.TemporaryDirectory() as tmp:
    plain = Path(tmp) / "trace.json"
    profiled[0].export_chrome_trace(str(plain))
    trace = gpuguide.artifact_path("profiler_trace_training_step.json.gz")
    trace.write_bytes(gzip.compress(plain.read_bytes()))
    print(f"trace: {gpuguide.format_bytes(plain.stat().st_size)} of JSON, "
          f"{gpuguide.format_bytes(trace.stat().st_size)} gzipped")  # fmt: skip
gpuguide.download_link(trace, "profiler trace (gzipped JSON, for ui.perfetto.dev)")

# %%
# The fix, measured
# -----------------
# The batched version computes the same numbers with one ``mean`` and one ``std``
# over the whole batch; its steps ran above, interleaved with the per-sample ones.
# The gain is what the loop's fixed costs were worth: large on a GPU, where a few
# hundred launches take far longer than their kernels; smaller on a CPU, where an
# operator costs a few microseconds and the matrix products weigh more.
print(gpuguide.table(
    {"normalisation": label, "step": t["step"], "normalise phase": t["normalise"]}
    for label, t in timed.items()
))  # fmt: skip
for label, t in timed.items():  # the step times of the table, recorded
    gpuguide.record("step time", t["step"], size=f"batch {batch}x{features}",
                    normalisation=label)  # fmt: skip
batching = gpuguide.compare(timed["batched"]["step"], slow["step"])
print(f"normalisation: {batching}")
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax, {"per-sample loop": slow["step"], "batched": timed["batched"]["step"]},
    ylabel="training step (ms)", title=f"Batching the normalisation: {batching.short}",
)  # fmt: skip
plt.show()
