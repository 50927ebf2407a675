"""
Several GPUs: DistributedDataParallel
=====================================

DistributedDataParallel (DDP) trains one copy of the model per GPU, each in its own
process and on its own share of the data. During the backward pass the processes
average their gradients with an all-reduce, so every copy takes the same optimizer
step and the copies stay identical.

This page starts the processes the way ``torchrun`` does, runs the same DDP training
step with one process and with several, and measures the throughput (samples/s) of
each and the time a step spends on the gradient all-reduce. With two or more CUDA
GPUs it uses the NCCL backend, one GPU per process; otherwise the processes train
on CPU cores with the gloo backend.

See also the concept page
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# On a CPU each process gets one thread, so that N processes use N cores and the
# comparison with one process is fair. Process counts stop at the usable cores.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.distributed import (
    DDPConfig,
    ddp_train_worker,
    free_port,
    make_mlp,
    run_workers,
)
from gpuguide.tables import format_cell

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
gpus = torch.cuda.device_count() if device.type == "cuda" else 0
if gpus >= 2:
    world_sizes = [n for n in (1, 2, 4, 8) if n <= gpus]
    config = DDPConfig("nccl", features=1024, width=4096, batch_size=256, steps=20)
    where = "cuda"
else:
    cores = gpuguide.usable_cpus()
    world_sizes = [n for n in (1, 2, 4) if n <= max(cores, 2)][: 2 if small else 3]
    width = 512 if small else 1024
    config = DDPConfig(
        "gloo", width=width, batch_size=128, steps=5 if small else 10, cpu_threads=1
    )
    where = "cpu"
    print(
        f"Scaling over GPUs needs at least 2 CUDA GPUs (this run has {gpus or 'none'}): "
        f"the processes below train on CPU cores ({cores} usable) with gloo."
    )
print(config)

# %%
# The code each process runs
# --------------------------
# A spawned process imports the function it runs by name, so the worker lives in
# a module, ``gpuguide.chapters.distributed.ddp_train_worker``, and not in this page:
#
# .. literalinclude:: /../src/gpuguide/chapters/distributed.py
#    :pyobject: ddp_train_worker
#
# The lesson is in five lines of it. ``dist.init_process_group(backend)`` reads
# its rank, the number of processes and where to meet from the environment.
# ``DDP(model)`` copies rank 0's weights to every process and registers hooks on
# the parameters. ``DistributedSampler`` gives every rank a different share of the
# data. In ``backward()`` those hooks start an all-reduce for each *bucket* of
# gradients (25 MB by default) as soon as the bucket is complete, so communication
# overlaps with the rest of the backward pass. ``ddp.no_sync()`` skips the
# all-reduce, for gradient accumulation, and here to time a step without it.

# %%
# Launching one process per device
# --------------------------------
# ``run_workers`` does on one machine what ``torchrun`` does: it starts
# ``world_size`` processes with the ``"spawn"`` method (``torch.multiprocessing``)
# and gives each ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
# ``MASTER_PORT``. Rank 0 opens a rendezvous store on that port; a free one is
# found by binding a socket to port 0. Each rank times its steps with
# :func:`gpuguide.benchmark` and sends its report back through a queue.
#
# On several machines, ``torchrun`` starts the same worker. For two machines with
# eight GPUs each, run on both:
#
# .. code-block:: bash
#
#    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \
#        --rdzv-endpoint=host:29500 train.py
#
# It starts 16 processes: ``WORLD_SIZE=16`` in all, ``RANK`` 0-7 on one machine and
# 8-15 on the other (the rendezvous at ``host:29500`` decides which), ``LOCAL_RANK``
# 0-7 on each (the GPU a process uses), and ``MASTER_ADDR``/``MASTER_PORT`` naming
# the store where all 16 meet. The worker above reads them and runs unchanged.
reports, steps = {}, []
for n in world_sizes:
    port = free_port()
    reports[n] = run_workers(ddp_train_worker, n, args=(config,), master_port=port)
    steps.append(
        {"world size": n, "MASTER_PORT": port, "rank 0's step": reports[n][0].step}
    )
print(gpuguide.table(steps))

# %%
# Every rank ends with the same gradients
# ---------------------------------------
# Each rank's sampler handed it different samples, yet after the all-reduce every
# rank holds the same gradients: their mean over the ranks' local gradients.
ranks = reports[world_sizes[-1]]
for r in ranks:
    print(f"rank {r.rank} on {r.device}: first samples {list(r.first_indices)}")
print(
    f"largest difference from rank 0's gradients: "
    f"{max(r.rank_difference for r in ranks):.1e}; from the mean of the local "
    f"gradients: {max(r.mean_error for r in ranks):.1e}"
)

# %%
# Throughput with 1 and N processes
# ---------------------------------
# Each process trains a batch of its own, so N processes train N times as many
# samples per step (the usual way to scale DDP). The ideal is N times the
# throughput of one process; communication and shared resources take their share.
# On a CPU, N processes need N idle cores: on a small machine the cores, not DDP,
# limit the scaling. Even with a core each, processes on one CPU share its memory
# bandwidth and caches, so a step without communication may take them longer than
# it takes one process alone; GPUs of their own share nothing of the sort. The
# comparisons carry the spread of rank 0's steps.


def per_sample(report, label):
    m = report.step
    times = tuple(t / report.samples_per_step for t in m.times_s)
    return gpuguide.Measurement(label, times, m.device, m.method)


def renamed(m, label):
    return gpuguide.Measurement(label, m.times_s, m.device, m.method)


throughput = {}
model_size = f"width {config.width}, batch {config.batch_size}"
for n, ranks_n in reports.items():
    label = f"training with {n} process{'es' if n > 1 else ''}"
    m = throughput[label] = per_sample(ranks_n[0], label)
    gpuguide.record("throughput", 1 / m.median_s, unit="samples/s", size=model_size,
                    spread=(1 / m.q75_s, 1 / m.q25_s), processes=n,
                    backend=config.backend)  # fmt: skip
one = next(iter(throughput.values()))
for (label, m), n in zip(throughput.items(), reports, strict=True):
    rate = gpuguide.format_rate(1 / m.median_s, "samples/s")
    if m is one:
        print(f"{label}: {rate} ({format_cell(m)} per sample)")
        continue
    c = gpuguide.compare(m, one)
    print(f"{label}: {rate}; {c}, {c.speedup / n:.0%} of ideal")
last, most = list(throughput)[-1], f"{world_sizes[-1]} processes"
crowding = gpuguide.compare(
    renamed(ranks[0].step_no_sync, f"a step of {most} without communication"),
    renamed(reports[world_sizes[0]][0].step_no_sync, "one process's"),
)
print(crowding)
if c.verdict == "slower":
    print(f"{most} were slower than one here: the lines above and below show why.")
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    throughput,
    ylabel="throughput (samples/s)",
    title=f"DDP: {most} train {gpuguide.format_ratio(c.speedup)} as fast as one",
    device=where,
    value=lambda s: 1 / s,
)
plt.show()

# %%
# What the all-reduce costs
# -------------------------
# Three timings from rank 0 of the largest run: the step, the same step inside
# ``no_sync()`` (no communication), and one all-reduce of a buffer as large as all
# gradients, alone. The difference of the first two is the communication the
# backward pass did *not* hide; compare it with the all-reduce alone.
r0 = ranks[0]
print(
    gpuguide.table(
        [
            {"rank 0": m.label, "time": m}
            for m in (r0.step_no_sync, r0.step, r0.allreduce)
        ]
    )
)
gradients = gpuguide.format_bytes(r0.gradient_bytes)
gpuguide.record("all-reduce alone", r0.allreduce, size=gradients,
                processes=r0.world_size, backend=config.backend)  # fmt: skip
exposed = r0.step.median_s - r0.step_no_sync.median_s
hidden = 1 - exposed / r0.allreduce.median_s if r0.allreduce.median_s > 0 else 0.0
grows = gpuguide.compare(r0.step, r0.step_no_sync).verdict == "slower"
print(f"{gradients} of gradients per step; the all-reduce alone takes {format_cell(r0.allreduce)}")  # fmt: skip
if not grows:
    hidden = 1.0
    print("the step with communication is not measurably slower: the backward hid it")
else:
    print(
        f"the step grows by {gpuguide.format_time(exposed)}: about "
        f"{min(max(hidden, 0.0), 1.0):.0%} of the communication overlapped the backward"
    )
if hidden <= 0:
    print(
        "The step grew by at least the all-reduce's own time: nothing was hidden. "
        "DDP also copies gradients into its buckets, and its communication thread "
        "needs a free core to run beside the backward pass."
    )
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {
        "step, no_sync": r0.step_no_sync,
        "step": r0.step,
        "all-reduce alone": r0.allreduce,
    },
    ylabel="time (ms)",
    title=f"All-reduce adds {gpuguide.format_time(exposed)} to a step "
    f"of {r0.world_size} processes"
    if grows
    else f"A step of {r0.world_size} processes hides its all-reduce",
    device=where,
)
plt.show()

# %%
# Why not ``nn.DataParallel``?
# ----------------------------
# ``nn.DataParallel`` runs in a single process: every step it copies the model from
# the first GPU to the others, splits the batch, runs one Python thread per GPU
# (which contend for the GIL) and gathers the outputs and gradients on the first
# GPU. DDP keeps one process per GPU, copies the weights once, and overlaps the
# gradient all-reduce with the backward pass. PyTorch's documentation recommends
# DDP even on a single machine. How much faster DDP is depends on the model, the
# batch and the interconnect, so it is measured here rather than quoted.
if gpus >= 2:
    n = world_sizes[-1]
    model = torch.nn.DataParallel(
        make_mlp(config.features, config.width, config.classes).to("cuda:0"),
        device_ids=list(range(n)),
    )
    x = torch.randn(n * config.batch_size, config.features, device="cuda:0")
    y = torch.randint(config.classes, (n * config.batch_size,), device="cuda:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def dp_step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    dp = gpuguide.benchmark(dp_step, device="cuda:0", label="DataParallel step")
    ddp_rate = 1 / throughput[last].median_s
    dp_rate = n * config.batch_size / dp.median_s
    print(
        f"{n} GPUs, {n * config.batch_size} samples per step: DataParallel "
        f"{gpuguide.format_rate(dp_rate, 'samples/s')}, DDP "
        f"{gpuguide.format_rate(ddp_rate, 'samples/s')} "
        f"({gpuguide.format_ratio(ddp_rate / dp_rate)} DataParallel)"
    )
    del model, x, y, optimizer
else:
    print("Comparing nn.DataParallel with DDP needs at least 2 CUDA GPUs.")

# %%
# What to take away
# -----------------
# Use one process per GPU with DDP, launched by ``torchrun`` (or, as here, by
# spawning processes from code that lives in an importable module). Give each rank
# its own data with ``DistributedSampler``. Check the all-reduce's share of a step
# with ``no_sync()``: when it is large, larger batches per GPU (more compute per
# byte of gradient) or gradient accumulation help.
