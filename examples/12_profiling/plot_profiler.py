"""
Profiling a training step
=========================

A timer tells you *how long* a training step takes; a profiler tells you *where* the
time goes. This page profiles a real training step (the model's parameters require
grad, so ``backward()`` has work to do) with :mod:`torch.profiler`: a schedule that
skips the first steps and warms up before it records, the top operators and kernels
as a table, and a trace to open in Perfetto. Then it times the phases of the step
(normalise, forward, backward, optimizer) where the step runs: with events on the
device's stream, which, unlike the profiler's named ranges, also see the backward
pass that autograd runs on a thread of its own.

The profile points at one bottleneck: the step normalises its batch one sample at a
time in a Python loop. The page fixes it and measures the step before and after.

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
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import gpuguide
from gpuguide.chapters.profiling import (
    kernel_time_s,
    operator_table,
    synchronize,
    time_steps,
    torch_messages,
)

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
on_cuda = device.type == "cuda"
small = gpuguide.small_mode()

batch, features, hidden, classes = (64, 256, 512, 10) if small else (128, 512, 1024, 10)
model = nn.Sequential(
    nn.Linear(features, hidden),
    nn.ReLU(),
    nn.Linear(hidden, hidden),
    nn.ReLU(),
    nn.Linear(hidden, classes),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
raw = torch.randn(batch, features, device=device) * 3 + 1
labels = torch.randint(0, classes, (batch,), device=device)
print(f"batch {batch} x {features} features, parameters require grad: "
      f"{all(p.requires_grad for p in model.parameters())}")  # fmt: skip
if not on_cuda:
    print("Device-side (CUDA kernel) times need a GPU; on this CPU the profile "
          "records the operators' CPU time.")  # fmt: skip

# %%
# The step, with named phases
# ---------------------------
# ``record_function`` puts a named range around each phase, so the profile groups
# operators by what the step was doing; given a phase timer (used further down),
# the step marks the same phases for it instead. The normalisation is written the
# slow way: one sample at a time. Each sample costs a handful of small operators,
# and each of them pays the dispatcher's fixed cost (and, on a GPU, a kernel launch).


def normalise_per_sample(x):
    rows = [(row - row.mean()) / (row.std() + 1e-5) for row in x]
    return torch.stack(rows)


def normalise_batched(x):
    mean = x.mean(dim=1, keepdim=True)
    std = x.std(dim=1, keepdim=True)
    return (x - mean) / (std + 1e-5)


def train_step(normalise, phases=None):
    mark = record_function if phases is None else phases.phase
    with mark("normalise"):
        x = normalise(raw)
    with mark("forward"):
        loss = nn.functional.cross_entropy(model(x), labels)
    with mark("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with mark("optimizer"):
        optimizer.step()


assert torch.allclose(normalise_per_sample(raw), normalise_batched(raw), atol=1e-5)

# %%
# Recording with a schedule
# -------------------------
# The schedule skips one step (``wait``), runs one step with the profiler on but its
# results thrown away (``warmup``, which absorbs the profiler's own start-up), then
# records three (``active``), once (``repeat=1``: by default the cycle repeats, and
# each new cycle drops the last one's events unless ``acc_events=True``, set here only
# because torch 2.11 warns about that drop even for a single cycle). ``prof.step()``
# marks the end of each step; the loop synchronizes first, so every recorded step
# holds its own kernels and the profiler starts and stops with none in flight.
# ``on_trace_ready`` gets the profile when the active steps are done;
# ``tensorboard_trace_handler`` would write files there instead.
#
# The page profiles once, with no option it does not use (``record_shapes``,
# ``profile_memory``, ``with_stack``): the profiler is native code (Kineto, on
# NVIDIA's CUPTI), and an earlier version of this page once died in its first
# profiling session with a segmentation fault on an H100, while other scripts that
# also profile ran beside it. The cause is not confirmed; fewer options and one
# session per process give native code the least to go wrong.
# What torch prints meanwhile (warnings, Kineto's log lines) is collected.
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
sort_key = "self_device_time_total" if on_cuda else "self_cpu_time_total"
wait, warmup, active = 1, 1, 3


def profile_steps(normalise):
    done = []
    with profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        acc_events=True,
        on_trace_ready=done.append,
    ) as prof:
        for _ in range(wait + warmup + active):
            train_step(normalise)
            synchronize(device)
            prof.step()
    return done[0]


with torch_messages() as said:
    slow_profile = profile_steps(normalise_per_sample)
if said.summary():
    print(said.summary())

# %%
# The top operators
# -----------------
# ``key_averages()`` sums the recorded events by name. Sorted by self time (time spent
# in the operator itself, not in what it calls), the table shows where the step
# spends its time. Look for many calls of small operators near the top: that is
# overhead, not arithmetic. On a GPU the profiler also gives every
# ``record_function`` range a row on the device, spanning from the range's first
# kernel to its last with the idle gaps between them, so its "Self CUDA %" can read
# far above 100%; ``operator_table`` leaves those rows out.
print(operator_table(slow_profile, sort_by=sort_key, row_limit=12))
calls = {e.key: e.count for e in slow_profile.key_averages()}
print(f"aten::mean ran {calls.get('aten::mean', 0) // active} times per step "
      f"for a batch of {batch}")  # fmt: skip
kernels_s = kernel_time_s(slow_profile) / active
if on_cuda and kernels_s == 0:
    print("The profile holds no CUDA kernels: CUPTI, which the profiler reads them "
          "from, was not available to it.")  # fmt: skip
elif on_cuda:
    print(f"kernels: {gpuguide.format_time(kernels_s)} of GPU time per step "
          "(the sum of their durations)")  # fmt: skip

# %%
# Time per phase
# --------------
# A ``record_function`` range times the thread that opened it. Autograd runs the
# backward pass on a thread of its own, so a "backward" range on the main thread
# holds none of its kernels; and on a GPU a range's device row includes the time the
# GPU sat idle between the range's kernels. To learn what each phase costs the step,
# time it where the step runs: with events on the device's stream before and after
# each phase and around the whole step (on a CPU, a host clock around work that is
# done when its call returns). A phase's time then includes the time the GPU waited
# for the host to launch its kernels, and the phases should add up to the step.
#
# ``time_steps`` runs the per-sample step and the batched one (the fix, below) in
# interleaved rounds, without the profiler, and reports the median of each phase
# with its spread.
timed = time_steps(
    {
        "per sample": lambda timer: train_step(normalise_per_sample, timer),
        "batched": lambda timer: train_step(normalise_batched, timer),
    },
    steps=10 if small else 30,
    device=device,
)
slow = timed["per sample"]
print(gpuguide.table(slow.rows()))
print(slow.check())
if on_cuda and kernels_s >= slow.step.q25_s:
    print("The kernels fill the step: on this GPU the step is bound by the GPU.")
elif on_cuda:
    print(f"Of a {gpuguide.format_time(slow.step.median_s)} step, the GPU ran kernels "
          f"for {gpuguide.format_time(kernels_s)} "
          f"({kernels_s / slow.step.median_s:.0%}); the rest of the time it waited "
          "for the host to launch them.")  # fmt: skip

# %%
# On a GPU, expect ``normalise`` to dominate: each of its few hundred small
# operators costs the host more than its kernel costs the GPU. On a CPU, an
# operator's fixed cost is smaller and the matrix products of ``forward`` and
# ``backward`` weigh more, so which phase leads depends on the cores and the batch
# size. The bars show the median with its interquartile range; the title names a
# phase only if it is larger than every other beyond their spreads.
largest = slow.largest()
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {name: slow[name] for name in slow.names},
    ylabel="time per step (ms)",
    title=f"'{largest}' is the largest phase" if largest else "No phase clearly leads",
    baseline="forward",
)
plt.show()

# %%
# The trace, for Perfetto
# -----------------------
# ``export_chrome_trace`` writes every recorded event with its start and duration.
# Open the file at https://ui.perfetto.dev (drag it onto the page) or in
# ``chrome://tracing``: each step is a row of ranges, and the per-sample loop shows
# up as a dense comb of tiny operators under ``normalise``. On a GPU, the backward
# pass's operators sit on a thread of their own, below the main thread's
# "backward" range. Perfetto also opens the gzipped file, a tenth of the size.
with tempfile.TemporaryDirectory() as tmp:
    plain = Path(tmp) / "trace.json"
    slow_profile.export_chrome_trace(str(plain))
    trace = gpuguide.artifact_path("profiler_trace_training_step.json.gz")
    trace.write_bytes(gzip.compress(plain.read_bytes()))
    print(f"trace: {gpuguide.format_bytes(plain.stat().st_size)} of JSON, "
          f"{gpuguide.format_bytes(trace.stat().st_size)} gzipped")  # fmt: skip
gpuguide.download_link(
    trace, "profiler trace (gzipped JSON; open it in ui.perfetto.dev)"
)

# %%
# The fix, measured
# -----------------
# The batched version computes the same numbers with one ``mean`` and one ``std``
# over the whole batch. Its steps ran above, interleaved with the per-sample ones, so
# both were measured under the same conditions. The gain is what the loop's fixed
# costs were worth: large on a GPU, where a few hundred launches take far longer
# than their kernels; smaller on a CPU, where an operator costs a few microseconds
# and the matrix products weigh more. The verdict compares the interquartile ranges
# of the two step times, and says so when they overlap.
fast = timed["batched"]
for label, t in timed.items():  # recorded for the last cell
    gpuguide.record(
        "step time", t.step, size=f"batch {batch}x{features}", normalisation=label
    )
print(gpuguide.table([
    {"normalisation": label, "step": t.step, "normalise phase": t["normalise"]}
    for label, t in timed.items()
]))  # fmt: skip
batching = gpuguide.compare(fast.step, slow.step)
if not batching.measurable:
    verdict = "no measurable difference in the step"
elif batching.verdict == "faster":
    verdict = f"the step is {gpuguide.format_ratio(batching.speedup)} faster"
else:
    verdict = f"the step is {gpuguide.format_ratio(1 / batching.speedup)} slower"
print(f"Batched normalisation: {verdict}.")

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {"per-sample loop": slow.step, "batched": fast.step},
    ylabel="training step (ms)",
    title=f"Batching the normalisation: {verdict}",
)
plt.show()
