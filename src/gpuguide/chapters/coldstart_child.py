"""The cold-start page's child: one fresh process, one start of a compiled model.

``python -m gpuguide.chapters.coldstart_child CASE BLOCKS DIM DEVICE ARTIFACTS
DEEPEST`` builds a stack of ``BLOCKS`` transformer blocks and reports its first
compiled call, its steady state and what the compiler's caches did, as one line of
JSON (:func:`gpuguide.chapters.coldstart.report`). ``CASE`` is ``cold``, ``warm``,
``Mega-Cache`` or ``regional``; the parent sets ``TORCHINDUCTOR_CACHE_DIR``.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from gpuguide.chapters.coldstart import measure, report


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


def by_blocks(
    model: nn.Sequential,
) -> nn.Sequential:  # regional compilation: one compilation serves all N
    for block in model:
        block.compile()
    return model


def main(
    case: str, blocks: int, dim: int, device: str, artifacts: str, deepest: bool
) -> None:
    torch.set_float32_matmul_precision("high")  # TF32 on a GPU
    model = nn.Sequential(*[Block(dim) for _ in range(blocks)]).to(device).eval()
    x, eager = torch.randn(1, 64, dim, device=device), copy.deepcopy(model)
    compiled = by_blocks(model) if case == "regional" else torch.compile(model)
    load: Callable[[], None] | None = None
    if case == "Mega-Cache":  # a cold process's caches, saved as one blob

        def load() -> None:
            torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())

    also: dict[str, nn.Module] = {}
    if case == "warm" and deepest:  # compiled by blocks too, side by side
        also["regional"] = by_blocks(copy.deepcopy(eager))
    result = measure(eager, compiled, x, device=device, before=load, also=also)
    if case == "cold" and (saved := torch.compiler.save_cache_artifacts()):
        Path(artifacts).write_bytes(saved[0])
    report(result)


if __name__ == "__main__":
    case, blocks, dim, device, artifacts, deepest = sys.argv[1:]
    main(case, int(blocks), int(dim), device, artifacts, deepest == "True")
