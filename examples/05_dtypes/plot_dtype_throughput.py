"""
Matmul throughput per dtype
===========================

The same matrix multiplication runs at very different speeds in fp64, fp32, TF32,
fp16 and bf16: on NVIDIA GPUs from Ampere on, TF32, fp16 and bf16 run on tensor
cores, whose peaks are many times the fp32 figure; on a CPU its instruction set
decides. This page measures FLOP/s per dtype over square matmuls of growing size,
then searches matmul shapes, after Stas Bekman's MAMF finder, for the best rate the
device reaches (accuracy is the next page's subject; see also :doc:`how a GPU runs
PyTorch </concepts/gpu>`).
"""

# %%
# Setup
# -----
# TF32 is not a storage dtype: cuBLAS runs fp32 matmuls on tensor cores with a
# 10-bit mantissa while ``torch.backends.cuda.matmul.allow_tf32`` is set. Peaks are
# dense datasheet figures, or on a CPU the best fp32 and fp64 rates measured on the
# one thread torch uses here (lower bounds; fp16 and bf16 have none there).
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Sweep, Variant, compare, format_value, report
from gpuguide.chapters import precision

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
# Square matmuls of growing size
# ------------------------------
# An ``(m, k) @ (k, n)`` product does a multiply and an add per term: ``2 m n k``
# FLOP. Only ``torch.mm`` is timed, each dtype on its own inputs, its sizes planned
# at its peak (or, where none is known, at a short 64 x 64 probe's rate).
def mm(a, b, out):
    return torch.mm(a, b, out=out)


tf32_mm = precision.tf32_matmuls(True)(mm)  # mm with TF32 inside each call


def squares(dtype, n, device):  # a, b and out
    return [torch.randn(n, n, device=device).to(dtype) for _ in range(3)]


known = {k: peaks.flops_for(d, tf32=k == "tf32") for k, d in variants.items()}
plan = {k: known[k] or precision.probe_rate(d, device) for k, d in variants.items()}
fns = {"tf32": tf32_mm}
ways = {
    k: Variant(fns.get(k, mm), inputs=partial(squares, d), peak=k, flop_per_s=plan[k])
    for k, d in variants.items()
}
times = Sweep(
    "square matmul",
    partial(squares, torch.float32),
    lo=32,
    hi=16384,
    per_octave=2,
    multiple_of=8,
    memory=lambda n: 3 * 8 * n * n,  # a, b and out in fp64
    flop=lambda n: 2 * n**3,
    rate="FLOP/s",
    size_label="matrix side n (elements)",
).run(ways)
print(times)
for k in variants:
    report(f"{k} square matmul", times.rate(k), peak=k, size=times.largest(k))
small, large = times.rate("fp32", times.sizes[0]), times.rate("fp32")
gpuguide.claim(
    f"small matmuls cannot fill the device: fp32 at n={times.largest('fp32')} runs "
    f"at least 2x the FLOP/s of n={times.sizes[0]}",
    **large.over(small),
    at_least=2,
    timed=True,
)

# Each dtype against fp32, then bf16 against fp16. A tensor-core GPU runs fp16 and
# bf16 at one rate; a CPU runs bf16 fast only with AVX512-BF16 or AMX, fp16 only
# with AVX512-FP16 or AMX-FP16, else on slow paths.
times.against("fp32")
print(times.compare("bf16", "fp16"))
gpuguide.claim(
    "on a CPU without AMX-FP16 or AVX512-FP16, an fp16 matmul runs at most half as "
    "fast as fp32's",
    times.compare("fp16", "fp32"),
    at_most=0.5,
    on="cpu",
    unless="this CPU has AMX-FP16" if precision.cpu_has("amx_fp16") else None,
)
gpuguide.claim(
    "on a CPU with AVX512-BF16, a bf16 matmul runs at least 1.5x as fast as fp32's",
    times.compare("bf16", "fp32"),
    at_least=1.5,
    on="cpu",
    unless=None if precision.cpu_has("avx512_bf16") else "this CPU has no AVX512-BF16",
)


# %%
# The best rate: a search over shapes
# -----------------------------------
# Squares are not where a GPU runs fastest (tiles divide unevenly among the SMs,
# long runs heat it until its clock drops). The search times every ``(m, n, k)`` of
# the four largest doubling sizes that fit (three on a CPU, one fewer in small mode)
# in short bursts on a cold L2 cache, then the three fastest on the full budget; the
# best of those and the squares at MAMF's rate (FLOP over the median of the five
# fastest calls):
#
# .. literalinclude:: /../src/gpuguide/chapters/precision.py
#    :pyobject: search_matmul_shapes
best = {}  # name -> the best shape's five fastest calls, per FLOP
for name, dtype in variants.items():
    squares = {(n, n, n): times.at(name, n) for n in times.ran(name)}
    shape, best[name], scouted = precision.search_matmul_shapes(
        dtype, plan[name], device=device, label=name, tf32=name == "tf32", timed=squares
    )
    size = "x".join(map(str, shape))
    print(f"{name}: the best of {scouted} scouted shapes and the squares: {size}")
    report("best matmul", best[name].rate(1), peak=name, size=size, dtype=name)
first, second = sorted(best, key=lambda k: best[k].median_s)[:2]
verdict = compare(best[first], best[second])
print(f"fastest: {verdict}")
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

# %%
# Throughput against size
# -----------------------
# A fast path's curve rises with ``n`` before it flattens (on a GPU the 16-bit ones
# later and higher); a slow path, such as fp16 on most CPUs, can stay low or fall. The
# legend gives each dtype's best rate. On an H100 expect the best bf16 and fp16 at
# 65-85% of the dense peak (MAMF's best: 794.5 of 989.5 TFLOP/s).
best_rate = {k: format_value(best[k].rate(1).value, "FLOP/s") for k in best}
title = f"fastest here: {first} over {second}, {verdict.short}"
times.plot(title=title, labels={k: f"{k} (best {best_rate[k]})" for k in best})
plt.show()

# %%
# What to take away
# -----------------
# Which dtype is fastest depends on the device's matrix units: measure it, search
# shapes before calling a rate the best, and weigh speed against accuracy (next).
gpuguide.takeaway()
