"""fp32 matmuls with TF32 turned off (plot_dtype_throughput)."""

import torch

torch.set_float32_matmul_precision("highest")
a = torch.randn(8192, 8192, device="cuda")
b = torch.randn(8192, 8192, device="cuda")


def step():
    return a @ b
