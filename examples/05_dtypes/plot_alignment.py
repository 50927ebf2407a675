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

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# On a GPU the sweep runs in fp16, the dtype that has used tensor cores the longest.
# On a CPU it runs in fp32, where what alignment can change is how the rows fall on
# the vector registers and cache lines, on one thread: with two on a two-core
# machine, any other work stalls every matmul, and a size's rate with it.
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import gpuguide
from gpuguide import Measurement, compare, interleave, plot_bars, plot_sweep, report

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
dtype, dtype_name = (
    (torch.float32, "fp32") if device.type == "cpu" else (torch.float16, "fp16")
)
if not page.needs_cuda("fp16 on tensor cores"):
    print(f"The same sweep runs here in {dtype_name}.")


def flop(n):  # a square matmul of side n: a multiply and an add per term
    return 2 * n**3


# %%
# Aligned sizes and their misaligned neighbours
# ---------------------------------------------
# Base sizes are multiples of 64 that fit the device's time budget at this dtype's
# peak. Around each base ``b`` the sweep takes three aligned sizes (``b - 8``, ``b``,
# ``b + 8``) and three misaligned ones (``b - 2``, ``b - 1``, ``b + 1``): ``b - 2`` is
# even but not a multiple of 8, the other two are odd. Only ``torch.mm`` is timed,
# the six sizes of a base in five interleaved rounds (:func:`gpuguide.interleave`),
# so that a slow spell of the machine falls on aligned and misaligned sizes alike.
# Small sizes take less time on a GPU than launching them, so the timer takes the
# matmul's own GPU time (``measure="kernel"``), not the launches.
bases = gpuguide.sweep(
    64,
    8192,
    memory_at=lambda b: 18 * (b + 8) ** 2 * dtype.itemsize,  # six sizes at once
    flop_at=lambda b: flop(b + 8),
    flop_per_s=page.peaks.flops_for(dtype),
    peaks=None,
    multiple_of=64,  # an unknown peak plans at a low fallback rate
)
offsets = (-8, -2, -1, 0, 1, 8)
print(f"bases: {bases}; offsets: {offsets}")
times = {}  # n -> Measurement, with its rounds
for base in bases:
    calls = {}
    for n in (base + d for d in offsets):
        a, b, out = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(3))
        calls[n] = partial(torch.mm, a, b, out=out)
    timed = interleave(
        {f"mm {n}": call for n, call in calls.items()},
        device=device,
        warmup_ms=10,
        rep_ms=60,
        measure="kernel",
    )
    times |= {n: timed[f"mm {n}"] for n in calls}
del a, b, out, calls


# %%
# Did the cliff show up?
# ----------------------
# Sizes of different work compare per FLOP: a call's time over its size's FLOP.
# Around each base, the three misaligned sizes are pooled round by round (the mean
# time per FLOP of the three in each round) and compared with the three aligned ones
# of the same rounds: a verdict needs all five rounds to agree. A ratio below 1 means
# misaligned sizes are slower. Small sizes cannot keep a GPU busy, so read the
# verdict at the largest base. What decides it: on a GPU, whether cuBLAS has a fast
# tensor-core kernel for rows that do not start on 16-byte boundaries (it depends on
# the GPU and the cuBLAS version); on a CPU, how the BLAS library blocks and packs
# the matrices.
def per_flop(label, sizes):
    rounds = [
        sum(times[n].rounds[r] / flop(n) for n in sizes) / len(sizes)
        for r in range(len(times[sizes[0]].rounds))
    ]
    return Measurement(label, rounds, times[sizes[0]].device, "per FLOP", rounds=rounds)


unit, scale = ("TFLOP/s", 1e12) if page.cuda else ("GFLOP/s", 1e9)
rate = {n: m.rate(flop(n)).value / scale for n, m in times.items()}
for base in bases:
    sizes = [base + d for d in offsets]
    c = compare(
        per_flop(f"misaligned n~{base}", [n for n in sizes if n % 8]),
        per_flop(f"aligned n~{base}", [n for n in sizes if n % 8 == 0]),
    )
    row = ", ".join(f"{n}: {rate[n]:.3g}" for n in sizes)
    print(f"around {base} ({unit}) {row}; misaligned/aligned {c.short}")

last = bases[-1]
aligned = times[last].rate(flop(last))  # the kernel's own time, n a multiple of 8
report("aligned square matmul", aligned, peak=dtype_name, size=last, dtype=dtype_name)
report("misaligned/aligned", c, size=last, dtype=dtype_name)  # the last base
worst = min((last + d for d in offsets if d % 8), key=rate.get)
worst_c = compare(per_flop(f"n={worst}", [worst]), per_flop(f"n={last}", [last]))
report("worst misaligned", worst_c, size=worst, dtype=dtype_name)
print(f"A cliff: misaligned/aligned below 0.5; a 16x cliff would be {1 / 16:.3f}.")
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
# Aligned sizes and misaligned ones as two series: a cliff shows as the misaligned
# points sitting well below the aligned line at every large base.
sizes = sorted(rate)
series = {
    f"aligned ({dtype_name}, n % 8 == 0)": [None if n % 8 else rate[n] for n in sizes],
    f"misaligned ({dtype_name})": [rate[n] if n % 8 else None for n in sizes],
}
fig, ax = plt.subplots()
plot_sweep(
    ax,
    sizes,
    series,
    xlabel="matrix side n (elements)",
    ylabel=f"matmul throughput ({unit})",
    title=f"At n~{last}, misaligned/aligned: {c.short}",
)
plt.show()

# %%
# The fix: pad the inner dimension
# --------------------------------
# In a model the awkward dimension is usually one, e.g. a layer width or a
# vocabulary size. Here ``x @ w`` has aligned ``m = n = b`` and an inner dimension
# ``k = b + 1``. Zero-padding ``k`` to a multiple of 8 only adds products with zero,
# so the exact product stays the same. Against the unpadded matmul, one thing
# changes at a time: inputs padded in advance (as when a layer is built with a padded
# width), or padding done inside every call.
k = last + 1
k8 = -(-k // 8) * 8
x = torch.randn(last, k, device=device, dtype=dtype)
w = torch.randn(k, last, device=device, dtype=dtype)
x8, w8 = F.pad(x, (0, k8 - k)), F.pad(w, (0, 0, 0, k8 - k))


def pad_then_mm(x, w):
    return torch.mm(F.pad(x, (0, k8 - k)), F.pad(w, (0, 0, 0, k8 - k)))


calls = {f"k={k}": (torch.mm, x, w), f"padded to {k8}": (torch.mm, x8, w8)}
calls["pad + mm each call"] = (pad_then_mm, x, w)
variants = {name: partial(fn, *args) for name, (fn, *args) in calls.items()}
fix = interleave(variants, device=device, rep_ms=500)  # 100 ms rounds: a steady median
print(gpuguide.table({"matmul": name, "time": m} for name, m in fix.items()))
plain, ahead, each = fix.values()
gain = compare(ahead, plain)
report("padded speed-up", gain, size=f"{last}x{last}x{k}", dtype=dtype_name)
print(compare(each, plain))
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
# The computed products need not be equal, though: the padded matmul may run another
# kernel, which adds up the ``k`` products in another order, and every partial sum
# is rounded. So the two results may differ by rounding, of the order of the dtype's
# ``eps`` times the size of the entries, while both stay as close to the exact
# product (computed in higher precision) as each other. Differences and errors below
# are in units of ``eps`` times the largest entry.
ref_dtype = torch.float32 if device.type == "mps" else torch.float64
exact = x.to(ref_dtype) @ w.to(ref_dtype)
eps = torch.finfo(dtype).eps * exact.abs().max().item()
unpadded, padded = torch.mm(x, w).to(ref_dtype), torch.mm(x8, w8).to(ref_dtype)
gap = (unpadded - padded).abs().max().item()
errors = [(r - exact).abs().max().item() for r in (unpadded, padded)]
print(
    f"max |padded - unpadded| = {gap:.3g}, {gap / eps:.2g} {dtype_name} eps of the "
    f"largest entry; against the exact product: unpadded {errors[0] / eps:.2g} eps, "
    f"padded {errors[1] / eps:.2g} eps"
)
if gap == 0:
    print("Here the two products are identical: the sums ran in the same order.")
elif max(errors) <= 2 * min(errors):
    print("Padding changed the rounding, not the accuracy: errors within 2x.")
else:
    better = "padded" if errors[1] < errors[0] else "unpadded"
    print(f"The {better} product is more accurate here: errors differ by over 2x.")

# %%
# What to take away
# -----------------
# Whether misaligned shapes cost much depends on the GPU, the dtype and the cuBLAS
# version: recent libraries have kernels for any shape, so the penalty may be a few
# percent or a few times, and the verdicts above say which it was here. Choosing
# dimensions that are multiples of 8 (or 64) when you design a model costs nothing;
# padding at run time costs a copy per call, which the chart weighs against the gain.
# This page's claims, and where they held in this run:
gpuguide.takeaway()
