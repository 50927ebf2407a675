"""Tests for gpuguide.chapters.distributed: spawned ranks and a real gloo DDP run."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler, TensorDataset

from gpuguide.chapters import distributed
from gpuguide.chapters.data import spawn_safe
from gpuguide.chapters.distributed import (
    _DDPConfig,
    _DDPReport,
    _run_worlds,
    _spawned,
    ddp_train_worker,
)
from gpuguide.timing import Measurement

TINY = _DDPConfig(
    features=8, width=16, classes=3, batch_size=4, steps=2, warmup_steps=1
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(fn, world_size, args=()):
    """Run ``fn(*args)`` in ``world_size`` spawned ranks, as the DDP page does."""
    return distributed.launch_worlds(fn, tuple(args), [world_size])[world_size]


def test_spawned_ranks_get_torchrun_variables_per_rank():
    # os.path.expandvars is importable by name, so a spawned child can run it.
    values = launch(
        os.path.expandvars, 2, args=("$RANK,$LOCAL_RANK/$WORLD_SIZE@$MASTER_ADDR",)
    )
    assert values == ["0,0/2@127.0.0.1", "1,1/2@127.0.0.1"]
    ports = launch(os.path.expandvars, 2, args=("$MASTER_PORT",))
    assert ports[0] == ports[1]
    assert int(ports[0]) > 0


def _expected_gradient_norm(config: _DDPConfig, world_size: int) -> float:
    """What DDP should produce, computed in one process: the mean of local grads."""
    torch.manual_seed(0)
    n = 4 * world_size * config.batch_size
    data = TensorDataset(
        torch.randn(n, config.features), torch.randint(config.classes, (n,))
    )
    model = config.model()
    grads = []
    for rank in range(world_size):
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
        x, y = data[list(sampler)[: config.batch_size]]
        model.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    return float(torch.stack(grads).mean(0).norm())


def test_ddp_worker_averages_gradients_identically_on_two_ranks():
    reports = launch(ddp_train_worker, 2, args=(TINY,))
    assert len(reports) == 2
    expected = _expected_gradient_norm(TINY, 2)
    single_rank = _expected_gradient_norm(TINY, 1)
    assert abs(expected - single_rank) > 1e-3  # the check can tell them apart
    n_params = sum(p.numel() for p in TINY.model().parameters())
    for r in reports:
        assert isinstance(r, _DDPReport)
        assert r.device == "cpu"
        assert r.rank_difference == 0.0
        assert r.mean_error < 1e-6
        assert r.gradient_norm == pytest.approx(expected, rel=1e-5)
        assert r.samples_per_step == 8
        assert r.gradient_bytes == 4 * n_params
        for m in (r.step, r.step_no_sync, r.allreduce):
            assert isinstance(m, Measurement)
            assert m.n == TINY.steps
            assert m.median_s > 0
    # DistributedSampler gave the ranks different samples.
    assert not set(reports[0].first_indices) & set(reports[1].first_indices)


def test_ddp_worker_in_this_process_with_one_rank(monkeypatch):
    # The same worker as in the spawned runs, here in-process so that coverage
    # sees it; a world of one: the averaged gradients are the local ones.
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    env |= {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = _DDPConfig(features=8, width=16, classes=3, batch_size=4, steps=3)
    threads = torch.get_num_threads()
    try:
        report = ddp_train_worker(config)
        assert torch.get_num_threads() == 1  # a thread per gloo process
    finally:
        torch.set_num_threads(threads)
    assert not torch.distributed.is_initialized()
    assert report.samples_per_step == 4
    assert report.step.n == report.step_no_sync.n == report.allreduce.n == 3
    assert report.rank_difference == 0.0
    assert report.mean_error == 0.0
    assert report.gradient_norm == pytest.approx(_expected_gradient_norm(config, 1))


class _ListQueue(list):
    put = list.append


class _CountingBarrier:
    waits = 0

    def wait(self):
        self.waits += 1


def test_run_worlds_takes_part_in_the_worlds_larger_than_its_index(monkeypatch):
    monkeypatch.setattr(os, "environ", dict(os.environ))
    queue, barrier = _ListQueue(), _CountingBarrier()
    worlds = [(1, 1111), (2, 2222), (4, 4444)]
    _run_worlds(1, os.getenv, ("MASTER_PORT",), worlds, barrier, queue)
    assert barrier.waits == 3  # also before the world it sits out
    assert queue == [((2, 1), "2222"), ((4, 1), "4444")]
    assert os.environ["WORLD_SIZE"] == "4"
    assert os.environ["RANK"] == "1"


def test_run_worlds_runs_each_world_in_turn_in_one_set_of_processes():
    ports = [free_port(), free_port()]
    worlds = list(zip((1, 2), ports, strict=True))
    spawn = mp.get_context("spawn")
    results, barrier = spawn.SimpleQueue(), spawn.Barrier(2)
    text = "$RANK/$WORLD_SIZE@$MASTER_PORT"
    with spawn_safe():
        mp.start_processes(
            _spawned,
            args=(os.path.expandvars, (text,), worlds, barrier, results),
            nprocs=2,
            start_method="spawn",
        )
    got = dict(results.get() for _ in range(3))
    assert got == {
        (1, 0): f"0/1@{ports[0]}",
        (2, 0): f"0/2@{ports[1]}",
        (2, 1): f"1/2@{ports[1]}",
    }


def test_launch_runs_each_world_and_returns_its_results_by_rank():
    from gpuguide.chapters import distributed

    args = ("$RANK/$WORLD_SIZE",)
    got = distributed.launch_worlds(os.path.expandvars, args, [1, 2], one_set=True)
    assert got == {1: ["0/1"], 2: ["0/2", "1/2"]}


@pytest.mark.gpu
def test_ddp_worker_with_nccl_on_the_gpus():
    world_size = 1  # NCCL's set-up and all-reduce, in one spawned rank (seconds)
    config = _DDPConfig("nccl", features=8, width=16, classes=3, batch_size=4, steps=2)
    reports = launch(ddp_train_worker, world_size, args=(config,))
    expected = _expected_gradient_norm(config, world_size)
    for rank, r in enumerate(reports):
        assert r.device == f"cuda:{rank}"
        assert r.step.method == "cuda-events"
        assert r.rank_difference == 0.0
        assert r.gradient_norm == pytest.approx(expected, rel=1e-4)


# -- the page's plan: world sizes, model, cores, launches ----------------------


@pytest.mark.parametrize(
    ("gpus", "cores", "small", "gpu_host", "sizes"),
    [
        (8, 4, False, True, [1, 2, 4, 8]),
        (3, 1, True, True, [1, 2]),
        (0, 2, False, False, [1, 2]),
        (0, 1, False, False, [1, 2]),  # at least two processes, even on one core
        (0, 16, False, False, [1, 2, 4]),
        (0, 16, True, False, [1, 2]),
        (1, 16, False, True, [1, 4]),  # a GPU's host: one process and the most
    ],
)
def test_ddp_plan_picks_world_sizes(gpus, cores, small, gpu_host, sizes):
    got, config, _ = distributed.ddp_plan(gpus, cores, small=small, gpu_host=gpu_host)
    assert got == sizes
    assert config.backend == ("nccl" if gpus >= 2 else "gloo")


def test_ddp_plan_sizes_the_model_for_the_backend():
    nccl = _DDPConfig("nccl", features=1024, width=4096, batch_size=256, steps=20)
    assert distributed.ddp_plan(2, 1)[1] == nccl
    gloo = _DDPConfig("gloo", width=1024, batch_size=128, steps=10)
    assert distributed.ddp_plan(0, 8)[1] == gloo
    small = _DDPConfig("gloo", width=512, batch_size=128, steps=5)
    assert distributed.ddp_plan(0, 8, small=True)[1] == small


def test_ddp_plan_says_when_too_few_cores_for_two_per_process():
    assert distributed.ddp_plan(0, 8)[2] is None
    assert distributed.ddp_plan(0, 7)[2] == (
        "7 usable cores: too few to time 4 processes steadily"
    )
    assert distributed.ddp_plan(0, 1)[2] == (
        "1 usable cores: too few to time 2 processes steadily"
    )
    assert distributed.ddp_plan(2, 1)[2] is None


@pytest.mark.parametrize(
    ("one_set", "launches"), [(True, [[1, 2, 4]]), (False, [[1], [2], [4]])]
)
def test_launch_worlds_in_one_set_or_a_set_per_world(monkeypatch, one_set, launches):
    calls = []

    def fake_launch(worker, args, sizes):
        calls.append(list(sizes))
        return {n: [(worker, args, n, rank) for rank in range(n)] for n in sizes}

    monkeypatch.setattr(distributed, "_launch", fake_launch)
    got = distributed.launch_worlds(len, ("a",), [1, 2, 4], one_set=one_set)
    assert calls == launches
    assert list(got) == [1, 2, 4]
    assert got[2] == [(len, ("a",), 2, 0), (len, ("a",), 2, 1)]
