"""
What autocast changes
=====================

``torch.autocast`` does not convert a model to 16 bits. The weights stay float32;
inside the autocast region each operation picks its own dtype: matrix
multiplications run in float16 or bfloat16, and operations that need range or
accuracy stay in float32. This page runs a small transformer block and reads from
the run which module produced which dtype, how many bytes the forward pass keeps
for backward, and how many gradient values float16 cannot represent.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The current spelling is ``torch.autocast(device_type, dtype=...)``; the older
# ``torch.cuda.amp.autocast`` that many tutorials still show is deprecated.
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import plot_bars, report, table
from gpuguide.chapters import precision

page = gpuguide.setup()
device = page.device
low = [torch.float16, torch.bfloat16]
name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}

# %%
# The model
# ---------
# One pre-norm transformer block, its softmax a module whose output we can watch;
# the AMP training page trains the same block:
#
# .. literalinclude:: /../src/gpuguide/chapters/precision.py
#    :pyobject: Block

width, seq = (64, 16) if device.type == "cpu" or page.small else (512, 128)
model = precision.Block(width, 10).to(device)
loss_fn = nn.CrossEntropyLoss()
x = torch.randn(32, seq, width, device=device)
y = torch.randint(0, 10, (32,), device=device)
print(f"batch 32 x {seq} tokens, width {width}")
dims = f"32x{seq}x{width}"  # batch x tokens x width, shown with recorded figures

# %%
# Which module produced which dtype
# ---------------------------------
# Forward hooks record the dtype each module received and returned during one
# autocast training step per 16-bit format; as in training, ``backward`` runs
# outside the autocast region. Which operations autocast keeps in float32 differs
# between devices, so the table comes from this run.
watched = {n: m for n, m in model.named_modules() if n} | {"loss": loss_fn}
names, outputs = {m: n for n, m in watched.items()}, {}


def keep_output(module, inputs, output):
    outputs[names[module]] = (inputs[0].dtype, output)


handles = [m.register_forward_hook(keep_output) for m in watched.values()]
rows, out_of = {}, {}  # module name -> its row; the dtypes it returned
for dtype in low:
    with torch.autocast(device.type, dtype=dtype):
        loss = loss_fn(model(x), y)
    loss.backward()
    for n, (in_dtype, out) in outputs.items():
        row = rows.setdefault(n, {"module": n, "type": type(watched[n]).__name__})
        row[f"autocast {name[dtype]}"] = f"{name[in_dtype]} -> {name[out.dtype]}"
        out_of.setdefault(n, set()).add(name[out.dtype])
print(table(rows.values()))
linears = [n for n, m in watched.items() if isinstance(m, nn.Linear)]
fp32_out = ["loss", "norm1", "norm2"] + (["softmax"] if device.type == "cuda" else [])
gpuguide.claim(
    "under autocast every Linear returns 16-bit values, and the loss and layer norm "
    "(on CUDA softmax too) float32",
    holds=all("float32" not in out_of[n] for n in linears)
    and all(out_of[n] == {"float32"} for n in fp32_out),
    measured=", ".join(f"{n} {'/'.join(sorted(out_of[n]))}" for n in out_of),
)
weight = model.qkv.weight
gpuguide.claim(
    "after autocast steps the weights and their gradients are float32",
    holds=weight.dtype == weight.grad.dtype == torch.float32,
    measured=f"{name[weight.dtype]} and {name[weight.grad.dtype]}",
)


# %%
# What the forward pass keeps for backward
# ----------------------------------------
# A ``saved_tensors_hooks`` pair sees each tensor saved for backward
# (:func:`~gpuguide.chapters.precision.kept_for_backward`, shown on
# :doc:`the training memory page </auto_examples/04_memory/plot_training_memory>`).
# float32 outputs and 16-bit copies of the weights are saved too.
saved = {}
for dtype in (torch.float32, *low):
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        saved[name[dtype]] = precision.kept_for_backward(lambda: loss_fn(model(x), y))
for mode, nbytes in saved.items():
    report("saved for backward", nbytes, unit="B", size=dims, mode=mode)
ratios = {mode: saved[mode] / saved["float32"] for mode in ("float16", "bfloat16")}
gpuguide.claim(
    "the 16-bit modes keep between half and three quarters of float32's bytes",
    holds=all(0.5 <= ratio <= 0.75 for ratio in ratios.values()),
    measured=", ".join(f"{mode} {ratio:.3f}" for mode, ratio in ratios.items()),
)
fig, ax = plt.subplots()
title = f"Autocast keeps {min(ratios.values()):.0%} of float32's activation bytes"
plot_bars(ax, precision.mib(saved), ylabel="saved for backward (MiB)", title=title)
plt.show()

# %%
# Gradients that float16 cannot hold
# ----------------------------------
# float16 has 5 exponent bits: normal numbers only down to about 6e-5 (smaller ones
# lose precision as subnormals, then become zero). bfloat16 keeps float32's 8, so
# its range, and pays with fewer mantissa bits: coarser steps between values. The
# backward pass of an autocast region computes activation gradients in 16 bits.
# Here they are computed once in float32 and rounded to each format; the
# ``GradScaler``'s starting scale, 2**16, shifts the tiny ones back into range.
loss = loss_fn(model(x), y)  # float32; the hooks keep every module's output
for handle in handles:
    handle.remove()
tensors = {id(out): out for n, (_, out) in outputs.items() if n != "loss"}
grads = torch.autograd.grad(loss, list(tensors.values()))
values = torch.cat([g.flatten() for g in grads])
values = values[values != 0]
tiny16 = torch.finfo(torch.float16).tiny


def percent(mask):
    return 100 * mask.float().mean().item()


below = percent(values.abs() < tiny16)
report("below float16's normal range", below, unit="%", size=dims)
plain = percent(values.half().abs() < tiny16)  # rounded to zero or to a subnormal
scaled = percent((values * 2.0**16).half().abs() < tiny16)
bf16_zero = percent(values.bfloat16() == 0)
gpuguide.claim(
    "the loss scale 2**16 leaves fewer activation gradients zero or subnormal in "
    "float16 than no scale, and bfloat16 rounds none to zero",
    holds=scaled < plain and bf16_zero == 0,
    measured=f"{scaled:.3f}% against {plain:.3f}%; bfloat16 {bf16_zero:.3f}% zero",
)
magnitudes = values.abs().cpu()
lo, hi = math.floor(magnitudes.min().log10()), math.ceil(magnitudes.max().log10())
bins = torch.logspace(lo, hi, 4 * (hi - lo) + 1)  # quarter decades
weights = torch.full_like(magnitudes, 100 / len(magnitudes))  # each value's share
fig, ax = plt.subplots()
ax.hist(magnitudes, bins=bins, weights=weights, label="activation gradients (fp32 run)")
ax.axvline(tiny16, color="0.3", linestyle="--", label="float16 smallest normal")
title = f"{below:.0f}% of activation gradients lie below float16's normal range"
ax.set(xscale="log", title=title, ylabel="share of values (%)")
ax.set_xlabel("|gradient| (loss per unit of activation)")
ax.legend()
gpuguide.label_device(fig, device)
plt.show()

# %%
# What to take away
# -----------------
# Autocast keeps the weights in float32 and picks a dtype per operation; float16's
# narrow range is why float16 training needs a loss scale and bfloat16's does not.
gpuguide.takeaway()
