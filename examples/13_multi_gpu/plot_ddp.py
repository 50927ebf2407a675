"""
Several GPUs: DistributedDataParallel
=====================================

DistributedDataParallel (DDP) trains one copy of the model per GPU, each in its own
process and on its own share of the data; during the backward pass the processes
average their gradients with an all-reduce, so the copies stay identical. This page
starts the processes the way ``torchrun`` does, runs the same DDP training step
with one process and with several, and measures the throughput (samples/s) and the
time a step spends on the all-reduce: with NCCL on two or more CUDA GPUs, one per
process, else with gloo on CPU cores.

See also the concept page :doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# On a CPU each process gets one thread, so that N processes use N cores and the
# comparison with one process is fair. Process counts stop at the usable cores; on
# the host of a single GPU, the page runs one process and the most.
from dataclasses import replace

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, plot_bars, report, table, usable_cpus
from gpuguide.chapters import distributed

page = gpuguide.setup()
gpus = torch.cuda.device_count() if page.cuda else 0
cores = usable_cpus()
world_sizes, config = distributed.ddp_plan(
    gpus, cores, small=page.small, gpu_host=page.cuda
)
if gpus < 2:
    print(
        f"Scaling over GPUs needs at least 2 CUDA GPUs (this run has {gpus or 'none'}):"
        f" the processes below train on CPU cores ({cores} usable) with gloo."
    )
where = "cuda" if gpus >= 2 else "cpu"
size = f"width {config.width}, batch {config.batch_size}"
print(
    f"each process: an MLP {config.features} -> {config.width} -> {config.width} "
    f"-> {config.classes}, a batch of {config.batch_size}, {config.steps} timed "
    f"steps, backend {config.backend}"
)
# N ranks on a CPU need a core each, and gloo's threads and this page more.
few = None if gpus >= 2 else distributed.too_few_cores(cores, world_sizes[-1])
if few:
    print(
        f"{few}, so the steps of more than one process are not timed steadily "
        "here and not shown as results; the Recorded results give them on a "
        "host with more cores, and on GPUs."
    )

# %%
# The code each process runs
# --------------------------
# A spawned process imports the function it runs by name, so the worker lives in
# a module, ``distributed.ddp_train_worker``, and not in this page:
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
# can overlap with the rest of the backward pass (measured below). ``ddp.no_sync()``
# skips the all-reduce, for gradient accumulation, and here to time a step without it.

# %%
# Launching one process per device
# --------------------------------
# ``distributed.launch_worlds`` does on one machine what ``torchrun`` does: it
# starts processes with the ``"spawn"`` method, and each (``run_worlds``) sets its
# ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``
# before it calls the worker; each rank sends its report back through a queue. On
# the host of a GPU, where a process takes seconds to start, one set of processes
# runs the world sizes in turn; elsewhere each world size starts its own.
#
# .. literalinclude:: /../src/gpuguide/chapters/distributed.py
#    :pyobject: _launch
#
# On several machines, ``torchrun`` starts the same worker. For two machines with
# eight GPUs each, run on both:
#
# .. code-block:: bash
#
#    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \
#        --rdzv-endpoint=host:29500 train.py
#
# It starts 16 processes: ``WORLD_SIZE=16``, ``RANK`` 0-15, ``LOCAL_RANK`` 0-7 on
# each machine (the GPU a process uses). The worker above runs unchanged.
one_set = page.cuda and gpus < 2  # ranks on a GPU's host: one set of processes
reports = distributed.launch_worlds(
    distributed.ddp_train_worker, (config,), world_sizes, one_set=one_set
)
shown = [n for n in world_sizes if n == 1 or not few]  # the steady timings
print(table({"world size": n, "rank 0's step": reports[n][0].step} for n in shown))

# %%
# Every rank ends with the same gradients
# ---------------------------------------
# Each rank's sampler handed it different samples, yet after the all-reduce every
# rank holds the same gradients: their mean over the ranks' local gradients.
ranks = reports[world_sizes[-1]]
for r in ranks:
    print(f"rank {r.rank} on {r.device}: first samples {list(r.first_indices)}")
firsts = [set(r.first_indices) for r in ranks]
gpuguide.claim(
    "each rank's sampler hands it different samples (the ranks' first four overlap "
    "nowhere)",
    holds=len(set().union(*firsts)) == sum(map(len, firsts)),
    measured=f"{len(set().union(*firsts))} distinct of {sum(map(len, firsts))}",
)
apart = max(r.rank_difference for r in ranks)
off_mean = max(r.mean_error for r in ranks)
gpuguide.claim(
    f"after the all-reduce, the {len(ranks)} ranks hold the same gradients, the mean "
    "of their local ones (to 1e-5)",
    holds=max(apart, off_mean) <= 1e-5,
    measured=f"largest difference from rank 0's: {apart:.1e}, from the mean: "
    f"{off_mean:.1e}",
)

# %%
# Throughput with 1 and N processes
# ---------------------------------
# Each process trains a batch of its own, so N processes train N times as many
# samples per step (the usual way to scale DDP). The ideal is N times the throughput
# of one process; communication and shared resources take their share. On a CPU,
# even with an idle core each, N processes share memory bandwidth and caches, so a
# step without communication may take them longer than one process alone (the line
# after the throughputs, and the table below); GPUs of their own share nothing of
# the sort. The comparisons carry the spread of rank 0's steps.
throughput = {}  # time per sample of rank 0's steps: a Measurement to compare
for n, (r0, *_) in reports.items():
    label = f"training with {n} process{'es' if n > 1 else ''}"
    per_sample = [t / r0.samples_per_step for t in r0.step.times_s]
    throughput[label] = replace(r0.step, label=label, times_s=per_sample)
    if n in shown:
        rate = r0.step.rate(r0.samples_per_step, "samples/s")
        report("throughput", rate, size=size, processes=n, backend=config.backend)
most = f"{world_sizes[-1]} processes"
c = compare(throughput[label], next(iter(throughput.values())))
gpuguide.claim(
    f"{most} train more samples per second than one", c, verdict="faster", unless=few
)
if not few:
    print(f"{c}, {c.speedup / world_sizes[-1]:.0%} of ideal")
    print(
        compare(
            replace(
                ranks[0].step_no_sync, label=f"a step of {most} without communication"
            ),
            replace(reports[1][0].step_no_sync, label="one process's"),
        )
    )
    fig, ax = plt.subplots()
    plot_bars(
        ax,
        throughput,
        ylabel="throughput (samples/s)",
        device=where,
        value=lambda s: 1 / s,
        title=f"DDP, {most} against one: {c.short}",
    )
    plt.show()

# %%
# What the all-reduce costs
# -------------------------
# Three timings from rank 0 of the largest run: the step, the same step inside
# ``no_sync()`` (no communication), and one all-reduce of a buffer as large as all
# gradients, alone. The difference of the first two is the communication the
# backward pass did *not* hide; compare it with the all-reduce alone. Where none of
# it overlapped, mind that DDP also copies gradients into its buckets, and that its
# communication thread needs a free core to run beside the backward pass.
r0 = ranks[0]
gradients = gpuguide.format_bytes(r0.gradient_bytes)
print(f"{gradients} of gradients per step")
if few:
    print(f"not timed steadily here ({few})")
if not few:
    one = replace(reports[1][0].step_no_sync, label="one process, no_sync")
    print(
        table({"rank 0": m.label, "time": m} for m in (one, r0.step_no_sync, r0.step))
    )
    report(
        "all-reduce alone",
        r0.allreduce,
        size=gradients,
        processes=r0.world_size,
        backend=config.backend,
    )
    exposed = r0.step.median_s - r0.step_no_sync.median_s
    hidden = min(max(1 - exposed / r0.allreduce.median_s, 0.0), 1.0)
    grows = compare(r0.step, r0.step_no_sync)
    print(
        f"the step grows by {gpuguide.format_time(exposed)}: about {hidden:.0%} of "
        "the communication overlapped the backward"
        if grows.verdict == "slower"
        else grows
    )
    fig, ax = plt.subplots()
    plot_bars(
        ax,
        {
            "step, no_sync": r0.step_no_sync,
            "step": r0.step,
            "all-reduce alone": r0.allreduce,
        },
        ylabel="time (ms)",
        device=where,
        title=f"A step of {most} against no_sync: {grows.short}",
    )
    plt.show()

# %%
# Why not ``nn.DataParallel``?
# ----------------------------
# ``nn.DataParallel`` runs in a single process: every step it copies the model from
# the first GPU to the others, splits the batch, runs one Python thread per GPU
# (which contend for the GIL) and gathers outputs and gradients on the first GPU.
# DDP copies the weights once and overlaps the all-reduce with the backward pass;
# PyTorch recommends it even on a single machine. By how much it wins depends on
# the model, the batch and the interconnect; the page measures it on 2 GPUs or more.
dp_vs = None
if gpus >= 2:
    n = world_sizes[-1]
    mlp = distributed.make_mlp(config.features, config.width, config.classes)
    model = torch.nn.DataParallel(mlp.to("cuda:0"), device_ids=list(range(n)))
    x = torch.randn(r0.samples_per_step, config.features, device="cuda:0")
    y = torch.randint(config.classes, (r0.samples_per_step,), device="cuda:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def dp_step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    dp = benchmark(dp_step, device="cuda:0", label="DataParallel")
    report(
        "DataParallel throughput",
        dp.rate(r0.samples_per_step, "samples/s"),
        size=size,
        processes=n,
    )
    dp_vs = compare(replace(r0.step, label="DDP"), dp)
    print(dp_vs)
    del mlp, model, x, y, optimizer
gpuguide.claim(
    "a DDP step is faster than nn.DataParallel's on the same samples",
    dp_vs,
    verdict="faster",
    unless=None if gpus >= 2 else "needs at least 2 CUDA GPUs",
)

# %%
# What to take away
# -----------------
# DDP keeps one copy of the model per device, each on its own data, and averages
# the gradients in the backward pass. Scaling needs a device (or a free core) per
# process and communication the backward can hide; time the step with and without
# ``no_sync()`` to see what it costs. The claims, and where they held:
gpuguide.takeaway()
