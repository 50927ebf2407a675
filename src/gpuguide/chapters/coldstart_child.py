"""The cold-start page's child: one fresh process, one start of a compiled model.

``python -m gpuguide.chapters.coldstart_child CASE BLOCKS DIM DEVICE ARTIFACTS
DEEPEST`` compiles a stack of ``BLOCKS`` transformer blocks and times its first
call and steady state (:func:`gpuguide.chapters.coldstart.measure`). ``CASE`` is
``cold``, ``warm``, ``Mega-Cache`` or ``regional``.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gpuguide.chapters.coldstart import measure


class Block(nn.Module):
    def __init__(self, dim: int, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        keep = None if pad is None else ~pad[:, None, None, :]  # pad: True = padding
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


def by_blocks(model: nn.Sequential) -> nn.Sequential:
    for block in model:  # regional compilation: one compilation serves all N
        block.compile()
    return model


if __name__ == "__main__":
    case, blocks, dim, device, artifacts, deepest = sys.argv[1:]
    torch.set_float32_matmul_precision("high")  # TF32 on a GPU
    model = nn.Sequential(*[Block(int(dim)) for _ in range(int(blocks))])
    model = model.to(device).eval()
    x, eager = torch.randn(1, 64, int(dim), device=device), copy.deepcopy(model)
    compiled = by_blocks(model) if case == "regional" else torch.compile(model)

    def load() -> None:  # Mega-Cache: a cold process's caches, saved as one blob
        torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())

    also: dict[str, nn.Module] = {}
    if case == "warm" and deepest == "True":  # compiled by blocks too, side by side
        also["regional"] = by_blocks(copy.deepcopy(eager))
    before = load if case == "Mega-Cache" else None
    measure(eager, compiled, x, device=device, before=before, also=also)
    if case == "cold" and (saved := torch.compiler.save_cache_artifacts()):
        Path(artifacts).write_bytes(saved[0])
