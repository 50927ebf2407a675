"""
torch.compile: compile time against steady-state speed, in two regimes
======================================================================

``torch.compile`` traces a model's Python code into graphs, fuses operations and
generates kernels for them (C++ on a CPU, Triton on a GPU). The first call pays for
that; later calls with the same input shapes reuse the compiled code. What it saves
per call depends on where eager mode loses its time, so this page compiles the same
transformer at two sizes: a small one whose GPU kernels take less time than the host
needs to launch them (host-bound), and a large one whose matmuls keep the GPU busy
(GPU-bound). For each, for inference and a training step, it measures the one-off
compile cost, the steady-state time of eager mode and each compile mode, the host's
launch time next to the GPU's work, and the calls it takes to break even.

See also the concept pages
:doc:`the roofline and its three regimes </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# On a GPU, TF32 tensor cores are allowed for eager and compiled runs alike, so that
# the compiler is the only thing that changes. Getting the compiler ready is a
# one-off cost per process, which
# :func:`~gpuguide.chapters.compiling.start_compiler` pays and times before anything
# else: importing inductor, starting its compile worker processes and a one-line
# compilation. Whether importing inductor warns depends on the torch release (about
# torch's own code, which gpuguide ignores); a warning caught is printed.
import copy

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

import gpuguide
from gpuguide.chapters.compiling import (
    capture_compiler,
    first_calls_s,
    host_and_gpu_times,
    start_compiler,
)

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small, on_cuda = gpuguide.small_mode(), device.type == "cuda"
if on_cuda:
    torch.set_float32_matmul_precision("high")
print(start_compiler(device))

# %%
# One model, two sizes
# --------------------
# A pre-norm transformer block written out: layer norm, one QKV projection, scaled
# dot-product attention, output projection and a GELU MLP, with residual
# connections. The small model is fixed; the large one gets as many sequences as
# the device's budget allows for a training step of about 30 ms.


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


# dim, heads, layers, sequences, sequence length
shapes = {"small": (256, 4, 4, 16, 128) if on_cuda else (64, 4, 2, 8, 64)}
dim, heads, layers, seq = (1024, 8, 2, 256) if on_cuda else (256, 4, 2, 64)
if small:
    dim, seq = 128, 64
peaks = gpuguide.device_peaks(device) if on_cuda else None  # a CPU: a fixed low rate
batch = gpuguide.largest_size(
    1,
    256,
    memory_at=lambda b: 4 * layers * (160 * dim * dim + 40 * b * seq * dim),
    flop_at=lambda b: 6 * b * seq * layers * 12 * dim * dim,
    budget=gpuguide.size_budget(device, memory_fraction=0.5, call_s=0.03),
    peaks=peaks,
    flop_per_s=peaks.flops.get("tf32") if peaks is not None else None,
)
shapes["large"] = (dim, heads, layers, batch, seq)
if small:
    shapes["small"] = (*shapes["small"][:3], 4, 32)
models, inputs = {}, {}
for size, (dim, heads, layers, batch, seq) in shapes.items():
    blocks = [Block(dim, heads) for _ in range(layers)]
    models[size] = nn.Sequential(*blocks).to(device)
    inputs[size] = torch.randn(batch, seq, dim, device=device)
    params = sum(p.numel() for p in models[size].parameters())
    print(
        f"{size}: {layers} blocks, dim {dim}, {params / 1e6:.1f} M parameters; "
        f"input {batch} x {seq} x {dim}"
    )

# %%
# The modes
# ---------
# ``"default"`` fuses and generates kernels. ``"reduce-overhead"`` adds CUDA graphs,
# which replay all of a call's kernel launches at once: the cure for a host-bound
# model. ``"max-autotune-no-cudagraphs"`` benchmarks several kernels for every matmul
# shape and keeps the fastest: worth trying only where matmuls dominate, and it
# multiplies the compile time (tens of seconds per shape on a GPU), so it gets its
# own section below, on one shape. (``"max-autotune"`` is the same search plus CUDA
# graphs.)
modes = ["default", "reduce-overhead"] if on_cuda else ["default"]
search = ["max-autotune-no-cudagraphs"] if on_cuda and not small else []
if not on_cuda:
    print(
        "reduce-overhead (CUDA graphs) needs a CUDA GPU, and this page runs the kernel "
        f"search (Triton against cuBLAS) on a GPU only; on {device.type}: default."
    )


# %%
# What is timed
# -------------
# Inference runs under ``torch.no_grad()``. A training step is forward, loss,
# backward and an AdamW update; the model is compiled (its backward with it), the
# optimizer stays eager. ``cudagraph_mark_step_begin`` tells CUDA graphs that a new
# step starts; it does nothing in the other modes.
def inference(net, x):
    def call():
        with torch.no_grad():
            return net(x)

    return call


def training(net, x):
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        F.mse_loss(net(x), x).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


# %%
# Warm-up apart from steady state, then all variants in rounds
# ------------------------------------------------------------
# Each mode compiles a fresh copy of the model, and its first five calls are timed
# one by one on a synchronized host clock: the first compiles (with CUDA graphs the
# next ones record). Everything the compiler writes meanwhile (max-autotune prints a
# table for every matmul it tunes) is captured and summed up in one line. Then eager
# and the compiled variants run in five rounds, one after the other in each round, so
# that a drift of the machine falls on all of them, under the ``"fail_on_recompile"``
# stance, which raises on any recompilation; dynamo's count of compiled graphs must
# not move. On a GPU, each variant's host launch time and GPU time are measured from
# the same calls: the GPU is held busy while the host launches, so that CUDA events
# time its work alone.
def graphs():
    return counters["stats"]["unique_graphs"]


results, shape, rep_ms = {}, {}, 200 if on_cuda else 100  # ms per variant
for size, model in models.items():
    for phase, make_fn in [("inference", inference), ("training step", training)]:
        key, x = f"{size} model, {phase}", inputs[size]
        torch._dynamo.reset()  # forget the previous graphs
        variants, warmup = {"eager": make_fn(copy.deepcopy(model), x)}, {}
        for mode in modes:
            before, net = graphs(), torch.compile(copy.deepcopy(model), mode=mode)
            variants[mode] = make_fn(net, x)
            with capture_compiler() as log:
                warmup[mode] = [
                    first_calls_s(variants[mode], device=device, calls=1)
                    for _ in range(5)
                ]
            if str(log):
                print(f"{key}, {mode}: {log}")
            assert graphs() > before, f"{key}, {mode}: nothing was compiled"
        warm = graphs()
        with torch.compiler.set_stance("fail_on_recompile"):
            timed = gpuguide.interleave(variants, rep_ms=rep_ms, device=device)
            split = {name: host_and_gpu_times(fn, device=device, label=name)
                     for name, fn in variants.items()} if on_cuda else {}  # fmt: skip
        assert graphs() == warm, f"{key}: recompiled while timing"
        compile_s = {  # the warm-up calls beyond five steady-state calls
            mode: sum(max(t - timed[mode].median_s, 0.0) for t in times)
            for mode, times in warmup.items()
        }
        results[key] = (timed, split, compile_s)
        shape[key] = "x".join(map(str, x.shape))  # the input's, for the record

# %%
# The tables
# ----------
# "compile" is what the five warm-up calls took beyond five steady-state calls.
# Compiling pays off after ``compile / (eager - compiled)`` calls, counted only where
# the saving is larger than the spread. Below each table, each mode's speed-up over
# eager, with the range it spans over both interquartile ranges. Speed-ups of 1.5-3x
# are often quoted for transformers; expect more on a host-bound model with CUDA
# graphs, and less on a GPU-bound one, whose time goes into matmuls that eager mode
# already runs well (cuBLAS on a GPU, oneDNN on a CPU). On a CPU there is no launch
# to hide, but a small model still pays Python's and the dispatcher's cost per
# operator.
gains = {}
for key, (timed, split, compile_s) in results.items():
    rows, lines, gains[key] = [], [], {}
    for name, m in timed.items():
        row = {"mode": name, "time per call": m}
        if split:
            row |= {"host (launch)": split[name].host, "GPU (work)": split[name].gpu}
        row |= {"compile": None, "pays off after": None}
        if name != "eager":
            c = gains[key][name] = gpuguide.compare(m, timed["eager"])
            gpuguide.record(
                "speed-up over eager",
                c.speedup,
                unit="x",
                spread=(c.low, c.high),
                size=shape[key],
                workload=key,
                mode=name,
            )
            even = gpuguide.break_even(compile_s[name], timed["eager"], m)
            row["compile"] = gpuguide.format_time(compile_s[name])
            row["pays off after"] = "-" if even is None else f"{even:,} calls"
            lines.append(f"{c}: {c.against(1.5, 3.0)} the 1.5-3x often quoted")
        rows.append(row)
    print(gpuguide.table(rows, title=key))
    if split:
        print(f"eager: {split['eager']}")
    print("\n".join(lines))

# %%
# A kernel search, one matmul shape
# ---------------------------------
# On a GPU, the large model's first MLP layer alone, on the large input: compiled
# with the search and without it, each timed from its first call, then against
# each other in rounds.
if search:
    mode, layer, x = search[0], models["large"][0].mlp[0], inputs["large"]
    nets = {"default": torch.compile(copy.deepcopy(layer)),
            mode: torch.compile(copy.deepcopy(layer), mode=mode)}  # fmt: skip
    calls = {name: inference(net, x) for name, net in nets.items()}
    with capture_compiler() as log:  # the search's tables stay off the page
        first = {name: first_calls_s(fn, device=device, calls=1)
                 for name, fn in calls.items()}  # fmt: skip
    timed = gpuguide.interleave(calls, rep_ms=rep_ms, device=device)
    c = gpuguide.compare(timed[mode], timed["default"])
    print(
        f"Linear {layer.in_features} -> {layer.out_features} on "
        f"{x.numel() // x.shape[-1]} rows: the first call took {first[mode]:.1f} s "
        f"with the search, {first['default']:.1f} s without"
        + (f"; {log}" if str(log) else "")
    )
    extra = gpuguide.format_time(max(first[mode] - first["default"], 0.0))
    print(f"{c}, for {extra} of search")
    gpuguide.record(
        "search speed-up over default", c.speedup, unit="x", spread=(c.low, c.high),
        size=f"{x.numel() // x.shape[-1]}x{layer.in_features}x{layer.out_features}",
        mode=mode,
    )  # fmt: skip

# %%
# Steady state
# ------------
# Bars are medians with their interquartile range, labelled with their time
# relative to eager: below 1.00x is faster than eager.
fig, axes = plt.subplots(2, 2, figsize=(11, 8))
for ax, (key, (timed, _, _)) in zip(axes.flat, results.items(), strict=True):
    faster = [c.speedup for c in gains[key].values() if c.verdict == "faster"]
    gain = f"up to {gpuguide.format_ratio(max(faster))}" if faster else "no gain"
    gpuguide.plot_bars(
        ax,
        timed,
        ylabel="time per call (ms)",
        title=f"{key}: {gain}",
        baseline="eager",
    )
plt.show()

# %%
# Compile time
# ------------
# A training step compiles a forward and a backward graph, so expect it to take
# longer than inference, and max-autotune's search to multiply the cost. Inductor
# keeps the code it generates in a disk cache (``/tmp/torchinductor_<user>`` by
# default), so a second run of this script compiles faster.
cost = {
    f"{key.replace(' model,', ',')}\n{mode}": seconds
    for key, (_, _, compile_s) in results.items()
    for mode, seconds in compile_s.items()
}
slowest = max(cost, key=cost.get)
fig, ax = plt.subplots(figsize=(10, 4.5))
gpuguide.plot_bars(
    ax,
    cost,
    ylabel="one-off compile cost (s)",
    title=f"Compiling costs up to {cost[slowest]:.1f} s "
    f"({slowest.replace(chr(10), ', ')})",
)
plt.show()

# %%
# What to take away
# -----------------
# Find out first where eager mode loses its time: when the host's launch time
# exceeds the GPU's work, CUDA graphs (``"reduce-overhead"``) remove most of the
# step; when the GPU is busy with large matmuls, compiling fuses the small operations
# around them and gains little, and a kernel search rarely beats cuBLAS by more than
# the spread. Time a compiled model after its warm-up, under ``"fail_on_recompile"``,
# and weigh the gain per call against the one-off cost: the break-even column counts
# it in calls.
