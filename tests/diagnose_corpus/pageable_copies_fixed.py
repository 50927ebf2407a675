"""The fix: copy from pinned host memory (plot_transfer_bandwidth)."""

import torch

torch.manual_seed(0)
host = torch.randn(64, 2**20).pin_memory()  # 256 MiB, pinned
weight = torch.randn(2**20, 16, device="cuda")


def step():
    batch = host.to("cuda", non_blocking=True)
    return (batch @ weight).sum()
