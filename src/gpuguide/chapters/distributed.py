"""Data-parallel training in spawned processes: what each process imports by name.

A spawned process imports the function it runs by name (see
:mod:`gpuguide.chapters.spawning`), so an example page cannot hand it a function
of its own. This module holds what the DDP page's processes run:
:func:`run_rank`, the entry point of one process, which sets the environment
variables that ``torchrun`` would set (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``MASTER_ADDR``, ``MASTER_PORT``) and calls a function; and
:func:`ddp_train_worker`, such a function, which trains a small MLP with
:class:`~torch.nn.parallel.DistributedDataParallel` and times its steps with
:func:`gpuguide.benchmark`. The page starts the processes itself.

Examples
--------
>>> import torch.multiprocessing as mp
>>> from gpuguide.chapters.distributed import DDPConfig, ddp_train_worker, run_rank
>>> results = mp.get_context("spawn").SimpleQueue()  # doctest: +SKIP
>>> mp.start_processes(run_rank, nprocs=2, start_method="spawn",
...     args=(ddp_train_worker, (DDPConfig(),), 2, "127.0.0.1", 29500, results))  # doctest: +SKIP
>>> sorted(results.get() for _ in range(2))[0][1].step  # doctest: +SKIP
<Measurement 'DDP step' on cpu: ...>
"""

from __future__ import annotations

import gc
import itertools
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.timing import Measurement, benchmark

if TYPE_CHECKING:
    import torch

__all__ = ["DDPConfig", "DDPReport", "ddp_train_worker", "make_mlp", "run_rank"]

#: A warm-up budget no call can stay under: ``benchmark`` then warms up with
#: exactly one call, so every rank makes the same number of calls (each DDP step
#: is a collective operation; a rank that made one call more would wait forever).
_ONE_WARMUP_CALL_MS = 1e-6


def _run_rank(
    local_rank: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    world_size: int,
    master_addr: str,
    master_port: int,
    results: Any,
) -> None:
    """Set torchrun's variables for this rank, call ``fn(*args)``, put the result."""
    rank, size = str(local_rank), str(world_size)
    os.environ.update(
        RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=size, LOCAL_WORLD_SIZE=size
    )
    os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))
    results.put((local_rank, fn(*args)))


def run_rank(local_rank: int, *args: Any) -> None:  # pragma: no cover - child
    """The entry point of one spawned rank: ``torch.multiprocessing`` passes its index.

    Called as ``run_rank(local_rank, fn, args, world_size, master_addr,
    master_port, results)``: sets ``RANK`` and ``LOCAL_RANK`` (the index),
    ``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``,
    so that ``fn`` runs as it would under ``torchrun``; puts ``(local_rank,
    fn(*args))`` in the ``results`` queue; then exits at once. Tearing down the
    interpreter while gloo's threads still hold tensors can abort the process
    (``terminate called without an active exception``), a known shutdown race in
    torch.distributed; the result is already in the queue (a ``SimpleQueue``
    writes before ``put`` returns), so the process flushes its output and leaves
    without that teardown.
    """
    _run_rank(local_rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@dataclass(frozen=True)
class DDPConfig:
    """What :func:`ddp_train_worker` trains and how long it times.

    Attributes
    ----------
    backend : str
        ``"gloo"`` (CPU tensors) or ``"nccl"`` (one CUDA GPU per rank).
    features, width, classes : int
        The MLP's input size, hidden width and number of classes.
    batch_size : int
        Samples per rank per step; ``world_size`` ranks train
        ``world_size * batch_size`` samples per step.
    steps : int
        Timed steps per measurement (the same on every rank).
    warmup_steps : int
        Untimed steps before the first measurement.
    cpu_threads : int or None
        ``torch.set_num_threads`` in each process with ``"gloo"``; None
        leaves torch's default.
    seed : int
        Seed for the data and the initial weights, the same on every rank.
    """

    backend: str = "gloo"
    features: int = 256
    width: int = 1024
    classes: int = 10
    batch_size: int = 64
    steps: int = 10
    warmup_steps: int = 3
    cpu_threads: int | None = 1
    seed: int = 0

    def __post_init__(self) -> None:
        if self.backend not in ("gloo", "nccl"):
            msg = f"backend must be 'gloo' or 'nccl', got {self.backend!r}"
            raise ValueError(msg)
        for name in ("features", "width", "classes", "batch_size", "steps"):
            checks.integer(name, getattr(self, name), minimum=1)


@dataclass(frozen=True)
class DDPReport:
    """What one rank of :func:`ddp_train_worker` measured and checked.

    Attributes
    ----------
    rank, world_size : int
        This process's rank and the number of processes.
    device : str
        Where this rank trained (``"cpu"``, ``"cuda:1"``).
    step : Measurement
        A full training step: forward, backward (with DDP's gradient
        all-reduce) and optimizer step.
    step_no_sync : Measurement
        The same step inside ``no_sync()``: no gradient communication.
    allreduce : Measurement
        One all-reduce of a buffer as large as all gradients, alone.
    gradient_bytes : int
        Bytes of gradients all-reduced per step.
    samples_per_step : int
        Samples per step over all ranks (``world_size * batch_size``).
    first_indices : tuple of int
        The first sample indices this rank's ``DistributedSampler`` gave it.
    rank_difference : float
        Largest difference between this rank's averaged gradients and rank
        0's (0 when DDP kept the replicas identical).
    mean_error : float
        Largest difference between the averaged gradients and the mean of
        the ranks' local gradients computed with ``no_sync()``.
    gradient_norm : float
        L2 norm of the averaged gradients of the first batch (the initial
        weights), for checking against a computation in one process.
    """

    rank: int
    world_size: int
    device: str
    step: Measurement
    step_no_sync: Measurement
    allreduce: Measurement
    gradient_bytes: int
    samples_per_step: int
    first_indices: tuple[int, ...]
    rank_difference: float
    mean_error: float
    gradient_norm: float


def make_mlp(features: int, width: int, classes: int) -> torch.nn.Module:
    """A three-layer MLP: ``features -> width -> width -> classes`` with ReLUs."""
    from torch import nn

    return nn.Sequential(
        nn.Linear(features, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, classes),
    )


def _flat_grads(model: torch.nn.Module) -> torch.Tensor:
    import torch

    return torch.cat(
        [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    )


def ddp_train_worker(config: DDPConfig) -> DDPReport:
    """Train an MLP with DistributedDataParallel in this process; time its steps.

    Run it in every rank, e.g. with :func:`run_rank` or under ``torchrun``: it
    reads ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE`` from the environment.

    Parameters
    ----------
    config : DDPConfig
        The model, batch, backend and number of steps.

    Returns
    -------
    DDPReport
        This rank's timings and gradient checks.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if config.backend == "nccl":  # one GPU per process
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        if config.cpu_threads is not None:
            torch.set_num_threads(config.cpu_threads)
        dist.init_process_group("gloo")
    try:
        # The same seed on every rank: the same data set and the same initial
        # weights (DDP also copies rank 0's weights to the others when it wraps).
        torch.manual_seed(config.seed)
        n = 4 * world_size * config.batch_size
        dataset = TensorDataset(
            torch.randn(n, config.features), torch.randint(config.classes, (n,))
        )
        model = make_mlp(config.features, config.width, config.classes).to(device)
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()

        # Each rank reads its own quarter, third... of the data set.
        sampler: DistributedSampler[int] = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, seed=config.seed
        )
        loader = DataLoader(dataset, batch_size=config.batch_size, sampler=sampler)
        batches = [(x.to(device), y.to(device)) for x, y in loader]
        next_batch = itertools.cycle(batches).__next__

        def step() -> None:
            x, y = next_batch()
            optimizer.zero_grad(set_to_none=True)
            loss_fn(ddp(x), y).backward()  # DDP all-reduces gradients here
            optimizer.step()

        def step_no_sync() -> None:
            with ddp.no_sync():  # gradients stay local: no communication
                step()

        # Check: the averaged gradients equal the mean of the local ones.
        x, y = batches[0]
        with ddp.no_sync():
            loss_fn(ddp(x), y).backward()
        local = _flat_grads(model)
        ddp.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        averaged = _flat_grads(model)
        ddp.zero_grad(set_to_none=True)
        gathered = [torch.empty_like(local) for _ in range(world_size)]
        dist.all_gather(gathered, local)
        mean_error = (torch.stack(gathered).mean(0) - averaged).abs().max()
        on_rank0 = averaged.clone()
        dist.broadcast(on_rank0, src=0)
        rank_difference = (averaged - on_rank0).abs().max()

        for _ in range(config.warmup_steps):
            step()

        def timed(fn: Callable[..., Any], label: str, *args: Any) -> Measurement:
            return benchmark(
                fn,
                args=args,
                label=label,
                device=device,
                warmup_ms=_ONE_WARMUP_CALL_MS,
                min_reps=config.steps,
                max_reps=config.steps,
            )

        timed_step = timed(step, "DDP step")
        timed_no_sync = timed(step_no_sync, "DDP step, no_sync")
        buffer = torch.zeros_like(averaged)
        timed_allreduce = timed(dist.all_reduce, "all-reduce alone", buffer)
        dist.barrier()  # every rank is done with its collectives before teardown
        report = DDPReport(
            rank=rank,
            world_size=world_size,
            device=str(device),
            step=timed_step,
            step_no_sync=timed_no_sync,
            allreduce=timed_allreduce,
            gradient_bytes=averaged.numel() * averaged.element_size(),
            samples_per_step=world_size * config.batch_size,
            first_indices=tuple(list(sampler)[:4]),
            rank_difference=float(rank_difference),
            mean_error=float(mean_error),
            gradient_norm=float(averaged.norm()),
        )
        # Free DDP, whose Reducer holds the process group, while the group is
        # still registered: a Reducer freed after destroy_process_group runs
        # gloo's destructor itself, which was seen to hang joining its threads.
        ddp = optimizer = step = step_no_sync = None  # type: ignore[assignment]
        gc.collect()
        return report
    finally:
        dist.destroy_process_group()
