"""
Profiling a training step
=========================

A timer tells you *how long* a training step takes; a profiler tells you *where* the
time goes. This page profiles a training step with :mod:`torch.profiler`, then times
its phases where the step runs. The profile points at a batch normalised one sample
at a time in a Python loop; the page fixes it and measures the step before and after.

See also :doc:`the roofline and its three regimes </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# A small MLP classifier on random data; the step standardises every sample (zero
# mean, unit variance) before the forward pass. Torch runs one CPU thread, so that
# other processes take no core from the timings.
import gc
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.profiler import profile, record_function, schedule

import gpuguide
from gpuguide import Measurement, claim, compare, plot_bars, report, table
from gpuguide.chapters.timeline import Marks

page = gpuguide.setup()
device = page.device
torch.set_num_threads(1)  # on a GPU's host, the thread only launches kernels
batch, features, hidden = (64, 256, 512) if page.small else (128, 512, 1024)
if not page.cuda and not page.small:  # a CPU's matmuls weigh more: a smaller MLP
    batch, features, hidden = 256, 256, 256
size = f"batch {batch}x{features}"
layers = [nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(hidden, 10)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
raw = torch.randn(batch, features, device=device) * 3 + 1
labels = torch.randint(0, 10, (batch,), device=device)  # 10 classes


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
# (``warmup``: the profiler's start-up), then records three (``active``), once
# (``acc_events=True`` keeps torch 2.11 from warning that a new cycle drops the
# events). ``prof.step()`` ends each step after a synchronization.
wait, warmup, active = 1, 1, 3
every = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
with profile(schedule=every, acc_events=True) as prof:  # CUDA's kernels too, if any
    for _ in range(wait + warmup + active):
        train_step(normalise_per_sample)
        getattr(torch, device.type).synchronize()  # torch.cpu's does nothing
        prof.step()

# %%
# The top operators, and the backward pass's thread
# -------------------------------------------------
# ``key_averages()`` sums the recorded events by name; sorted by self CPU time (in
# the operator itself, not in what it calls; on a GPU, the host's cost to launch
# it), many calls of small operators near the top are overhead, not arithmetic.
#
# A range belongs to the thread that opened it, and autograd decides which thread
# runs the backward pass: for CPU tensors the thread that called ``backward()``; for
# CUDA tensors a thread of its own per device, so the main thread's "backward" range
# holds none of the pass's operators.
averages = prof.key_averages()
print(averages.table(sort_by="self_cpu_time_total", row_limit=12))
means = sum(e.count for e in averages if e.key == "aten::mean") // active
claim(
    "the per-sample loop calls aten::mean at least once per sample and step",
    holds=means >= batch,
    measured=f"{means} calls per step for a batch of {batch}",
)
main_thread = {e.thread for e in prof.events() if e.name == "backward"}
ops = [e.thread in main_thread for e in prof.events() if "autograd::eng" in e.name]
claim(
    "autograd runs the backward pass's operators on "
    + ("a thread of its own" if page.cuda else "the thread that called backward()"),
    holds=bool(ops) and sum(ops) == (0 if page.cuda else len(ops)),
    measured=f"{sum(ops)} of {len(ops)} on the thread of the 'backward' range",
)


# %%
# Time per phase, with events on the stream
# -----------------------------------------
# Time each phase where the step runs: an event recorded on the device's stream
# completes when the work queued before it does, whichever thread queued it, so two
# events bracket a phase's time on the GPU, waits for the host included (a CPU
# reads its clock). ``Marks.span`` from chapter 11 does that as the step's
# ``phase``. The two steps take turns, without the profiler, after two warm-ups.
variants = {"per sample": normalise_per_sample, "batched": normalise_batched}
marks = Marks(device)
gc.disable()  # a collection inside a phase would land in its time
for i in range(12 if page.small else 102):
    for label, normalise in variants.items():
        train_step(normalise, partial(marks.span, label if i >= 2 else "warm-up"))
gc.enable()
timed = {}
for label in variants:  # spans() waits for the marked work; a step's come in order
    runs = [s.duration_s for s in marks.spans() if s.lane == label]
    secs = {n: runs[i :: len(phases)] for i, n in enumerate(phases)}
    secs["step"] = [sum(phase_s) for phase_s in zip(*secs.values(), strict=True)]
    timed[label] = {n: Measurement(n, t, str(device), "marks") for n, t in secs.items()}
    report("step time", timed[label]["step"], size=size, normalisation=label)
print(table({"normalisation": label, **t} for label, t in timed.items()))
slow, fast = timed["per sample"], timed["batched"]
share = {n: f"{sum(slow[n].times_s) / sum(slow['step'].times_s):.0%}" for n in phases}
claim(
    "normalise takes the largest share of the per-sample step",
    holds=max(phases, key=lambda n: sum(slow[n].times_s)) == "normalise",
    measured=", ".join(f"{n} {share[n]}" for n in phases),
    timed=True,
)

# %%
# The trace, for Perfetto
# -----------------------
# ``export_chrome_trace`` writes every recorded event with its start and duration
# (gzipped, for a name ending in ``.gz``). Open it at https://ui.perfetto.dev: each
# step is a row of ranges, the per-sample loop a dense comb of tiny operators under
# ``normalise``, and on a GPU the backward pass's operators a thread of their own.
trace = gpuguide.artifact_path("profiler_trace_training_step.json.gz")
prof.export_chrome_trace(str(trace))
gpuguide.download_link(trace, "profiler trace (gzipped JSON, for ui.perfetto.dev)")

# %%
# The fix, measured
# -----------------
# The gain of the batched version is what the loop's fixed costs were worth beside
# the rest of the step: on a GPU, a few hundred launches take far longer than their
# kernels; on a CPU, an operator costs a few microseconds and the matrix products
# weigh more (hence the smaller MLP there).
batching = compare(fast["step"], slow["step"])
normalising = compare(fast["normalise"], slow["normalise"])
claim("the batched normalisation is at least 3x as fast", normalising, at_least=3)
claim("batching it makes the step at least 1.5x as fast", batching, at_least=1.5)
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
