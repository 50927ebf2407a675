"""
Mixed-precision training with autocast
======================================

Automatic mixed precision (AMP) runs the matrix multiplications of a training step
in a 16-bit format and keeps the numerically touchy operations, and the weights, in
float32. This page trains one small transformer block three ways from the same
initial weights on the same data: float32, float16 autocast with a ``GradScaler``,
and bfloat16 autocast without one.

For each mode it measures the time of one training step, the peak memory of a
step and the loss reached after a fixed number of steps, and it reports what the
gradient scaler did. The previous page shows which operations autocast runs in
which dtype, and why float16 needs the scaler while bfloat16 does not.
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

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
print(f"float32 matmul precision: {torch.get_float32_matmul_precision()!r}")

# %%
# A small model and a synthetic task
# ----------------------------------
# The transformer block of the previous page classifies sequences of random
# vectors; the label is the argmax of a fixed random projection of the sequence
# mean. The width comes from the device's
# budget; the CPU gets a small batch and a short planned step because its 16-bit
# matmuls are often many times slower than its float32 ones.


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


batch, seq, classes = (32, 16, 10) if device.type == "cpu" else (64, 128, 10)
step_s = 0.002 if device.type == "cpu" else 0.05  # planned float32 step time
tokens = batch * seq
# A GPU plans with its datasheet peak. A CPU step this small is bound by the
# overhead per operation, not by FLOPs, and a measured CPU peak varies with the
# machine's load, so the CPU plans with the helpers' fixed fallback rate (None).
width = 16  # small mode: the smallest width
if not small:
    width = gpuguide.largest_size(
        16,
        1024,
        memory_at=lambda d: 4 * (48 * d * d + 20 * tokens * d + batch * seq * seq),
        flop_at=lambda d: 6 * tokens * 12 * d * d + 12 * batch * seq * seq * d,
        call_s=step_s,
        peaks=gpuguide.device_peaks(device) if device.type == "cuda" else None,
        multiple_of=16,
    )
steps = 10 if small else 40
print(f"batch {batch} x {seq} tokens, width {width}, {classes} classes, {steps} steps")

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
# inf/NaN flag back to the host, a synchronization, unless the optimizer is fused.)
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
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
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
# The step is timed after the training run (the first steps paid the one-time
# costs), and its memory is tracked over one more step. On CUDA the peak counts
# tensors in the caching allocator, above what the step started with (weights and
# optimizer state); on the CPU it is the process's resident memory, which is too
# coarse to see a model this small.
for mode, run in runs.items():
    run["time"] = gpuguide.benchmark(
        run["step"], args=(x, y), device=device, label=mode
    )
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
print(gpuguide.table(rows))
print(f"step peak measured with: {base['memory'].method}")

# %%
# Step time
# ---------
# On recent data-center GPUs expect the 16-bit modes to be several times faster
# than true float32 for a block this wide (2-6x is common): the matmuls move to
# tensor cores, while layer norms, softmax and the optimizer gain less. Small
# models are partly launch-bound, which caps the gain. Many CPUs have no fast 16-bit matrix
# units, and there autocast is slower than float32, not faster.
fastest = min(runs, key=lambda k: runs[k]["time"].median_s)
speedup = base["time"].median_s / runs[fastest]["time"].median_s
if fastest == "fp32":
    finding = "float32 is the fastest mode here: autocast does not pay on this device"
else:
    finding = f"{fastest} autocast: a step {gpuguide.format_ratio(speedup)} faster"
print(finding)
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
)
plt.show()
if device.type == "cpu":
    print(
        "The tensor-core speed-up of 16-bit matmuls needs a GPU; this CPU run shows "
        "the numerics, the scaler, and whether 16-bit math pays on this CPU."
    )
