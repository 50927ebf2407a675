"""
Feeding the model: DataLoader workers
=====================================

A training step is only as fast as the input pipeline hands it batches. When each
sample costs CPU time (reading, decoding, augmenting), a ``DataLoader`` working in
the main process makes the model wait for every batch; worker processes prepare the
next batches while the model trains on this one.

This page trains a small model on samples that each cost a fraction of a millisecond
of CPU work. It measures whether loading or the model is the slower side, then times
an epoch with more and more workers, and how much of the loading they hide.

See also the concept page :doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# On a CPU the model gets one thread, the other cores are left to the workers. Worker
# counts stop at the usable cores; with a GPU, whose host takes seconds to start a
# worker, the sweep runs two workers and the most, over 6 timed epochs, not 10.
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

import gpuguide
from gpuguide import benchmark, compare, interleave, plot_bars, report
from gpuguide.chapters.data import SyntheticImages, spawn_safe

page = gpuguide.setup()
device, cores = page.device, gpuguide.usable_cpus()
if device.type == "cpu":
    torch.set_num_threads(1)  # the other cores are the workers'

worker_counts = [n for n in (1, 2, 4, 8) if n <= cores][: 1 if page.small else 4]
if page.cuda and len(worker_counts) > 2:
    worker_counts = [2, worker_counts[-1]]
rounds, reps = (3, 6) if page.cuda else (5, 10)  # turns; timed epochs per variant
timing = {"device": device, "warmup_ms": 1, "rounds": rounds, "min_reps": reps}
# An epoch: a batch of 64 for every worker, at least 8 batches at full size on a CPU.
SAMPLES = 64 * max(4 if page.small or page.cuda else 8, *worker_counts)
too_few = f"{cores} cores: too few for workers beside the model" if cores < 4 else None

# %%
# A dataset that costs CPU time per sample
# ----------------------------------------
# :class:`gpuguide.chapters.data.SyntheticImages` builds sample ``i`` the same way in
# every process: a random image, ``work`` smoothing passes standing in for decoding,
# a random crop and flip. It lives in an importable module, for the reason given
# below. An epoch is the first ``SAMPLES`` samples.
dataset = SyntheticImages(2**20, shape=(3, 32, 32), work=2)
epoch_data = Subset(dataset, range(SAMPLES))
report("one sample", benchmark(dataset.__getitem__, args=(0,), label="one sample"))

# %%
# The model, one training step and one epoch
# ------------------------------------------
# A two-layer MLP. A timed call is one epoch: every batch of the loader through a
# training step. Every epoch runs to its end: a worker shut down while sending a
# batch, when its loader is deleted, can abort (``SIGABRT``).
model = nn.Sequential(nn.Flatten(), nn.Linear(3072, 512), nn.ReLU(), nn.Linear(512, 10))
model.to(device)  # 3072 = 3 x 32 x 32 inputs
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = nn.CrossEntropyLoss()


def train_step(images, labels):
    images = images.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    loss = loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def epoch(loader, step=train_step):
    with spawn_safe():  # where a loader starts its workers: see the next cell
        batches = iter(loader)
    for images, labels in batches:
        step(images, labels)


# %%
# Workers are spawned processes
# -----------------------------
# ``multiprocessing_context="spawn"`` starts each worker as a fresh interpreter (the
# default on Windows and macOS, and safe where the parent runs threads, as torch
# does). A worker unpickles the dataset, which imports its class by name, so the class
# must live in an importable module, not in a notebook or this page. A spawned child
# also re-runs the parent's main script, hence ``if __name__ == "__main__":`` in
# scripts; this page, without one, relies on ``spawn_safe``. Workers start at
# ``iter(loader)``. The baseline makes its batches in the main process.
baseline = DataLoader(epoch_data, batch_size=64)
loaders = {"baseline": baseline}
for n in worker_counts:
    loaders[f"num_workers={n}"] = DataLoader(
        epoch_data,
        batch_size=64,
        num_workers=n,
        multiprocessing_context="spawn",
        persistent_workers=True,
    )

# %%
# Loader-bound or model-bound?
# ----------------------------
# Loading alone runs an epoch of the baseline loader (no workers) without the model;
# the model alone trains on the same batches made beforehand; the two take turns.
# When loading is slower (the loop is *loader-bound*), workers can speed up an epoch
# up to that ratio, or the number of free cores if smaller. When the model is slower,
# workers can at best hide the loading behind it.
load_only = partial(epoch, baseline, step=lambda images, labels: None)
batches = list(baseline)  # the same batches, made once
load, compute = interleave(
    {"loading alone": load_only, "model alone": partial(epoch, batches)}, **timing
).values()
# Loading alone runs on the host's CPU, also on a GPU machine (host=True says so).
report("loading alone", load.rate(SAMPLES, "samples/s"), size=SAMPLES, host=True)
report("model alone", compute.rate(SAMPLES, "samples/s"), size=SAMPLES)
bound = compare(compute, load)
print(f"per epoch of {SAMPLES} samples: {bound}")
not_bound = None if bound.verdict == "faster" else "the loop is not loader-bound here"

# %%
# More workers
# ------------
# The other loaders hand the work to 1, 2, 4 or 8 workers (up to the cores; with a
# GPU, 2 and the most). The workers start in one untimed epoch, then the loaders
# take turns. On a CPU the workers and the model share the cores: a worker that
# loads takes a core from the model.
for loader in loaders.values():
    epoch(loader)  # starts the workers, untimed
results = interleave(
    {k: partial(epoch, loader) for k, loader in loaders.items()}, **timing
)
# The fastest worker setting by its upper quartile: a steady one over a noisy one.
fastest = min(list(results)[1:], key=lambda k: results[k].q75_s)
gain = compare(results[fastest], results["baseline"])
report("workers' best speed-up", gain, size=SAMPLES)
gpuguide.claim(
    "when the loop is loader-bound, workers make an epoch faster than the baseline",
    gain,
    verdict="faster",
    unless=too_few or not_bound,
)

# %%
# How much loading the workers hide
# ---------------------------------
# In the main process loading and the model add up; with workers the epoch ideally
# costs only the larger of the two, or less when the loading is spread over several
# workers. Each bar is a median with its IQR, labelled with its ratio to the baseline.
serial = load.median_s + compute.median_s
spread = (load.q25_s + compute.q25_s, load.q75_s + compute.q75_s)
alone, overlapped = results["baseline"], results[fastest]
gpuguide.claim(
    "in the main process, an epoch costs loading plus the model, within 25%",
    alone.median_s / serial,
    spread=(alone.q25_s / spread[1], alone.q75_s / spread[0]),
    at_least=0.8,
    at_most=1.25,
    timed=True,
)
hidden = min(max((serial - overlapped.median_s) / load.median_s, 0.0), 1.0)
noisy = any(m.is_noisy for m in (load, compute, overlapped))
gpuguide.claim(
    "with workers, at least half of the loading time no longer adds to the epoch",
    hidden,
    at_least=0.5,
    timed=True,
    unless=too_few or ("a side is NOISY here" if noisy else None),
)
title = f"{fastest}: {gain.short} the baseline, {hidden:.0%} of the loading hidden"
fig, ax = plt.subplots()
bars = {"loading alone": load, "model alone": compute, **results}
ylabel = f"time per epoch of {SAMPLES} samples (ms)"
plot_bars(ax, bars, ylabel=ylabel, baseline="baseline", title=title)
plt.show()

# %%
# What to take away
# -----------------
# Measure the loader alone first: if it delivers fewer samples per second than the
# model consumes, workers help, up to the number of free cores.
gpuguide.takeaway()
