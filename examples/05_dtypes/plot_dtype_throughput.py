"""
Matmul throughput and accuracy per dtype
========================================

The same matrix multiplication runs at very different speeds in fp64, fp32, TF32,
fp16 and bf16: on NVIDIA GPUs from Ampere on, TF32, fp16 and bf16 run on tensor
cores, whose datasheet peaks are many times the fp32 figure. This page measures
the achieved FLOP/s of square matmuls per dtype over a range of sizes and holds
each against the peak of the device actually measured.

Speed is half of the trade: the page then multiplies the same random matrices in
each dtype and compares the result with an fp64 reference.
"""

# %%
# Setup
# -----
# TF32 is not a storage dtype: it is a mode in which cuBLAS runs fp32 matmuls on
# tensor cores with a 10-bit mantissa. It is switched by one flag,
# ``torch.backends.cuda.matmul.allow_tf32``; the context manager below changes only
# that flag and puts the previous value back afterwards. The peaks printed are those
# of the device this page ran on: datasheet figures of one GPU are easily carried
# over, wrongly, to measurements made on another.
import contextlib

import matplotlib.pyplot as plt
import torch

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
peaks = gpuguide.device_peaks(device)
print(f"Peaks of {peaks.name}: {peaks.source}")


@contextlib.contextmanager
def tf32_matmuls(enabled):
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


has_tf32 = device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0)
variants = {  # name -> (storage dtype, TF32 allowed)
    "fp64": (torch.float64, False),
    "fp32": (torch.float32, False),
    "tf32": (torch.float32, True),
    "fp16": (torch.float16, False),
    "bf16": (torch.bfloat16, False),
}
if not has_tf32:
    del variants["tf32"]
    if device.type == "cuda":
        print(
            "TF32 needs an NVIDIA GPU of the Ampere generation or later; not this one."
        )
    else:
        print("TF32 and tensor cores need an NVIDIA GPU (Ampere or later for TF32).")
if device.type == "mps":
    del variants["fp64"]
    print("MPS has no float64, so fp64 is left out.")
for name, (dtype, tf32) in variants.items():
    peak = peaks.flops_for(dtype, tf32=tf32)
    print(f"  peak {name}: {gpuguide.format_rate(peak, 'FLOP/s')}")

# %%
# Sizes per dtype
# ---------------
# Each dtype gets its own sweep, planned with its own peak. Where the peak is unknown
# (fp16 and bf16 on a CPU, an unlisted GPU) a small matmul stands in for it, and as
# a guard against a bad guess such a sweep stops at the first size whose fastest
# call took more than twice the time budget per call.
budget = gpuguide.size_budget(device)
probe_n = 64  # size of the stand-in matmul


def sizes_for(dtype, tf32):
    rate = peaks.flops_for(dtype, tf32=tf32)
    if rate is None:
        a = torch.randn(probe_n, probe_n, device=device).to(dtype)
        m = gpuguide.benchmark(torch.mm, args=(a, a), device=device, rep_ms=5.0)
        rate = gpuguide.matmul_flop(probe_n, probe_n, probe_n) / m.min_s
    return gpuguide.sweep(
        32,
        16384,
        memory_at=lambda n: 3 * n * n * dtype.itemsize,
        flop_at=lambda n: gpuguide.matmul_flop(n, n, n),
        budget=budget,
        flop_per_s=rate,  # this dtype's rate, not the fp32 peak
        per_octave=2,
        multiple_of=8,
    )


# %%
# Measuring FLOP/s
# ----------------
# Inputs and output are created per size, outside the timed call; only
# ``torch.mm(a, b, out=out)`` is timed, after a warm-up that absorbs first-call costs.
rates = {}  # name -> {n: FLOP/s}
for name, (dtype, tf32) in variants.items():
    rates[name], probed = {}, peaks.flops_for(dtype, tf32=tf32) is None
    with tf32_matmuls(tf32):
        for n in sizes_for(dtype, tf32):
            a, b, out = (torch.randn(n, n, device=device).to(dtype) for _ in range(3))
            m = gpuguide.benchmark(
                torch.mm, args=(a, b), kwargs={"out": out}, label=f"{name} {n}"
            )
            rates[name][n] = gpuguide.flops_per_s(
                gpuguide.matmul_flop(n, n, n), m.median_s
            )
            if probed and m.min_s > 2 * budget.call_s:
                break
    del a, b, out

# %%
# Against the peak
# ----------------
# Each dtype's rate at its largest size, as a share of its peak. On recent
# data-center GPUs large fp16 and bf16 matmuls typically reach 60-85% of peak. Above
# 100% the listed figure is no ceiling: for A100 and H100 it is the non-tensor fp64
# peak, while cuBLAS uses fp64 tensor cores; a CPU's "peak" is a quick calibration.
unit, scale = ("TFLOP/s", 1e12) if device.type == "cuda" else ("GFLOP/s", 1e9)
percent, largest, rows, beaten = {}, {}, [], []
for name, by_n in rates.items():
    dtype, tf32 = variants[name]
    n = largest[name] = max(by_n)
    pct = gpuguide.percent_of_peak(by_n[n], peaks.flops_for(dtype, tf32=tf32))
    shown = "n/a" if pct is None else f"{pct:.0f}%"
    rows.append(
        {"dtype": name, "largest n": n, unit: by_n[n] / scale, "% of peak": shown}
    )
    if pct is not None:
        percent[f"{name} (n={n})"] = pct
        if pct > 100:
            beaten.append(name)
print(gpuguide.table(rows))
for name in beaten:
    print(f"  {name} beat its listed peak: that figure is no ceiling here")

for name in [k for k in ("tf32", "fp16", "bf16") if k in rates]:
    n = max(set(rates[name]) & set(rates["fp32"]))  # the largest size both reached
    speed = rates[name][n] / rates["fp32"][n]
    verdict = "faster" if speed > 1 else "SLOWER, against the usual advice"
    print(f"{name} at n={n}: {gpuguide.format_ratio(speed)} fp32's rate ({verdict})")

# %%
# Throughput against size
# -----------------------
# Small matmuls cannot fill the device, so every curve rises with ``n`` before it
# flattens near its ceiling; the lower-precision curves on a GPU flatten later and
# higher. The legend gives each dtype's share of its peak at its largest size.
sizes = sorted({n for by_n in rates.values() for n in by_n})
series = {}
for name, by_n in rates.items():
    pct = percent.get(f"{name} (n={largest[name]})")
    label = name if pct is None else f"{name}: {pct:.0f}% of peak"
    series[label] = [by_n[n] / scale if n in by_n else None for n in sizes]
best = max(rates, key=lambda k: rates[k][largest[k]])
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    sizes,
    series,
    xlabel="matrix side n (elements)",
    ylabel=f"throughput ({unit})",
    title=f"{best} matmuls are the fastest here",
)
plt.show()

# %%
# Share of peak at the largest size
# ---------------------------------
# Dtypes with a known peak; bar labels compare each share with fp32's.
if percent:
    top = max(percent, key=percent.get)
    fig, ax = plt.subplots()
    gpuguide.plot_bars(
        ax,
        percent,
        ylabel="achieved / peak (%)",
        title=f"{top.split()[0]} gets closest to its peak: {percent[top]:.0f}%",
        baseline=next((k for k in percent if k.startswith("fp32")), None),
    )
    ax.set_xlabel("dtype (largest size reached)")
    plt.show()
else:
    print(f"No peak figures for {peaks.name}, so no share-of-peak chart.")

# %%
# What the speed costs: accuracy
# ------------------------------
# The same random fp64 matrices are rounded to each dtype and multiplied there; the
# result is compared with the fp64 product. Two measures: the largest error over the
# largest entry of the reference (normwise), and the median of the elementwise
# relative errors. Expect each to be of the order of the format's unit roundoff
# (half its ``eps``): fp16 and TF32 keep 10 mantissa bits, bf16 only 7.
n_acc = 128 if small else (256 if device.type == "cpu" else 2048)
ref_dtype = torch.float32 if device.type == "mps" else torch.float64
a64 = torch.randn(n_acc, n_acc, device=device, dtype=ref_dtype)
b64 = torch.randn(n_acc, n_acc, device=device, dtype=ref_dtype)
ref = a64 @ b64
normwise, roundoff = {}, {}
print(f"accuracy against {ref_dtype} at n={n_acc}:")
for name, (dtype, tf32) in variants.items():
    if dtype == ref_dtype:
        continue
    with tf32_matmuls(tf32):
        got = (a64.to(dtype) @ b64.to(dtype)).to(ref_dtype)
    err = (got - ref).abs()
    normwise[name] = (err.max() / ref.abs().max()).item()
    median_rel = (err / ref.abs()).median().item()
    roundoff[name] = 2.0**-11 if tf32 else torch.finfo(dtype).eps / 2
    print(
        f"  {name}: max|err|/max|ref| {normwise[name]:.2e}, median relative error "
        f"{median_rel:.2e}, unit roundoff {roundoff[name]:.2e}"
    )

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
# Hold measurements against the peaks of your own device, not figures quoted for
# another GPU. On a tensor-core GPU, fp16 and bf16 (and TF32 for fp32 code) buy a
# large factor in speed for four to five fewer significant decimal digits than fp32;
# bf16 keeps fp32's range, fp16 keeps three more mantissa bits. On a CPU without
# bf16 or fp16 matrix units the low precisions can be slower than fp32: measure
# before you switch.
