"""
DataLoader settings, one at a time
==================================

Worker processes are the ``DataLoader`` setting that matters most when loading is the
slower side (previous page). This page measures the others, each changed alone
against a baseline: ``persistent_workers``, ``batch_size``, ``pin_memory`` (on a GPU
only) and ``prefetch_factor``. A popular text switched on workers and pinned memory
together, so its timing cannot tell which one helped; here each is measured alone,
with the spread of its measurements.

See also the concept page :doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# The same small model and synthetic samples as on the previous page: on a CPU the
# model gets one thread and the workers the other cores; an epoch is 256 samples
# (512 where at least 8 cores can run workers, 128 with a GPU), in batches of 64.
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
    torch.set_num_threads(1)
SAMPLES = 128 if page.cuda else 512 if cores >= 8 and not page.small else 256
dataset = SyntheticImages(2**20, shape=(3, 32, 32), work=2)

# %%
# One epoch, and a loader
# -----------------------
# A timed call is one epoch: every batch through a training step, run to its end, so
# that no batch is on its way from a worker when a loader is deleted. Workers are
# spawned: each imports the dataset by name, and ``spawn_safe`` keeps it from
# re-running this page. A loader changes one setting of the baseline.
model = nn.Sequential(
    nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, 10)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def epoch(loader):
    with spawn_safe():  # where a loader starts its workers
        batches = iter(loader)
    for images, labels in batches:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


def make_loader(samples=SAMPLES, **change):
    settings = {"batch_size": 64, "num_workers": 0, "pin_memory": False, **change}
    if settings["num_workers"] > 0:
        settings["multiprocessing_context"] = "spawn"
        settings.setdefault("persistent_workers", True)
    return DataLoader(Subset(dataset, range(samples)), **settings)


# %%
# Starting workers: once, or every epoch
# --------------------------------------
# Without ``persistent_workers`` a loader starts new workers at every epoch, and a
# spawned worker imports torch before its first sample. The two loaders below differ
# only in ``persistent_workers``; each epoch is a single batch, after one untimed
# epoch (which starts the persistent worker).
first_batch = {
    name: benchmark(
        partial(epoch, make_loader(64, num_workers=1, persistent_workers=keep)),
        label=f"one-batch epoch, {name} worker",
        min_reps=1,
        max_reps=1,
    )
    for name, keep in (("new", False), ("persistent", True))
}
saved = first_batch["new"].median_s - first_batch["persistent"].median_s
report("start-up saved per epoch by persistent workers", saved, unit="s", host=True)
gpuguide.claim(
    "a one-batch epoch with a new worker takes at least 10x one with a persistent "
    "worker",
    compare(first_batch["persistent"], first_batch["new"]),
    at_least=10,
)

# %%
# One setting at a time
# ---------------------
# A larger batch saves only the work done once per batch (here half the optimizer
# steps). Pinned memory speeds the copy to the GPU, a small part of this step.
# ``prefetch_factor`` exists only with workers, so its loader is compared with
# ``num_workers=1``: one worker busy all the time gains nothing from preparing more
# batches ahead. The loaders take turns, so a drift of the machine falls on all, and
# the claims bound each setting's effect.
loaders = {"baseline": make_loader(), "batch_size=128": make_loader(batch_size=128)}
if page.needs_cuda("pin_memory=True (page-locked batches for copies to a GPU)"):
    loaders["pin_memory=True"] = make_loader(pin_memory=True)
loaders["num_workers=1"] = make_loader(num_workers=1)
if not page.small:
    loaders["1 worker, prefetch 4"] = make_loader(num_workers=1, prefetch_factor=4)
results = interleave(
    {label: partial(epoch, loader) for label, loader in loaders.items()},
    device=device,
    rounds=3 if page.cuda else 5,
    min_reps=6 if page.cuda else 10,
)
small = "small mode: no prefetch loader" if page.small else None
for label, against, claim, bound in (
    (
        "batch_size=128",
        "baseline",
        "batches of 128 instead of 64 make an epoch at most 1.5x faster",
        {"at_most": 1.5},
    ),
    (
        "pin_memory=True",
        "baseline",
        "pin_memory=True makes an epoch at most 1.25x faster",
        {"at_most": 1.25, "on": "cuda"},
    ),
    (
        "1 worker, prefetch 4",
        "num_workers=1",
        "one busy worker is not faster with prefetch_factor=4",
        {"verdict": "not faster", "unless": small},
    ),
):
    gain = compare(results[label], results[against]) if label in results else None
    if gain is not None:
        report(f"speed-up of {label}", gain, size=SAMPLES)
    gpuguide.claim(claim, gain, **bound)

fig, ax = plt.subplots()
plot_bars(
    ax,
    results,
    ylabel="throughput (samples/s)",
    value=lambda s: SAMPLES / s,
    title=f"One setting at a time: epochs of {SAMPLES} samples",
)
plt.show()
del loaders  # the workers are idle: every epoch ran to its end

# %%
# What to take away
# -----------------
# Keep spawned workers persistent: a new worker pays its start-up at every epoch.
# Larger batches cut per-batch overhead; pinned memory speeds the copy to a GPU,
# which matters once loading keeps up; prefetching more helps only workers that are
# sometimes idle. Let an epoch finish before you drop its loader.
gpuguide.takeaway()
