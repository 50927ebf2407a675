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

import gpuguide
from gpuguide.chapters import compiling
from gpuguide.chapters.coldstart_child import Block
from gpuguide.timing import first_calls_s, host_and_gpu_times

page = gpuguide.setup()
device = page.device
if page.cuda:
    torch.set_float32_matmul_precision("high")
else:
    torch.set_num_threads(1)
print(compiling.start_compiler(device))

# %%
# One model, two sizes
# --------------------
# Two pre-norm transformer blocks, the ones the cold-start page compiles:
#
# .. literalinclude:: /../src/gpuguide/chapters/coldstart_child.py
#    :pyobject: Block
#
# The large model gets as many sequences as the device's peak rates fit in a 30 ms
# training step (the tables give the time it took).
# dim, heads, sequences, sequence length (and the tests' small sizes):
small = (256, 4, 16, 128) if page.cuda and not page.small else (32, 4, 1, 16)
dim, heads, seq = (1024, 8, 256) if page.cuda else (256, 4, 64)
dim = 128 if page.small else dim
batch = gpuguide.largest_size(  # a training step's bytes and FLOP at b sequences
    1,
    256,
    memory_at=lambda b: 8 * (160 * dim * dim + 40 * b * seq * dim),
    flop_at=lambda b: 6 * b * seq * 2 * 12 * dim * dim,
    peaks=page.peaks if page.cuda else None,  # on a CPU: a fixed low rate
    budget=gpuguide.size_budget(device, memory_fraction=0.5, call_s=0.03),
    flop_per_s=page.peaks.flops.get("tf32") if page.cuda else None,
)
large = (dim, heads, batch, seq)

# %%
# The modes, and what is timed
# ----------------------------
# ``"default"`` fuses and generates kernels; ``"reduce-overhead"`` adds CUDA graphs,
# which replay all of a call's kernel launches at once (``"max-autotune"`` is the
# next page). A training step is forward, loss, backward and an eager AdamW update;
# ``cudagraph_mark_step_begin`` tells CUDA graphs that a new step starts.
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


# %%
# The workloads, one table each
# -----------------------------
# Each mode compiles a fresh copy of the model; its first five calls are timed one
# by one (the first compiles; with CUDA graphs the next ones record). Then all
# variants run in five rounds under the ``"fail_on_recompile"`` stance; on a GPU,
# the host's launch and the GPU's work are also timed apart. "compile" is what the
# warm-up calls took beyond as many steady-state calls; it pays off after
# ``compile / (eager - compiled)`` calls. Each speed-up is placed against the 1.5-3x
# often quoted for transformers.
workloads = {
    "small model, inference": (small, inference),
    "large model, inference": (large, inference),
    "large model, training step": (large, training),
}
results, gains = {}, {}
for key, ((dim, heads, batch, seq), make_fn) in workloads.items():
    model = torch.nn.Sequential(Block(dim, heads), Block(dim, heads)).to(device)
    x, shape = torch.randn(batch, seq, dim, device=device), f"{batch}x{seq}x{dim}"
    torch._dynamo.reset()  # forget the previous graphs
    variants, warmup = {"eager": make_fn(copy.deepcopy(model), x)}, {}
    for mode in modes:
        net = torch.compile(copy.deepcopy(model), mode=mode)
        step = variants[mode] = make_fn(net, x)
        warmup[mode] = [first_calls_s(step, device=device, calls=1) for _ in range(5)]
    with torch.compiler.set_stance("fail_on_recompile"):  # a recompilation raises
        timed = gpuguide.interleave(variants, device=device, rep_ms=400, sample_ms=5)
        split = {}
        for name, fn in variants.items() if page.cuda else ():
            split[name] = host_and_gpu_times(fn, device=device, label=name)
    results[key] = timed, split
    rows = compiling.mode_rows(timed, warmup, split)
    print(gpuguide.table(rows, title=f"{key}: two blocks, input {shape}"))
    gains[key] = {m: gpuguide.compare(timed[m], timed["eager"]) for m in modes}
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
eager_split = results["small model, inference"][1].get("eager")
gpuguide.claim(
    "on a GPU, eager mode runs the small model host-bound (GPU work < host launch)",
    eager_split and gpuguide.compare(eager_split.gpu, eager_split.host),
    verdict="faster",
    on="cuda",
)
gpuguide.claim(
    "on a GPU, CUDA graphs gain at least 2x on the small model's inference",
    gains["small model, inference"].get("reduce-overhead"),
    at_least=2.0,
    on="cuda",
)
gpuguide.claim(
    "on a CPU, the default mode gains at least 1.1x on the small model, in each round",
    **gains["small model, inference"]["default"].per_round(),
    at_least=1.1,
    on="cpu",
)
on_large = [c for k, by in gains.items() if k.startswith("large") for c in by.values()]
gpuguide.claim(
    "compiling the large model gains at most 1.3x, in each round, phase and mode",
    **max((c.per_round() for c in on_large), key=lambda r: r["spread"][1]),
    at_most=1.3,
)
fig, axes = plt.subplots(1, len(results), figsize=(11, 4.5))
for ax, (key, (timed, _)) in zip(axes, results.items(), strict=True):
    faster = [c.speedup for c in gains[key].values() if c.verdict == "faster"]
    gain = f"up to {max(faster):.2f}x" if faster else "no measurable gain"
    gpuguide.plot_bars(ax, timed, ylabel="time per call (ms)", title=f"{key}: {gain}")
plt.show()

# %%
# What to take away
# -----------------
# Compile where eager mode's time is overhead, time it after its warm-up, and weigh
# the gain against the one-off cost.
gpuguide.takeaway()
