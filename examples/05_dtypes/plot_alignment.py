"""
Tensor cores and shape alignment
================================

A common piece of advice says that fp16 matmuls should have every dimension a
multiple of 8 (16 bytes), or tensor cores go unused and performance falls off a
cliff. A popular notebook repeated it with a "16x" figure, but every size it timed
was a multiple of 16, so the cliff was never measured. This page measures both
sides: square matmuls at aligned sizes (``n`` a multiple of 8) next to misaligned
neighbours such as ``n - 1`` and ``n + 1``, compared at equal work (time per FLOP),
with their spread. The last part times the usual fix, padding the inner dimension.
See also :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# On a GPU the sweep runs in fp16, the dtype that has used tensor cores the longest;
# on a CPU in fp32, on one thread, where alignment can change how the rows fall on
# the vector registers and cache lines.
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import gpuguide
from gpuguide import Sweep, Variant, compare, interleave, plot_bars, report

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
name = "fp32" if page.device.type == "cpu" else "fp16"
dtype = {"fp32": torch.float32, "fp16": torch.float16}[name]
page.needs_cuda(f"fp16 on tensor cores (the same sweep runs here in {name})")


# %%
# Aligned sizes and their misaligned neighbours
# ---------------------------------------------
# Base sizes ``b`` are multiples of 64 that fit the device's time budget at this
# dtype's peak. Around each the sweep takes three aligned sizes (``b - 8``, ``b``,
# ``b + 8``) and three misaligned ones (``b - 2``, ``b - 1``, ``b + 1``): ``b - 2``
# is even but not a multiple of 8, the other two are odd. Only ``torch.mm`` is
# timed, the six sizes of a base in five interleaved rounds (``paired=True``), so
# that a slow spell of the machine falls on aligned and misaligned sizes alike.
# Small sizes take less time on a GPU than launching them, so the timer takes the
# matmul's own GPU time (``measure="kernel"``), not the launches.
def squares(n, device):  # a, b and out
    return [torch.randn(n, n, device=device, dtype=dtype) for _ in range(3)]


def mm(a, b, out):
    return torch.mm(a, b, out=out)


offsets = {f"b{d:+d}" if d else "b": d for d in (-8, -2, -1, 0, 1, 8)}
neighbours = {k: Variant(mm, size=lambda b, d=d: b + d) for k, d in offsets.items()}
sweep = Sweep(
    f"square matmul, {name}",
    squares,
    lo=64,
    hi=8192,
    memory=lambda b: 18 * (b + 8) ** 2 * dtype.itemsize,  # six sizes at once
    flop=lambda n: 2 * n**3,  # a multiply and an add per term
    rate="FLOP/s",
    peak=name,
    size_label="base size b (elements)",
).run(neighbours, paired=True, warmup_ms=10, rep_ms=60, measure="kernel")
print(sweep)


# %%
# Did the cliff show up?
# ----------------------
# Sizes of different work compare per FLOP. Around each base, the three misaligned
# sizes are pooled round by round (the mean time per FLOP of the three in each
# round, ``per_work``) and compared with the three aligned ones of the same rounds:
# a verdict needs all five rounds to agree. A ratio below 1 means misaligned sizes
# are slower (a cliff reads below 0.5, a "16x" one 0.0625); read it at the largest
# base, as small sizes cannot keep a GPU busy. What decides
# it: on a GPU, whether cuBLAS has a fast tensor-core kernel for rows that do not
# start on 16-byte boundaries (it depends on the GPU and the cuBLAS version); on a
# CPU, how the BLAS library blocks and packs the matrices.
aligned = [k for k, d in offsets.items() if d % 8 == 0]
misaligned = [k for k in offsets if k not in aligned]
for base in sweep.sizes:
    c = compare(sweep.per_work(misaligned, base), sweep.per_work(aligned, base))
    print(f"around {base}: misaligned/aligned {c.short}")
last = sweep.sizes[-1]
report("aligned square matmul", sweep.rate("b"), peak=name, size=last, dtype=name)
report("misaligned/aligned", c, size=last, dtype=name)  # the last base
worst = min(misaligned, key=lambda k: sweep.rate(k).value)
worst_c = compare(sweep.per_work([worst]), sweep.per_work(["b"]))
report("worst misaligned", worst_c, size=last + offsets[worst], dtype=name)
gpuguide.claim(
    f"on a CPU in fp32, misaligned sizes around n={last} run at least half as fast "
    "per FLOP as their aligned neighbours (no cliff)",
    c,
    at_least=0.5,
    on="cpu",
)
gpuguide.claim(
    f"on a GPU in fp16, misaligned sizes around n={last} are slower per FLOP "
    "than their aligned neighbours",
    c,
    verdict="slower",
    on="cuda",
)

# %%
# Throughput against size
# -----------------------
# One line per offset from the base: a cliff shows as the misaligned lines sitting
# well below the aligned ones at every large base.
sweep.plot(
    title=f"At n~{last}, misaligned/aligned: {c.short}",
    labels={k: f"{k} (misaligned)" for k in misaligned},
)
plt.show()

# %%
# The fix: pad the inner dimension
# --------------------------------
# In a model the awkward dimension is usually one, e.g. a layer width or a
# vocabulary size. Here ``x @ w`` has aligned ``m = n = b`` and ``k = b + 1``.
# Zero-padding ``k`` to a multiple of 8 only adds products with zero. Against the
# unpadded matmul: inputs padded in advance (a layer built with a padded width), or
# padding inside every call.
k, k8 = last + 1, last + 8  # last is a multiple of 64
x = torch.randn(last, k, device=page.device, dtype=dtype)
w = torch.randn(k, last, device=page.device, dtype=dtype)
x8, w8 = F.pad(x, (0, k8 - k)), F.pad(w, (0, 0, 0, k8 - k))


def pad_then_mm(x, w):
    return torch.mm(F.pad(x, (0, k8 - k)), F.pad(w, (0, 0, 0, k8 - k)))


calls = {f"k={k}": (torch.mm, x, w), f"padded to {k8}": (torch.mm, x8, w8)}
calls["pad + mm each call"] = (pad_then_mm, x, w)
variants = {label: partial(fn, *args) for label, (fn, *args) in calls.items()}
fix = interleave(variants, device=page.device, rep_ms=500)  # steady 100 ms rounds
plain, ahead, each = fix.values()
gain = compare(ahead, plain)
report("padded speed-up", gain, size=f"{last}x{last}x{k}", dtype=name)
gpuguide.claim(
    "padding inside every call is not faster than padding in advance: it adds a copy",
    compare(each, ahead),
    verdict="not faster",
)
gpuguide.claim(
    f"on a GPU in fp16, a matmul padded in advance to k={k8} is faster than "
    f"one with k={k}",
    gain,
    verdict="faster",
    on="cuda",
)
fig, ax = plt.subplots()
title = f"Padded in advance against k={k}: {gain.short}"
plot_bars(ax, fix, ylabel="time per matmul (ms)", title=title)
plt.show()

# %%
# Same product, different rounding
# --------------------------------
# The padded matmul may run another kernel, which adds up the ``k`` products in
# another order, rounding every partial sum: the two results may differ by about
# ``eps`` times the entries, and either may be nearer the exact product (computed in
# higher precision). Below, in units of ``eps`` times the largest entry:
ref_dtype = torch.float32 if page.device.type == "mps" else torch.float64
exact = x.to(ref_dtype) @ w.to(ref_dtype)
eps = torch.finfo(dtype).eps * exact.abs().max().item()
unpadded, padded = torch.mm(x, w).to(ref_dtype), torch.mm(x8, w8).to(ref_dtype)
gap = (unpadded - padded).abs().max().item() / eps
errors = [(r - exact).abs().max().item() / eps for r in (unpadded, padded)]
print(
    f"max |padded - unpadded| = {gap:.2g} {name} eps; against the exact product: "
    f"unpadded {errors[0]:.2g} eps, padded {errors[1]:.2g} eps"
)

# %%
# What to take away
# -----------------
# Whether misaligned shapes cost much depends on the GPU, the dtype and the cuBLAS
# version, as the verdicts above say for this one. Dimensions that are multiples of
# 8 (or 64) cost nothing when you design a model; padding at run time costs a copy
# per call, which the chart weighs against the gain.
gpuguide.takeaway()
