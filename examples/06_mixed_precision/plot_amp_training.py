"""
Mixed-precision training with autocast
======================================

Automatic mixed precision (AMP) runs the matrix multiplications of a training step
in a 16-bit format and keeps the numerically touchy operations, and the weights, in
float32. This page trains one small transformer block from the same weights on the
same data in float32, float16 autocast with a ``GradScaler`` and bfloat16 autocast
without one, and measures each mode's step time, peak memory and loss reached. The
previous page shows which operations autocast runs in which dtype.

See also :doc:`the roofline </concepts/roofline>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# The current spellings are ``torch.autocast(device_type, dtype=...)`` and
# ``torch.amp.GradScaler(device_type)``. The float32 baseline is true float32: at
# the default matmul precision, ``"highest"``, matmuls do not use TF32. A CPU runs
# torch on one thread here: with two on a two-core machine, any other work stalls
# every parallel operation, and the step times with it.
import copy
import functools
import itertools

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import compare, interleave, plot_bars, plot_sweep, report, track_memory
from gpuguide.chapters.compiling import host_and_gpu_times
from gpuguide.chapters.precision import Block, has_amx_fp16, has_avx512_bf16

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device, on_cuda = page.device, page.cuda
print(f"float32 matmul precision: {torch.get_float32_matmul_precision()!r}")


# %%
# A small model and a synthetic task
# ----------------------------------
# The previous page's transformer block (:class:`~gpuguide.chapters.precision.Block`,
# shown there) classifies random sequences by a fixed projection of their mean. On a
# GPU it is as wide as a bfloat16 step of about 10 ms of matmuls allows, so that the
# GPU's work, not the launches, sets the step time; a CPU gets a small step, as
# without 16-bit matrix instructions 16-bit steps are slow.
batch, seq, classes = (64, 128, 10) if on_cuda else (32, 16, 10)
tokens, steps = batch * seq, 10 if page.small else 40
step_s = 0.01 if on_cuda else 0.008  # the time budget of one step's matmuls
width = 16 if page.small else gpuguide.largest_size(
    16, 4096 if on_cuda else 1024, per_octave=2, multiple_of=64 if on_cuda else 16,
    budget=gpuguide.size_budget(device, memory_fraction=0.5, call_s=step_s),
    # three models, each with weights, gradients and AdamW's two moments
    memory_at=lambda d: 4 * (144 * d * d + 24 * tokens * d + batch * seq * seq),
    flop_at=lambda d: 6 * tokens * 12 * d * d + 12 * batch * seq * seq * d,
    peaks=page.peaks if on_cuda else None,
    flop_per_s=page.peaks.flops.get("bf16") if on_cuda else None,
)  # fmt: skip
print(f"batch {batch} x {seq} tokens, width {width}, {classes} classes, {steps} steps")
dims = f"{batch}x{seq}x{width}"  # batch x tokens x width, shown with recorded figures
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
# Only the forward pass and the loss go inside ``autocast``; ``backward`` uses the
# dtypes the forward chose, and the weights stay float32. bfloat16 has float32's
# range, so its gradients need no scaling. float16 does: the scaler multiplies the
# loss (by 2**16 at first) so that small gradients stay representable, divides the
# gradients before the optimizer step, skips that step when they hold inf or NaN
# (a read-back to the host, unless the optimizer is fused) and then halves the scale.
# Each mode trains from a copy of the same weights on the same batches.
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
    return loss


runs = {}
for mode, dtype in modes.items():
    model = copy.deepcopy(initial)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, fused=on_cuda or None)
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None
    step = functools.partial(train_step, model, optimizer, dtype, scaler)
    generator = torch.Generator(device).manual_seed(1)
    losses = torch.zeros(steps, device=device)
    scales = [scaler.get_scale()] if scaler is not None else []
    for i in range(steps):
        losses[i] = step(*make_batch(batch, generator)).detach()
        if scaler is not None:
            scales.append(scaler.get_scale())  # a sync, harmless in this untimed loop
    with torch.no_grad():
        final = loss_fn(model(x_eval), y_eval).item()  # evaluated in float32
    runs[mode] = {"step": step, "losses": losses.tolist(), "final": final}
    if scaler is not None:
        skipped = sum(after < before for before, after in itertools.pairwise(scales))
        print(
            f"{mode}: GradScaler scale {scales[0]:g} at the start, {scales[-1]:g} "
            f"after {steps} steps; {skipped} steps skipped for inf/NaN gradients"
        )

# %%
# Step time and peak memory
# -------------------------
# The steps are timed after training, the modes in five alternating rounds; on a GPU
# the host's time to launch a step is printed beside the GPU's time to run it. On a
# GPU the peak of one more step is the CUDA allocator's, above the weights and
# optimizer state: it counts tensors' bytes. A CPU has only the process's resident
# memory, which moves by whole pages and by what glibc keeps after frees, more than
# this small step's tensors differ between modes: the page does not report it there.
steps_of = {mode: lambda s=run["step"]: s(x, y) for mode, run in runs.items()}
times = interleave(steps_of, rep_ms=500, device=device)
peaks = {}
for mode, run in runs.items():
    report("step time", times[mode], size=dims, mode=mode)
    if on_cuda:
        print(f"{mode}: {host_and_gpu_times(steps_of[mode], device=device)}")
        with track_memory(device) as tracker:
            run["step"](x, y)
        peaks[mode] = tracker.report.peak_increase_bytes
        report("step peak", peaks[mode], unit="B", size=dims, mode=mode)
if not on_cuda:
    print("Step peaks: not measured on a CPU (resident memory is too coarse here).")
gpuguide.claim(
    "on a GPU, each 16-bit mode's step peak is at most 0.8x fp32's",
    max(peaks[m] for m in runs if m != "fp32") / peaks["fp32"] if on_cuda else None,
    at_most=0.8,
    on="cuda",
)
gpuguide.claim(
    "the weights stay float32 in every mode",
    holds=all(
        p.dtype == torch.float32
        for run in runs.values()
        for p in run["step"].args[0].parameters()
    ),
    measured="all float32",
)

# %%
# Step time
# ---------
# On a GPU the 16-bit matmuls run on tensor cores: on a step bound by its matmuls
# expect several times fp32's speed, up to the ratio of the datasheet peaks (norms,
# softmax and optimizer gain less). On a CPU its vector instructions decide (named in
# the provenance line): bf16 matmuls are fast only with AVX512-BF16 or AMX, fp16 ones
# with AVX512-FP16 or AMX-FP16, and a step this small may lose more to autocast's
# casts than its matmuls gain.
flops = page.peaks.flops if on_cuda else {}
verdicts = {m: compare(times[m], times["fp32"]) for m in runs if m != "fp32"}
for mode, c in verdicts.items():
    if flops.get(mode[:4]) and flops.get("fp32"):  # a datasheet's peaks
        ratio = flops[mode[:4]] / flops["fp32"]
        c = f"{c}: {c.against(ratio, ratio)} the ratio of the peaks, {ratio:.3g}x"
    print(c)
fastest = max(verdicts.values(), key=lambda c: c.speedup)
gpuguide.claim(
    "on a GPU, bf16 autocast makes a step at least 2x as fast as fp32",
    verdicts["bf16"],
    at_least=2,
    on="cuda",
)
gpuguide.claim(
    "on a GPU, fp16 autocast with a scaler makes a step faster than fp32",
    verdicts["fp16 + scaler"],
    verdict="faster",
    on="cuda",
)
fp16_matrix, bf16_vector = has_amx_fp16(), has_avx512_bf16()
gpuguide.claim(
    "on a CPU with AVX512-BF16, a bf16 autocast step runs at least as fast as fp32's",
    verdicts["bf16"],
    at_least=1.0,
    on="cpu",
    unless=None if bf16_vector else "this CPU has no AVX512-BF16",
)
gpuguide.claim(
    "on a CPU without AMX-FP16 or AVX512-FP16, an fp16 autocast step runs at most "
    "half as fast as fp32's",
    verdicts["fp16 + scaler"],
    at_most=0.5,
    on="cpu",
    unless="this CPU has AMX-FP16" if fp16_matrix else None,
)
fig, ax = plt.subplots()
plot_bars(ax, times, ylabel="time per training step (ms)",
          title=f"16-bit autocast: {fastest}")  # fmt: skip
plt.show()

# %%
# Loss curves
# -----------
# Mixed precision changes the rounding of every step, so the curves differ; the
# eval losses below say by how much here. A curve that stalls or jumps where the
# others do not points at overflow (fp16, no scaler).
print(", ".join(f"{mode}: eval loss {run['final']:.4f}" for mode, run in runs.items()))
worst = max(abs(run["final"] - runs["fp32"]["final"]) for run in runs.values())
fig, ax = plt.subplots()
plot_sweep(
    ax, list(range(1, steps + 1)),
    {f"{mode} (eval {run['final']:.3f})": run["losses"] for mode, run in runs.items()},
    xlabel="training step (count)", ylabel="training loss (nats)",
    title=f"Eval losses differ from fp32's by {worst:.2g} at most",
    logx=False, logy=False,
)  # fmt: skip
plt.show()

# %%
# What to take away
# -----------------
# Autocast keeps the weights in float32 and runs the matmuls in 16 bits: where the
# hardware has 16-bit matrix units that is the speed-up, elsewhere a cost. This
# page's claims, and where they held in this run:
gpuguide.takeaway()
