"""
Matmul accuracy per dtype
=========================

The previous page measured how much faster a matrix multiplication runs in TF32,
fp16 and bf16 than in fp32. This page measures what the speed costs: it multiplies
the same random matrices in each dtype and compares the result with an fp64
reference, against each format's unit roundoff.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# TF32 is not a storage dtype: it is a mode in which cuBLAS runs fp32 matmuls on
# tensor cores with a 10-bit mantissa, switched by one flag, which the context
# manager below sets and puts back. MPS has no float64, so there fp32 is the
# reference.
import contextlib
import math

import matplotlib.pyplot as plt
import torch

import gpuguide

page = gpuguide.setup()
device = page.device


@contextlib.contextmanager
def tf32_matmuls(enabled):
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


variants = {"fp32": torch.float32, "tf32": torch.float32}  # name -> storage dtype
variants |= {"fp16": torch.float16, "bf16": torch.bfloat16}
if not (page.needs_cuda("TF32") and torch.cuda.get_device_capability(device) >= (8, 0)):
    del variants["tf32"]  # TF32 needs an Ampere or later GPU
ref_dtype = torch.float32 if device.type == "mps" else torch.float64
if ref_dtype == torch.float32:
    del variants["fp32"]  # the reference itself

# %%
# The same product in each dtype
# ------------------------------
# The same random matrices, drawn in the reference dtype, are rounded to each dtype
# and multiplied there; the result is compared with the reference product. Two
# measures: the largest error over the largest entry of the reference (normwise),
# and the median of the elementwise relative errors. Expect the 16-bit errors near
# the format's unit roundoff, half its ``eps`` (fp16 and TF32 keep 10 mantissa bits,
# bf16 only 7); fp32's (23 bits) is far smaller, but may be several times its
# roundoff (the lines below say how many), as the rounding errors of long sums add up.
n = 128 if page.small else (256 if device.type == "cpu" else 2048)
a = torch.randn(n, n, device=device, dtype=ref_dtype)
b = torch.randn(n, n, device=device, dtype=ref_dtype)
ref = a @ b
normwise, roundoff, relative = {}, {}, {}
print(f"accuracy against {ref_dtype} at n={n}:")
for name, dtype in variants.items():
    with tf32_matmuls(name == "tf32"):
        got = (a.to(dtype) @ b.to(dtype)).to(ref_dtype)
    err = (got - ref).abs()
    normwise[name] = (err.max() / ref.abs().max()).item()
    median_rel = (err / ref.abs()).median().item()
    roundoff[name] = 2.0**-11 if name == "tf32" else torch.finfo(dtype).eps / 2
    relative[name] = median_rel / roundoff[name]
    print(
        f"  {name}: max|err|/max|ref| {normwise[name]:.2e}, median relative error "
        f"{median_rel:.2e}, unit roundoff {roundoff[name]:.2e} (the median error is "
        f"{gpuguide.format_ratio(median_rel / roundoff[name])} of it)"
    )
sixteen = [k for k in ("tf32", "fp16", "bf16") if k in normwise]
gpuguide.claim(
    f"the 16-bit formats' median errors lie within 4x of their unit roundoff "
    f"({', '.join(sixteen)})",
    max(max(relative[k], 1 / relative[k]) for k in sixteen),
    at_most=4,
)

# %%
# Error against the unit roundoff
# -------------------------------
# Bars are the normwise errors, on a log axis; the dashes mark each format's unit
# roundoff, and the bar labels compare each error with the first dtype's. The fewer
# mantissa bits, the larger the error: fp32 (23), then fp16 and TF32 (10), bf16 (7).
# Each decimal digit is 3.3 bits, so bf16's three bits fewer than fp16's cost about
# one digit more.
first, worst = next(iter(normwise)), max(normwise, key=normwise.get)
bits = {"fp32": 23, "tf32": 10, "fp16": 10, "bf16": 7}
pairs = [(a, b) for a in normwise for b in normwise if bits[a] > bits[b]]
ordered = all(normwise[a] < normwise[b] for a, b in pairs)
gpuguide.claim(
    "the fewer mantissa bits, the larger the normwise error",
    holds=ordered,
    measured=", ".join(f"{k} ({bits[k]} bits) {normwise[k]:.2e}" for k in normwise),
)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    normwise,
    ylabel="max |error| / max |reference| (ratio)",
    title=f"{'Fewer mantissa bits, larger error' if ordered else 'Error per dtype'}: "
    f"{worst} is {gpuguide.format_ratio(normwise[worst] / normwise[first])} {first}'s",
)
ax.set_xlabel("dtype (same inputs)")
marks = {"marker": "_", "s": 600, "color": "0.2", "zorder": 3}
ax.scatter(list(roundoff), list(roundoff.values()), label="unit roundoff", **marks)
ax.set_yscale("log")
ax.legend()
plt.show()

# %%
# Digits given up
# ---------------
# The digits of fp32's accuracy that each format gives up are log10 of its error over
# fp32's. Where fp32's own error is several times its roundoff (long sums), a 16-bit
# format gives up fewer digits than the 3.9 (fp16) or 4.8 (bf16) that the mantissas
# alone predict.
if "fp32" in normwise:
    lost = {k: math.log10(normwise[k] / normwise["fp32"]) for k in sixteen}
    print(", ".join(f"{k} gives up {d:.1f} of fp32's digits" for k, d in lost.items()))
    gpuguide.claim(
        "fp16 gives up at least two of fp32's significant digits, bf16 at least three",
        holds=lost["fp16"] >= 2 and lost["bf16"] >= 3,
        measured=f"fp16 {lost['fp16']:.1f}, bf16 {lost['bf16']:.1f}",
    )
    gpuguide.claim(
        "bf16 gives up between half a digit and a digit and a half more than fp16",
        lost["bf16"] - lost["fp16"],
        at_least=0.5,
        at_most=1.5,
    )

# %%
# What to take away
# -----------------
# Each format's error follows its mantissa: bf16 keeps fp32's range, fp16 three more
# mantissa bits; which of the two a model can use is the mixed-precision chapter's
# subject.
gpuguide.takeaway()
