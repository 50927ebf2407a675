"""Data-parallel training in spawned processes: what each process imports by name.

:func:`launch_worlds` starts processes that set ``torchrun``'s variables and run a
worker; :func:`ddp_train_worker` trains a small MLP with DDP and times its steps;
:func:`ddp_plan` sizes the DDP page.
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

from gpuguide.chapters.data import spawn_safe
from gpuguide.timing import Measurement, benchmark

if TYPE_CHECKING:
    import torch

__all__ = ["ddp_plan", "ddp_train_worker", "launch_worlds"]

# A warm-up budget no call stays under: ``benchmark`` warms up with exactly one call,
# so every rank makes as many calls (a DDP step is collective: one more would hang).
_ONE_WARMUP_CALL_MS = 1e-6
_HOST = "127.0.0.1"  # where the ranks meet: this machine
_TIMEOUT_S = 600  # a launch that runs longer than this is stopped


def _run_worlds(
    local_rank: int,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    worlds: Sequence[tuple[int, int]],
    barrier: Any,
    results: Any,
) -> None:
    """Take part in each world ``(world_size, master_port)`` with a rank in it, in
    turn: set torchrun's variables, put ``((world_size, local_rank), fn(*args))``
    into ``results``."""
    for world_size, master_port in worlds:
        barrier.wait()  # every process is done with the world before
        if local_rank < world_size:
            rank, size = str(local_rank), str(world_size)
            os.environ.update(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=size)
            os.environ.update(LOCAL_WORLD_SIZE=size, MASTER_ADDR=_HOST)
            os.environ["MASTER_PORT"] = str(master_port)
            results.put(((world_size, local_rank), fn(*args)))


def _spawned(local_rank: int, *args: Any) -> None:  # pragma: no cover - child
    """One spawned process: :func:`_run_worlds`, then exit at once (tearing down
    while gloo's threads hold tensors can abort). ``torch._dynamo``, which DDP
    imports, is imported first, by all processes together."""
    import torch._dynamo  # noqa: F401

    _run_worlds(local_rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _launch(
    worker: Callable[..., Any],
    args: tuple[Any, ...],
    sizes: Sequence[int],
) -> dict[int, list[Any]]:
    """Each world's ``worker(*args)`` results by rank, from one set of processes."""
    import torch.multiprocessing as mp

    sockets = [socket.socket() for _ in sizes]  # all bound at once: distinct ports
    for s in sockets:
        s.bind((_HOST, 0))
    worlds = [(n, s.getsockname()[1]) for n, s in zip(sizes, sockets, strict=True)]
    for s in sockets:
        s.close()
    spawn = mp.get_context("spawn")
    results, barrier = spawn.SimpleQueue(), spawn.Barrier(max(sizes))
    with spawn_safe():  # the children import what they run, not the page
        ranks = mp.start_processes(
            _spawned,
            args=(worker, args, worlds, barrier, results),
            nprocs=max(sizes),
            join=False,
            start_method="spawn",
        )
    deadline = time.monotonic() + _TIMEOUT_S
    try:
        while not ranks.join(timeout=0.05):  # raises if a rank failed
            if time.monotonic() > deadline:
                msg = f"{max(sizes)} processes still running after {_TIMEOUT_S} s"
                raise TimeoutError(msg)
    finally:
        for process in ranks.processes:
            if process.is_alive():
                process.kill()
    got = dict(results.get() for _ in range(sum(sizes)))  # (size, rank): report
    return {n: [got[n, rank] for rank in range(n)] for n in sizes}


def launch_worlds(
    worker: Callable[..., Any],
    args: tuple[Any, ...],
    sizes: Sequence[int],
    *,
    one_set: bool = False,
) -> dict[int, list[Any]]:
    """Run ``worker(*args)`` in every rank of worlds of ``sizes`` processes; each
    world's results by rank. ``one_set``: one set of processes runs all worlds."""
    if one_set:
        return _launch(worker, args, sizes)
    return {n: _launch(worker, args, [n])[n] for n in sizes}


@dataclass(frozen=True)
class _DDPConfig:
    """What :func:`ddp_train_worker` trains and times: ``backend`` ``"gloo"`` (CPU)
    or ``"nccl"`` (one GPU per process), ``batch_size`` per process."""

    backend: str = "gloo"
    features: int = 256
    width: int = 1024
    classes: int = 10
    batch_size: int = 64
    steps: int = 10
    warmup_steps: int = 3

    def model(self) -> torch.nn.Module:
        """A three-layer MLP: ``features -> width -> width -> classes`` with ReLUs."""
        from torch import nn

        hidden = [nn.Linear(self.features, self.width), nn.ReLU()]
        hidden += [nn.Linear(self.width, self.width), nn.ReLU()]
        return nn.Sequential(*hidden, nn.Linear(self.width, self.classes))


@dataclass(frozen=True)
class _DDPReport:
    """What one rank timed and checked on the first batch: its averaged gradients
    against rank 0's (``rank_difference``) and the mean of the local ones
    (``mean_error``)."""

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


def ddp_plan(
    gpus: int, cores: int, *, small: bool = False, gpu_host: bool = False
) -> tuple[list[int], _DDPConfig, str | None]:
    """The DDP page's world sizes, config and why its gloo ranks cannot be timed
    steadily (None where they can): with two CUDA GPUs or more, 1-8 processes, NCCL
    and a large MLP; else gloo, 1, 2 and 4 processes up to the usable ``cores`` (at
    least 2; ``small``: 1 and 2, a narrower MLP), on a GPU's host one and the most.
    Each gloo rank needs two cores: its own and one for gloo's threads and the page.
    """
    if gpus >= 2:
        sizes = [n for n in (1, 2, 4, 8) if n <= gpus]
        config = _DDPConfig("nccl", features=1024, width=4096, batch_size=256, steps=20)
        return sizes, config, None
    sizes = [n for n in (1, 2, 4) if n <= max(cores, 2)][: 2 if small else 3]
    if gpu_host:
        sizes = [1, sizes[-1]]
    width, steps = (512, 5) if small else (1024, 10)
    config = _DDPConfig("gloo", width=width, batch_size=128, steps=steps)
    few = f"{cores} usable cores: too few to time {sizes[-1]} processes steadily"
    return sizes, config, None if cores >= 2 * sizes[-1] else few


def _flat_grads(model: torch.nn.Module) -> torch.Tensor:
    import torch

    return torch.cat(
        [p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]
    )


def ddp_train_worker(config: _DDPConfig) -> _DDPReport:
    """Train an MLP with DistributedDataParallel in this rank (``RANK``,
    ``LOCAL_RANK`` and ``WORLD_SIZE`` set); time its steps."""
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
        torch.set_num_threads(1)
        dist.init_process_group("gloo")
    try:
        # The same seed on every rank: the same data set and the same initial
        # weights (DDP also copies rank 0's weights to the others when it wraps).
        torch.manual_seed(0)
        n = 4 * world_size * config.batch_size
        dataset = TensorDataset(
            torch.randn(n, config.features), torch.randint(config.classes, (n,))
        )
        model = config.model().to(device)
        ddp = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        loss_fn = torch.nn.CrossEntropyLoss()

        # Each rank reads its own quarter, third... of the data set.
        sampler: DistributedSampler[int] = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank
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

        timed_step = timed(step, f"{world_size}-rank DDP step")
        timed_no_sync = timed(step_no_sync, f"{world_size}-rank step, no_sync")
        buffer = torch.zeros_like(averaged)
        timed_allreduce = timed(dist.all_reduce, "all-reduce alone", buffer)
        dist.barrier()  # every rank is done with its collectives before teardown
        report = _DDPReport(
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
