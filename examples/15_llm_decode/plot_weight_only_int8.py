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
from gpuguide.chapters import compiling, decode
from gpuguide.timing import first_calls_s

page = gpuguide.setup()
device = page.device
dtype = torch.bfloat16 if page.cuda else torch.float32
if page.cuda:
    print(compiling.start_compiler(device))
configs = {  # (dim, layers, heads, kv_heads, ffn, vocab), batches, context
    "small": ((256, 1, 4, 2, 704, 1024), [1, 16], 64),
    "cuda": ((8192, 1, 64, 8, 28672, 32000), [1, 256], 256),
    "cpu": ((512, 2, 8, 2, 1408, 4096), [1, 64], 128),
}
regime = "small" if page.small else "cuda" if page.cuda else "cpu"
dims, batches, context = configs[regime]
shape = decode.DecoderShape(*dims)
model = decode.random_decoder(shape, device=device, dtype=dtype)
mode, base = ("default", "bf16") if page.cuda else ("eager", "fp32")
where = {"size": f"{shape.label}, context {context}", "mode": mode}

# %%
# Per-channel int8 weights, converted inside the linear layer
# -----------------------------------------------------------
# Each output row gets a scale, ``max |row| / 127`` (rounded up in the weights'
# dtype), and its values are rounded to int8 against it
# (:func:`~gpuguide.chapters.decode.quantize_int8`): each weight is then off by at
# most half its row's scale. The layer converts the int8 weight to the input's dtype
# and scales the output. A compiled batch-1 product is a multiply and a sum (below).


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
error = (q.float() - w.float() / scales.float()[:, None]).abs()  # |q * s - w| / s
gpuguide.claim(
    "each dequantized weight is within half its row's scale (to float32 rounding)",
    holds=error.max().item() <= 0.5 + 1e-5,
    measured=f"largest error {error.max().item():.4f} of the scale",
)
int8_bytes = shape.step_bytes(1, context, dtype.itemsize, weight_itemsize=1)
bf16_bytes = shape.step_bytes(1, context, dtype.itemsize)
print(
    f"a batch-1 step reads {gpuguide.format_bytes(int8_bytes)} instead of "
    f"{gpuguide.format_bytes(bf16_bytes)} ({int8_bytes / bf16_bytes:.0%})"
)

# %%
# Both models, compiled, at each batch size
# -----------------------------------------
# Eagerly, ``self.weight.to(x.dtype)`` writes a converted copy of every weight that
# the matmul reads again: more bytes, not fewer. The compiler fuses the conversion
# into the kernel that reads the weights only where it generates that kernel; a
# matmul goes to cuBLAS, which takes 16-bit weights. Written as a multiply and a
# sum, a batch-1 product becomes a reduction that inductor generates (eagerly it
# would build the whole product in memory, hence ``is_compiling()``). Each batch
# size compiles both models afresh, so that only the weights differ. A CPU runs both
# eagerly and does not time them: four compilations would outlast the page.
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
        first_calls_s(steps[name], device=device, calls=3)
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
# At batch 1 the int8 step should approach the ratio of bytes read (published: 1.5-1.6x
# on A100 and H100 GPUs); at a large batch, which computes more per byte, the
# conversion is extra work (0.65x of 16-bit in one serving benchmark).
gains = {b: gpuguide.compare(t["int8"], t[base]) for b, t in timed.items()}
for batch, verdict in zip(batches, ["faster", "not faster"], strict=True):
    claim = f"compiled, at batch {batch}, int8 is {verdict} than {base}"
    gpuguide.claim(claim, gains.get(batch), verdict=verdict, on="cuda")
    if batch in gains:
        gpuguide.report("int8 speed-up", gains[batch], over=base, batch=batch, **where)
if timing:
    if bf16_bytes > 4 * decode.l2_cache_bytes(device):  # past the GPU's L2
        rate = timed[1][base].rate(bf16_bytes, "B/s")
        gpuguide.report(
            "decode bandwidth", rate, peak="memory", batch=1, dtype=base, **where
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
# Weight-only int8 cuts the bytes a memory-bound step reads: fuse the conversion into
# the kernel that reads the weights, and check the error on the outputs.
gpuguide.takeaway()
