"""
Mixed-precision training with autocast
======================================

Automatic mixed precision (AMP) runs the matrix multiplications of a training step
in a 16-bit format and keeps the numerically touchy operations, and the weights, in
float32. This page trains one small transformer block three ways from the same
initial weights on the same data: float32, float16 autocast with a ``GradScaler``,
and bfloat16 autocast without one.

For each mode it measures the time of one training step (the modes in alternating
rounds), the host's time to launch a step next to the GPU's time to run it, the
peak memory of a step and the loss reached after a fixed number of steps, and it
reports what the gradient scaler did. The previous page shows which operations autocast runs in
which dtype, and why float16 needs the scaler while bfloat16 does not.

See also the concept pages
:doc:`the roofline and its three regimes </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# The current spelling is ``torch.autocast(device_type, dtype=...)`` and
# ``torch.amp.GradScaler(device_type)``; the older ``torch.cuda.amp.autocast`` and
# ``torch.cuda.amp.GradScaler`` that many tutorials still show are deprecated.
# The float32 baseline is true float32: with the default matmul precision,
# ``"highest"``, float32 matmuls do not use tensor cores. (``"high"`` lets them use
# TF32 on Ampere and newer GPUs, ``"medium"`` even bfloat16: a cheaper first step
# than autocast, and a different baseline.)
import copy
import itertools
from collections import namedtuple

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide.chapters.compiling import host_and_gpu_times

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
print(f"float32 matmul precision: {torch.get_float32_matmul_precision()!r}")

# %%
# A small model and a synthetic task
# ----------------------------------
# The transformer block of the previous page classifies sequences of random
# vectors; the label is the argmax of a fixed random projection of the sequence
# mean. The lesson is about tensor cores, so on a GPU the block is as wide as a
# bfloat16 step of about 10 ms of matmuls allows: wide enough that the GPU's work,
# not the host's launches, sets the step time in every mode (printed below). The
# CPU gets a small batch and a short planned step because its 16-bit matmuls are
# often many times slower than its float32 ones.


class Block(nn.Module):
    def __init__(self, width, classes):
        super().__init__()
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.softmax = nn.Softmax(dim=-1)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        weights = self.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5)
        x = x + self.proj(weights @ v)
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


on_cuda = device.type == "cuda"
batch, seq, classes = (64, 128, 10) if on_cuda else (32, 16, 10)
tokens = batch * seq
# A GPU plans a bfloat16 step with its datasheet peak. A CPU step this small is
# bound by the overhead per operation, not by FLOPs, and a measured CPU peak varies
# with the machine's load, so the CPU plans float32 with a fixed fallback rate.
peaks = gpuguide.device_peaks(device) if on_cuda else None
width = 16  # small mode: the smallest width
if not small:
    width = gpuguide.largest_size(
        16,
        4096 if on_cuda else 1024,
        # three models, each with weights, gradients and AdamW's two moments
        memory_at=lambda d: 4 * (144 * d * d + 24 * tokens * d + batch * seq * seq),
        flop_at=lambda d: 6 * tokens * 12 * d * d + 12 * batch * seq * seq * d,
        budget=gpuguide.size_budget(
            device, memory_fraction=0.5, call_s=0.01 if on_cuda else 0.002
        ),
        peaks=peaks,
        flop_per_s=peaks.flops.get("bf16") if on_cuda else None,
        per_octave=2,
        multiple_of=64 if on_cuda else 16,
    )
steps = 10 if small else 40
print(f"batch {batch} x {seq} tokens, width {width}, {classes} classes, {steps} steps")
dims = f"{batch}x{seq}x{width}"  # batch x tokens x width, shown with recorded figures

torch.manual_seed(0)
teacher = torch.randn(width, classes, device=device)


def make_batch(n, generator=None):
    x = torch.randn(n, seq, width, device=device, generator=generator)
    return x, (x.mean(dim=1) @ teacher).argmax(dim=-1)


x, y = make_batch(batch)  # for the timings
x_eval, y_eval = make_batch(4 * batch)
initial = Block(width, classes).to(device)
loss_fn = nn.CrossEntropyLoss()

# %%
# One training step, three modes
# ------------------------------
# Only the forward pass and the loss go inside ``autocast``; ``backward`` runs
# outside it and uses the dtypes the forward chose. The weights stay float32.
# bfloat16 has float32's exponent range, so its gradients need no scaling. float16
# does: the scaler multiplies the loss (by 2**16 at first) so that small gradients
# stay representable, and divides the gradients before the optimizer step.
# ``scaler.step`` skips the optimizer step when the scaled gradients contain inf or
# NaN, and ``scaler.update`` then halves the scale. (``scaler.step`` reads that
# inf/NaN flag back to the host, a synchronization, unless the optimizer is fused:
# on a GPU this page uses the fused AdamW, which takes the flag on the GPU.)
modes = {"fp32": torch.float32, "fp16 + scaler": torch.float16}
if device.type == "cuda" and not torch.cuda.is_bf16_supported():
    print("This GPU has no native bfloat16; the bf16 mode needs an Ampere or newer.")
else:
    modes["bf16"] = torch.bfloat16


def make_step(model, optimizer, dtype, scaler):
    def step(x, y):
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
        return loss

    return step


# %%
# Train each mode from the same weights
# -------------------------------------
# Every run starts from a copy of ``initial`` and sees the same fresh batches in
# the same order (a generator seeded the same way for each run). Losses are kept on
# the device and read once at the end; the scaler's scale is read after every step
# (a synchronization, harmless in this untimed loop) to count the steps it skipped.
runs = {}
for mode, dtype in modes.items():
    model = copy.deepcopy(initial)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=on_cuda or None)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    step = make_step(model, optimizer, dtype, scaler)
    generator = torch.Generator(device).manual_seed(1)
    losses = torch.zeros(steps, device=device)
    scales = [scaler.get_scale()] if scaler is not None else []
    for i in range(steps):
        losses[i] = step(*make_batch(batch, generator)).detach()
        if scaler is not None:
            scales.append(scaler.get_scale())
    with torch.no_grad():
        final = loss_fn(model(x_eval), y_eval).item()  # evaluated in float32
    runs[mode] = {"step": step, "losses": losses.tolist(), "final": final}
    if scaler is not None:  # the scale only drops on a step that was skipped
        skipped = sum(after < before for before, after in itertools.pairwise(scales))
        print(
            f"{mode}: GradScaler scale {scales[0]:g} at the start, {scales[-1]:g} "
            f"after {steps} steps; {skipped} steps skipped for inf/NaN gradients"
        )


# %%
# Step time and peak memory
# -------------------------
# The steps are timed after the training run (the first steps paid the one-time
# costs), the three modes in five alternating rounds, so that a drift of the
# machine falls on all of them alike. On a GPU, the host's time to launch a step is
# then measured next to the GPU's time to run it, from the same steps: with the GPU
# held busy while the host launches, CUDA events time the work alone. Memory is
# tracked over one more step. On CUDA the peak counts tensors in the caching
# allocator, above what the step started with (weights and optimizer state); on
# the CPU it is the process's resident memory, which is too coarse to see a model
# this small.
times = gpuguide.interleave(
    {mode: lambda step=run["step"]: step(x, y) for mode, run in runs.items()},
    rep_ms=500,
    device=device,
)
for mode, run in runs.items():
    run["time"] = times[mode]
    run["split"] = host_and_gpu_times(lambda s=run["step"]: s(x, y), device=device)
    with gpuguide.track_memory(device) as tracker:
        run["step"](x, y)
    run["memory"] = tracker.report
base = runs["fp32"]
Row = namedtuple("Row", "mode step_time vs_fp32 step_peak eval_loss")
rows = []
for mode, run in runs.items():
    peak = run["memory"].peak_increase_bytes
    peak_text = "unknown" if peak is None else gpuguide.format_bytes(peak)
    ratio = gpuguide.format_ratio(run["time"].median_s / base["time"].median_s)
    rows.append(Row(mode, run["time"], ratio, peak_text, f"{run['final']:.4f}"))
    gpuguide.record("step time", run["time"], size=dims, mode=mode)
    if peak is not None:
        gpuguide.record("step peak", peak, unit="B", size=dims, mode=mode)
print(gpuguide.table(rows))
print(f"step peak measured with: {base['memory'].method}")
if on_cuda:
    for mode, run in runs.items():
        print(f"{mode}: {run['split']}")

# %%
# Step time
# ---------
# On a GPU the 16-bit matmuls run on tensor cores, so on a step bound by its matmuls
# expect a speed-up of several times, up to the ratio of the two dtypes' peaks
# (printed below for the datasheet figures); the layer norms, the softmax and the
# optimizer gain less. A step bound by launches would hide it: check the host and
# GPU times above. Many CPUs have no fast 16-bit matrix units, and there autocast is
# slower than float32, not faster.
verdicts = {m: gpuguide.compare(run["time"], base["time"]) for m, run in runs.items()}
for mode, c in verdicts.items():
    if mode == "fp32":
        continue
    peak_ratio = None
    if peaks is not None and peaks.flops.get(mode[:4]) and peaks.flops.get("fp32"):
        peak_ratio = peaks.flops[mode[:4]] / peaks.flops["fp32"]
    line = str(c)
    if peak_ratio is not None:
        where = c.against(peak_ratio, peak_ratio)
        line += f": {where} the ratio of the peaks, {gpuguide.format_ratio(peak_ratio)}"
    print(line)
sixteen = [c for mode, c in verdicts.items() if mode != "fp32"]
if any(c.verdict == "faster" for c in sixteen):
    ratio = gpuguide.format_ratio(max(c.speedup for c in sixteen))
    finding = f"16-bit autocast: steps up to {ratio} faster than float32"
elif all(c.verdict == "slower" for c in sixteen):
    finding = "16-bit autocast: steps slower than float32 on this device"
else:
    finding = "16-bit autocast: no step measurably faster than float32"
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {mode: run["time"] for mode, run in runs.items()},
    ylabel="time per training step (ms)",
    title=finding,
)
plt.show()

# %%
# Loss curves
# -----------
# Mixed precision changes the rounding of every step, so the curves are not
# identical, but they should track each other closely; a curve that stalls or
# jumps points at overflow (fp16 without a scaler) or a loss computed in 16 bits.
worst = max(abs(run["final"] - base["final"]) for run in runs.values())
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    list(range(1, steps + 1)),
    {f"{mode} (eval {run['final']:.3f})": run["losses"] for mode, run in runs.items()},
    xlabel="training step (count)",
    ylabel="training loss (nats)",
    title=f"All modes train alike: eval losses differ from fp32 by {worst:.2g} at most",
    logx=False,
    logy=False,
    record="training loss",
)
plt.show()
if device.type == "cpu":
    print(
        "The tensor-core speed-up of 16-bit matmuls needs a GPU; this CPU run shows "
        "the numerics, the scaler, and whether 16-bit math pays on this CPU."
    )
