"""
A decode step is memory-bound: step time against batch size
===========================================================

A language model generates text one token per sequence at a time. Each *decode
step* multiplies a few new token vectors by every weight matrix, so it reads all the
weights to do two FLOP per weight and token: at small batch sizes the roofline puts
its time at what memory bandwidth allows, and on a GPU a batch of 32 sequences
should cost little more than one. Only past the roofline's ridge does the arithmetic
take over.

This page builds a Llama-shaped decoder with random weights and a key-value cache,
times one step for batches from 1 to a few hundred against the roofline's
prediction, then counts the cache's memory against context length and batch.
"""

# %%
# Setup
# -----
# bfloat16 weights on a GPU, float32 on a CPU (whose matmuls are slow in bfloat16).
# :class:`~gpuguide.chapters.decode.DecoderShape` counts what a step reads and
# computes: the counts size the model and give its rates.
import dataclasses
import functools

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Sweep, Variant, benchmark, compare, format_bytes, report
from gpuguide.chapters import decode
from gpuguide.chapters.roofline import streaming_elements

page = gpuguide.setup()
device = page.device
dtype = torch.bfloat16 if page.cuda else torch.float32
size = dtype.itemsize  # bytes per weight and per cached value
peak = page.peaks.flops_for(dtype)

# %%
# A decoder with a static key-value cache
# ---------------------------------------
# Attention needs the keys and values of every earlier position. Recomputing them
# would redo the whole sequence each step, so they are cached. The cache here is
# allocated once, for the longest sequence, and each step writes its token's keys
# and values in place at a position held in a tensor on the device:
#
# .. literalinclude:: /../src/gpuguide/chapters/decode.py
#    :pyobject: StaticCache
#
# Each new token attends to every position of the cache; those not written yet are
# masked out. Its query heads come in groups that share one key-value head
# (grouped-query attention, as in Llama 3), which makes the cache smaller:
#
# .. literalinclude:: /../src/gpuguide/chapters/decode.py
#    :pyobject: Attention.forward
#
# No step reads a value back to the host and every tensor keeps its shape, as a
# CUDA graph needs. Rotary position embeddings are left out.
if page.cuda:  # the layer shape of a 70B-class model; layers as the budget allows
    base = decode.DecoderShape(8192, 1, heads=64, kv_heads=8, ffn=28672, vocab=32000)
    most, context = 1024, 256
else:
    base = decode.DecoderShape(1024, 1, heads=16, kv_heads=4, ffn=2816, vocab=8192)
    most, context = 64, 256
if page.small:
    base = dataclasses.replace(base, dim=256, heads=4, kv_heads=2, ffn=704, vocab=1024)
    most, context = 8, 64
call_s = 0.05 if page.cuda else 0.1
budget = gpuguide.size_budget(device, memory_fraction=0.5, call_s=call_s)
shapes = {n: dataclasses.replace(base, layers=n) for n in range(1, 5)}
layers = gpuguide.largest_size(
    1,
    4,
    budget=budget,
    flop_per_s=peak,
    memory_at=lambda n: (
        shapes[n].weight_bytes(size) + shapes[n].kv_cache_bytes(most, context, size)
    ),
    flop_at=lambda n: shapes[n].step_flop(most, context),
)
shape = shapes[layers]
model = decode.random_decoder(shape, device=device, dtype=dtype)
weights = shape.weight_bytes(size)
print(f"{shape.label}: {format_bytes(weights)} of weights, {context} positions")

# %%
# The page's own memory roof: a copy
# ----------------------------------
# A datasheet's bandwidth is not reached by real kernels; a large copy (read once,
# written once, each tensor at least four times a GPU's L2 cache) shows what this
# device's memory delivers to a simple kernel.
n = streaming_elements(device=device)
if page.cuda:  # float32 elements, 4 bytes each: four times the L2 cache's bytes
    n = max(n, decode.l2_cache_bytes(device))
src, dst = torch.ones(n, device=device), torch.empty(n, device=device)
copy = benchmark(dst.copy_, args=(src,), label="copy").rate(8 * n, "B/s")
report("copy bandwidth", copy, peak="memory", size=4 * n)
del src, dst

# %%
# One step for each batch size
# ----------------------------
# Each batch size gets a fresh cache; its step (one token per sequence, at position
# ``context // 2``) is timed from a CUDA graph on a GPU, so that launching its few
# hundred kernels costs no host time (the next page measures that cost). A step
# reads the weights once, whatever the batch, plus the whole cache (masked
# positions too): the bytes the sweep's rates count.
graphs = page.needs_cuda("Replaying each step from a CUDA graph")
pos = torch.tensor([context // 2], device=device)


def one_step(batch, dev):  # a fresh cache for this batch, and a step to time
    model.setup_cache(batch, context)
    tokens = torch.randint(shape.vocab, (batch,), device=dev)
    step = functools.partial(model, tokens, pos)
    return [decode.cuda_graph(step) if graphs else step]


steps = Sweep(
    "decode step",
    one_step,
    lo=1,
    hi=most,
    memory=lambda b: shape.kv_cache_bytes(b, context, size),
    traffic=lambda b: shape.step_bytes(b, context, size),
    flop=lambda b: shape.step_flop(b, context),
    size_label="batch (sequences)",
).run({"step": Variant(lambda step: step(), call_s=call_s, flop_per_s=peak)})
print(steps)
batches, last = steps.ran("step"), steps.largest("step")
read, model_size = steps.rate("step", 1), f"{shape.label}, context {context}"
report(
    "decode bandwidth", read, peak="memory", size=model_size, batch=1, dtype=f"{dtype}"
)
tokens_s = steps.at("step", last).rate(last, "token/s")  # `last` tokens per step
report("decode rate", tokens_s, size=model_size, batch=last)
many = min(64, last)  # tokens per second: batch `many` over batch 1
ride = compare(steps.at("step", many), steps.at("step", 1))
gpuguide.claim(
    f"a step of batch {many} yields at least 2x the tokens per second of batch 1",
    many * ride.speedup,
    spread=(many * ride.low, many * ride.high),
    at_least=2,
    timed=True,
)

# %%
# The roofline's prediction
# -------------------------
# A step of batch ``b`` does ``b`` times the FLOP of batch 1 but reads about the same
# bytes: in bfloat16 its intensity is about ``b`` FLOP/byte (two FLOP per weight and
# token over two bytes per weight), in float32 ``b / 2``. The roofline predicts
# ``max(bytes / bandwidth, FLOP / peak FLOP/s)``: flat while the bytes decide, then
# rising with the batch past the *knee*, where the step's intensity reaches the
# ridge (peak FLOP/s over bandwidth). On an H100 the ridge is about 295 FLOP/byte
# with the datasheet's figures, so the knee should come at a batch of a few hundred;
# on a CPU, whose FLOP/s are low, at a batch of a few to a few tens.
flops = [steps.at("step", b).rate(shape.step_flop(b, context)).value for b in batches]
peak_flops = peak or max(flops)
per_seq = shape.step_bytes(2, context, size) - shape.step_bytes(1, context, size)
fixed = shape.step_bytes(1, context, size) - per_seq
flop_1 = shape.step_flop(1, context)


def roofline_s(batch, bandwidth):
    return max((fixed + batch * per_seq) / bandwidth, batch * flop_1 / peak_flops)


# Past the knee each sequence adds more compute time than read time (never, if the
# cache it reads costs more than its FLOP do).
gain = flop_1 * copy.value / peak_flops - per_seq
knee = fixed / gain if gain > 0 else float("inf")
print(
    f"ridge {peak_flops / copy.value:.3g} FLOP/byte with the copy's bandwidth: "
    f"the knee is predicted at batch {knee:.3g}"
)
# A step at batch 32 against batch 1, then the sweep's last batch against one well
# below the knee.
wide = min(32, last)
flat = compare(steps.at("step", 1), steps.at("step", wide))
gpuguide.claim(
    f"on a GPU, a decode step at batch {wide} costs at most 1.3x batch 1's",
    flat,
    at_most=1.3,
    on="cuda",
)
below = max([b for b in batches if b <= knee / 2], default=None)
gpuguide.claim(
    f"past the knee a step costs more: batch {last} at least 1.5x batch {below}",
    below and compare(steps.at("step", below), steps.at("step", last)),
    at_least=1.5,
    unless=None if below and last >= 2 * knee else "the sweep does not reach the knee",
)
series = {"measured": [steps.at("step", b) for b in batches]}  # those that ran
for what, bandwidth in (
    ("copy's bandwidth", copy.value),
    ("datasheet", page.peaks.memory_bandwidth_bytes_per_s),
):
    if bandwidth:
        series[f"roofline, {what}"] = [roofline_s(b, bandwidth) * 1e3 for b in batches]
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    batches,
    series,
    xlabel="batch (sequences)",
    ylabel="time per decode step (ms)",
    title=f"Step time, batch {wide} over 1: {flat.short}; knee at batch {knee:.0f}",
)
if batches[0] <= knee <= 4 * last:
    ax.axvline(knee, color="0.5", ls=":")
plt.show()

# %%
# The cache's memory against context and batch
# --------------------------------------------
# Each token of each sequence keeps ``2 x layers x kv_heads x head_dim`` values.
# The weights are read once per step however many sequences share them; the cache
# grows with every sequence and every position, and past some number of tokens in
# flight (batch x context) it outweighs the weights: in memory, and in the bytes a
# step reads. The allocated cache is checked against the count.
allocated = sum(buf.nbytes for buf in model.buffers())
counted = shape.kv_cache_bytes(last, context, size)
gpuguide.claim(
    f"the cache allocated for batch {last} is the size counted",
    holds=allocated == counted,
    measured=f"{format_bytes(allocated)} allocated, {format_bytes(counted)} counted",
)
crossover = weights / shape.kv_bytes_per_token(size)
grouped = shape.heads // shape.kv_heads
ungrouped = crossover / grouped
print(f"without grouped query heads ({grouped}x the cache): past {ungrouped:,.0f}")
contexts = [2**k for k in range(9, 18)]
cache = {
    f"batch {b}": [shape.kv_cache_bytes(b, c, size) / 2**30 for c in contexts]
    for b in (1, 8, 64, 512)
}
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    contexts,
    cache | {"weights": [weights / 2**30] * len(contexts)},
    xlabel="context (tokens)",
    ylabel="memory (GiB)",
    title=f"The cache outweighs the weights past {crossover:,.0f} tokens in flight",
)
plt.show()

# %%
# What to take away
# -----------------
# Below the ridge a decode step is bounded by reading the weights, which every
# sequence of the batch shares: serve several together and the tokens per second grow
# with the batch until it passes the knee (the claims say how much, and where).
# Fewer bytes per weight (next pages: int8) can speed up a memory-bound step; a long
# context or a large batch makes the cache, not the weights, the bytes to save.
gpuguide.takeaway()
