"""fp16 matmuls whose sizes are not multiples of 8 (plot_alignment)."""

import torch

N = 8191
a = torch.randn(N, N, device="cuda", dtype=torch.float16)
b = torch.randn(N, N, device="cuda", dtype=torch.float16)


def step():
    return a @ b
