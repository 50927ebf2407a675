"""
Decode overhead: CUDA graphs, and a cache that must keep its shape
==================================================================

At batch 1 a decode step of a mid-sized model is a few hundred small kernels, and
on a GPU eager PyTorch can spend more time launching them than the GPU spends
running them (a claim below checks it). ``torch.compile`` fuses some of them;
``mode="reduce-overhead"`` also replays the step from a CUDA graph, which removes
the launches. This page times eager, compiled and CUDA-graph steps with the host's
and the GPU's time per step, the compile time and the steps it takes to pay for
itself. Then the trap: a key-value cache that grows by concatenation changes shape
every step, so the compiler recompiles, step after step.
"""

# %%
# Setup
# -----
# The decoder of the previous page (:mod:`gpuguide.chapters.decode`), smaller: on a
# GPU two layers of a 1B-class shape, whose kernels are short enough that eager mode
# is launch-bound. The compiler's one-off start-up is paid first, apart.
import copy
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import compare, format_bytes, report
from gpuguide.chapters import compiling, decode
from gpuguide.timing import first_calls_s, host_and_gpu_times

if not torch.cuda.is_available():  # a relative lesson: one thread's steadier times
    torch.set_num_threads(1)
page = gpuguide.setup()
device, small = page.device, page.small
dtype = torch.bfloat16 if page.cuda else torch.float32
print(compiling.start_compiler(device))
if page.cuda and not small:
    shape = decode.DecoderShape(2048, 2, heads=16, kv_heads=4, ffn=5632, vocab=32000)
    context, prompt = 512, 64
else:
    shape = decode.DecoderShape(256, 2, heads=4, kv_heads=2, ffn=704, vocab=1024)
    context, prompt = 128, 32
model = decode.random_decoder(shape, device=device, dtype=dtype)
model.setup_cache(1, context)
token = torch.randint(shape.vocab, (1,), device=device)
pos = torch.tensor([prompt], device=device)  # a prompt is in the cache
print(f"{shape.label}: {format_bytes(shape.weight_bytes(dtype.itemsize))} of weights")

# %%
# Eager, compiled and CUDA graphs at batch 1
# ------------------------------------------
# Each mode compiles its own copy of the model. ``decode.stepper`` calls
# ``cudagraph_mark_step_begin`` before each step: it tells the CUDA graphs that a
# new step begins (the previous step's outputs may be overwritten). The first five
# calls of each are timed one by one: the first compiles, and with CUDA graphs the
# next ones warm up and capture. Then all modes run in alternating rounds under the
# ``"fail_on_recompile"`` stance.
graphs = page.needs_cuda('mode="reduce-overhead" (CUDA graphs)')
modes = ["default", "reduce-overhead"][: 1 + graphs]
nets = {mode: torch.compile(copy.deepcopy(model), mode=mode) for mode in modes}
variants, warmup = {"eager": decode.stepper(model, token, pos)}, {}
with compiling.capture_compiler() as log:  # what torch logs stays off the page
    for mode, net in nets.items():
        variants[mode] = step = decode.stepper(net, token, pos)
        warmup[mode] = [first_calls_s(step, device=device, calls=1) for _ in range(5)]
print(f"while compiling: {log}" if str(log) else "the compiler logged nothing")
with torch.compiler.set_stance("fail_on_recompile"):
    timed = gpuguide.interleave(variants, device=device, sample_ms=5)
    split = {n: host_and_gpu_times(f, device=device) for n, f in variants.items()}

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
rows = compiling.mode_rows(timed, warmup, split)
for row, m in zip(rows, timed.values(), strict=True):
    row["bandwidth"] = m.rate(nbytes, "B/s")
print(gpuguide.table(rows))
eager = split["eager"]
print(f"eager: {eager}")
bound = "on a GPU, an eager step at batch 1 is launch-bound: host time > GPU time"
gpuguide.claim(bound, holds=eager.bound == "host", measured=str(eager), on="cuda")
best = modes[-1]
at = {"size": f"{shape.label}, context {context}", "batch": 1, "mode": best}
gain = compare(timed[best], timed["eager"])
fused = compare(timed["default"], timed["eager"])
report("speed-up over eager", gain, quoted=(2.0, 5.0) if page.cuda else None, **at)
noisy = fused.noisy and "a side is NOISY here: no check"
faster = "compiled (default mode) is at least 1.2x faster than eager at batch 1"
gpuguide.claim(faster, fused, at_least=1.2, unless=noisy)
if best != "default":
    gpuguide.claim(f"{best} is at least 2x faster than eager", gain, at_least=2.0)
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
# fixed addresses, so ``"reduce-overhead"`` would record a new graph at every
# length.


class GrowingCache(nn.Module):
    def __init__(self, batch, kv_heads, length, head_dim, *, dtype, device):
        super().__init__()  # starts with ``length`` positions: the prompt's
        shape = (batch, kv_heads, length, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)

    def update(self, pos, k, v):
        self.k = torch.cat([self.k, k], dim=2)  # a new, longer tensor every step
        self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v


# %%
# The static cache used above allocates its tensors once and writes each step's
# keys and values in place, at a position held in a tensor on the device, so every
# step has the same shapes and the same graph serves every step:
#
# .. literalinclude:: /../src/gpuguide/chapters/decode.py
#    :pyobject: _StaticCache
#
# Both caches, compiled with the default mode, generate the same number of tokens
# from the prompt, each step timed on its own with a synchronized host clock
# (``compiling.time_each_call``, which also counts the graphs dynamo compiled).
# Beside them, for scale, the static cache's steady step with the fastest mode.
n_steps = 6 if small else 16
positions = [(torch.tensor([prompt + i], device=device),) for i in range(n_steps)]
growing = copy.deepcopy(model)
growing.setup_cache(1, prompt, cache=GrowingCache)
caches = {"static cache": nets["default"], "growing cache": torch.compile(growing)}
trace, compiled = {}, {}
with compiling.capture_compiler():
    for name, net in caches.items():
        calls = compiling.time_each_call(partial(net, token), positions, device=device)
        compiled[name] = n = sum(c > 0 for c in calls.compiles)
        trace[f"{name} ({n} compilations)"] = [t * 1e3 for t in calls.times_s]
        report("steps that compiled", n, unit="steps", cache=name, size=n_steps)
static, growth = compiled["static cache"], compiled["growing cache"]
none = "the static cache compiles nothing new, step after step"
gpuguide.claim(none, holds=static == 0, measured=f"{static} compilations")
twice = "the growing cache compiles at least twice: a new shape, then symbolic"
gpuguide.claim(twice, holds=growth >= 2, measured=f"{growth} compilations")
if best != "default":
    trace[f"static cache, {best}, steady"] = [timed[best].median_s * 1e3] * n_steps

# %%
# Time per step
# -------------
# The static cache's steps should all take the steady time; the growing cache's
# first steps compile (counted above), and the later ones run the code made for any
# length, each with a longer cache to copy. The title gives the mean after step 2.
after = {name.split(" (")[0]: sum(t[2:]) / (n_steps - 2) for name, t in trace.items()}
grown, kept = after["growing cache"], after["static cache"]
title = f"After step 2: {grown:.3g} ms per step growing, {kept:.3g} ms static"
fig, ax = plt.subplots()
labels = {"xlabel": "step (index)", "ylabel": "time of the step (ms)", "logx": False}
gpuguide.plot_sweep(ax, list(range(1, n_steps + 1)), trace, **labels, title=title)
plt.show()

# %%
# What to take away
# -----------------
# At small batch, launching a decode step can cost more than running it (on a GPU,
# see the claims): capture it in a CUDA graph (``mode="reduce-overhead"``), and keep
# every shape fixed from step to step: a preallocated cache written in place at a
# position held in a tensor, which the compiler does not recompile for.
gpuguide.takeaway()
