"""The pattern that keeps torch's own log lines off the pages can fail."""

from __future__ import annotations

import pytest
from conftest import TORCH_LOG

# Lines printed on pages of the first H100 build (../shared/gpu-runs).
SEEN_ON_GPU = [
    "AUTOTUNE addmm(2048x768, 2048x256, 256x768)",
    "Autotune Choices Stats:",
    "SingleProcess AUTOTUNE benchmarking takes 12.0574 seconds",
    "loss.item()  synchronizes (called a synchronizing CUDA operation "
    "(Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:162.))",
    "warning while compiling: UserWarning: TypedStorage is deprecated.",
    "Profiler clears events at the end of each cycle.",
    "ERROR: DataLoader worker (pid 1234) is killed by signal: Terminated.",
    "W1123 00:42:01.123000 4321 torch/_dynamo/convert_frame.py:1016] recompile",
    "[rank0]:W1123 00:42:01.123000 4321 torch/distributed/x.py:1] note",
]

CLEAN = [
    "Measured on NVIDIA H100 80GB HBM3 | torch 2.11.0+cu130 | 2026-11-23 00:42 UTC",
    "loss.item()  synchronizes (called a synchronizing CUDA operation)",
    "max-autotune benchmarked 22 choices for 8 matmuls in 94 s",
    "W = x @ w: 2048 x 2048",
]


@pytest.mark.parametrize("line", SEEN_ON_GPU)
def test_torch_logs_are_caught(line):
    assert TORCH_LOG.search("page output\n" + line + "\nmore")


@pytest.mark.parametrize("line", CLEAN)
def test_clean_lines_pass(line):
    assert TORCH_LOG.search(line) is None
