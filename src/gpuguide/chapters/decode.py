"""The Llama-shaped decoder chapter 15's pages time, and what its steps cost.

RMSNorm, grouped-query attention over a static cache, a SwiGLU MLP, random weights
(:func:`random_decoder`); :class:`DecoderShape` counts what one step reads and
computes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from gpuguide import checks

if TYPE_CHECKING:
    from torch import Tensor

__all__ = [
    "DecoderShape",
    "cuda_graph",
    "l2_cache_bytes",
    "quantize_int8",
    "random_decoder",
    "stepper",
]


#: The L2 cache assumed where torch gives none: more than any GPU's (a B200's 126 MB).
_L2_FALLBACK_BYTES = 256 * 2**20


@dataclasses.dataclass(frozen=True)
class DecoderShape:
    """A decoder's sizes: width ``dim``, ``layers``, query ``heads`` and the
    ``kv_heads`` they share (grouped-query attention), MLP width ``ffn``, ``vocab``.
    """

    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            checks.integer(field.name, getattr(self, field.name), minimum=1)
        if self.dim % self.heads or self.heads % self.kv_heads:
            msg = (
                "heads must divide dim and kv_heads divide heads, got "
                f"dim={self.dim}, heads={self.heads}, kv_heads={self.kv_heads}"
            )
            raise ValueError(msg)

    @property
    def label(self) -> str:
        """The shape in a few words, to name what a figure was measured on."""
        return (
            f"{self.layers} layer(s) of dim {self.dim}, ffn {self.ffn}, "
            f"{self.heads}/{self.kv_heads} heads, vocab {self.vocab}"
        )

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.dim // self.heads

    @property
    def matmul_params(self) -> int:
        """Weights of the matmuls one step runs (the layers' and the output head)."""
        qkv = self.dim * (self.heads + 2 * self.kv_heads) * self.head_dim
        per_layer = qkv + self.dim * self.dim + 3 * self.dim * self.ffn
        return self.layers * per_layer + self.vocab * self.dim

    def weight_bytes(self, itemsize: int) -> int:
        """Bytes the weights take, ``itemsize`` each: matmuls, embedding, norms."""
        norms = (2 * self.layers + 1) * self.dim
        return (self.matmul_params + self.vocab * self.dim + norms) * itemsize

    def kv_bytes_per_token(self, itemsize: int) -> int:
        """Bytes of cache one token of one sequence takes (keys, values, all layers)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * itemsize

    def kv_cache_bytes(self, batch: int, context: int, itemsize: int) -> int:
        """Bytes of the cache of ``batch`` sequences of ``context`` positions."""
        return batch * context * self.kv_bytes_per_token(itemsize)

    def step_flop(self, batch: int, context: int) -> int:
        """FLOP of one step for ``batch`` new tokens attending to ``context``
        positions each: 2 per matmul weight and token, 4 per head, position and
        head width for the attention."""
        attention = 4 * self.layers * self.heads * self.head_dim * context
        return batch * (2 * self.matmul_params + attention)

    def step_bytes(
        self, batch: int, context: int, itemsize: int, weight_itemsize: int = 0
    ) -> int:
        """Bytes one step reads: weights (``weight_itemsize`` each, else ``itemsize``;
        below it, a scale per output row), norms, an embedding row and ``context``
        positions of cache per sequence."""
        weight_itemsize = weight_itemsize or itemsize
        weights = self.matmul_params * weight_itemsize
        if weight_itemsize < itemsize:  # one scale per output row
            qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
            rows = self.layers * (qkv + 2 * self.dim + 2 * self.ffn) + self.vocab
            weights += rows * itemsize
        norms = (2 * self.layers + 1) * self.dim * itemsize
        embedding_rows = batch * self.dim * itemsize
        cache = self.kv_cache_bytes(batch, context, itemsize)
        return weights + norms + embedding_rows + cache


class _StaticCache(nn.Module):
    """Keys and values of ``length`` positions for each of ``batch`` sequences,
    allocated once: zeros where nothing was written yet (masked, but not NaN)."""

    k: Tensor
    v: Tensor

    def __init__(
        self,
        batch: int,
        kv_heads: int,
        length: int,
        head_dim: int,
        *,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__()
        shape = (batch, kv_heads, length, head_dim)
        self.register_buffer("k", torch.zeros(shape, dtype=dtype, device=device))
        self.register_buffer("v", torch.zeros(shape, dtype=dtype, device=device))

    def update(self, pos: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new keys and values ``(batch, kv_heads, 1, head_dim)`` at the
        position held in ``pos`` (a one-element tensor on the device), in place."""
        self.k.index_copy_(2, pos, k)
        self.v.index_copy_(2, pos, v)
        return self.k, self.v


class Attention(nn.Module):
    """Attention of one new token per sequence over the cache; each key-value head
    serves ``heads // kv_heads`` query heads."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.heads, self.kv_heads = shape.heads, shape.kv_heads
        self.head_dim = shape.head_dim
        width = (shape.heads + 2 * shape.kv_heads) * shape.head_dim
        self.wqkv = nn.Linear(shape.dim, width, bias=False)
        self.wo = nn.Linear(shape.dim, shape.dim, bias=False)
        self.cache: Any = None  # a _StaticCache (or a page's own), set by the decoder

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        b, kv_width = x.shape[0], self.kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split(
            [self.heads * self.head_dim, kv_width, kv_width], -1
        )
        q = q.view(b, self.kv_heads, self.heads // self.kv_heads, self.head_dim)
        k, v = (t.view(b, self.kv_heads, 1, self.head_dim) for t in (k, v))
        keys, values = self.cache.update(pos, k, v)
        scores = q @ keys.transpose(-1, -2) * self.head_dim**-0.5
        visible = torch.arange(keys.shape[2], device=x.device) <= pos
        scores = scores.masked_fill(~visible, float("-inf"))
        weights = scores.float().softmax(dim=-1).to(values.dtype)
        out: Tensor = self.wo((weights @ values).reshape(b, -1))
        return out


class Block(nn.Module):
    """A pre-norm decoder layer: attention, then a SwiGLU MLP, each with a residual."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(shape.dim), nn.RMSNorm(shape.dim)
        self.attention = Attention(shape)
        self.w13 = nn.Linear(shape.dim, 2 * shape.ffn, bias=False)  # gate and up
        self.w2 = nn.Linear(shape.ffn, shape.dim, bias=False)

    def forward(self, x: Tensor, pos: Tensor) -> Tensor:
        x = x + self.attention(self.norm1(x), pos)
        gate, up = self.w13(self.norm2(x)).chunk(2, dim=-1)
        out: Tensor = x + self.w2(F.silu(gate) * up)
        return out


class Decoder(nn.Module):
    """``tokens`` (one per sequence) and their position -> next-token logits."""

    def __init__(self, shape: DecoderShape) -> None:
        super().__init__()
        self.shape = shape
        self.embed = nn.Embedding(shape.vocab, shape.dim)
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = nn.RMSNorm(shape.dim)
        self.head = nn.Linear(shape.dim, shape.vocab, bias=False)

    def setup_cache(
        self, batch: int, length: int, cache: Callable[..., nn.Module] = _StaticCache
    ) -> None:
        """Give every layer a new ``cache(batch, kv_heads, length, head_dim,
        dtype=, device=)``."""
        s, weight = self.shape, self.embed.weight  # never quantized
        kv = (batch, s.kv_heads, length, s.head_dim)
        for attention in (m for m in self.modules() if isinstance(m, Attention)):
            attention.cache = None  # free the old cache before the new one
            attention.cache = cache(*kv, dtype=weight.dtype, device=weight.device)

    def forward(self, tokens: Tensor, pos: Tensor) -> Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x, pos)
        logits: Tensor = self.head(self.norm(x))
        return logits


def stepper(net: Callable[..., Tensor], *args: Any) -> Callable[[], Tensor]:
    """A decode step, ``net(*args)``, that first tells CUDA graphs a new step
    begins (the last step's outputs may be overwritten)."""

    def step() -> Tensor:
        torch.compiler.cudagraph_mark_step_begin()
        return net(*args)

    return step


def random_decoder(
    shape: DecoderShape, *, device: torch.device | str, dtype: torch.dtype
) -> Decoder:
    """A :class:`Decoder` with random weights made on ``device`` in ``dtype``
    (never in float32 first), for inference: no gradients."""
    with torch.device("meta"):
        model = Decoder(shape)
    model = model.to(dtype).to_empty(device=device).requires_grad_(False)
    for p in model.parameters():
        if p.ndim == 1:
            p.fill_(1.0)  # norms
        else:
            p.normal_(0.0, p.shape[1] ** -0.5)  # activations keep their scale
    return model.eval()


def quantize_int8(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 weight-only quantization: ``(q, scales)``, one scale per
    output row, about ``max |row| / 127`` in the weight's dtype (rounded up: no
    value clips); ``q * scales`` is within ``scales / 2`` of each weight."""
    largest = weight.detach().abs().amax(dim=1).float()
    largest = largest.clamp(min=torch.finfo(torch.float32).tiny)
    scales = (largest / 127 * (1 + 2**-7)).to(weight.dtype)  # up by a bf16 rounding
    w = weight.detach().to(torch.float32, copy=True)  # a copy, rounded in place
    w.div_(scales.float()[:, None]).round_().clamp_(-127, 127)
    return w.to(torch.int8), scales


def cuda_graph(step: Callable[[], Any]) -> Callable[[], None]:
    """The replay of ``step`` captured in a CUDA graph (after a side-stream warm-up)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def l2_cache_bytes(device: torch.device | str) -> int:
    """Bytes of ``device``'s L2 cache (0 off CUDA)."""
    device = torch.device(device)
    if device.type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0) or _L2_FALLBACK_BYTES)
