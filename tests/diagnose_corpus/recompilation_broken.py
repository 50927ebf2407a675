"""A compiled step fed batches of varying length as static shapes
(plot_recompilation): every new length compiles again. The eager backend keeps
each compilation short here; the guards, and so the recompilations, are the same."""

import itertools

import torch

torch.manual_seed(0)
weight = torch.randn(64, 64)
lengths = itertools.cycle([40, 24, 56, 32, 48, 16, 64, 8])


@torch.compile(backend="eager", dynamic=False)
def block(x):
    return torch.softmax(x @ weight, dim=-1).sum()


def step():
    return block(torch.randn(next(lengths), 64))
