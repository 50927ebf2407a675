"""The FLOP formula of the MFU page against FlopCounterMode on a small GPT."""

from __future__ import annotations

import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from gpuguide.chapters.training import GPT, gpt_config


def test_the_formula_matches_the_counter_on_written_out_attention() -> None:
    """6 x weight-matrix parameters x tokens for the matmuls, plus the attention's
    whole square (the counter ignores the causal mask): exactly the counted FLOP."""
    config = gpt_config("cpu", small=True)
    model = GPT(config, sdpa=False)
    tokens = torch.randint(config.vocab, (config.batch, config.context + 1))
    with FlopCounterMode(display=False) as counter:
        logits = model(tokens[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
    weights = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    weights -= model.position.weight.numel()
    n_tokens = config.batch * config.context
    head = config.width // config.heads
    square = 12 * config.layers * config.heads * head * config.context * n_tokens
    assert counter.get_total_flops() == 6 * weights * n_tokens + square
