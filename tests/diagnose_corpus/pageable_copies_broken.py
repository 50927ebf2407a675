"""Batches copied from pageable host memory (plot_transfer_bandwidth):
``non_blocking=True`` does not make such a copy overlap."""

import torch

torch.manual_seed(0)
host = torch.randn(64, 2**20)  # 256 MiB, pageable
weight = torch.randn(2**20, 16, device="cuda")


def step():
    batch = host.to("cuda", non_blocking=True)
    return (batch @ weight).sum()
