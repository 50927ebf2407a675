"""
Weight-only int8: fewer bytes per decode step
=============================================

A memory-bound decode step takes the time to read its weights, so storing them in
8 bits instead of 16 should make it up to twice as fast, as long as the conversion
back happens inside the kernel that reads them. Only the weights change: the
activations, the cache and the arithmetic stay in bfloat16. This page quantizes a
decoder's weights to int8 with one scale per output channel, checks the error, and
on a GPU times a step at batch 1, where the bytes decide, and at a large batch,
where they do not.
"""

# %%
# Setup
# -----
# The chapter's decoder (:mod:`gpuguide.chapters.decode`), on a GPU with a 70B-class
# layer shape, whose large matrices a step must stream from memory.
import copy

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import gpuguide
from gpuguide import format_bytes, report
from gpuguide.chapters import compiling, decode

page = gpuguide.setup()
device, small = page.device, page.small
dtype = torch.bfloat16 if page.cuda else torch.float32
if page.cuda:
    print(compiling.start_compiler(device))
if small:
    shape = decode.DecoderShape(
        dim=256, layers=1, heads=4, kv_heads=2, ffn=704, vocab=1024
    )
    batches, context = [1, 16], 64
elif page.cuda:
    shape = decode.DecoderShape(
        dim=8192, layers=1, heads=64, kv_heads=8, ffn=28672, vocab=32000
    )
    batches, context = [1, 256], 256
else:
    shape = decode.DecoderShape(
        dim=512, layers=2, heads=8, kv_heads=2, ffn=1408, vocab=4096
    )
    batches, context = [1, 64], 128
model = decode.random_decoder(shape, device=device, dtype=dtype)
model_size = f"{shape.label}, context {context}"

# %%
# Per-channel int8 weights, converted inside the linear layer
# -----------------------------------------------------------
# Each output row of a weight matrix gets a scale, ``max |row| / 127`` (rounded up
# in the weights' dtype), and its values are rounded to int8 against it
# (:func:`~gpuguide.chapters.decode.quantize_int8`); each weight is then off by at
# most half its row's scale. The layer converts the int8 weight to the input's dtype
# and multiplies the output by the scales: the same result as the dequantized matrix.
# A compiled batch-1 product is written as a multiply and a sum (why: below).


class Int8Linear(nn.Module):
    def __init__(self, linear):
        super().__init__()
        weight, scales = decode.quantize_int8(linear.weight)
        self.register_buffer("weight", weight)
        self.register_buffer("scales", scales)

    def forward(self, x):
        weight = self.weight.to(x.dtype)
        if x.shape[0] == 1 and torch.compiler.is_compiling():
            return (x[:, None, :] * weight).sum(-1) * self.scales
        return F.linear(x, weight) * self.scales


def to_int8(module):
    for name, child in module.named_children():
        if isinstance(child, nn.Linear):
            setattr(module, name, Int8Linear(child))
        else:
            to_int8(child)
    return module


quantized = to_int8(copy.deepcopy(model))
w = model.blocks[0].attention.wo.weight
q, scales = decode.quantize_int8(w)
error = (decode.dequantize_int8(q, scales) - w.float()).abs() / scales.float()[:, None]
gpuguide.claim(
    "each dequantized weight is within half its row's scale (to float32 rounding)",
    holds=error.max().item() <= 0.5 + 1e-5,
    measured=f"largest error {error.max().item():.4f} of the scale",
)
int8_bytes = shape.step_bytes(1, context, dtype.itemsize, weight_itemsize=1)
bf16_bytes = shape.step_bytes(1, context, dtype.itemsize)
print(
    f"a batch-1 step reads {format_bytes(int8_bytes)} instead of "
    f"{format_bytes(bf16_bytes)} ({int8_bytes / bf16_bytes:.0%})"
)

# %%
# Both models, compiled, at each batch size
# -----------------------------------------
# In eager mode ``self.weight.to(x.dtype)`` writes a converted copy of every weight
# and the matmul reads it again: more bytes than the 16-bit weights, not fewer. The
# compiler can fuse the conversion into the kernel that reads the weights, but
# only where it generates that kernel: a matmul goes to cuBLAS, which takes 16-bit
# weights. Written as a multiply and a sum, a batch-1 product becomes a reduction
# that inductor generates, converting each int8 weight as it reads it; eagerly the
# same line would build the whole product in memory, hence ``is_compiling()``. At
# a large batch the matmul stays a cuBLAS call. On a GPU each batch size compiles
# both models afresh, in the default mode, so that only the weights differ. On a
# CPU, where four compilations would outlast this page's time, both run eagerly
# and are not timed: the unfused conversion is not the step this page is about.
mode, base = ("default", "bf16") if page.cuda else ("eager", "fp32")
timing = page.needs_cuda("Timing the compiled int8 step against the 16-bit one")
pos = torch.tensor([context // 2], device=device)
timed, logits = {}, {}
for batch in batches:
    torch._dynamo.reset()
    tokens = torch.randint(shape.vocab, (batch,), device=device)
    steps = {}
    for name, net in {base: model, "int8": quantized}.items():
        net.setup_cache(batch, context)
        compiled = torch.compile(net, dynamic=False) if page.cuda else net
        steps[name] = decode.stepper(compiled, tokens, pos)
        compiling.first_calls_s(steps[name], device=device, calls=3)
        logits[name] = steps[name]().float().clone()
    if timing:
        timed[batch] = gpuguide.interleave(steps, device=device)
difference = (logits["int8"] - logits[base]).norm() / logits[base].norm()
gpuguide.claim(
    f"int8 logits stay within 5% of {base}'s (relative norm of the difference)",
    holds=difference.item() <= 0.05,
    measured=f"{difference.item():.2%}",
)

# %%
# Faster at batch 1, not at a large batch
# ---------------------------------------
# At batch 1 the int8 step should approach the ratio of bytes read (published
# figures: 1.5-1.6x on A100 and H100 GPUs); at a large batch, where the step
# computes more per byte, the conversion is extra work and int8 gains nothing
# (measured at 0.65x of 16-bit in one serving benchmark). The claims need a GPU.
gains = {b: gpuguide.compare(t["int8"], t[base]) for b, t in timed.items()}
for batch, gain in gains.items():
    report("int8 speed-up", gain, over=base, batch=batch, mode=mode, size=model_size)
    rate = timed[batch]["int8"].rate(
        shape.step_bytes(batch, context, dtype.itemsize, 1), "B/s"
    )
    print(f"batch {batch}: int8 reads its bytes at {rate}")
small_b, large_b = batches
gpuguide.claim(
    f"compiled, at batch {small_b}, int8 is faster than {base}",
    gains.get(small_b),
    verdict="faster",
    on="cuda",
)
gpuguide.claim(
    f"compiled, at batch {large_b}, int8 is not faster than {base}",
    gains.get(large_b),
    verdict="not faster",
    on="cuda",
)
if timing:
    bandwidth = timed[1][base].rate(bf16_bytes, "B/s")
    if bf16_bytes > 4 * decode.l2_cache_bytes(device):  # past the GPU's L2
        report(
            "decode bandwidth",
            bandwidth,
            peak="memory",
            size=model_size,
            batch=1,
            mode=mode,
            dtype=base,
        )
    fig, axes = plt.subplots(1, len(batches), figsize=(10, 4))
    for ax, (batch, times) in zip(axes, timed.items(), strict=True):
        gpuguide.plot_bars(
            ax,
            times,
            ylabel="time per decode step (ms)",
            title=f"Batch {batch}: int8 {gains[batch].short}",
        )
    plt.show()

# %%
# What to take away
# -----------------
# Weight-only int8 halves the bytes a memory-bound step reads; fuse the conversion
# into the kernel that reads the weights, and check the error on the outputs.
gpuguide.takeaway()
