"""
Attention written out, against SDPA's fused kernels
===================================================

Attention is ``softmax(q @ k.T / sqrt(d)) @ v`` for every head. Written out in
PyTorch, it builds the ``S x S`` matrix of scores for each head in memory and reads
it back twice: its memory grows with the square of the sequence length ``S``.
``torch.nn.functional.scaled_dot_product_attention`` (SDPA) runs instead one of
several fused kernels (FlashAttention, memory-efficient, cuDNN) that keep each tile
of scores on chip and never write the matrix out.

This page checks that every backend gives the same answer, then sweeps the sequence
length at the FlashAttention papers' shapes (on a GPU: bf16, 16 heads of 128, and
``16384 / S`` sequences), measuring each one's rate and the peak memory of the
written-out path against SDPA's.

See also :doc:`/concepts/roofline` and the kernel-fusion chapter.
"""

# %%
# Setup
# -----
# The papers count ``4 * B * S**2 * H * D`` FLOP for one forward pass (two matmuls
# of ``2 * S**2 * D`` per head; half as many with a causal mask), as
# :func:`~gpuguide.chapters.attention.attention_flop` does. A CPU runs the same code
# with fewer heads, fewer tokens, shorter sequences and float32.
from contextlib import nullcontext
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel

import gpuguide
from gpuguide import Sweep, Variant
from gpuguide.chapters import attention

page = gpuguide.setup()
dtype, peak = (torch.bfloat16, "bf16") if page.cuda else (torch.float32, "fp32")
head_dim, heads = 128, 16 if page.cuda else 2
tokens, lo, hi = (16384, 512, 8192) if page.cuda else (4096, 256, 2048)
if page.small:
    tokens, lo, hi = 512, 128, 256


def make_qkv(seq, device=page.device):  # q, k, v: (batch, heads, seq, head_dim)
    shape = (tokens // seq, heads, seq, head_dim)
    return [torch.randn(shape, device=device, dtype=dtype) for _ in range(3)]


# %%
# The formula written out, and SDPA's backends
# --------------------------------------------
# Scaling ``q`` before the product saves one pass over the scores. The causal mask
# (a token attends only to earlier ones) sets the upper triangle to ``-inf``.
# ``torch.nn.attention.sdpa_kernel`` restricts SDPA to the backends given; one that
# cannot run these inputs here raises an error, so each is tried once. Every output
# must match the written-out formula in float32 (float64 on a CPU) within a
# tolerance set by the data type's precision.
def naive(q, k, v, causal=False):
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if causal:
        s = q.shape[-2]
        above = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
        scores.masked_fill_(above, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def sdpa(q, k, v, causal=False, backend=None):  # backend None: SDPA's own choice
    with sdpa_kernel(backend) if backend else nullcontext():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


q, k, v = make_qkv(2 * lo)
backends = attention.usable_backends(lambda: sdpa(q, k, v))
variants = {"naive": naive, "SDPA default": sdpa}
variants |= {f"SDPA {name}": partial(sdpa, backend=b) for name, b in backends.items()}
tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
high = [t.to(torch.float32 if page.cuda else torch.float64) for t in (q, k, v)]
errors = [
    attention.agreement(fn(q, k, v, causal), naive(*high, causal), tolerance=tolerance)
    for fn in variants.values()
    for causal in (False, True)
]
gpuguide.claim(
    f"every variant gives the reference's answer within {tolerance:g}",
    holds=all(ok for _, ok in errors),
    measured=f"largest error {max(e for e, _ in errors):.1e} of the largest value",
)


# %%
# The sweep over sequence length
# ------------------------------
# Every variant runs at every length whose memory fits the page's budget (which
# ``GPUGUIDE_GPU_MEMORY`` caps on a GPU): the written-out path and SDPA's math
# backend (float32 inside, on a GPU) hold three ``S x S`` matrices per head, the
# fused kernels little beyond their inputs.
def workload(lo, hi, causal=False):
    return Sweep(
        "attention forward" + (", causal" if causal else ""),
        make_qkv,
        lo=lo,
        hi=hi,
        memory=lambda s: 8 * tokens * heads * head_dim * dtype.itemsize,
        flop=lambda s: attention.attention_flop(
            tokens // s, s, heads, head_dim, causal=causal
        ),
        rate="FLOP/s",
        peak=peak,
        size_label="sequence length S (tokens)",
    )


def scores(element):  # the bytes the written-out path holds at length S
    return lambda s: attention.naive_bytes(tokens // s, s, heads, head_dim, element)


quadratic = {"naive": scores(dtype.itemsize), "SDPA math": scores(4)}
lengths = workload(lo, hi).run(
    {n: Variant(fn, memory=quadratic.get(n), call_s=0.1) for n, fn in variants.items()}
)
print(lengths)
shape = f"{tokens} tokens, {heads} heads of {head_dim}"  # what every S shares
lengths.report(shape=shape, causal=False)
s = lengths.largest("SDPA default", "naive")
gpuguide.claim(
    f"at S={s}, SDPA default runs at least 1.2x the written-out FLOP/s",
    lengths.compare("SDPA default", "naive", s),
    at_least=1.2,
)
lengths.plot(title="Forward rate against sequence length")
plt.show()

# %%
# Memory: quadratic against linear
# --------------------------------
# The written-out path's scores grow with ``S**2`` per sequence, a fused kernel's
# working memory with ``S``: at a fixed number of tokens per call, the ratio of the
# two grows with ``S``. Peak memory is what one call adds to its inputs (on a CPU,
# the process's resident memory: a coarser measure). The FlashAttention README's
# 10x less memory at ``S = 2048`` and 20x at 4096 were measured for training
# (forward and backward): a different quantity from this forward pass's ratios.
pair = {name: variants[name] for name in ("naive", "SDPA default")}
memory = attention.peak_memory(lengths, pair, make_qkv, device=page.device)
paired = zip(lengths.sizes, memory["naive"], memory["SDPA default"], strict=True)
ratios = {s: n / f for s, n, f in paired if n and f}
for s in set(ratios) & {2048, 4096}:
    what = "forward peak memory, naive / SDPA default"
    gpuguide.report(what, ratios[s], unit="x", size=shape, S=s)
gpuguide.claim(
    "naive's memory over SDPA default's grows with S: at least doubles over the sweep",
    holds=len(ratios) >= 2 and max(ratios.values()) >= 2 * ratios[min(ratios)],
    measured=", ".join(f"{r:.3g}x at S={s}" for s, r in ratios.items()),
    unless="small sizes: too little memory to measure" if page.small else None,
)

# %%
# The causal case
# ---------------
# A causal mask halves the work, but a kernel that skips the masked tiles has less
# to overlap, so its rate drops: at ``S = 8192`` (on a CPU, the longest length).
at = lengths.largest("SDPA default")
causal = workload(at, at, causal=True).run({"SDPA default": partial(sdpa, causal=True)})
causal.report(shape=shape, causal=True)
rate, full = causal.rate("SDPA default"), lengths.rate("SDPA default", at)
gpuguide.claim(
    f"at S={at}, SDPA default's causal rate is below its non-causal one",
    **rate.over(full),
    at_most=1.0,
    timed=True,
)

# %%
# What to take away
# -----------------
# Call ``scaled_dot_product_attention`` rather than writing the formula out: the
# answer is the same within the data type's precision, its memory does not hold the
# ``S x S`` matrices, and its rate is higher (the claims, in this run). The next
# page shows which kernel SDPA picked, when it falls back to the math path, and
# FlexAttention for masks SDPA cannot express.
gpuguide.takeaway()
