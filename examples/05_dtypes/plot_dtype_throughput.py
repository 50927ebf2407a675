"""
Matmul throughput and accuracy per dtype
========================================

The same matrix multiplication runs at very different speeds in fp64, fp32, TF32,
fp16 and bf16: on NVIDIA GPUs from Ampere on, TF32, fp16 and bf16 run on tensor
cores, whose datasheet peaks are many times the fp32 figure. This page measures the
achieved FLOP/s per dtype twice: over square matmuls of growing size, which shows
how the rate grows with size, and over a small search of matmul shapes, after Stas
Bekman's MAMF finder, which finds the best rate the device reaches. Each best rate is
held against the dense peak of the device actually measured.

Speed is half of the trade: the page then multiplies the same random matrices in
each dtype and compares the result with an fp64 reference.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# TF32 is not a storage dtype: it is a mode in which cuBLAS runs fp32 matmuls on
# tensor cores with a 10-bit mantissa. It is switched by one flag,
# ``torch.backends.cuda.matmul.allow_tf32``; the context manager below changes only
# that flag and puts the previous value back afterwards. The peaks printed are the
# dense figures of the device this page ran on (for fp64 on A100, H100 and H200 the
# FP64 tensor-core figure, as cuBLAS runs fp64 matmuls on those cores); on a CPU they
# are the best fp32 and fp64 rates gpuguide measured on it.
import contextlib

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.mamf import probe_flops_per_s, search_matmul_shapes

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
peaks = gpuguide.device_peaks(device)
print(f"Peaks of {peaks.name}: {peaks.source}")
if peaks.measured:
    print(f"  {peaks.detail}")


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
# (fp16 and bf16 on a CPU, an unlisted GPU) the rate of a small matmul stands in for
# it, and as a guard against a bad guess such a sweep stops at the first size whose
# fastest call took more than twice the time budget per call.
budget = gpuguide.size_budget(device)


def plan_rate(dtype, tf32):
    return peaks.flops_for(dtype, tf32=tf32) or probe_flops_per_s(dtype, device)


def sizes_for(dtype, tf32):
    return gpuguide.sweep(
        32,
        16384,
        memory_at=lambda n: 3 * n * n * dtype.itemsize,
        flop_at=lambda n: gpuguide.matmul_flop(n, n, n),
        budget=budget,
        flop_per_s=plan_rate(dtype, tf32),  # this dtype's rate, not the fp32 peak
        per_octave=2,
        multiple_of=8,
    )


# %%
# Square matmuls of growing size
# ------------------------------
# Inputs and output are created per size, outside the timed call; only
# ``torch.mm(a, b, out=out)`` is timed, after a warm-up that absorbs first-call costs.
times = {}  # name -> {n: Measurement}
for name, (dtype, tf32) in variants.items():
    times[name], probed = {}, peaks.flops_for(dtype, tf32=tf32) is None
    with tf32_matmuls(tf32):
        for n in sizes_for(dtype, tf32):
            a, b, out = (torch.randn(n, n, device=device).to(dtype) for _ in range(3))
            times[name][n] = gpuguide.benchmark(
                torch.mm, args=(a, b), kwargs={"out": out}, label=f"{name} {n}"
            )
            if probed and times[name][n].min_s > 2 * budget.call_s:
                break
    del a, b, out


def rate(name, n, seconds):
    return gpuguide.flops_per_s(gpuguide.matmul_flop(n, n, n), seconds)


for name in [k for k in ("tf32", "fp16", "bf16") if k in times]:
    n = max(set(times[name]) & set(times["fp32"]))  # the largest size both reached
    c = gpuguide.compare(times[name][n], times["fp32"][n])  # with the spread
    advice = ", against the usual advice" if c.verdict == "slower" else ""
    print(f"{c}{advice}")

# %%
# The best rate: a search over shapes
# -----------------------------------
# Squares are not where a device runs fastest. How an ``(m, k) @ (k, n)`` product's
# output tiles divide among a GPU's SMs, and how long ``k`` keeps each busy, decide
# how well it fills the device, and long runs of large squares heat a GPU until its
# clock drops. :func:`~gpuguide.chapters.mamf.search_matmul_shapes` times every
# ``(m, n, k)`` from the four largest doubling sizes that fit the budget (three on a
# CPU, one fewer in small mode) in short bursts, then the three fastest again. A
# shape's rate is its FLOP over the median of its five fastest calls, as in MAMF; the
# median call shows the spread.
searches = {}
for name, (dtype, tf32) in variants.items():
    with tf32_matmuls(tf32):
        searches[name] = search_matmul_shapes(
            dtype, device=device, label=name, flop_per_s=plan_rate(dtype, tf32)
        )

# %%
# Against the peak
# ----------------
# On H100-class GPUs expect bf16 and fp16 at their best shape at 65-85% of the dense
# peak: the best published result is 794.5 TFLOP/s on an H100 SXM, 80.3% of 989.5
# (MAMF, ml-engineering), and the largest squares stay a few points lower. TF32 and
# fp32 land in the same range, fp64 on tensor cores higher (85-97%). A rate above a
# datasheet peak gets no share, only "above sheet": the row, the measurement or this
# GPU's clock differs (the guide's own tests treat it as an error). On a CPU the fp32 and fp64 shares are of the best square matmul rate
# measured there (a lower bound on its peak; a better rate reads 100%), and fp16 and
# bf16 have no figure.
unit, scale = ("TFLOP/s", 1e12) if device.type == "cuda" else ("GFLOP/s", 1e9)
share = "% of CPU ceiling" if peaks.measured else "% of dense peak"
percent, rows = {}, []
for name, found in searches.items():
    dtype, tf32 = variants[name]
    best, n = found.best, max(times[name])
    pct = peaks.percent_of(best.flops_per_s, dtype, tf32=tf32)
    if pct is not None:
        cell = f"{pct:.0f}%"
    else:  # no figure, or a GPU above its datasheet row (another clock, variant)
        cell = "n/a" if peaks.flops_for(dtype, tf32=tf32) is None else "above sheet"
    rows.append(
        {
            "dtype": name,
            "shapes": len(found.scouted),
            "best (m x n x k)": str(best.shape),
            unit: best.flops_per_s / scale,
            "median call": best.median_flops_per_s / scale,
            share: cell,
            "largest square": n,
            "its rate": rate(name, n, times[name][n].median_s) / scale,
        }
    )
    if pct is not None:
        percent[f"{name} ({best.shape})"] = pct
print(gpuguide.table(rows, title=f"best shape per dtype, rates in {unit}"))
for name, found in searches.items():  # the peak of each variant is named like it
    best = found.best
    gpuguide.record(
        "best matmul", best.flops_per_s, unit="FLOP/s",
        spread=(best.median_flops_per_s, best.flops_per_s),
        size="x".join(map(str, best.shape)), peak=name, dtype=name,
    )  # fmt: skip


def time_per_flop(name):
    """The best shape's call times per FLOP, so dtypes at different shapes compare."""
    best = searches[name].best
    flop = gpuguide.matmul_flop(*best.shape)
    m = best.measurement
    return gpuguide.Measurement(name, [t / flop for t in m.times_s], m.device, m.method)


ranked = sorted(searches, key=lambda k: searches[k].best.flops_per_s, reverse=True)
fastest = ranked[0]
lead = ""
if len(ranked) > 1:
    c = gpuguide.compare(time_per_flop(fastest), time_per_flop(ranked[1]))
    lead = f"; against {ranked[1]}: {c.short}"
    if not c.measurable:
        fastest = f"{fastest} and {ranked[1]}"
print(
    f"fastest: {ranked[0]} at {searches[ranked[0]].best.shape}, "
    f"{gpuguide.format_rate(searches[ranked[0]].best.flops_per_s, 'FLOP/s')}{lead}"
)

# %%
# Throughput against size
# -----------------------
# Small matmuls cannot fill the device, so every curve rises with ``n`` before it
# flattens near its ceiling; the lower-precision curves on a GPU flatten later and
# higher. fp16 and bf16 run at nearly the same rate, so each dtype gets its own
# marker and line style. The legend gives each dtype's best rate from the search.
sizes = sorted({n for by_n in times.values() for n in by_n})
series = {}
for name, by_n in times.items():
    best = gpuguide.format_rate(searches[name].best.flops_per_s, "FLOP/s")
    series[f"{name} (search best: {best})"] = [
        rate(name, n, by_n[n].median_s) / scale if n in by_n else None for n in sizes
    ]
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    sizes,
    series,
    xlabel="matrix side n (elements)",
    ylabel=f"square matmul throughput ({unit})",
    title=f"{fastest} matmuls are the fastest here",
    record="square matmul",
)
styles = zip("osD^v", ["-", "--", "-.", ":", "-"], strict=True)
own = [line for line in ax.get_lines() if line.get_label() in series]  # not recorded
for line, (marker, style) in zip(own, styles, strict=False):
    line.set(marker=marker, linestyle=style, markerfacecolor="none")
ax.legend()
plt.show()

# %%
# Share of peak at the best shape
# -------------------------------
# Dtypes with a known peak; bar labels compare each share with fp32's.
if percent:
    top = max(percent, key=percent.get)
    fig, ax = plt.subplots()
    gpuguide.plot_bars(
        ax,
        percent,
        ylabel=f"best rate ({share})",
        title=f"{top.split()[0]} gets closest: {percent[top]:.0f}{share}",
        baseline=next((k for k in percent if k.startswith("fp32")), None),
    )
    ax.set_xlabel("dtype (best shape m x n x k)")
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
