"""One small matmul per sample, in a Python loop (plot_batching)."""

import torch

torch.set_num_threads(1)  # microsecond calls: a second thread only waits
torch.manual_seed(0)
weight = torch.randn(32, 32)
samples = torch.randn(256, 16, 32)


def step():
    outputs = [sample @ weight for sample in samples]
    return torch.stack(outputs).relu().sum()
