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
and times one step for batches from 1 to a few hundred against the roofline's
prediction.
"""

# %%
# Setup
# -----
# bfloat16 weights on a GPU, float32 on a CPU (whose matmuls are slow in bfloat16).
# :class:`~gpuguide.chapters.decode.DecoderShape` counts what a step reads and
# computes.
import functools

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Sweep, Variant, benchmark, compare, format_bytes, report
from gpuguide.chapters import decode
from gpuguide.chapters.roofline import streaming_elements

page = gpuguide.setup()
dtype = torch.bfloat16 if page.cuda else torch.float32
size = dtype.itemsize  # bytes per weight and per cached value
shape = decode.DecoderShape(1024, 4, heads=16, kv_heads=4, ffn=2816, vocab=8192)
if page.cuda:  # two layers of a 70B-class model's shape
    shape = decode.DecoderShape(8192, 2, heads=64, kv_heads=8, ffn=28672, vocab=32000)
if page.small:
    shape = decode.DecoderShape(256, 1, heads=4, kv_heads=2, ffn=704, vocab=1024)
most = 8 if page.small else 1024 if page.cuda else 64  # the largest batch
context = 64 if page.small else 256  # positions in the cache
model = decode.random_decoder(shape, device=page.device, dtype=dtype)

# %%
# The page's own memory roof: a copy
# ----------------------------------
# A datasheet's bandwidth is not reached by real kernels; a large copy (read once,
# written once, each tensor at least four times a GPU's L2 cache) shows what this
# device's memory delivers to a simple kernel.
n = streaming_elements(device=page.device)
if page.cuda:  # float32 elements, 4 bytes each: four times the L2 cache's bytes
    n = max(n, decode.l2_cache_bytes(page.device))
src, dst = torch.ones(n, device=page.device), torch.empty(n, device=page.device)
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
pos = torch.tensor([context // 2], device=page.device)


def one_step(batch, dev):  # a fresh cache for this batch, and a step to time
    model.setup_cache(batch, context)
    tokens = torch.randint(shape.vocab, (batch,), device=dev)
    step = functools.partial(model, tokens, pos)
    return [decode.cuda_graph(step) if graphs else step]


peak = page.peaks.flops_for(dtype)
call_s = 0.05 if page.cuda else 0.1
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
read, label = steps.rate("step", 1), f"{shape.label}, context {context}"
report("decode bandwidth", read, peak="memory", size=label, batch=1, dtype=str(dtype))
tokens_s = steps.at("step", last).rate(last, "token/s")  # `last` tokens per step
report("decode rate", tokens_s, size=label, batch=last)
many = min(64, last)
gpuguide.claim(
    f"a step of batch {many} costs at most {many / 2:g}x batch 1's: 2x the tokens/s",
    compare(steps.at("step", 1), steps.at("step", many)),
    at_most=many / 2,
)

# %%
# The roofline's prediction
# -------------------------
# A step of batch ``b`` does ``b`` times the FLOP of batch 1 but reads about the same
# bytes: in bfloat16 its intensity is about ``b`` FLOP/byte (two FLOP per weight and
# token over two bytes per weight), in float32 ``b / 2``. The roofline, with the
# copy's bandwidth, predicts ``max(bytes / bandwidth, FLOP / peak FLOP/s)``: flat
# while the bytes decide, then rising with the batch past the *knee*, where each
# sequence adds more compute time than read time (never, if the cache it reads costs
# more than its FLOP do). On an H100 the ridge is about 295 FLOP/byte with the
# datasheet's figures, so the knee should come at a batch of a few hundred; on a
# CPU, whose FLOP/s are low, at a batch of a few to a few tens.
flop_1 = shape.step_flop(1, context)
peak_flops = peak or max(b * flop_1 / steps.at("step", b).median_s for b in batches)
per_seq = shape.step_bytes(2, context, size) - shape.step_bytes(1, context, size)
fixed = shape.step_bytes(1, context, size) - per_seq
gain = flop_1 * copy.value / peak_flops - per_seq
knee = fixed / gain if gain > 0 else float("inf")
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
roofline_ms = [
    1e3 * max((fixed + b * per_seq) / copy.value, b * flop_1 / peak_flops)
    for b in batches
]
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    batches,
    {"measured": [steps.at("step", b) for b in batches], "roofline": roofline_ms},
    xlabel="batch (sequences)",
    ylabel="time per decode step (ms)",
    title=f"Step time, batch {wide} over 1: {flat.short}; knee at batch {knee:.0f}",
)
plt.show()

# %%
# The key-value cache
# -------------------
# Attention needs the keys and values of every earlier position. Recomputing them
# would redo the whole sequence each step, so they are cached. The cache here is
# allocated once, for the longest sequence, and each step writes its token's keys
# and values in place at a position held in a tensor on the device:
#
# .. literalinclude:: /../src/gpuguide/chapters/decode.py
#    :pyobject: _StaticCache
#
# Each new token attends to every position of the cache; those not written yet are
# masked out. Its query heads come in groups that share one key-value head
# (grouped-query attention, as in Llama 3), which makes the cache smaller:
#
# .. literalinclude:: /../src/gpuguide/chapters/decode.py
#    :pyobject: Attention.forward
#
# Each token of each sequence keeps ``2 x layers x kv_heads x head_dim`` values:
# past some number of tokens in flight (batch x context) the cache outweighs the
# weights, in memory and in the bytes a step reads.
allocated = sum(buf.nbytes for buf in model.buffers())
gpuguide.claim(
    f"the cache allocated for batch {last} is the size counted",
    holds=allocated == shape.kv_cache_bytes(last, context, size),
    measured=f"{format_bytes(allocated)} allocated",
)
in_flight = shape.weight_bytes(size) / shape.kv_bytes_per_token(size)
print(f"the cache outweighs the weights past {in_flight:,.0f} tokens in flight")

# %%
# What to take away
# -----------------
# Below the ridge a decode step is bounded by reading the weights, which every
# sequence of the batch shares: serve several together and the tokens per second grow
# with the batch until it passes the knee (the claims say how much, and where).
# Fewer bytes per weight (next pages: int8) can speed up a memory-bound step; a long
# context or a large batch makes the cache, not the weights, the bytes to save.
gpuguide.takeaway()
