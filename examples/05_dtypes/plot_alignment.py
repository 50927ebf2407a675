"""
Tensor cores and shape alignment
================================

A common piece of advice says that fp16 matmuls should have every dimension a
multiple of 8 (16 bytes), or tensor cores go unused and performance falls off a
cliff. A popular notebook repeated it with a "16x" figure, but every size it timed
was a multiple of 16, so the cliff was never measured. This page measures both
sides: on a GPU, square fp16 matmuls at aligned sizes (``n`` a multiple of 8) next
to misaligned neighbours such as ``n - 1`` and ``n + 1``.

Throughput is normalised per size (``2 n^3`` FLOP), so a misaligned size that costs
no more than its neighbours shows the same FLOP/s. The printout gives the ratio of
misaligned to aligned throughput and whether a cliff showed up; the last part times
the usual fix, padding the inner dimension to a multiple of 8.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# On a CUDA GPU the sweep runs in fp16, the dtype that has used tensor cores the
# longest. Elsewhere it runs in fp32, where the only alignment effect to look for is
# the width of the CPU's vector registers.
import statistics

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
dtype = torch.float16 if device.type != "cpu" else torch.float32
dtype_name = {torch.float16: "fp16", torch.float32: "fp32"}[dtype]
if device.type != "cuda":
    print(
        "Tensor cores need an NVIDIA GPU; this run measures the same sweep in "
        f"{dtype_name} on {device.type}, where only vector-width alignment can matter."
    )
peaks = gpuguide.device_peaks(device)
peak = peaks.flops_for(dtype)
print(f"dtype {dtype_name}; peak {gpuguide.format_rate(peak, 'FLOP/s')} ({peaks.name})")

# %%
# Aligned sizes and their misaligned neighbours
# ---------------------------------------------
# Base sizes are multiples of 64 that fit the device's time budget at this dtype's
# peak. Around each base ``b`` the sweep takes three aligned sizes (``b - 8``, ``b``,
# ``b + 8``) and three misaligned ones (``b - 2``, ``b - 1``, ``b + 1``): ``b - 2`` is
# even but not a multiple of 8, the other two are odd.
bases = gpuguide.sweep(
    64,
    8192,
    memory_at=lambda b: 3 * (b + 8) ** 2 * dtype.itemsize,
    flop_at=lambda b: gpuguide.matmul_flop(b + 8, b + 8, b + 8),
    flop_per_s=peak,
    peaks=None,  # where this dtype's peak is unknown, plan at the low fallback rate
    multiple_of=64,
)
offsets = (-8, -2, -1, 0, 1, 8)


def aligned(n):
    return n % 8 == 0


print(f"bases: {bases}; offsets: {offsets}")

# %%
# Measuring
# ---------
# Inputs and output are created before timing; only ``torch.mm(a, b, out=out)`` is
# timed, on a shorter budget than the default to keep 6 sizes per base affordable.
# The rate is computed from each size's own FLOP count. The small sizes take a few
# microseconds on a GPU, less than launching them, so the timer measures the
# matmul's own GPU time (``measure="kernel"``: the launches are hidden), not the
# time per call of a loop, which would be the launch time at every small size.
rate = {}  # n -> FLOP/s
for base in bases:
    for n in (base + d for d in offsets):
        a, b, out = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(3))
        m = gpuguide.benchmark(
            torch.mm,
            args=(a, b),
            kwargs={"out": out},
            label=f"mm {n}",
            warmup_ms=10,
            rep_ms=50,
            measure="kernel",
        )
        rate[n] = gpuguide.flops_per_s(gpuguide.matmul_flop(n, n, n), m.median_s)
del a, b, out

# %%
# Did the cliff show up?
# ----------------------
# For each base, the median throughput of the misaligned sizes over the median of
# the aligned ones. Below 1 means misaligned sizes are slower. Small sizes cannot
# keep a GPU busy, so read the verdict at the largest base, where they can.
unit, scale = ("TFLOP/s", 1e12) if device.type == "cuda" else ("GFLOP/s", 1e9)
ratios = {}
for base in bases:
    sizes = [base + d for d in offsets]
    good = statistics.median(rate[n] for n in sizes if aligned(n))
    bad = statistics.median(rate[n] for n in sizes if not aligned(n))
    ratios[base] = bad / good
    row = ", ".join(f"{n}: {rate[n] / scale:.3g}" for n in sizes)
    print(f"around {base} ({unit}) {row}; misaligned/aligned {ratios[base]:.2f}")

last = bases[-1]
worst = min((n for n in rate if abs(n - last) <= 8 and not aligned(n)), key=rate.get)
worst_ratio = rate[worst] / rate[last]
if ratios[last] < 0.5:
    verdict = "a cliff: misaligned sizes ran at less than half the aligned rate"
elif ratios[last] < 0.9:
    verdict = "a penalty, but no cliff: misaligned sizes ran 10-50% slower"
elif ratios[last] > 1.1:
    verdict = "no cliff: misaligned sizes ran more than 10% faster, not slower"
else:
    verdict = "no cliff: misaligned sizes ran within 10% of the aligned rate"
print(
    f"at n~{last}: misaligned/aligned = {ratios[last]:.2f} (median of the three), "
    f"worst n={worst} at {worst_ratio:.2f}; median over all bases "
    f"{statistics.median(ratios.values()):.2f}. Verdict: {verdict}."
)
gpuguide.record(
    "misaligned/aligned", ratios[last], unit="x", size=last, dtype=dtype_name
)
gpuguide.record("worst misaligned", worst_ratio, unit="x", size=worst, dtype=dtype_name)
print(
    f"A 16x cliff would be a ratio of {1 / 16:.3f}; "
    f"the worst seen here was {worst_ratio:.2f}."
)

# %%
# Throughput against size
# -----------------------
# Two series over the same axis: aligned sizes and misaligned ones. A cliff shows as
# the misaligned points sitting well below the aligned line at every base.
sizes = sorted(rate)
overall = gpuguide.format_ratio(statistics.median(ratios.values()))
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    sizes,
    {
        f"aligned ({dtype_name}, n % 8 == 0)": [
            rate[n] / scale if aligned(n) else None for n in sizes
        ],
        f"misaligned ({dtype_name}, median {overall} aligned)": [
            None if aligned(n) else rate[n] / scale for n in sizes
        ],
    },
    xlabel="matrix side n (elements)",
    ylabel=f"matmul throughput ({unit})",
    title=f"Misaligned sizes at n~{last} run at "
    f"{gpuguide.format_ratio(ratios[last])} the aligned rate",
    record="matmul throughput",
)
plt.show()

# %%
# A closer look at the largest base
# ---------------------------------
# The same six sizes as bars, each labelled with its throughput relative to ``b``.
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {f"n={last + d}": rate[last + d] / scale for d in offsets},
    ylabel=f"throughput ({unit})",
    title=f"Around n={last}, the worst misaligned size reaches "
    f"{gpuguide.format_ratio(worst_ratio)} the rate of n={last}",
    baseline=f"n={last}",
)
ax.set_xlabel("matrix side n (elements)")
plt.show()

# %%
# The fix: pad the inner dimension
# --------------------------------
# In a model the awkward dimension is usually one, e.g. a layer width or a
# vocabulary size. Here ``x @ w`` has aligned ``m = n = b`` and an inner dimension
# ``k = b + 1``. Zero-padding ``k`` to a multiple of 8 only adds products with zero,
# so the exact product stays the same. Compared with the unpadded matmul, one thing
# changes at a time: inputs padded in advance (as when a layer is built with a padded
# width), or padding done inside every call.
k = last + 1
k8 = -(-k // 8) * 8
x = torch.randn(last, k, device=device, dtype=dtype)
w = torch.randn(k, last, device=device, dtype=dtype)
x8, w8 = F.pad(x, (0, k8 - k)), F.pad(w, (0, 0, 0, k8 - k))


def pad_then_mm(x, w):
    return torch.mm(F.pad(x, (0, k8 - k)), F.pad(w, (0, 0, 0, k8 - k)))


fix = {
    f"k={k}": gpuguide.benchmark(torch.mm, args=(x, w), label=f"k={k}"),
    f"padded to {k8}": gpuguide.benchmark(torch.mm, args=(x8, w8), label="padded"),
    "pad + mm each call": gpuguide.benchmark(pad_then_mm, args=(x, w), label="pad+mm"),
}
base_s = fix[f"k={k}"].median_s
rows = [
    {"matmul": label, "time": m, "speed": gpuguide.format_ratio(base_s / m.median_s)}
    for label, m in fix.items()
]
print(gpuguide.table(rows))
gain = gpuguide.compare(fix[f"padded to {k8}"], fix[f"k={k}"])  # padded in advance
gpuguide.record(
    "padded speed-up", gain.speedup, unit="x", spread=(gain.low, gain.high),
    size=f"{last}x{last}x{k}", dtype=dtype_name,
)  # fmt: skip

ahead, each = (
    gpuguide.format_ratio(m.median_s / base_s) for m in list(fix.values())[1:]
)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    fix,
    ylabel="time per matmul (ms)",
    title=f"Time vs k={k}: padded in advance {ahead}, padding every call {each}",
)
plt.show()

# %%
# Same product, different rounding
# --------------------------------
# The computed products need not be equal, though: the padded matmul runs another
# kernel, which adds up the ``k`` products in another order, and every partial sum and
# the result are rounded. So the two results differ by rounding, which shows as a
# difference of the order of the dtype's ``eps`` times the size of the entries, and
# both stay as close to the exact product (computed in higher precision) as each
# other. Differences and errors below are in units of ``eps`` times the largest entry.
ref_dtype = torch.float32 if device.type == "mps" else torch.float64
exact = x.to(ref_dtype) @ w.to(ref_dtype)
unit = torch.finfo(dtype).eps * exact.abs().max().item()
unpadded, padded = torch.mm(x, w).to(ref_dtype), torch.mm(x8, w8).to(ref_dtype)
gap = (unpadded - padded).abs().max().item()
errors = [(r - exact).abs().max().item() for r in (unpadded, padded)]
del exact, unpadded, padded
print(
    f"max |padded - unpadded| = {gap:.3g}, {gap / unit:.2g} {dtype_name} eps of the "
    f"largest entry; against the exact product: unpadded {errors[0] / unit:.2g} eps, "
    f"padded {errors[1] / unit:.2g} eps"
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
# percent or a few times, and the verdict above says which it was here. Choosing
# dimensions that are multiples of 8 (or 64) when you design a model costs nothing;
# padding at run time costs a copy per call, which the last chart weighs against
# the gain.
