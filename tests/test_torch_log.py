"""The patterns that keep torch's own log lines and stray reprs off the pages can fail."""

from __future__ import annotations

import pytest
from conftest import STRAY_REPR, TORCH_LOG

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


# Values left at the end of a cell, as sphinx-gallery printed them (the first was
# on three pages of the H100 build of f4b16f4).
STRAY = [
    "Result(page='plot_roofline', name='float32 matmul rate', value=5.2e13, "
    "unit='FLOP/s', spread=None, config=mappingproxy({}), runs=1, size=8192)",
    "config=mappingproxy({'dtype': 'bf16'})",
    "<gpuguide.chapters.data.Loader object at 0x7f3a2c1b9d90>",
    # Printed on purpose once, but a reader should get text, not a repr (the
    # reading of 6f805ee found each of these on a page).
    "<Measurement 'matmul 256' on cpu: median 221 us, IQR 63 us (29%), 455 runs>",
    "DDPConfig(backend='gloo', features=256, width=1024, batch_size=128, seed=0)",
    "DecoderShape(dim=1024, layers=1, heads=16, kv_heads=4, ffn=2816, vocab=8192)",
    "<Peaks CPU: fp32 214 GFLOP/s, memory 12.1 GB/s>",
    "output shape torch.Size([64, 10])",
    "Claim(text='a is 4', outcome='held', measured='4')",
    '"This page\'s claims in this run: 2 held\\n  Claim held: x (measured 1)"',
]

MEANT = [
    "Results of this run: 4 figures",
    "matmul 256: 221 us per call (190 us-253 us)",
    "DDP with 2 processes: backend gloo, 256 features, width 1024, batch 128",
    "output shape (64, 10)",
    "torch.Size is a tuple",
    '"quoted" words in a sentence',
]


@pytest.mark.parametrize("line", STRAY)
def test_stray_reprs_are_caught(line):
    assert STRAY_REPR.search("page output\n" + line + "\nmore")


@pytest.mark.parametrize("line", MEANT)
def test_printed_values_pass(line):
    assert STRAY_REPR.search(line) is None
