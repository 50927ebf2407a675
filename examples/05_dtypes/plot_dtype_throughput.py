"""
Matmul throughput per dtype
===========================

The same matrix multiplication runs at very different speeds in fp64, fp32, TF32,
fp16 and bf16: on NVIDIA GPUs from Ampere on, TF32, fp16 and bf16 run on tensor
cores, whose peaks are many times the fp32 figure; on a CPU its instruction set
decides. This page measures FLOP/s per dtype over square matmuls of growing size,
then searches matmul shapes, after Stas Bekman's MAMF finder, for the best rate the
device reaches. What lower precisions cost in accuracy is the next page's subject.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# TF32 is not a storage dtype: it is a mode in which cuBLAS runs fp32 matmuls on
# tensor cores with a 10-bit mantissa, switched by one flag,
# ``torch.backends.cuda.matmul.allow_tf32`` (set and put back by
# :func:`~gpuguide.chapters.precision.tf32_matmuls`). The peaks are the device's
# dense datasheet figures, or on a CPU the best fp32 and fp64 rates measured on it
# (a lower bound: a better rate reads 100%); fp16 and bf16 have none there. A CPU
# runs torch on one thread here (its peaks are measured so too): with two on a
# two-core machine, any other work stalls every parallel matmul, and the rates
# with it.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import compare, matmul_flop, plot_sweep, report, sweep
from gpuguide.chapters import precision
from gpuguide.chapters.precision import matmul_bytes, tf32_matmuls, time_matmul

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device, peaks = page.device, page.peaks
variants = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32}
variants |= {"fp16": torch.float16, "bf16": torch.bfloat16}  # name -> storage dtype
if not (page.needs_cuda("TF32") and torch.cuda.get_device_capability(device) >= (8, 0)):
    del variants["tf32"]  # TF32 needs an Ampere or later GPU
if device.type == "mps":
    del variants["fp64"]  # MPS has no float64

# %%
# Sizes per dtype
# ---------------
# An ``(m, k) @ (k, n)`` product does a multiply and an add per term: ``2 m n k``
# FLOP (:func:`gpuguide.matmul_flop`). Each dtype plans its sizes with its own peak,
# or where none is known (fp16 and bf16 on a CPU) with the fastest of two short
# timings of a 64 x 64 matmul (a first one may stall).
known = {k: peaks.flops_for(d, tf32=k == "tf32") for k, d in variants.items()}
budget = gpuguide.size_budget(device)
plan = {k: known[k] or precision.probe_rate(d, device) for k, d in variants.items()}

# %%
# Square matmuls of growing size
# ------------------------------
# Only ``torch.mm(a, b, out=out)`` is timed, after a warm-up. A sweep planned with a
# stand-in rate stops at the first size whose fastest call took over twice the time
# budget. Each dtype's largest square is held against its peak.
times = {}  # name -> {n: Measurement}
for name, dtype in variants.items():
    times[name] = {}
    sizes = sweep(
        32,
        16384,
        budget=budget,
        flop_per_s=plan[name],
        per_octave=2,
        multiple_of=8,
        memory_at=lambda n, d=dtype: matmul_bytes(n, n, n, d),
        flop_at=lambda n: matmul_flop(n, n, n),
    )
    with tf32_matmuls(name == "tf32"):
        for n in sizes:
            m = times[name][n] = time_matmul(
                dtype, (n, n, n), device=device, label=f"{name} {n}"
            )
            if not known[name] and m.min_s > 2 * budget.call_s:
                break
    report(f"{name} square matmul", m.rate(matmul_flop(n, n, n)), peak=name, size=n)

# Each lower precision against fp32 at the largest size both reached, then bf16
# against fp16. A tensor-core GPU runs fp16 and bf16 at one rate (one peak); a CPU
# runs bf16 fast only with AVX512-BF16 or AMX, fp16 only with AVX512-FP16 or
# AMX-FP16, and without them takes slow paths, often many times slower than fp32.
pairs = [("tf32", "fp32"), ("fp16", "fp32"), ("bf16", "fp32"), ("bf16", "fp16")]
against = {}
for low, high in (pair for pair in pairs if pair[0] in times):
    n = max(set(times[low]) & set(times[high]))
    against[low, high] = compare(times[low][n], times[high][n])
    print(against[low, high])
fp16_matrix, bf16_vector = precision.has_amx_fp16(), precision.has_avx512_bf16()
gpuguide.claim(
    "on a CPU without AMX-FP16 or AVX512-FP16, an fp16 matmul runs at most half as "
    "fast as fp32's",
    against["fp16", "fp32"],
    at_most=0.5,
    on="cpu",
    unless="this CPU has AMX-FP16" if fp16_matrix else None,
)
gpuguide.claim(
    "on a CPU with AVX512-BF16, a bf16 matmul runs at least 1.5x as fast as fp32's",
    against["bf16", "fp32"],
    at_least=1.5,
    on="cpu",
    unless=None if bf16_vector else "this CPU has no AVX512-BF16",
)


# %%
# The best rate: a search over shapes
# -----------------------------------
# Squares are not where a GPU runs fastest: how the output tiles divide among the
# SMs and how long ``k`` keeps each busy decide how well a product fills them, and
# long runs of large squares heat a GPU until its clock drops. The search times every
# ``(m, n, k)`` of the four largest doubling sizes that fit (three on a CPU, one fewer
# in small mode) in short bursts on a cold L2 cache, then the three fastest again on
# the full budget. A shape's rate is MAMF's: its FLOP over the median of its five
# fastest calls (:func:`~gpuguide.chapters.precision.mamf`). The best is the fastest
# of those three and of the squares above.
def time_shape(name, dtype, shape, **budgets):  # on a cold L2; per FLOP, as MAMF
    label = f"{name} {'x'.join(map(str, shape))}"
    m = time_matmul(dtype, shape, device=device, label=label, flush_l2=True, **budgets)
    return precision.mamf(m, matmul_flop(*shape))


lo, levels = (256, 4) if page.cuda else (32, 3)
scout = {"warmup_ms": 5, "rep_ms": 20, "max_reps": 100}  # short bursts
best = {}  # name -> the best shape's five fastest calls, per FLOP
for name, dtype in variants.items():
    scouted = {}
    shapes = precision.matmul_shapes(
        dtype, plan[name], budget, lo=lo, levels=levels - page.small
    )
    with tf32_matmuls(name == "tf32"):
        for shape in shapes:
            scouted[shape] = time_shape(name, dtype, shape, **scout)
            if scouted[shape].min_s * matmul_flop(*shape) > 2 * budget.call_s:
                break  # larger shapes would take longer still
        top = sorted(scouted, key=lambda s: scouted[s].median_s)[:3]
        full = {s: time_shape(name, dtype, s) for s in top}
    squares = {(n, n, n): m for n, m in times[name].items()}
    full |= {s: precision.mamf(m, matmul_flop(*s)) for s, m in squares.items()}
    shape = min(full, key=lambda s: full[s].median_s)
    best[name] = full[shape]
    size = "x".join(map(str, shape))
    print(f"{name}: the best of {len(scouted)} scouted shapes and the squares: {size}")
    report("best matmul", best[name].rate(1), peak=name, size=size, dtype=name)

# %%
# Throughput against size
# -----------------------
# Small matmuls cannot fill the device, so every curve rises with ``n`` before it
# flattens; on a GPU the 16-bit curves flatten later and higher, on top of each other
# (hence a marker per dtype). The title compares the two fastest dtypes at their best
# shapes, per FLOP. On an H100 expect the best bf16 and fp16 rates at 65-85% of the
# dense peak: the best published is 794.5 TFLOP/s, 80.3% of 989.5 (MAMF). Hold rates
# against your own device's peaks, and search shapes before calling a rate the best.
first, second = sorted(best, key=lambda k: best[k].median_s)[:2]
verdict = compare(best[first], best[second])
print(f"fastest: {verdict}")
small_n, large_n = min(times["fp32"]), max(times["fp32"])
rates = [times["fp32"][n].rate(matmul_flop(n, n, n)) for n in (small_n, large_n)]
gpuguide.claim(
    f"small matmuls cannot fill the device: fp32 at n={large_n} runs at least 2x "
    f"the FLOP/s of n={small_n}",
    rates[1].value / rates[0].value,
    spread=(rates[1].low / rates[0].high, rates[1].high / rates[0].low),
    at_least=2,
    timed=True,
)
gpuguide.claim(
    "on a GPU, bf16's best matmul runs at least 4x as fast as fp32's",
    compare(best["bf16"], best["fp32"]),
    at_least=4,
    on="cuda",
)
bf16_peak = peaks.flops_for(torch.bfloat16) or 0.0  # 0: unknown
gpuguide.claim(
    "on a GPU, bf16's best matmul reaches at least 65% of the dense peak",
    best["bf16"].rate(1),
    at_least=0.65 * bf16_peak,
    on="cuda",
    unless=None if bf16_peak else "the bf16 peak of this GPU is unknown",
)
unit, scale = ("TFLOP/s", 1e12) if page.cuda else ("GFLOP/s", 1e9)
sizes = sorted({n for by_n in times.values() for n in by_n})
series = {
    f"{name} (best {gpuguide.format_rate(best[name].rate(1).value, 'FLOP/s')})": [
        by_n[n].rate(matmul_flop(n, n, n)).value / scale if n in by_n else None
        for n in sizes
    ]
    for name, by_n in times.items()
}
fig, ax = plt.subplots()
plot_sweep(
    ax,
    sizes,
    series,
    xlabel="matrix side n (elements)",
    ylabel=f"square matmul throughput ({unit})",
    title=f"{first} is the fastest here"
    if verdict.measurable
    else f"{first} and {second} are the fastest here, with no measurable difference",
)
for line, marker in zip(ax.get_lines(), "osD^v", strict=False):
    line.set(marker=marker, markerfacecolor="none")
ax.legend()
plt.show()

# %%
# What to take away
# -----------------
# Which dtype is fastest depends on the device's matrix units: measure it, search
# shapes before calling a rate the best, and weigh the speed against the next
# page's accuracy. This page's claims, and where they held in this run:
gpuguide.takeaway()
