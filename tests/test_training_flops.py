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


def test_compiled_blocks_share_one_graph_across_blocks_models_and_batches() -> None:
    """compile_blocks: one graph for every block, a new model's blocks and a
    doubled batch (the MFU page's "+ 2x batch" row), so compiling happens once."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    config = gpt_config("cpu", small=True)
    for batch in (config.batch, config.batch, 2 * config.batch):  # two models at 4
        model = GPT(config)
        model.compile_blocks()
        tokens = torch.randint(config.vocab, (batch, config.context))
        assert model(tokens).shape == (batch, config.context, config.vocab)
    assert counters["stats"]["unique_graphs"] == 1
    assert counters["stats"]["calls_captured"] > 0
    torch._dynamo.reset()
