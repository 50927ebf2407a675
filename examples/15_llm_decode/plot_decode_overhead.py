"""
Decode overhead: CUDA graphs, and a cache that must keep its shape
==================================================================

At batch 1 a decode step of a mid-sized model is a few hundred small kernels, and
on a GPU eager PyTorch can spend more time launching them than the GPU spends
running them (a claim below checks it).
``torch.compile`` fuses some of them; ``mode="reduce-overhead"`` also replays the
step from a CUDA graph, which removes the launches. This page times eager, compiled
and CUDA-graph steps with the host's and the GPU's time per step, the compile time
and the steps it takes to pay for itself. Then the trap: a key-value cache that
grows by concatenation changes shape every step, so the compiler recompiles and the
CUDA graphs are captured again, step after step.
"""

# %%
# Setup
# -----
# The decoder of the previous page (:mod:`gpuguide.chapters.decode`), smaller: on a
# GPU two layers of a 1B-class shape, whose kernels are short enough that eager mode
# is launch-bound. The compiler's one-off start-up is paid first, apart.
import copy

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch._dynamo.utils import counters

import gpuguide
from gpuguide import compare, format_bytes, report, table
from gpuguide.chapters import compiling, decode

if not torch.cuda.is_available():  # a relative lesson: one thread's steadier times
    torch.set_num_threads(1)
page = gpuguide.setup()
device, small = page.device, page.small
dtype = torch.bfloat16 if page.cuda else torch.float32
print(compiling.start_compiler(device))
big = page.cuda and not small
if big:
    shape = decode.DecoderShape(
        dim=2048, layers=2, heads=16, kv_heads=4, ffn=5632, vocab=32000
    )
else:
    shape = decode.DecoderShape(
        dim=256, layers=2, heads=4, kv_heads=2, ffn=704, vocab=1024
    )
context, prompt = (512, 64) if big else (128, 32)
model = decode.random_decoder(shape, device=device, dtype=dtype)
model.setup_cache(1, context)
token = torch.randint(shape.vocab, (1,), device=device)
pos = torch.tensor([prompt], device=device)  # a prompt is in the cache
print(f"{shape.label}: {format_bytes(shape.weight_bytes(dtype.itemsize))} of weights")
model_size = f"{shape.label}, context {context}"

# %%
# Eager, compiled and CUDA graphs at batch 1
# ------------------------------------------
# Each mode compiles its own copy of the model. ``cudagraph_mark_step_begin`` tells
# the CUDA graphs that a new step begins (the previous step's outputs may be
# overwritten). The first five calls of each are timed one by one: the first
# compiles, and with CUDA graphs the next ones warm up and capture.
# (:func:`~gpuguide.chapters.decode.stepper` wraps the call.) Then all modes
# run in alternating rounds under the ``"fail_on_recompile"`` stance.
modes = ["default"]
if page.needs_cuda('mode="reduce-overhead" (CUDA graphs)'):
    modes.append("reduce-overhead")
variants, warmup = {"eager": decode.stepper(model, token, pos)}, {}
with compiling.capture_compiler() as log:  # what torch logs stays off the page
    for mode in modes:
        compiled = torch.compile(copy.deepcopy(model), mode=mode)
        variants[mode] = decode.stepper(compiled, token, pos)
        warmup[mode] = [compiling.first_calls_s(variants[mode], device=device, calls=1)
                        for _ in range(5)]  # fmt: skip
if str(log):
    print(f"while compiling: {log}")
with torch.compiler.set_stance("fail_on_recompile"):
    timed = gpuguide.interleave(variants, device=device, sample_ms=5)
    split = {name: compiling.host_and_gpu_times(fn, device=device, label=name)
             for name, fn in variants.items()}  # fmt: skip

# %%
# Host, GPU, compile time
# -----------------------
# "host" is the time the host takes to launch a step, "GPU" the GPU's work for it,
# timed apart (the GPU held busy while the host launches). Eager mode is
# launch-bound when its host time exceeds its GPU time: then CUDA graphs should
# gain several times, while fusion alone (``"default"``) gains less. A CPU has no
# launches to remove, but a tiny model still pays Python's cost per operator.
# "compile" is what the warm-up calls took beyond five steady steps.
nbytes = shape.step_bytes(1, context, dtype.itemsize)
rows = []
for name, m in timed.items():
    cost = sum(max(t - m.median_s, 0.0) for t in warmup.get(name, []))
    even = gpuguide.break_even(cost, timed["eager"], m) if name in warmup else None
    rows.append({"mode": name, "step": m, "host": split[name].host,
                 "GPU": split[name].gpu, "bandwidth": m.rate(nbytes, "B/s"),
                 "compile": f"{cost:.2f} s" if name in warmup else None,
                 "pays off after": even and f"{even:,} steps"})  # fmt: skip
print(table(rows))
print(f"eager: {split['eager']}")
gpuguide.claim("on a GPU, an eager step at batch 1 is launch-bound: its host time exceeds its GPU time",
               holds=split["eager"].bound == "host", measured=str(split["eager"]), on="cuda")  # fmt: skip
best, at = modes[-1], {"size": model_size, "batch": 1, "mode": modes[-1]}
gain = compare(timed[best], timed["eager"])
report("speed-up over eager", gain, quoted=(2.0, 5.0) if page.cuda else None, **at)
fused = compare(timed["default"], timed["eager"])
gpuguide.claim(
    "compiled (default mode) is at least 1.2x faster than eager at batch 1",
    fused,
    at_least=1.2,
    unless="a side is NOISY here: no check" if fused.noisy else None,
)
if best != "default":
    gpuguide.claim(
        f"{best} is at least 2x faster than eager at batch 1", gain, at_least=2.0
    )
# Memory's bandwidth needs weights well past the caches (a CPU's hold this model).
if page.cuda and nbytes > 4 * decode.l2_cache_bytes(device):
    report("decode bandwidth", timed[best].rate(nbytes, "B/s"), peak="memory", **at)
fig, ax = plt.subplots()
title = f"Batch 1: {gain.short} with {best}"
gpuguide.plot_bars(ax, timed, ylabel="time per decode step (ms)", title=title)
plt.show()

# %%
# The trap: a cache that grows by concatenation
# ---------------------------------------------
# Many first implementations append each token's keys and values with
# ``torch.cat``. It is correct, but the cache's length, a dimension of the
# attention's tensors, changes every step, and the compiler must follow: it
# recompiles with that length symbolic, and every later step runs code made for
# any length. CUDA graphs cannot follow at all: a graph replays fixed shapes at
# fixed addresses, so ``"reduce-overhead"`` would record a new graph at every length
# (and this cache reads, each step, tensors that the previous step's graph owns).
# The static cache writes in place into tensors that keep their shape, so the same
# graph serves every step.


class GrowingCache(nn.Module):
    def __init__(self, batch, kv_heads, length, head_dim, *, dtype, device):
        super().__init__()  # starts with ``length`` positions: the prompt's
        self.k = torch.zeros(batch, kv_heads, length, head_dim, dtype=dtype, device=device)  # fmt: skip
        self.v = torch.zeros_like(self.k)

    def update(self, pos, k, v):
        self.k = torch.cat([self.k, k], dim=2)  # a new, longer tensor every step
        self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v


# %%
# Step after step, counted
# ------------------------
# Both caches, compiled with the default mode, generate the same number of tokens
# from the prompt, each step timed on its own with a synchronized host clock;
# dynamo's count of graphs says which steps compiled. Beside them, for scale, the
# static cache's steady step with the fastest mode measured above.
n_steps = 6 if small else 16
growing = copy.deepcopy(model)
growing.setup_cache(1, prompt, cache=GrowingCache)
nets = {"static cache": variants["default"],
        "growing cache": decode.stepper(torch.compile(growing), token, pos)}  # fmt: skip
trace = {}
with compiling.capture_compiler() as log:
    for name, step in nets.items():
        pos.fill_(prompt)
        times, compiles = [], 0
        for _ in range(n_steps):
            graphs = counters["stats"]["unique_graphs"]
            times.append(compiling.first_calls_s(step, device=device, calls=1))
            compiles += counters["stats"]["unique_graphs"] > graphs
            pos.add_(1)  # on the device: no synchronization
        trace[f"{name} ({compiles} compilations)"] = times
        report("steps that compiled", compiles, unit="steps", cache=name, size=n_steps)
        if name == "static cache":
            gpuguide.claim("the static cache compiles nothing new, step after step",
                           holds=compiles == 0, measured=f"{compiles} compilations")  # fmt: skip
        else:
            gpuguide.claim("the growing cache compiles at least twice: a new shape, then symbolic",
                           holds=compiles >= 2, measured=f"{compiles} compilations")  # fmt: skip
if str(log):
    print(f"the compiler, meanwhile: {log}")
if best != "default":
    trace[f"static cache, {best}, steady"] = [timed[best].median_s] * n_steps

# %%
# Time per step
# -------------
# The static cache's steps should all take the steady time; the growing cache's
# first steps compile (counted above), and the later ones run the code made for any
# length, each with a longer cache to copy into its next, longer tensor. The title
# gives the mean of the steps after the second.
steady = {name.split(" (")[0]: sum(t[2:]) / (n_steps - 2) for name, t in trace.items()}
fig, ax = plt.subplots()
gpuguide.plot_sweep(ax, list(range(1, n_steps + 1)), {k: [t * 1e3 for t in v] for k, v in trace.items()},
                    xlabel="step (index)", ylabel="time of the step (ms)", logx=False,
                    title=f"After step 2: {steady['growing cache'] * 1e3:.3g} ms per step growing, "
                    f"{steady['static cache'] * 1e3:.3g} ms static")  # fmt: skip
plt.show()

# %%
# What to take away
# -----------------
# At small batch, launching a decode step can cost more than running it (on a GPU,
# see the claims): capture it in a CUDA graph (``mode="reduce-overhead"``), and keep
# every shape fixed from step to step: a preallocated cache written in place at a
# position held in a tensor, which the compiler does not recompile for.
gpuguide.takeaway()
