"""
What autocast changes
=====================

``torch.autocast`` does not convert a model to 16 bits. The weights stay float32;
inside the autocast region each operation picks its own dtype: matrix
multiplications run in float16 or bfloat16, and operations that need range or
accuracy stay in float32. Which ones differs by device: the loss and layer norm
on both, softmax on CUDA but not on the CPU, as this page's run shows.

This page runs a small transformer block and reads from the run itself which module
produced which dtype, how many bytes the forward pass keeps for backward in each
mode, and how many gradient values float16 cannot represent: why float16 training
needs a gradient scaler and bfloat16 training does not.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The current spelling is ``torch.autocast(device_type, dtype=...)``; the older
# ``torch.cuda.amp.autocast`` that many tutorials still show is deprecated.
import math
from collections import namedtuple

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import plot_bars, plot_sweep, report, table
from gpuguide.chapters import precision

page = gpuguide.setup()
device = page.device
low = [torch.float16, torch.bfloat16]
name = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}

# %%
# Three formats
# -------------
# float16 has 5 exponent bits: normal numbers only down to about 6e-5 (smaller ones
# lose precision as subnormals, then become zero). bfloat16 keeps float32's 8, so
# its range, and pays with fewer mantissa bits: coarser steps between values.
Format = namedtuple("Format", "dtype max smallest_normal smallest_subnormal eps")
infos = [torch.finfo(dtype) for dtype in (torch.float32, *low)]
print(table(Format(f.dtype, f.max, f.tiny, f.tiny * f.eps, f.eps) for f in infos))  # fmt: skip


# %%
# The model
# ---------
# One pre-norm transformer block with the attention written out (its softmax a
# module whose output we can watch), and a classification head; the AMP training
# page trains the same block:
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
# autocast forward pass per 16-bit format. Expect every ``Linear`` to return 16-bit
# values. Which other operations autocast keeps in float32 differs between devices
# (on CUDA softmax and layer norm do, on the CPU fewer), so the table comes from
# this run. Functions called inside ``forward`` (``q @ k``) follow the same rules.
watched = {n: m for n, m in model.named_modules() if n} | {"loss": loss_fn}
names, outputs = {m: n for n, m in watched.items()}, {}


def keep_output(module, inputs, output):
    outputs[names[module]] = (inputs[0].dtype, output)


handles = [m.register_forward_hook(keep_output) for m in watched.values()]
short = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
rows = {}  # module name -> its row, in the order the modules returned
for dtype in low:
    with torch.autocast(device.type, dtype=dtype), torch.no_grad():
        loss_fn(model(x), y)
    for n, (in_dtype, out) in outputs.items():
        row = rows.setdefault(n, {"module": n, "type": type(watched[n]).__name__})
        row[f"autocast {name[dtype]}"] = f"{short[in_dtype]} -> {short[out.dtype]}"
print(table(rows.values()))
out_of = {  # module name -> the dtypes it returned, over both autocast passes
    n: "/".join(sorted({row[f"autocast {name[d]}"].split(" -> ")[1] for d in low}))
    for n, row in rows.items()
}
linears = [n for n, m in watched.items() if isinstance(m, nn.Linear)]
gpuguide.claim(
    "under autocast every Linear returns 16-bit values",
    holds=all("fp32" not in out_of[n] for n in linears),
    measured=", ".join(f"{n} {out_of[n]}" for n in linears),
)
gpuguide.claim(
    "the loss and layer norm return float32 under autocast",
    holds=all(out_of[n] == "fp32" for n in ("loss", "norm1", "norm2")),
    measured=f"loss {out_of['loss']}, norm1 {out_of['norm1']}, norm2 {out_of['norm2']}",
)
gpuguide.claim(
    "on CUDA, softmax runs in float32 under autocast",
    holds=out_of["softmax"] == "fp32",
    measured=f"softmax returns {out_of['softmax']}",
    on="cuda",
)

with torch.autocast(device.type, dtype=low[0]):
    loss = loss_fn(model(x), y)
loss.backward()
weight = model.qkv.weight
print(f"after an autocast step: weights {weight.dtype}, gradients {weight.grad.dtype}")
gpuguide.claim(
    "after an autocast step the weights and their gradients are float32",
    holds=weight.dtype == weight.grad.dtype == torch.float32,
    measured=f"{short[weight.dtype]} and {short[weight.grad.dtype]}",
)
model.zero_grad(set_to_none=True)


# %%
# What the forward pass keeps for backward
# ----------------------------------------
# Most of a training step's memory beyond the weights is the activations saved for
# backward; a ``saved_tensors_hooks`` pair sees each one as it is saved, on every
# device. Expect the 16-bit modes to keep somewhat more than half of float32's
# bytes: float32 outputs and 16-bit copies of the weights are saved too.
def saved_bytes(dtype):
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.dtype, t.shape)] = t.numel() * t.element_size()
        return t

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    with hooks, autocast:
        loss_fn(model(x), y)
    return sum(seen.values())


saved = {name[d]: saved_bytes(d) for d in (torch.float32, *low)}
for mode, nbytes in saved.items():
    report("saved for backward", nbytes, unit="B", size=dims, mode=mode)
fig, ax = plt.subplots()
kept = min(saved.values()) / saved["float32"]
gpuguide.claim(
    "the 16-bit modes keep between half and three quarters of float32's bytes",
    max(saved[name[d]] for d in low) / saved["float32"],
    spread=(kept, max(saved[name[d]] for d in low) / saved["float32"]),
    at_least=0.5,
    at_most=0.75,
)
plot_bars(ax, {mode: nbytes / 2**20 for mode, nbytes in saved.items()},
          ylabel="saved for backward (MiB)",
          title=f"Autocast keeps {kept:.0%} of float32's activation bytes")  # fmt: skip
plt.show()

# %%
# Gradients that float16 cannot hold
# ----------------------------------
# The backward pass of an autocast region computes activation gradients in 16 bits.
# Here they are computed once in float32 (the loss's gradient with respect to every
# module's output) and rounded to each format. Activation gradients are tiny, often
# below float16's smallest normal number: some become zero, many lose precision.
# The ``GradScaler``'s starting scale, 2**16, shifts them back into range.
loss = loss_fn(model(x), y)  # float32; the hooks keep every module's output
for handle in handles:
    handle.remove()
tensors = {id(out): out for n, (_, out) in outputs.items() if n != "loss"}
grads = torch.autograd.grad(loss, list(tensors.values()))
values = torch.cat([g.flatten() for g in grads])
values = values[values != 0]
tiny16 = torch.finfo(torch.float16).tiny
Lost = namedtuple("Lost", "rounded_to zero subnormal")  # subnormals lose precision
lost = []
scaled = (values * 2.0**16).half()  # what the GradScaler's starting scale makes of them
for label, rounded in [("float16", values.half()), ("float16, loss x 2**16", scaled),
                       ("bfloat16", values.bfloat16())]:  # fmt: skip
    zero = (rounded == 0).float().mean().item()
    tiny = torch.finfo(rounded.dtype).tiny
    sub = ((rounded != 0) & (rounded.abs() < tiny)).float().mean().item()
    lost.append(Lost(label, f"{zero:.3%}", f"{sub:.3%}"))
print(table(lost))
zero_or_sub = [float(row.zero[:-1]) + float(row.subnormal[:-1]) for row in lost]
gpuguide.claim(
    "the loss scale 2**16 leaves fewer activation gradients zero or subnormal in "
    "float16 than no scale",
    holds=zero_or_sub[1] < zero_or_sub[0],
    measured=f"{zero_or_sub[1]:.3f}% against {zero_or_sub[0]:.3f}%",
)
gpuguide.claim(
    "bfloat16 rounds no activation gradient to zero",
    holds=lost[2].zero == f"{0:.3%}",
    measured=f"{lost[2].zero} zero",
)

magnitudes = values.abs().log10().cpu()
lo, hi = math.floor(magnitudes.min().item()), math.ceil(magnitudes.max().item())
edges = torch.linspace(lo, hi, 4 * (hi - lo) + 1)  # quarter decades
counts = torch.histc(magnitudes, bins=len(edges) - 1, min=lo, max=hi)
share = (counts / counts.sum() * 100).tolist()
below = (values.abs() < tiny16).float().mean().item()
report("below float16's normal range", 100 * below, unit="%", size=dims)
fig, ax = plt.subplots()
plot_sweep(
    ax, (10 ** ((edges[:-1] + edges[1:]) / 2)).tolist(),
    {"activation gradients (float32 run)": share},
    xlabel="|gradient| (loss per unit of activation)", ylabel="share of values (%)",
    title=f"{below:.0%} of activation gradients lie below float16's normal range",
    logy=False,
)  # fmt: skip
ax.axvline(tiny16, color="0.3", linestyle="--", label="float16 smallest normal")
ax.axvline(tiny16 * 2**-10, color="0.3", linestyle=":", label="float16 smallest")
ax.legend()
plt.show()

# %%
# What to take away
# -----------------
# Autocast keeps the weights in float32 and picks a dtype per operation; read the
# table above for the device at hand. float16's narrow range is why float16
# training needs a loss scale and bfloat16's does not. This page's claims:
gpuguide.takeaway()
