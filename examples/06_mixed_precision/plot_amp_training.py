"""
Mixed-precision training with autocast
======================================

Automatic mixed precision (AMP) runs a training step's matrix multiplications in a
16-bit format and keeps the numerically touchy operations, and the weights, in
float32. This page trains one small transformer block from the same weights on the
same data in float32, float16 autocast with a ``GradScaler`` and bfloat16 autocast,
and measures each mode's step time, peak memory and loss reached.

See also :doc:`the roofline </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# The current spellings are ``torch.autocast(device_type, dtype=...)`` and
# ``torch.amp.GradScaler(device_type)``. The float32 baseline is true float32: at
# the default matmul precision, ``"highest"``, matmuls do not use TF32. A CPU runs
# torch on one thread here, so that other work does not stall its step times.
import copy
import functools

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import compare, interleave, plot_bars, report
from gpuguide.chapters import precision
from gpuguide.timing import host_and_gpu_times

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device, on_cuda = page.device, page.cuda


# %%
# A small model and a synthetic task
# ----------------------------------
# The previous page's transformer block (:class:`~gpuguide.chapters.precision.Block`,
# shown there) classifies random sequences by a fixed projection of their mean. On a
# GPU it is as wide as a bfloat16 step of about 10 ms of matmuls allows
# (:func:`~gpuguide.chapters.precision.block_width`), so that the GPU's work, not the
# launches, sets the step time; a CPU gets a small step.
batch, seq, classes = (64, 128, 10) if on_cuda else (32, 16, 10)
steps = 10 if page.small else 40
step_s = 0.01 if on_cuda else 0.008  # the time budget of one step's matmuls
width = precision.block_width(device, batch=batch, seq=seq, step_s=step_s)
width = 16 if page.small else width
print(f"batch {batch} x {seq} tokens, width {width}, {classes} classes, {steps} steps")
dims = f"{batch}x{seq}x{width}"  # batch x tokens x width, shown with recorded figures
teacher = torch.randn(width, classes, device=device)


def make_batch(n, generator=None):
    x = torch.randn(n, seq, width, device=device, generator=generator)
    return x, (x.mean(dim=1) @ teacher).argmax(dim=-1)


x, y = make_batch(batch)  # for the timings
x_eval, y_eval = make_batch(4 * batch)
initial = precision.Block(width, classes).to(device)
loss_fn = nn.CrossEntropyLoss()

# %%
# One training step, three modes
# ------------------------------
# Only the forward pass and the loss go inside ``autocast``; ``backward`` uses the
# dtypes the forward chose, and the weights stay float32. bfloat16 has float32's
# range, so its gradients need no scaling. float16 does: the scaler multiplies the
# loss (by 2**16 at first) so that small gradients stay representable, divides the
# gradients before the optimizer step, and skips that step and halves the scale
# when they hold inf or NaN. Each mode trains from a copy of the same weights on the
# same batches; mixed precision changes the rounding of every step, so the losses
# reached differ a little.
modes = {"fp32": torch.float32, "fp16 + scaler": torch.float16, "bf16": torch.bfloat16}


def train_step(model, optimizer, dtype, scaler, x, y):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = loss_fn(model(x), y)
    if scaler is None:
        loss.backward()
        optimizer.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


runs = {}
for mode, dtype in modes.items():
    model = copy.deepcopy(initial)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=on_cuda or None)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    runs[mode] = functools.partial(train_step, model, optimizer, dtype, scaler)
    generator = torch.Generator(device).manual_seed(1)
    for _ in range(steps):
        runs[mode](*make_batch(batch, generator))
    with torch.no_grad():  # evaluated in float32
        print(f"{mode}: eval loss {loss_fn(model(x_eval), y_eval).item():.4f}")
dtypes = {p.dtype for step in runs.values() for p in step.args[0].parameters()}
gpuguide.claim(
    "the weights stay float32 in every mode",
    holds=dtypes == {torch.float32},
    measured=", ".join(map(str, dtypes)),
)

# %%
# Step time and peak memory
# -------------------------
# The modes take turns in five rounds. On a GPU the 16-bit matmuls run on tensor
# cores, the host's time to launch a step is printed beside the GPU's time to run
# it, and the peak memory of a step is the CUDA allocator's. On a CPU its vector
# instructions decide (named in the provenance line): bf16 matmuls are fast only
# with AVX512-BF16 or AMX, fp16 ones with AVX512-FP16 or AMX-FP16. A CPU's resident
# memory moves by whole pages, more than this small step's tensors differ between
# modes: the page does not report it there.
steps_of = {mode: lambda s=step: s(x, y) for mode, step in runs.items()}
times = interleave(steps_of, rep_ms=500, device=device)
peaks = {}
for mode in runs:
    report("step time", times[mode], size=dims, mode=mode)
    if on_cuda:
        print(f"{mode}: {host_and_gpu_times(steps_of[mode], device=device)}")
        peaks[mode] = precision.peak_rise(steps_of[mode], device)  # lowest of 3
        report("step peak", peaks[mode], unit="B", size=dims, mode=mode)
gpuguide.claim(
    "on a GPU, each 16-bit mode's step peak is at most 0.8x fp32's",
    max(peaks[m] for m in runs if m != "fp32") / peaks["fp32"] if on_cuda else None,
    at_most=0.8,
    on="cuda",
)
verdicts = {m: compare(times[m], times["fp32"]) for m in runs if m != "fp32"}
for mode, c in verdicts.items():
    report("speed-up over fp32", c, size=dims, mode=mode)
bf16, fp16 = verdicts["bf16"], verdicts["fp16 + scaler"]
gpuguide.claim(
    "on a GPU, bf16 autocast makes a step at least 2x as fast as fp32, and fp16 "
    "autocast with a scaler makes it faster",
    holds=bf16.low >= 2 and fp16.verdict == "faster",
    measured=f"bf16 {bf16.short}, fp16 {fp16.short}",
    on="cuda",
    timed=True,
)
bf16_units, fp16_units = precision.cpu_has("avx512_bf16"), precision.cpu_has("amx_fp16")
gpuguide.claim(
    "on a CPU, a bf16 autocast step runs at least as fast as fp32's with AVX512-BF16, "
    "and an fp16 one at most half as fast without AMX-FP16 or AVX512-FP16",
    holds=(bf16.low >= 1 or not bf16_units) and (fp16.high <= 0.5 or fp16_units),
    measured=f"bf16 {bf16.short}, fp16 {fp16.short}",
    on="cpu",
    unless=None if bf16_units or not fp16_units else "no AVX512-BF16, has AMX-FP16",
    timed=True,
)
fig, ax = plt.subplots()
title = f"16-bit autocast: {max(verdicts.values(), key=lambda c: c.speedup)}"
plot_bars(ax, times, ylabel="time per training step (ms)", title=title)
plt.show()

# %%
# What to take away
# -----------------
# Autocast keeps the weights in float32 and runs the matmuls in 16 bits: where the
# hardware has 16-bit matrix units that is the speed-up, elsewhere a cost.
gpuguide.takeaway()
