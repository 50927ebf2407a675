"""Data-parallel training in several processes: a launcher and a timed DDP worker.

:func:`run_workers` does on one machine what ``torchrun`` does: it starts one
process per rank with the ``"spawn"`` method, sets the environment variables
that :func:`torch.distributed.init_process_group` reads (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), runs a
function in each, and returns what each rank returned. :func:`ddp_train_worker`
is such a function: it trains a small MLP with
:class:`~torch.nn.parallel.DistributedDataParallel` and times its steps with
:func:`gpuguide.benchmark`.

Both live in a module because spawned processes import the function they run
by name (see :mod:`gpuguide.chapters.spawning`); an example page cannot hand them a
function of its own.

Examples
--------
>>> from gpuguide.chapters.distributed import DDPConfig, ddp_train_worker, run_workers
>>> reports = run_workers(ddp_train_worker, 2, args=(DDPConfig(),))  # doctest: +SKIP
>>> reports[0].step  # doctest: +SKIP
<Measurement 'DDP step' on cpu: ...>
"""

from __future__ import annotations

import gc
import itertools
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide import checks
from gpuguide.chapters.spawning import spawn_safe
from gpuguide.timing import Measurement, benchmark

if TYPE_CHECKING:
    import torch

__all__ = [
    "DDPConfig",
    "DDPReport",
    "ddp_train_worker",
    "free_port",
    "make_mlp",
    "run_workers",
]

#: A warm-up budget no call can stay under: ``benchmark`` then warms up with
#: exactly one call, so every rank makes the same number of calls (each DDP step
#: is a collective operation; a rank that made one call more would wait forever).
_ONE_WARMUP_CALL_MS = 1e-6


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` now, chosen by the operating system.

    Binds a socket to port 0, reads the port the system picked, and closes the
    socket. Another program could take the port before it is used, but a
    freshly released ephemeral port is rarely reused at once.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _run_rank(
    local_rank: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    world_size: int,
    master_addr: str,
    master_port: int,
    results: Any,
) -> None:
    """Entry point of one spawned process: set torchrun's variables, call ``fn``."""
    rank, size = str(local_rank), str(world_size)
    os.environ.update(
        RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=size, LOCAL_WORLD_SIZE=size
    )
    os.environ.update(MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))
    results.put((local_rank, fn(*args)))


def _spawned_rank(local_rank: int, *args: Any) -> None:  # pragma: no cover - child
    """:func:`_run_rank` in a spawned process, which then exits at once.

    Tearing down the interpreter while gloo's threads still hold tensors can
    abort the process (``terminate called without an active exception``), a
    known shutdown race in torch.distributed. The result is already in the
    queue (a ``SimpleQueue`` writes before ``put`` returns), so the process
    flushes its output and leaves without that teardown.
    """
    _run_rank(local_rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_workers(
    fn: Callable[..., Any],
    world_size: int,
    *,
    args: Sequence[Any] = (),
    master_addr: str = "127.0.0.1",
    master_port: int | None = None,
    timeout_s: float = 600.0,
) -> list[Any]:
    """Run ``fn(*args)`` in ``world_size`` spawned processes, as torchrun would.

    Each process gets ``RANK`` and ``LOCAL_RANK`` (its index), ``WORLD_SIZE``
    and ``LOCAL_WORLD_SIZE`` (``world_size``), ``MASTER_ADDR`` and
    ``MASTER_PORT`` in its environment, so ``fn`` can call
    ``torch.distributed.init_process_group(backend)`` without arguments, and
    the same ``fn`` runs unchanged under ``torchrun``.

    Parameters
    ----------
    fn : callable
        Importable by name (a module-level function of a module, not of
        ``__main__``); its arguments and return value must be picklable.
    world_size : int
        Number of processes (>= 1).
    args : sequence
        Positional arguments for ``fn``, the same in every process.
    master_addr : str
        Address of rank 0's rendezvous store.
    master_port : int, optional
        Its port; default a free one (:func:`free_port`).
    timeout_s : float
        Seconds to wait for all processes to finish before stopping them.

    Returns
    -------
    list
        What ``fn`` returned in each process, in rank order.

    Raises
    ------
    torch.multiprocessing.ProcessRaisedException
        If ``fn`` raised in a process; the message holds its traceback.
    torch.multiprocessing.ProcessExitedException
        If a process died without raising (a signal, ``os._exit``).
    TimeoutError
        If the processes did not finish within ``timeout_s``.
    """
    import torch.multiprocessing as mp

    world_size = checks.integer("world_size", world_size, minimum=1)
    port = free_port(master_addr) if master_port is None else int(master_port)
    results = mp.get_context("spawn").SimpleQueue()
    with spawn_safe():
        context = mp.start_processes(
            _spawned_rank,
            args=(fn, tuple(args), world_size, master_addr, port, results),
            nprocs=world_size,
            join=False,
            start_method="spawn",
        )
    received: dict[int, Any] = {}

    def drain() -> None:
        while not results.empty():
            rank, value = results.get()
            received[rank] = value

    deadline = time.monotonic() + timeout_s
    try:
        while not context.join(timeout=0.05):
            drain()
            if time.monotonic() > deadline:
                msg = f"{world_size} processes still running after {timeout_s:g} s"
                raise TimeoutError(msg)
        drain()
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join()
        results.close()
    missing = sorted(set(range(world_size)) - set(received))
    if missing:  # pragma: no cover - a process that exits 0 always reports
        msg = f"every rank must return a result, got none from rank(s) {missing}"
        raise RuntimeError(msg)
    return [received[rank] for rank in range(world_size)]


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

    Run it in every rank, e.g. with :func:`run_workers` or ``torchrun``: it
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
