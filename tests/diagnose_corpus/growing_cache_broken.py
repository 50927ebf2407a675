"""A key-value cache that grows by concatenation under a compiled step
(plot_decode_overhead): its shape changes every step, so the step recompiles."""

import torch

torch.manual_seed(0)
state = {"cache": torch.randn(1, 8, 64)}


@torch.compile(backend="eager", dynamic=False)
def attend(query, cache):
    weights = torch.softmax(query @ cache.transpose(1, 2), dim=-1)
    return weights @ cache


def step():
    query = torch.randn(1, 1, 64)
    state["cache"] = torch.cat([state["cache"], query], dim=1)
    return attend(query, state["cache"])
