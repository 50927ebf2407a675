"""
Several GPUs: DistributedDataParallel
=====================================

DistributedDataParallel (DDP) trains a copy of the model per GPU, each in its own
process on its own data, and averages the gradients with an all-reduce in the
backward pass. This page runs the same DDP step with one process and with several,
and measures the throughput (samples/s) and what the all-reduce costs: with NCCL on
two or more CUDA GPUs, else with gloo on CPU cores.

See also the concept page :doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# On a CPU each process gets one thread and, to be timed steadily, two free cores
# (one for gloo's threads and this page).
from dataclasses import replace

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, plot_bars, report, table, usable_cpus
from gpuguide.chapters import distributed

page = gpuguide.setup()
gpus = torch.cuda.device_count() if page.cuda else 0
cores = usable_cpus()
world_sizes, config, few = distributed.ddp_plan(
    gpus, cores, small=page.small, gpu_host=page.cuda
)
most = world_sizes[-1]
size = f"width {config.width}, batch {config.batch_size}"
if gpus < 2:
    print(f"Scaling needs 2 GPUs (here {gpus}); ranks on CPU ({few or 'a core each'})")

# %%
# The code each process runs
# --------------------------
# A spawned process imports the function it runs, so the worker lives in a module:
#
# .. literalinclude:: /../src/gpuguide/chapters/distributed.py
#    :pyobject: ddp_train_worker
#
# ``dist.init_process_group(backend)`` reads the rank, the number of processes and
# where to meet from the environment. ``DDP(model)`` copies rank 0's weights to
# every process and hooks the parameters; ``DistributedSampler`` gives each rank a
# different share of the data. In ``backward()`` the hooks start an all-reduce for
# each *bucket* of gradients (25 MB by default) once it is complete, so
# communication can overlap the rest of the backward pass. ``ddp.no_sync()`` skips
# the all-reduce (for gradient accumulation; here, to time a step without it).

# %%
# Launching one process per device
# --------------------------------
# ``distributed.launch_worlds`` does on one machine what ``torchrun`` does: it
# spawns the processes, and each sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
# ``MASTER_ADDR`` and ``MASTER_PORT`` before it calls the worker:
#
# .. literalinclude:: /../src/gpuguide/chapters/distributed.py
#    :pyobject: _launch
#
# On two machines with eight GPUs each, ``torchrun`` starts the same worker as 16
# processes (``RANK`` 0-15, ``LOCAL_RANK`` 0-7, the GPU a process uses):
#
# .. code-block:: bash
#
#    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d \
#        --rdzv-endpoint=host:29500 train.py
reports = distributed.launch_worlds(
    distributed.ddp_train_worker, (config,), world_sizes, one_set=page.cuda and gpus < 2
)

# %%
# Every rank ends with the same gradients
# ---------------------------------------
# Each rank's sampler hands it different samples, yet after the all-reduce every
# rank holds the same gradients: the mean of the ranks' local ones.
ranks = reports[most]
firsts = [set(r.first_indices) for r in ranks]
distinct, drawn = len(set().union(*firsts)), sum(map(len, firsts))
apart = max(max(r.rank_difference, r.mean_error) for r in ranks)
gpuguide.claim(
    f"the {most} ranks' samplers hand them different samples (their first four "
    "overlap nowhere), yet after the all-reduce all hold the same gradients, the "
    "mean of their local ones (to 1e-5)",
    holds=distinct == drawn and apart <= 1e-5,
    measured=f"{distinct} distinct of {drawn} first samples; gradients at most "
    f"{apart:.1e} from rank 0's and from the mean",
)

# %%
# Throughput with 1 and N processes
# ---------------------------------
# Each process trains a batch of its own, so N processes train N times as many
# samples per step. The ideal is N times one process's throughput; communication
# and shared resources take their share.
throughput = {}  # rank 0's time per sample, to compare
for n, (r0, *_) in reports.items():
    label = f"{n} process{'es' if n > 1 else ''}"
    per_sample = [t / r0.samples_per_step for t in r0.step.times_s]
    throughput[label] = replace(r0.step, label=label, times_s=per_sample)
    if n == 1 or not few:
        rate = r0.step.rate(r0.samples_per_step, "samples/s")
        report("throughput", rate, size=size, processes=n, backend=config.backend)
c = compare(throughput[label], throughput["1 process"])
gpuguide.claim(
    f"{label} train more samples per second than one", c, verdict="faster", unless=few
)
if not few:
    print(f"{c}, {c.speedup / most:.0%} of ideal")
    fig, ax = plt.subplots()
    plot_bars(
        ax,
        throughput,
        ylabel="throughput (samples/s)",
        device=r0.device,
        value=lambda s: 1 / s,
        title=f"DDP, {label} against one: {c.short}",
    )
    plt.show()

# %%
# What the all-reduce costs
# -------------------------
# Rank 0's step, the step inside ``no_sync()`` and an all-reduce of all gradients
# alone: the step's growth is the communication the backward did *not* hide. On a
# CPU, N processes share memory bandwidth and caches, so even a step without
# communication may take them longer than one process alone (GPUs share neither).
r0 = ranks[0]
if not few:
    report(
        "all-reduce alone",
        r0.allreduce,
        size=gpuguide.format_bytes(r0.gradient_bytes),
        processes=most,
        backend=config.backend,
    )
    timings = (reports[1][0].step_no_sync, r0.step_no_sync, r0.step, r0.allreduce)
    print(table({"rank 0": m.label, "time": m} for m in timings))
    exposed = r0.step.median_s - r0.step_no_sync.median_s
    hidden = min(max(1 - exposed / r0.allreduce.median_s, 0.0), 1.0)
    grows = compare(r0.step, r0.step_no_sync)
    print(
        f"the step grows by {gpuguide.format_time(exposed)}: about {hidden:.0%} of "
        "the communication overlapped the backward"
        if grows.verdict == "slower"
        else grows
    )

# %%
# Why not ``nn.DataParallel``?
# ----------------------------
# ``nn.DataParallel`` runs in one process: every step it copies the model to each
# GPU, runs a Python thread per GPU (contending for the GIL) and gathers outputs
# and gradients on the first. DDP copies the weights once and overlaps the all-reduce.
dp_vs = None
if gpus >= 2:
    mlp = config.model()
    model = torch.nn.DataParallel(mlp.to("cuda:0"), device_ids=list(range(most)))
    x = torch.randn(r0.samples_per_step, config.features, device="cuda:0")
    y = torch.randint(config.classes, (r0.samples_per_step,), device="cuda:0")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def dp_step():
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    dp = benchmark(dp_step, device="cuda:0", label="DataParallel")
    dp_rate = dp.rate(r0.samples_per_step, "samples/s")
    report("DataParallel throughput", dp_rate, size=size, processes=most)
    dp_vs = compare(r0.step, dp)
gpuguide.claim(
    "a DDP step is faster than nn.DataParallel's on the same samples",
    dp_vs,
    verdict="faster",
    unless=None if gpus >= 2 else "needs at least 2 CUDA GPUs",
)

# %%
# What to take away
# -----------------
# DDP averages the gradients of a model copy per device in the backward pass.
# Scaling needs a device (or a free core) per process and communication the
# backward can hide; time the step with and without ``no_sync()`` to see its cost.
gpuguide.takeaway()
