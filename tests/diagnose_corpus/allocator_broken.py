"""Blocks of ever-changing sizes under a memory cap (plot_allocator): the caching
allocator runs out of fitting blocks, frees its cache and retries."""

import itertools

import torch

torch.cuda.set_per_process_memory_fraction(0.05)
cap = int(0.05 * torch.cuda.get_device_properties(0).total_memory)
sizes = itertools.cycle([0.30, 0.45, 0.20, 0.55, 0.35, 0.60])


def step():
    first = torch.empty(int(next(sizes) * cap), dtype=torch.uint8, device="cuda")
    second = torch.empty(int(next(sizes) * cap), dtype=torch.uint8, device="cuda")
    total = first.float().sum() + second.float().sum()
    del first, second
    return total
