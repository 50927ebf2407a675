"""
Feeding the model: DataLoader workers, batch size and overlap
=============================================================

A training step is only as fast as the input pipeline hands it batches. When each
sample costs CPU time (reading, decoding, augmenting), a ``DataLoader`` working in
the main process makes the model wait for every batch; worker processes prepare the
next batches while the model trains on this one.

This page trains a small model on synthetic samples that each cost a fraction of a
millisecond of CPU work. It first measures whether loading or the model is the slower
side, which decides what workers can do, then times an epoch while changing one
DataLoader setting at a time: ``num_workers``, ``batch_size``, ``pin_memory``,
``prefetch_factor``, ``persistent_workers``. Every verdict is computed with the
spread of the measurements.

See also the concept page
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# On a CPU-only machine the model and the loader's workers share the same cores,
# so the model gets one thread here and the other cores are left to the workers.
# Worker counts stop at the number of cores this process may use.
from collections import namedtuple
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.data import DataLoader, Subset

import gpuguide
from gpuguide.chapters.data import SyntheticImages
from gpuguide.chapters.spawning import spawn_safe
from gpuguide.tables import format_cell

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
cores = gpuguide.usable_cpus()
if device.type == "cpu":
    torch.set_num_threads(1)
    print(f"{cores} usable CPU cores; the model uses 1 thread, workers the others")
worker_counts = [n for n in (1, 2, 4, 8) if n <= cores][: 1 if small else 4]
SAMPLES = 64 * max(4, *worker_counts)  # an epoch: a batch of 64 for every worker

# %%
# A dataset that costs CPU time per sample
# ----------------------------------------
# :class:`gpuguide.chapters.data.SyntheticImages` builds sample ``i`` from a seed: a
# random image, ``work`` smoothing passes standing in for decoding, a random crop and
# flip. It lives in an importable module rather than in this page, for the reason
# given below. An epoch here is the first ``SAMPLES`` samples (a
# :class:`~torch.utils.data.Subset`), at least one batch for every worker.
dataset = SyntheticImages(2**20, shape=(3, 32, 32), work=2)
epoch_data = Subset(dataset, range(SAMPLES))
one_sample = gpuguide.benchmark(dataset.__getitem__, args=(0,), label="one sample")
print(f"one sample: {one_sample}")

# %%
# The model, one training step and one epoch
# ------------------------------------------
# A two-layer MLP. A timed call is one epoch: every batch of the loader, each
# through a training step. Every epoch runs to its end, so that no batch is still on
# its way from a worker when a loader is deleted: a worker shut down in the middle of
# sending a batch can abort (``SIGABRT``) as its interpreter exits, and the loader
# then reports the worker as killed, in the middle of whatever the page does next.
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
    with spawn_safe():  # where a loader starts its workers: see the next cell
        batches = iter(loader)
    for images, labels in batches:
        step(images, labels)


def no_model(images, labels):
    pass


# %%
# Workers are spawned processes
# -----------------------------
# ``multiprocessing_context="spawn"`` starts each worker as a fresh interpreter (the
# default on Windows and macOS, and safe where the parent runs threads, as torch
# does). A worker unpickles the dataset, which imports its class by name, so the
# class must live in an importable module, not in a notebook or in this page. A
# spawned child also re-runs the parent's main script first, which is why scripts
# put their code under ``if __name__ == "__main__":``. This page has no such guard:
# run as ``python plot_dataloader.py`` it relies on
# :func:`~gpuguide.chapters.spawning.spawn_safe` to stop the re-run; the docs build
# runs it with a stand-in ``__main__`` that has no file, where ``spawn_safe()``
# changes nothing. Workers start at ``iter(loader)`` and stop when their loader is
# deleted.
BASELINE = {"batch_size": 64, "num_workers": 0, "pin_memory": False}


def make_loader(data=epoch_data, **change):
    settings = {**BASELINE, **change}
    if settings["num_workers"] > 0:
        settings["multiprocessing_context"] = "spawn"
        settings.setdefault("persistent_workers", True)
    return DataLoader(data, **settings)


def timed(variants):
    """Time each variant's epochs, taking turns for five rounds."""
    return gpuguide.interleave(variants, device=device, warmup_ms=1, min_reps=10)


# %%
# Loader-bound or model-bound?
# ----------------------------
# Loading alone runs an epoch of the baseline loader (no workers) without the
# model; the model alone trains on the same batches made beforehand. Whichever is
# slower decides what workers can do. When loading is the slower side (the loop is
# *loader-bound*), workers that load in parallel can speed up an epoch up to that
# ratio, or to the number of free cores if that is smaller. When the model is slower,
# workers can at best hide the loading behind it. Both rates are recorded, in samples
# per second with the range their quartiles give.
baseline = make_loader()
premade = list(baseline)  # the same batches, made once


def model_alone():
    for images, labels in premade:
        train_step(images, labels)


load, compute = timed(
    {"loading alone": partial(epoch, baseline, no_model), "model alone": model_alone}
).values()
bound = gpuguide.compare(compute, load)
regime = {
    "faster": "loader-bound",
    "slower": "model-bound",
}.get(bound.verdict, "neither side measurably slower")
print(
    f"per epoch of {SAMPLES} samples: loading {format_cell(load)}, the model "
    f"{format_cell(compute)}: {regime} ({bound})"
)
for side, m in {"loading alone": load, "model alone": compute}.items():
    gpuguide.record(
        side, SAMPLES / m.median_s, unit="samples/s", size=SAMPLES,
        spread=(SAMPLES / m.q75_s, SAMPLES / m.q25_s),
    )  # fmt: skip

# %%
# Starting workers: once, or every epoch
# --------------------------------------
# Without ``persistent_workers`` a loader starts new workers at every epoch, and a
# spawned worker imports torch before its first sample (typically one to a few
# seconds). The two loaders below differ only in ``persistent_workers``; each epoch
# is a single batch, after one untimed epoch (which starts the persistent worker).
# The throughputs further down leave start-up out.
first_batch = {}
for name, persistent in (("new", False), ("persistent", True)):
    one_batch = Subset(dataset, range(64))
    loader = make_loader(one_batch, num_workers=1, persistent_workers=persistent)
    first_batch[name] = gpuguide.benchmark(
        partial(epoch, loader, no_model),
        label=f"one-batch epoch, {name} worker",
        warmup_ms=1.0,
        min_reps=1,
        max_reps=1,
    )
    del loader
fresh, kept = first_batch["new"].median_s, first_batch["persistent"].median_s
print(
    f"a one-batch epoch: {gpuguide.format_time(fresh)} with a new worker, "
    f"{gpuguide.format_time(kept)} with a persistent one: "
    f"{gpuguide.format_time(fresh - kept)} of start-up saved per epoch"
)

# %%
# One setting at a time
# ---------------------
# The baseline prepares batches of 64 in the main process. Each other loader changes
# one thing: the number of workers, the batch size, pinned host memory (CUDA only),
# or how many batches each worker prepares ahead (``prefetch_factor``, which exists
# only with workers, so its loader keeps one worker and is compared with
# ``num_workers=1``). A popular text switched on workers and pinned memory together,
# so its timing cannot tell which one helped; here each is measured alone. The
# workers of every loader start together in one untimed epoch; then the loaders
# take turns, so that a drift of the machine falls on all of them alike.
#
# Expect, when the loop is loader-bound, throughput to grow with the workers until
# the cores or the loading-to-model ratio run out, and the other settings to matter
# little: a larger batch saves only the work done once per batch (here half the
# optimizer steps), pinned memory speeds a copy that is a small part of the step,
# and one worker is busy all the time whatever it prefetches. When it is not
# loader-bound, expect the workers to gain at most the loading time that they hide.
loaders = {"baseline": baseline}
for n in worker_counts:
    loaders[f"num_workers={n}"] = make_loader(num_workers=n)
loaders["batch_size=128"] = make_loader(batch_size=128)
if device.type == "cuda":
    loaders["pin_memory=True"] = make_loader(pin_memory=True)
else:
    print(
        "pin_memory=True pins host memory for faster copies to a GPU; it needs an "
        "accelerator, so this CPU run does not request it."
    )
if not small:
    loaders["1 worker, prefetch 4"] = make_loader(num_workers=1, prefetch_factor=4)
with spawn_safe():
    started = [iter(loader) for loader in loaders.values()]  # all workers at once
for batches in started:
    for _ in batches:  # the rest of this untimed epoch
        pass
del started
results = timed({label: partial(epoch, loader) for label, loader in loaders.items()})


Row = namedtuple("Row", "setting epoch throughput speed_up against")
rows = []
for label, m in results.items():
    ref = "num_workers=1" if "prefetch" in label else "baseline"
    speed = gpuguide.format_rate(SAMPLES / m.median_s, "samples/s")
    if label == ref:
        rows.append(Row(label, m, speed, None, None))
    else:
        rows.append(Row(label, m, speed, gpuguide.compare(m, results[ref]).short, ref))
print(gpuguide.table(rows, title=f"one epoch of {SAMPLES} samples"))
fastest = min(
    (k for k in results if k.startswith("num_workers")),
    key=lambda k: results[k].median_s,
)
gain = gpuguide.compare(results[fastest], results["baseline"])
print(f"workers, at their best: {gain}")
gpuguide.record(
    "workers' best speed-up", gain.speedup, unit="x", spread=(gain.low, gain.high),
    size=SAMPLES,
)  # fmt: skip

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    results,
    ylabel="throughput (samples/s)",
    title=f"{fastest}: {gpuguide.compare(results[fastest], results['baseline']).short} the baseline",
    value=lambda seconds: SAMPLES / seconds,
)
plt.show()
del loaders  # the workers are idle: every epoch ran to its end

# %%
# How much loading the workers hide
# ---------------------------------
# In the main process loading and the model add up; with workers the epoch ideally
# costs only the larger of the two, or less when the loading itself is spread over
# several workers. Printed: the share of the loading time that no longer adds to the
# epoch, with the fastest number of workers.
serial = load.median_s + compute.median_s
overlapped = results[fastest]
hidden = min(max((serial - overlapped.median_s) / load.median_s, 0.0), 1.0)
noisy = any(m.is_noisy for m in (load, compute, overlapped))
times = {
    "loading alone": load,
    "model alone": compute,
    "both, baseline": results["baseline"],
    f"both, {fastest}": overlapped,
}
print(gpuguide.table([{"run": k, f"epoch of {SAMPLES}": m} for k, m in times.items()]))
print(
    f"loading + model = {gpuguide.format_time(serial)}; with {fastest} "
    f"{hidden:.0%} of the loading time no longer adds to the epoch"
    f"{' (NOISY)' if noisy else ''}"
)
if device.type == "cpu":
    print(
        f"On a CPU the workers and the model share the {cores} cores: a worker that "
        "loads takes a core from the model."
    )

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    times,
    ylabel=f"time per epoch of {SAMPLES} samples (ms)",
    title=f"With {fastest}, {hidden:.0%} of the loading time no longer adds up",
    baseline="both, baseline",
)
plt.show()

# %%
# What to take away
# -----------------
# Measure the loader alone first: if it delivers fewer samples per second than the
# model consumes, workers help, up to the number of free cores. Larger batches cut
# per-batch overhead. Pinned memory speeds the copy to a GPU, which matters once
# loading keeps up. Keep spawned workers persistent, and let an epoch finish (or
# run out its batches) before you drop its loader.
