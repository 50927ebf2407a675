"""
DataLoader settings, one at a time
==================================

Worker processes are the ``DataLoader`` setting that matters most when loading is the
slower side (previous page). This page measures the others, each changed alone
against a baseline: ``persistent_workers`` (start the workers once, not every
epoch), ``batch_size``, ``pin_memory`` (page-locked batches, for faster copies to a
GPU: measured only where there is one) and ``prefetch_factor`` (how many batches
each worker prepares ahead). A popular
text switched on workers and pinned memory together, so its timing cannot tell which
one helped; here each is measured alone, with the spread of its measurements.

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
from gpuguide import benchmark, compare, format_time, interleave, plot_bars, report
from gpuguide.chapters.data import SyntheticImages
from gpuguide.chapters.spawning import spawn_safe

page = gpuguide.setup()
device, cores = page.device, gpuguide.usable_cpus()
if device.type == "cpu":
    torch.set_num_threads(1)
    print(f"{cores} usable CPU cores; the model uses 1 thread, workers the others")
SAMPLES = 128 if page.cuda else 512 if cores >= 8 and not page.small else 256
rounds, reps = (3, 6) if page.cuda else (5, 10)  # turns; timed epochs per variant
dataset = SyntheticImages(2**20, shape=(3, 32, 32), work=2)

# %%
# The training step, one epoch and a loader
# -----------------------------------------
# A timed call is one epoch: every batch of the loader through a training step, run
# to its end, so that no batch is on its way from a worker when a loader is deleted.
# Workers are spawned (``multiprocessing_context="spawn"``): each imports the dataset
# by name, and ``spawn_safe`` keeps it from re-running this page. A loader changes
# one setting of the baseline. Workers start at ``iter(loader)``: ``start_workers``
# starts those of several loaders at once, and ``finish`` runs out their epochs.
model = nn.Sequential(
    nn.Flatten(), nn.Linear(3 * 32 * 32, 512), nn.ReLU(), nn.Linear(512, 10)
).to(device)
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
    with spawn_safe():  # where a loader starts its workers
        batches = iter(loader)
    for images, labels in batches:
        step(images, labels)


def make_loader(samples=SAMPLES, **change):
    settings = {"batch_size": 64, "num_workers": 0, "pin_memory": False, **change}
    if settings["num_workers"] > 0:
        settings["multiprocessing_context"] = "spawn"
        settings.setdefault("persistent_workers", True)
    return DataLoader(Subset(dataset, range(samples)), **settings)


def start_workers(loaders):
    with spawn_safe():
        return [iter(loader) for loader in loaders]


def finish(started):
    for batches in started:
        for _ in batches:  # the rest of this untimed epoch
            pass


def skip(images, labels):  # a step that does nothing: loading alone
    pass


# The loaders compared further down, each with one setting changed.
loaders = {"baseline": make_loader(), "batch_size=128": make_loader(batch_size=128)}
if page.needs_cuda("pin_memory=True (page-locked batches for copies to a GPU)"):
    loaders["pin_memory=True"] = make_loader(pin_memory=True)
loaders["num_workers=1"] = make_loader(num_workers=1)
if not page.small:
    loaders["1 worker, prefetch 4"] = make_loader(num_workers=1, prefetch_factor=4)


# %%
# Starting workers: once, or every epoch
# --------------------------------------
# Without ``persistent_workers`` a loader starts new workers at every epoch, and a
# spawned worker imports torch before its first sample (typically one to a few
# seconds). The two loaders below differ only in ``persistent_workers``; each epoch
# is a single batch, after one untimed epoch (which starts the persistent worker).
# With a GPU, whose host takes seconds to start a worker, the persistent workers of
# this page start in the background while the new worker's untimed epoch runs.
one_batch = {
    "new": make_loader(64, num_workers=1, persistent_workers=False),
    "persistent": make_loader(64, num_workers=1),
}
early = [x for x in (one_batch["persistent"], *loaders.values()) if x.num_workers]
started = start_workers(early if page.cuda else [])
first_batch = {}
for name, loader in one_batch.items():
    first_batch[name] = benchmark(
        partial(epoch, loader, step=skip),
        label=f"one-batch epoch, {name} worker",
        warmup_ms=1.0,
        min_reps=1,
        max_reps=1,
    )
    finish(started)  # before the persistent worker is timed
    started = []
del one_batch, loader
fresh, kept = first_batch["new"].median_s, first_batch["persistent"].median_s
saved = fresh - kept  # measured on the host's CPU, also with a GPU: host=True
report("start-up saved per epoch by persistent workers", saved, unit="s", host=True)
print(
    f"(a one-batch epoch: {format_time(fresh)} with a new worker, "
    f"{format_time(kept)} with a persistent one)"
)
gpuguide.claim(
    "a one-batch epoch with a new worker takes at least 10x one with a persistent "
    "worker",
    compare(first_batch["persistent"], first_batch["new"]),
    at_least=10,
)

# %%
# One setting at a time
# ---------------------
# The baseline prepares batches of 64 in the main process. A larger batch saves only
# the work done once per batch (here half the optimizer steps). Pinned memory speeds
# the copy to the GPU, a small part of this step, and needs an accelerator.
# ``prefetch_factor`` exists only with workers, so its loader keeps one worker and is
# compared with ``num_workers=1``: one worker busy all the time gains nothing from
# preparing more batches ahead. Expect each of them to matter little: the claims
# below bound each. The workers of every loader start together in one
# untimed epoch (with a GPU, they started above); then the loaders take turns, so a
# drift of the machine falls on all.
finish(start_workers(loaders.values()))  # all workers at once
results = interleave(
    {label: partial(epoch, loader) for label, loader in loaders.items()},
    device=device,
    warmup_ms=1,
    rounds=rounds,
    min_reps=reps,
)
gains = {}
for label, against in (
    ("batch_size=128", "baseline"),
    ("pin_memory=True", "baseline"),
    ("1 worker, prefetch 4", "num_workers=1"),
):
    if label in results:
        gains[label] = compare(results[label], results[against])
        report(f"speed-up of {label}", gains[label], size=SAMPLES)
gpuguide.claim(
    "batches of 128 instead of 64 make an epoch at most 1.5x faster",
    gains["batch_size=128"],
    at_most=1.5,
)
gpuguide.claim(
    "pin_memory=True makes an epoch at most 1.25x faster",
    gains.get("pin_memory=True"),
    at_most=1.25,
    on="cuda",
)
gpuguide.claim(
    "one busy worker is not faster with prefetch_factor=4",
    gains.get("1 worker, prefetch 4"),
    verdict="not faster",
    unless="small mode: no prefetch loader" if page.small else None,
)

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
# sometimes idle. Let an epoch finish (or run out its batches) before you drop its
# loader.
gpuguide.takeaway()
