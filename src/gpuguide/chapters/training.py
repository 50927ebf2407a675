"""A GPT-style model sized to the device, for the MFU page."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["GPT", "GPTConfig", "gpt_config"]


class GPTConfig(NamedTuple):
    """Layers, width, heads, context length, vocabulary and batch of one model."""

    layers: int
    width: int
    heads: int
    context: int
    vocab: int
    batch: int

    def __str__(self) -> str:
        return (
            f"GPT of {self.layers} layers, {self.width} wide, {self.heads} heads; "
            f"context {self.context}, vocabulary {self.vocab}, batch {self.batch}"
        )


def gpt_config(device: torch.device | str, *, small: bool = False) -> GPTConfig:
    """About 350M parameters on a GPU (GPT-2 medium), a few million on a CPU."""
    if small:
        return GPTConfig(layers=2, width=128, heads=4, context=64, vocab=512, batch=4)
    if torch.device(device).type == "cuda":
        return GPTConfig(24, 1024, 16, context=512, vocab=50304, batch=4)
    return GPTConfig(layers=4, width=256, heads=4, context=128, vocab=2048, batch=8)


class _Block(nn.Module):
    def __init__(self, config: GPTConfig, sdpa: bool) -> None:
        super().__init__()
        width = config.width
        self.heads, self.sdpa = config.heads, sdpa
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        """Causal self-attention, by SDPA or written out (``self.sdpa``)."""
        batch, context, width = x.shape
        shape = (batch, context, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # written out: the (context x context) scores pass through memory
            scores = q @ k.transpose(-2, -1) / (width // self.heads) ** 0.5
            mask = torch.ones(context, context, dtype=torch.bool, device=x.device)
            scores = scores.masked_fill(~mask.tril(), float("-inf"))
            out = scores.softmax(-1) @ v
        merged: torch.Tensor = self.proj(
            out.transpose(1, 2).reshape(batch, context, width)
        )
        return merged

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attend(self.norm1(x))
        mlp: torch.Tensor = self.down(F.gelu(self.up(self.norm2(x))))
        return x + mlp


class GPT(nn.Module):
    """A decoder-only transformer with pre-norm blocks and a tied output head."""

    def __init__(self, config: GPTConfig, *, sdpa: bool = True) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.width)
        self.position = nn.Embedding(config.context, config.width)
        self.blocks = nn.ModuleList(_Block(config, sdpa) for _ in range(config.layers))
        self.norm = nn.LayerNorm(config.width)

    def compile_blocks(self) -> None:
        """Compile each block in place: they share one graph, compiled once, with
        the batch and context dimensions dynamic (one graph for every batch size)."""
        for block in self.blocks:
            block.compile(dynamic=True)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits, ``(batch, context, vocab)``."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.embed(tokens) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        logits: torch.Tensor = self.norm(x) @ self.embed.weight.T  # a tied head
        return logits
