"""
Feeding the model: DataLoader workers, batch size and overlap
=============================================================

A training step is only as fast as the input pipeline hands it batches. When each
sample costs CPU time (reading, decoding, augmenting), a ``DataLoader`` working in
the main process makes the model wait for every batch; worker processes prepare the
next batches while the model trains on this one.

This page trains a small model on synthetic samples that each cost a fraction of a
millisecond of CPU work, and measures the throughput (samples/s) while changing one
DataLoader setting at a time: ``num_workers``, ``batch_size``, ``pin_memory``,
``prefetch_factor``, ``persistent_workers``. Timing loading alone and compute alone
then shows how much of the loading the workers hid behind the computation.
"""

# %%
# Setup
# -----
# On a CPU-only machine the model and the loader's workers share the same cores,
# so the model gets one thread here and the other cores are left to the workers.
# Worker counts stop at the number of cores this process may use.
import itertools
from collections import namedtuple

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.data import DataLoader

import gpuguide
from gpuguide.chapters.data import SyntheticImages
from gpuguide.chapters.spawning import spawn_safe

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
cores = gpuguide.usable_cpus()
if device.type == "cpu":
    torch.set_num_threads(1)
    print(f"{cores} usable CPU cores; the model uses 1 thread, workers the others")
worker_counts = [n for n in (1, 2, 4, 8) if n <= cores][: 1 if small else 4]
SAMPLES = 256 if small else 384  # samples per timed call: batches of 64 or 128

# %%
# A dataset that costs CPU time per sample
# ----------------------------------------
# :class:`gpuguide.chapters.data.SyntheticImages` builds sample ``i`` from a seed: a
# random image, ``work`` smoothing passes standing in for decoding, a random crop and
# flip. It lives in an importable module rather than in this page, for the reason
# given in the next cell. Its length is large so that no measurement reaches the end.
dataset = SyntheticImages(2**20, shape=(3, 32, 32), work=2)
one_sample = gpuguide.benchmark(dataset.__getitem__, args=(0,), label="one sample")
print(f"one sample: {one_sample}")

# %%
# The model and one training step
# -------------------------------
# A two-layer MLP: on a CPU its step costs about as much as loading its batch, where
# overlap matters most. A timed call trains on ``SAMPLES`` samples in all.
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


def train(batches, steps, step=train_step):
    for _ in range(steps):
        step(*next(batches))


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


def make_loader(**change):
    settings = {**BASELINE, **change}
    if settings["num_workers"] > 0:
        settings["multiprocessing_context"] = "spawn"
        settings.setdefault("persistent_workers", True)
    return DataLoader(dataset, **settings)


def measure(label, loader, step=train_step):
    with spawn_safe():
        batches = iter(loader)
    next(batches)  # waits for the workers to start: not part of the timing
    return timed(label, batches, SAMPLES // loader.batch_size, step)


def timed(name, *args):
    # A call takes tens of ms: a short warm-up, then 4 to 8 timed calls.
    return gpuguide.benchmark(
        train, args=args, label=name, device=device, warmup_ms=1, min_reps=4, max_reps=8
    )


# %%
# Starting workers: once, or every epoch
# --------------------------------------
# Without ``persistent_workers`` a loader starts new workers at every epoch, and a
# spawned worker imports torch before its first sample (typically one to a few
# seconds). The two loaders below differ only in ``persistent_workers``; a timed
# call starts a new epoch and takes its first batch, after one untimed call (which
# starts the persistent worker). The throughputs further down leave start-up out.
one_worker = make_loader(num_workers=1, persistent_workers=True)
restarting = make_loader(num_workers=1, persistent_workers=False)
first_batch = {}
for name, loader in (("new", restarting), ("persistent", one_worker)):
    with spawn_safe():
        first_batch[name] = gpuguide.benchmark(
            lambda loader=loader: next(iter(loader)),
            label=f"first batch of an epoch, {name} worker",
            warmup_ms=1.0,
            min_reps=1,
            max_reps=1,
        )
del restarting, loader
fresh, kept = first_batch["new"].median_s, first_batch["persistent"].median_s
print(
    f"first batch of an epoch: {gpuguide.format_time(fresh)} with a new worker, "
    f"{gpuguide.format_time(kept)} with a persistent one: "
    f"{gpuguide.format_time(fresh - kept)} of start-up saved per epoch"
)

# %%
# One setting at a time
# ---------------------
# The baseline prepares batches of 64 in the main process. Each other bar changes
# one thing: the number of workers, the batch size, pinned host memory (CUDA only),
# or how many batches each worker prepares ahead (``prefetch_factor``, which exists
# only with workers, so its bar keeps one worker and its printed ratio is to
# ``num_workers=1``). A popular text switched
# on workers and pinned memory together, so its timing cannot tell which one
# helped; here each is measured alone.
results = {"baseline": measure("baseline", make_loader())}
results["num_workers=1"] = measure("num_workers=1", one_worker)
del one_worker
for n in worker_counts[1:]:
    results[f"num_workers={n}"] = measure(f"{n} workers", make_loader(num_workers=n))
results["batch_size=128"] = measure("batch 128", make_loader(batch_size=128))
if device.type == "cuda":
    results["pin_memory=True"] = measure("pinned", make_loader(pin_memory=True))
else:
    print(
        "pin_memory=True pins host memory for faster copies to a GPU; it needs an "
        "accelerator, so this CPU run does not request it."
    )
if not small:
    loader = make_loader(num_workers=1, prefetch_factor=4)
    results["1 worker, prefetch 4"] = measure("prefetch 4", loader)
    del loader


def rate(seconds):
    return SAMPLES / seconds


Row = namedtuple("Row", "setting throughput IQR_per_call speed_up")
rows = []
for label, m in results.items():
    ref = "num_workers=1" if "prefetch" in label else "baseline"
    ratio = gpuguide.format_ratio(results[ref].median_s / m.median_s)
    speed = gpuguide.format_rate(rate(m.median_s), "samples/s")
    rows.append(Row(label, speed, gpuguide.format_time(m.iqr_s), f"{ratio} {ref}"))
print(gpuguide.table(rows, title=f"{SAMPLES} samples per call"))
best = max(results, key=lambda k: rate(results[k].median_s))

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    results,
    ylabel="throughput (samples/s)",
    title=f"Training throughput: best with {best}",
    value=rate,
)
plt.show()

# %%
# How much loading the workers hide
# ---------------------------------
# Loading alone iterates the baseline loader without the model; compute alone trains
# on batches made beforehand. In the main process the two add up; with workers the
# step ideally costs only the larger of the two. Printed: the share of the loading
# time that no longer adds to the step, with the fastest number of workers.
fastest = max(
    (k for k in results if k.startswith("num_workers")),
    key=lambda k: rate(results[k].median_s),
)
load_alone = measure("loading alone", make_loader(), step=lambda *batch: None)
premade = torch.utils.data.default_collate([dataset[i] for i in range(64)])
compute_alone = timed("compute alone", itertools.repeat(premade), SAMPLES // 64)
serial = load_alone.median_s + compute_alone.median_s
overlapped = results[fastest]
hidden = min(max((serial - overlapped.median_s) / load_alone.median_s, 0.0), 1.0)
times = {
    "loading alone": load_alone,
    "compute alone": compute_alone,
    "both, baseline": results["baseline"],
    f"both, {fastest}": overlapped,
}
per_call = f"time per {SAMPLES} samples"
rows = [
    {"run": k, per_call: gpuguide.format_time(m.median_s)} for k, m in times.items()
]
print(gpuguide.table(rows))
print(
    f"loading + compute = {gpuguide.format_time(serial)}; with {fastest} "
    f"{hidden:.0%} of the loading time was hidden behind the compute"
)
if hidden < 0.5:
    why = "workers and model share the CPU cores" if device.type == "cpu" else ""
    print(f"Less than half was hidden: {why or 'the loader is still too slow'}.")

fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    times,
    ylabel=f"time per {SAMPLES} samples (ms)",
    title=f"With {fastest}, {hidden:.0%} of the loading time was hidden",
    baseline="both, baseline",
)
plt.show()

# %%
# What to take away
# -----------------
# Measure the loader alone first: if it delivers fewer samples per second than the
# model consumes, workers help, up to the number of free cores. Larger batches cut
# per-batch overhead. Pinned memory speeds the copy to a GPU, which matters once
# loading keeps up. Keep spawned workers persistent.
