"""
torch.compile: compile time against steady-state speed, in two regimes
======================================================================

``torch.compile`` fuses operations and generates kernels; the first call pays for
that. What it saves depends on where eager mode loses its time, so this page
compiles one transformer at two sizes, a small host-bound one and a large one whose
matmuls keep the GPU busy, and measures the compile cost, each mode's steady-state
time and the calls it takes to break even. See also :doc:`the roofline
</concepts/roofline>` and :doc:`Amdahl's law </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# TF32 on a GPU, one thread on a CPU, for eager and compiled alike. The compiler's
# one-off start :func:`~gpuguide.chapters.compiling.start_compiler` pays first.
import copy

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

import gpuguide
from gpuguide.chapters import compiling
from gpuguide.chapters.coldstart_child import Block
from gpuguide.timing import first_calls_s, host_and_gpu_times

page = gpuguide.setup()
device, small = page.device, page.small
if page.cuda:
    torch.set_float32_matmul_precision("high")
else:
    torch.set_num_threads(1)
print(compiling.start_compiler(device))

# %%
# One model, two sizes
# --------------------
# A pre-norm transformer block written out, with residual connections (the one the
# cold-start page compiles):
#
# .. literalinclude:: /../src/gpuguide/chapters/coldstart_child.py
#    :pyobject: Block
#
# The large model gets as many sequences as the device's peak rates fit in a 30 ms
# training step (the tables give the time it took).
# dim, heads, layers, sequences, sequence length
shapes = {"small": (256, 4, 2, 16, 128) if page.cuda else (32, 4, 2, 1, 16)}
dim, heads, layers, seq = (1024, 8, 2, 256) if page.cuda else (256, 4, 2, 64)
if small:
    dim, seq = 128, 64
    shapes["small"] = (*shapes["small"][:3], 1, 16)
peaks = page.peaks if page.cuda else None  # on a CPU: a fixed low rate
batch = gpuguide.largest_size(  # a training step's bytes and FLOP at b sequences
    1,
    256,
    memory_at=lambda b: 4 * layers * (160 * dim * dim + 40 * b * seq * dim),
    flop_at=lambda b: 6 * b * seq * layers * 12 * dim * dim,
    peaks=peaks,
    budget=gpuguide.size_budget(device, memory_fraction=0.5, call_s=0.03),
    flop_per_s=peaks.flops.get("tf32") if peaks else None,
)
shapes["large"] = (dim, heads, layers, batch, seq)
models, inputs = {}, {}
for size, (dim, heads, layers, batch, seq) in shapes.items():
    models[size] = nn.Sequential(*[Block(dim, heads) for _ in range(layers)]).to(device)
    inputs[size] = torch.randn(batch, seq, dim, device=device)
    print(f"{size}: {layers} blocks of dim {dim}; input {batch} x {seq} x {dim}")

# %%
# The modes, and what is timed
# ----------------------------
# ``"default"`` fuses and generates kernels; ``"reduce-overhead"`` adds CUDA graphs,
# which replay all of a call's kernel launches at once (``"max-autotune"`` is the
# next page). A training step is forward, loss, backward and an eager AdamW update;
# ``cudagraph_mark_step_begin`` tells CUDA graphs that a new step starts.
#
# Each mode compiles a fresh copy of the model; its first five calls are timed one
# by one (the first compiles; with CUDA graphs the next ones record). Then all
# variants run in five rounds under the ``"fail_on_recompile"`` stance; on a GPU,
# the host's launch and the GPU's work are also timed apart.
modes = ["default"]
if page.needs_cuda("reduce-overhead (CUDA graphs)"):
    modes.append("reduce-overhead")


def inference(net, x):
    return torch.no_grad()(lambda: net(x))  # no_grad as a decorator


def training(net, x):
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        F.mse_loss(net(x), x).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


rep_ms = None if page.cuda else 400


def measure(size, make_fn):
    model, x = models[size], inputs[size]
    torch._dynamo.reset()  # forget the previous graphs
    variants, warmup = {"eager": make_fn(copy.deepcopy(model), x)}, {}
    for mode in modes:
        before = counters["stats"]["unique_graphs"]  # dynamo's count of graphs
        net = torch.compile(copy.deepcopy(model), mode=mode)
        variants[mode] = make_fn(net, x)
        step = variants[mode]
        warmup[mode] = [first_calls_s(step, device=device, calls=1) for _ in range(5)]
        assert counters["stats"]["unique_graphs"] > before, f"{mode}: not compiled"
    with torch.compiler.set_stance("fail_on_recompile"):  # a recompilation raises
        timed = gpuguide.interleave(variants, device=device, rep_ms=rep_ms, sample_ms=5)
        split = {}
        for name, fn in variants.items() if page.cuda else ():
            split[name] = host_and_gpu_times(fn, device=device, label=name)
    return timed, split, warmup


# %%
# The workloads, one table each
# -----------------------------
# "compile" is what the warm-up calls took beyond as many steady-state calls; it
# pays off after ``compile / (eager - compiled)`` calls. Each speed-up is placed
# against the 1.5-3x often quoted for transformers.
phases = {"inference": inference, "training step": training}
workloads = {f"{s} model, {p}": (s, f) for s in models for p, f in phases.items()}
del workloads["small model, training step"]
results, gains = {}, {}
for key, (size, make_fn) in workloads.items():
    timed, split, warmup = results[key] = measure(size, make_fn)
    print(gpuguide.table(compiling.mode_rows(timed, warmup, split), title=key))
    gains[key] = {m: gpuguide.compare(timed[m], timed["eager"]) for m in modes}
    shape = "x".join(map(str, inputs[size].shape))
    for mode, c in gains[key].items():
        extra = {"workload": key, "size": shape, "mode": mode}
        gpuguide.report("speed-up over eager", c, quoted=(1.5, 3.0), **extra)

# %%
# Where compiling gains
# ---------------------
# On a GPU, the small model's eager kernels take less time than the host needs to
# launch them, and CUDA graphs replay the launches at once. On a CPU, eager mode
# pays Python's and the dispatcher's cost per operator, which a compiled graph pays
# once. Large matmuls leave little of either. The bars: medians with their IQR.
small_gain = gains["small model, inference"]
eager_split = results["small model, inference"][1].get("eager")
gpuguide.claim(
    "on a GPU, eager mode runs the small model host-bound: the GPU's work for a "
    "call is shorter than the host's launch of it",
    eager_split and gpuguide.compare(eager_split.gpu, eager_split.host),
    verdict="faster",
    on="cuda",
)
gpuguide.claim(
    "on a GPU, CUDA graphs (reduce-overhead) run the small model's inference at "
    "least 2x as fast as eager",
    small_gain.get("reduce-overhead"),
    at_least=2.0,
    on="cuda",
)
gpuguide.claim(
    "on a CPU, the default mode runs the small model's inference at least 1.1x as "
    "fast as eager, in each round",
    **compiling.per_round(small_gain["default"]),
    at_least=1.1,
    unless=page.cuda and "on a GPU, the small model's gain is CUDA graphs' (above)",
)
large = [c for k, got in gains.items() if k.startswith("large") for c in got.values()]
gpuguide.claim(
    "compiling the large model gains at most 1.3x over eager, in each round, phase "
    "and mode",
    **max(map(compiling.per_round, large), key=lambda r: r["spread"][1]),
    at_most=1.3,
)
fig, axes = plt.subplots(1, len(results), figsize=(11, 4.5))
for ax, (key, (timed, _, _)) in zip(axes, results.items(), strict=True):
    faster = [c.speedup for c in gains[key].values() if c.verdict == "faster"]
    gain = f"up to {max(faster):.2f}x" if faster else "no measurable gain"
    ylabel = "time per call (ms)"
    gpuguide.plot_bars(ax, timed, ylabel=ylabel, title=f"{key}: {gain}")
plt.show()

# %%
# What to take away
# -----------------
# Compile where eager mode's time is overhead, time it after its warm-up, and weigh
# the gain against the one-off cost.
gpuguide.takeaway()
