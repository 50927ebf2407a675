"""
Profiling a training step
=========================

A timer tells you *how long* a training step takes; a profiler tells you *where* the
time goes. This page profiles a real training step (the model's parameters require
grad, so ``backward()`` has work to do) with :mod:`torch.profiler`: a schedule that
skips the first steps and warms up before it records, named ``record_function``
ranges for the phases of the step, and the top operators by time as a table.

The profile points at one bottleneck: the step normalises its batch one sample at a
time in a Python loop. The page fixes it, measures the step before and after the fix,
and saves the profiler trace so you can open it in Perfetto.
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
# The step, with named ranges
# ---------------------------
# ``record_function`` puts a named range around each phase, so the profile groups
# operators by what the step was doing. The normalisation is written the slow way: one
# sample at a time. Each sample costs a handful of small operators, and each of them
# pays the dispatcher's fixed cost (and, on a GPU, a kernel launch).


def normalise_per_sample(x):
    rows = [(row - row.mean()) / (row.std() + 1e-5) for row in x]
    return torch.stack(rows)


def normalise_batched(x):
    mean = x.mean(dim=1, keepdim=True)
    std = x.std(dim=1, keepdim=True)
    return (x - mean) / (std + 1e-5)


def train_step(normalise):
    with record_function("normalise"):
        x = normalise(raw)
    with record_function("forward"):
        loss = nn.functional.cross_entropy(model(x), labels)
    with record_function("backward"):
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
    return loss


assert torch.allclose(normalise_per_sample(raw), normalise_batched(raw), atol=1e-5)

# %%
# Recording with a schedule
# -------------------------
# The schedule skips one step (``wait``), runs one step with the profiler on but its
# results thrown away (``warmup``, which absorbs the profiler's own start-up), then
# records three (``active``). ``prof.step()`` marks the end of each training step.
# ``on_trace_ready`` is called once the active steps are done; here it only keeps the
# profile, but it is where ``tensorboard_trace_handler`` would write files.
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
sort_key = "self_device_time_total" if on_cuda else "self_cpu_time_total"
wait, warmup, active = 1, 1, 3


def profile_steps(normalise):
    done = []
    with profile(
        activities=activities,
        schedule=schedule(wait=wait, warmup=warmup, active=active),
        on_trace_ready=done.append,
    ) as prof:
        for _ in range(wait + warmup + active):
            train_step(normalise)
            prof.step()
    return done[0]


slow_profile = profile_steps(normalise_per_sample)

# %%
# The top operators
# -----------------
# ``key_averages()`` sums the recorded events by operator name. Sorted by self time
# (time spent in the operator itself, not in what it calls), the table shows where
# the step spends its time. Look for many calls of small operators near the top:
# that is overhead, not arithmetic.
print(slow_profile.key_averages().table(sort_by=sort_key, row_limit=12))

# %%
# Time per phase
# --------------
# The ``record_function`` ranges appear in the same averages under their names; their
# total time per step shows the phase to fix.
phases = ["normalise", "forward", "backward", "optimizer"]


def phase_ms(prof):
    time_attr = "device_time_total" if on_cuda else "cpu_time_total"
    totals = {e.key: getattr(e, time_attr) for e in prof.key_averages()}
    return {p: totals.get(p, 0.0) / 1e3 / active for p in phases}  # us -> ms/step


slow_phases = phase_ms(slow_profile)
rows = [{"phase": p, "ms per step": f"{ms:.3f}"} for p, ms in slow_phases.items()]
print(gpuguide.table(rows))
worst = max(slow_phases, key=slow_phases.get)
calls = {e.key: e.count for e in slow_profile.key_averages()}
print(f"Largest phase: {worst}; aten::mean ran {calls.get('aten::mean', 0) // active} "
      f"times per step for a batch of {batch}")  # fmt: skip

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    slow_phases,
    ylabel="time per step (ms)",
    title=f"The profile points at '{worst}'",
    baseline="forward",
)
plt.show()

# %%
# The trace, for Perfetto
# -----------------------
# ``export_chrome_trace`` writes every recorded event with its start and duration.
# Open the file at https://ui.perfetto.dev (drag it onto the page) or in
# ``chrome://tracing``: each step is a row of ranges, and the per-sample loop shows
# up as a dense comb of tiny operators under ``normalise``.
# Perfetto also opens the gzipped file, a tenth of the size.
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
# The batched version computes the same numbers with one ``mean`` and one ``std`` over
# the whole batch. Only the normalisation changes between the two timings; each is
# the median over many steps (300 ms of them, three times the default), without the
# profiler (which adds its own overhead).
slow = gpuguide.benchmark(train_step, args=(normalise_per_sample,), label="per sample",
                          device=device, rep_ms=300)  # fmt: skip
fast = gpuguide.benchmark(train_step, args=(normalise_batched,), label="batched",
                          device=device, rep_ms=300)  # fmt: skip
print(slow)
print(fast)
speedup = slow.median_s / fast.median_s
print(f"batched normalisation: the whole step is {gpuguide.format_ratio(speedup)} "
      "faster")  # fmt: skip
fast_phases = phase_ms(profile_steps(normalise_batched))
print(f"normalise phase: {slow_phases['normalise']:.3f} -> "
      f"{fast_phases['normalise']:.3f} ms per step in the profile")  # fmt: skip
if speedup < 1.1:
    print("Here the fix barely changed the step time: the loop's overhead was small "
          "next to the rest of the step on this device.")  # fmt: skip

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {"per-sample loop": slow, "batched": fast},
    ylabel="training step (ms)",
    title=f"Batching the normalisation: step {gpuguide.format_ratio(speedup)} faster",
)
plt.show()
