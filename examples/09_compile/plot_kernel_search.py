"""
max-autotune: a kernel search for one matmul shape
==================================================

``torch.compile(mode="max-autotune-no-cudagraphs")`` benchmarks several kernels for
every matmul shape it compiles (Triton templates with several tile sizes, and the
cuBLAS kernel eager mode calls) and keeps the fastest. ``"max-autotune"`` is the same
search plus CUDA graphs. The search adds compile time (it compiles and times every
candidate), so it is worth trying only where matmuls dominate.

This page runs the search on one layer, a ``Linear`` applied to many rows, and weighs
what it found (the steady-state speed-up over the default compile mode) against what
it cost (the seconds of its first call). The search's Triton templates need a CUDA
GPU; on other devices the page times eager mode against the default mode alone.

See also the concept page
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# As on the previous page: TF32 on a GPU for every variant, one thread on a CPU, and
# the compiler's one-off start-up paid with
# :func:`~gpuguide.chapters.compiling.start_compiler` before anything is timed.
import copy

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide.chapters.compiling import capture_compiler, start_compiler
from gpuguide.timing import first_calls_s

page = gpuguide.setup()
device, small = page.device, page.small
if page.cuda:
    torch.set_float32_matmul_precision("high")
else:
    torch.set_num_threads(1)
print(start_compiler(device))

# %%
# One layer, many rows
# --------------------
# The first layer of a transformer's MLP: ``dim`` to ``4 * dim`` features, on as
# many rows (tokens) as the device's time budget allows, up to 32,768. Its work is
# declared once and sizes the problem as well as giving the rates below.
dim = 128 if small else 1024 if page.cuda else 256


def flop(rows):  # one multiply and one add per term of each output
    return 2 * rows * dim * 4 * dim


rows = gpuguide.largest_size(
    256,
    32768,
    memory_at=lambda rows: 4 * (rows * dim + rows * 4 * dim + 4 * dim * dim),
    flop_at=flop,
    peaks=page.peaks if page.cuda else None,  # on a CPU: a fixed low rate
    flop_per_s=page.peaks.flops.get("tf32") if page.cuda else None,
)
layer = nn.Linear(dim, 4 * dim).to(device)
x = torch.randn(rows, dim, device=device)
shape = f"{rows}x{dim}x{4 * dim}"
print(
    f"Linear {dim} -> {4 * dim} on {rows:,} rows: {flop(rows) / 1e9:.3g} GFLOP a call"
)

# %%
# Compiling with and without the search
# -------------------------------------
# Each mode compiles its own copy of the layer, and its first call (the
# compilation, and for the search the benchmarking of every candidate) is timed on
# a synchronized host clock. Inductor writes a table for every matmul it tunes to
# stderr; :func:`~gpuguide.chapters.compiling.capture_compiler` keeps the tables off
# the page and sums them up in one line. The search is left out in small mode, where
# it would take most of the run.
search = "max-autotune-no-cudagraphs"
modes = ["default"]
if page.needs_cuda(f"The kernel search ({search})") and not small:
    modes.append(search)
torch._dynamo.reset()
nets = {"eager": layer} | {
    mode: torch.compile(copy.deepcopy(layer), mode=mode) for mode in modes
}


def inference(net):
    def call():
        with torch.no_grad():
            return net(x)

    return call


calls = {name: inference(net) for name, net in nets.items()}
with capture_compiler() as log:
    first = {mode: first_calls_s(calls[mode], device=device, calls=1) for mode in modes}
print(", ".join(f"{mode}: first call {first[mode]:.1f} s" for mode in modes))
if str(log):
    print(log)

# %%
# The steady state, in rounds
# ---------------------------
# The variants run in five rounds, one after the other in each round, so that a
# drift of the machine falls on all of them. Compiling a lone matmul gives the
# default mode nothing to fuse: it calls the same library kernel as eager mode
# (cuBLAS on a GPU, oneDNN or MKL on a CPU), so it cannot be faster; on a GPU the
# two should be within 10% of each other. Only the search can pick another
# kernel; on a large, common shape cuBLAS is hard to beat, so a small gain at
# most, to weigh against the extra seconds of the first call.
timed = gpuguide.interleave(calls, device=device, sample_ms=5)
rates = [
    {"variant": k, "time per call": m, "rate": m.rate(flop(rows))}
    for k, m in timed.items()
]
print(gpuguide.table(rates))
default = gpuguide.compare(timed["default"], timed["eager"])
print(default)
gpuguide.claim(
    "the default mode runs the lone matmul no faster than eager: nothing to fuse",
    default,
    verdict="not faster",
)
gpuguide.claim(  # on a CPU its wrapper costs a few percent more, up to 16% a round
    "on a GPU, the default mode runs the lone matmul within 10% of eager's time",
    **(default.per_round() if page.cuda else {}),
    at_least=1 / 1.1 if page.cuda else None,
    at_most=1.1 if page.cuda else None,
    on="cuda",
)
found = None
gpuguide.claim(
    "on a GPU, the search's first call takes longer than the default mode's",
    holds=search in first and first[search] > first["default"],
    measured=", ".join(f"{mode} {first[mode]:.1f} s" for mode in modes),
    on="cuda",
    unless=search not in first and "small mode leaves the search out",
)
if search in timed:
    extra = gpuguide.format_time(max(first[search] - first["default"], 0.0))
    print(f"the search cost {extra} more than the default compilation")
    found = gpuguide.compare(timed[search], timed["default"])
    gpuguide.report("search speed-up over default", found, size=shape, mode=search)
gpuguide.claim(
    "on a GPU, the search gains at most 1.2x over the default mode on this shape",
    found,
    at_most=1.2,
    on="cuda",
    unless=found is None and "small mode leaves the search out",
)

# %%
# Side by side
# ------------
# Bars are medians with their interquartile range, labelled with their time
# relative to eager: below 1.00x is faster than eager. The title is the last
# verdict: the search against the default mode where it ran.
c = found or default
fig, ax = plt.subplots()
title = f"{c.subject.label} against {c.baseline.label}: {c.short}"
gpuguide.plot_bars(
    ax, timed, ylabel="time per call (ms)", baseline="eager", title=title
)
plt.show()

# %%
# What to take away
# -----------------
# A kernel search pays where the library has no good kernel for a shape (odd sizes,
# a matmul with work fused around it); for a large, square-ish matmul the library
# kernel is usually as good. Try ``"max-autotune"`` on the model's real shapes, time
# the steady state in rounds, and count the calls it takes to earn back its compile
# time.
gpuguide.takeaway()
