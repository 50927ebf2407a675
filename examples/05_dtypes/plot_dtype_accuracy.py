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
# bf16 only 7); fp32's (23 bits), far smaller, can reach several to tens of times
# its roundoff, as the rounding errors of long sums add up.
n = 128 if page.small else (256 if device.type == "cpu" else 2048)
a = torch.randn(n, n, device=device, dtype=ref_dtype)
b = torch.randn(n, n, device=device, dtype=ref_dtype)
ref = a @ b
normwise, roundoff = {}, {}
print(f"accuracy against {ref_dtype} at n={n}:")
for name, dtype in variants.items():
    with tf32_matmuls(name == "tf32"):
        got = (a.to(dtype) @ b.to(dtype)).to(ref_dtype)
    err = (got - ref).abs()
    normwise[name] = (err.max() / ref.abs().max()).item()
    median_rel = (err / ref.abs()).median().item()
    roundoff[name] = 2.0**-11 if name == "tf32" else torch.finfo(dtype).eps / 2
    print(
        f"  {name}: max|err|/max|ref| {normwise[name]:.2e}, median relative error "
        f"{median_rel:.2e}, unit roundoff {roundoff[name]:.2e} (the median error is "
        f"{gpuguide.format_ratio(median_rel / roundoff[name])} of it)"
    )

# %%
# Error against the unit roundoff
# -------------------------------
# Bars are the normwise errors, on a log axis; the dashes mark each format's unit
# roundoff, and the bar labels compare each error with the first dtype's.
first, worst = next(iter(normwise)), max(normwise, key=normwise.get)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    normwise,
    ylabel="max |error| / max |reference| (ratio)",
    title=f"Fewer mantissa bits, larger error: {worst} is "
    f"{gpuguide.format_ratio(normwise[worst] / normwise[first])} {first}'s",
)
ax.set_xlabel("dtype (same inputs)")
marks = {"marker": "_", "s": 600, "color": "0.2", "zorder": 3}
ax.scatter(list(roundoff), list(roundoff.values()), label="unit roundoff", **marks)
ax.set_yscale("log")
ax.legend()
plt.show()

# %%
# What to take away
# -----------------
# Each format's error follows its mantissa: fp16 and bf16 (and TF32 for fp32 code)
# give up four to five of fp32's significant decimal digits. bf16 keeps fp32's
# range, fp16 keeps three more mantissa bits; which of the two a model can use is
# the subject of the mixed-precision chapter.
