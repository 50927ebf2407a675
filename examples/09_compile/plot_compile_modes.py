"""
torch.compile: compile time against steady-state speed
======================================================

``torch.compile`` traces a model's Python code into graphs, fuses operations and
generates kernels for them (C++ on a CPU, Triton on a GPU). The first call pays for
that; later calls with the same input shapes reuse the compiled code. This page
measures both on a small transformer, for inference and for a training step, in
eager mode and in each compile mode the device supports: the one-off compile cost,
the steady-state time, the speed-up and the calls it takes to break even. It also
counts the graphs compiled during the warm-up and during the timed calls.
"""

# %%
# Setup
# -----
# On a GPU, inductor warns when float32 matmuls could use TF32 tensor cores but may
# not; this page allows TF32 for eager and compiled runs alike, so that the compiler
# is the only thing that changes.
#
# Getting the compiler ready is a one-off cost per process, which
# :func:`~gpuguide.chapters.compiling.start_compiler` pays and times before anything
# else: importing inductor, starting its compile worker processes (each imports
# torch, which on a machine with few cores would slow down whatever is being timed)
# and a one-line compilation. In torch 2.13 the import warns about torch's own use
# of the deprecated ``torch.jit.script_method``; that warning is caught and printed.
import copy
from typing import NamedTuple

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

import gpuguide
from gpuguide.chapters.compiling import first_calls_s, recording, start_compiler

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
on_cuda = device.type == "cuda"
if on_cuda:
    torch.set_float32_matmul_precision("high")

print(start_compiler(device))  # with any warning caught while importing

# %%
# The model
# ---------
# A pre-norm transformer block written out, so that eager and compiled run the same
# Python code: layer norm, one QKV projection, scaled dot-product attention, output
# projection and a GELU MLP, with residual connections.


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


dim, heads, layers, batch, seq = (256, 4, 4, 16, 128) if on_cuda else (64, 4, 2, 8, 64)
if small:
    batch, seq = batch // 2, seq // 2
base = nn.Sequential(*[Block(dim, heads) for _ in range(layers)]).to(device)
x = torch.randn(batch, seq, dim, device=device)
target = torch.randn_like(x)
print(f"{layers} blocks, dim {dim}, {heads} heads; input {batch} x {seq} x {dim}")

# %%
# The modes
# ---------
# ``"default"`` fuses and generates kernels. ``"reduce-overhead"`` adds CUDA graphs,
# which replay all of a call's kernel launches at once. ``"max-autotune"`` also
# benchmarks several kernels for every matmul and keeps the fastest (plus CUDA
# graphs), which makes compiling much slower; ``"max-autotune-no-cudagraphs"`` is
# the search alone.
if on_cuda:
    modes = ["default", "reduce-overhead", "max-autotune"]
else:
    search = device.type == "cpu" and not small
    modes = ["default"] + (["max-autotune-no-cudagraphs"] if search else [])
    print(
        "reduce-overhead (CUDA graphs) and max-autotune (a search over GPU matmul "
        f"kernels) need a CUDA GPU; on {device.type} this page runs eager and "
        f"{', '.join(modes)}."
    )


# %%
# What is timed
# -------------
# Inference runs under ``torch.no_grad()``. A training step is forward, loss,
# backward and an AdamW update; the model is compiled (its backward with it), the
# optimizer stays eager. ``cudagraph_mark_step_begin`` tells CUDA graphs that a new
# step starts; it does nothing in the other modes.
def inference(net):
    def call():
        with torch.no_grad():
            return net(x)

    return call


def training(net):
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        F.mse_loss(net(x), target).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


# %%
# Warm-up apart from steady state, with compilations counted
# ----------------------------------------------------------
# A popular book chapter times its compiled transformer after five untimed warm-up
# calls and never checks that they compiled everything. Here the five warm-up calls
# are timed one by one with a synchronized host clock (the first compiles; with CUDA
# graphs the next ones record), and dynamo's counter of compiled graphs is read
# before and after them and after the steady-state measurement. That measurement
# runs under the ``"fail_on_recompile"`` stance, which raises on any recompilation,
# for 200 ms rather than the default 100 ms: the steady state is what is compared.
CACHE = ("fxgraph_cache_hit", "fxgraph_cache_miss")  # inductor's disk cache


class Result(NamedTuple):
    steady: gpuguide.Measurement  # after the warm-up
    first_s: float  # the first call, which compiles
    compile_s: float  # what the warm-up took beyond five steady-state calls


def graphs():
    return counters["stats"]["unique_graphs"]


def measure(make_fn, net, label):
    fn, before, caught = make_fn(net), graphs(), {}
    cache = dict(counters["inductor"])
    with recording(caught, label):  # printed below, not hidden
        first = [first_calls_s(fn, device=device, calls=1) for _ in range(5)]
    for text in sorted({f"{w.category.__name__}: {w.message}" for w in caught[label]}):
        print(f"{label}: warning while compiling: {text}")
    warm = graphs()
    hits, misses = (counters["inductor"][k] - cache.get(k, 0) for k in CACHE)
    with torch.compiler.set_stance("fail_on_recompile"):
        m = gpuguide.benchmark(fn, device=device, label=label, rep_ms=200)
    assert graphs() == warm, f"{label}: recompiled while timing"
    print(
        f"{label}: {warm - before} graph(s) compiled in 5 warm-up calls, "
        f"{graphs() - warm} while timing; inductor cache: {hits} hit(s), "
        f"{misses} miss(es)"
    )
    return Result(m, first[0], sum(max(t - m.median_s, 0.0) for t in first))


results = {}
for phase, make_fn in [("inference", inference), ("training step", training)]:
    results[phase] = {}
    for mode in ["eager", *modes]:
        torch._dynamo.reset()  # forget the previous mode's graphs
        net = copy.deepcopy(base).train(make_fn is training)
        if mode != "eager":
            net = torch.compile(net, mode=mode)
        results[phase][mode] = measure(make_fn, net, f"{phase}, {mode}")

# %%
# The table
# ---------
# "compile" is the one-off cost: what the five warm-up calls took beyond five
# steady-state calls. Compiling pays off after ``compile / (eager - compiled)``
# calls, never if the compiled model is not faster. Speed-ups of 1.5-3x are often
# quoted for transformers; expect anything from none to a few times, depending on
# how much of eager's time goes into launching small operations and moving
# activations through memory.
for phase, rows in results.items():
    eager = rows["eager"].steady.median_s
    table = []
    for mode, row in rows.items():
        saving = eager - row.steady.median_s
        even = f"{row.compile_s / saving:,.0f} calls" if saving > 0 else "never"
        table.append(
            {
                "phase, mode": f"{phase}, {mode}",
                "first call": gpuguide.format_time(row.first_s),
                "compile": None if mode == "eager" else f"{row.compile_s:.2f} s",
                "steady median ± IQR/2": row.steady,
                "speed-up": gpuguide.format_ratio(eager / row.steady.median_s),
                "break-even": None if mode == "eager" else even,
            }
        )
    print(gpuguide.table(table))
    best = max(eager / rows[mode].steady.median_s for mode in modes)
    if best < 1:
        verdict = "no mode beat eager here, against the usual advice"
    elif best < 1.5:
        verdict = "a gain, below the 1.5-3x often quoted for transformers"
    else:
        verdict = "above" if best > 3 else "within"
        verdict += " the 1.5-3x often quoted for transformers"
    print(f"{phase}: best speed-up {gpuguide.format_ratio(best)}: {verdict}")

# %%
# Steady state
# ------------
# Bars are medians with their interquartile range, labelled with their time
# relative to eager: below 1.00x is faster than eager.
fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
for ax, (phase, rows) in zip(axes, results.items(), strict=True):
    eager = rows["eager"].steady.median_s
    fastest = min(rows[mode].steady.median_s for mode in modes)
    ratio = gpuguide.format_ratio(eager / fastest)
    gpuguide.plot_bars(
        ax,
        {mode: row.steady for mode, row in rows.items()},
        ylabel="time per call (ms)",
        title=f"{phase}: best compiled mode at {ratio} eager speed",
        baseline="eager",
    )
plt.show()

# %%
# Compile time
# ------------
# A training step compiles a forward and a backward graph, so expect it to take
# longer than inference; on a GPU, expect max-autotune's search to multiply the
# cost. Inductor keeps the code it generates in a disk cache
# (``/tmp/torchinductor_<user>`` by default), so a second run of this script, or a
# mode that shares kernels with an earlier one, compiles faster: the cache hits
# printed above tell which case this page shows.
compile_s = {
    f"{phase}\n{mode}": row.compile_s
    for phase, rows in results.items()
    for mode, row in rows.items()
    if mode != "eager"
}
slowest = max(compile_s, key=compile_s.get)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    compile_s,
    ylabel="one-off compile cost (s)",
    title=f"Compiling costs up to {compile_s[slowest]:.1f} s "
    f"({slowest.replace(chr(10), ', ')})",
)
plt.show()

# %%
# What to take away
# -----------------
# Time a compiled model after its warm-up, and check that the warm-up compiled
# everything: a graph counter or the ``"fail_on_recompile"`` stance turns a silent
# recompilation in the timed region into a visible one. Whether compiling is worth
# it is a trade between a gain per call and a one-off cost, which the break-even
# column counts in calls: long training runs and servers amortize it easily, a short
# script may not.
