"""
A training step's time, and its MFU
===================================

How far is a training step from what the device can do? Model-FLOP utilization
(MFU) answers it: the FLOP the model needs per step, divided by the step time and
by a peak. This page trains a GPT-style model sized by device type, measures what
each usual change to the step adds, counts the step's FLOP by formula and with
:class:`torch.utils.flop_counter.FlopCounterMode`, and splits its time by the
profiler.
"""

from dataclasses import replace

import matplotlib.pyplot as plt
import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

import gpuguide
from gpuguide.breakdown import time_budget
from gpuguide.chapters.training import GPT, gpt_config

page = gpuguide.setup()
device = page.device
torch.set_num_threads(1)  # on a shared CPU: one thread, steadier timings
config = gpt_config(device, small=page.small)


# %%
# The step, and the changes to it
# -------------------------------
# Each change keeps the ones before it: bf16 autocast (tensor cores), PyTorch's
# fused attention (SDPA) in place of the written-out one, ``torch.compile``, AdamW's
# fused kernel, and a batch twice as large. ``compile_blocks`` compiles each block
# in place, with dynamic shapes: the blocks share one graph, so compiling takes no
# longer with depth, and the doubled batch needs no second compile.
def make_step(dtype, sdpa, compiled, fused, batch):
    model = GPT(config, sdpa=sdpa).to(device)
    if compiled:
        model.compile_blocks()
    optimizer = torch.optim.AdamW(model.parameters(), fused=fused)
    tokens = torch.randint(config.vocab, (batch, config.context + 1), device=device)

    def step():
        with torch.autocast(device.type, dtype, enabled=dtype != torch.float32):
            logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return model, step


# %%
# FLOP per step, two ways
# -----------------------
# The formula: 6 FLOP per parameter and token (2 forward, 4 backward), plus the
# attention's two matmuls, 12 * layers * heads * head width * context per token, of
# which a causal mask needs half. ``FlopCounterMode`` counts the matmuls it sees:
# only the weight matrices' (the position table, biases and norms multiply none),
# and attention's whole square (it ignores the mask) where it is written out or
# SDPA's kernel has a formula (CUDA's do; the CPU's has none).
L, H, T = config.layers, config.heads, config.context
model, step = make_step(torch.float32, True, False, False, config.batch)
N = sum(p.numel() for p in model.parameters())
tokens = config.batch * T
formula = tokens * (6 * N + 12 * L * H * (config.width // H) * T / 2)
with FlopCounterMode(display=False) as counter:
    step()
counted = counter.get_total_flops()
print(f"{config}: {N / 1e6:.2f}M parameters, {tokens} tokens per step")
print(f"formula: {formula / 1e9:.3f} GFLOP; FlopCounterMode: {counted / 1e9:.3f} GFLOP")

# %%
# Step time and MFU as the step improves
# --------------------------------------
# One row per change, each against the row above it per sample (the last row's
# step holds twice the samples). MFU is the formula's FLOP per second over the
# datasheet's bf16 peak; without one (a CPU has none), over a bf16 matmul
# measured here.
bf16 = torch.bfloat16
changes = {
    "fp32, eager": (torch.float32, False, False, False, config.batch),
    "+ bf16 autocast": (bf16, False, False, False, config.batch),
    "+ SDPA": (bf16, True, False, False, config.batch),
    "+ compile": (bf16, True, True, False, config.batch),
    "+ fused AdamW": (bf16, True, True, True, config.batch),
    "+ 2x batch": (bf16, True, True, True, 2 * config.batch),
}
n = 8192 if page.cuda else 512
a, b = (torch.randn(n, n, device=device, dtype=bf16) for _ in range(2))
matmul = gpuguide.benchmark(torch.mm, args=(a, b)).rate(2 * n**3)
peak = (page.peaks.flops_for(bf16) if page.cuda else None) or matmul.value
rows, previous = [], None
for name, (dtype, sdpa, compiled, fused, batch) in changes.items():
    model, step = make_step(dtype, sdpa, compiled, fused, batch)
    time = gpuguide.benchmark(step, device=device, label=name)
    per_sample = replace(time, times_s=tuple(t / batch for t in time.times_s))
    change = previous and gpuguide.compare(per_sample, previous)
    verdict = change and (change.short if change.measurable else change.verdict)
    rate = time.rate(formula * batch / config.batch)
    rows.append({"change": name, "step": time, "speed-up per sample": verdict})
    rows[-1] |= {"TFLOP/s": rate, "MFU": rate.value / peak}
    previous = per_sample
source = "measured" if peak == matmul.value else "datasheet"
print(gpuguide.table(rows, title=f"GPT step; MFU of the {source} bf16 peak"))
fig, ax = plt.subplots()
ax.barh([r["change"] for r in rows][::-1], [100 * r["MFU"] for r in rows][::-1])
ax.set_xlabel(f"MFU (% of the {source} bf16 peak)")
ax.set_title(f"MFU goes from {rows[0]['MFU']:.0%} to {rows[-1]['MFU']:.0%}")
gpuguide.label_device(fig, device)

# %%
# The MFU line
# ------------
# The last row's MFU, its peak named, and its FLOP counted both ways.
rate = rows[-1]["TFLOP/s"].value
print(
    f"MFU {rate / peak:.1%} of the {source} bf16 peak ({peak / 1e12:.2f} TFLOP/s) "
    f"by the formula's FLOP, {rate * counted / formula / peak:.1%} by "
    f"FlopCounterMode's; {rate / matmul.value:.1%} of the bf16 matmul measured "
    f"here ({matmul})"
)
gpuguide.claim(  # above 100%: the FLOP count or the peak is wrong
    "the step's MFU is below 100% of the bf16 matmul measured here",
    rate / matmul.value,
    at_most=1.0,
)

# %%
# Where the last step's time goes
# -------------------------------
# The profiler's kernels (on a CPU, its operators) by category, and ``idle``: the
# time with nothing running. The categories add up to the step timed without the
# profiler (10 rounds on a CPU, whose shared cores vary more; 3 on a GPU, where
# reading a profile of thousands of kernels takes most of a second).
budget = time_budget(step, steps=3 if page.cuda else 10, device=str(device))
print(budget)
gpuguide.claim(
    "the time budget sums to within 5% of the measured step",
    budget.gap,
    at_most=0.05,
    timed=True,
)

# %%
# Attention alone, SDPA against written out
# -----------------------------------------
# One block's attention, forward and backward in bf16, both ways: where the SDPA
# row above is slower or faster, this says whether attention's kernels are why.
# It runs after the budget: it leaves the block's attention written out.
block = model.blocks[0]  # called as written: not through the compiled forward
x = torch.randn(config.batch, T, config.width, device=device, requires_grad=True)


def attend(sdpa):
    block.sdpa = sdpa
    with torch.autocast(device.type, bf16):
        block.attend(x).sum().backward()


ways = {"SDPA": lambda: attend(True), "written out": lambda: attend(False)}
attention = gpuguide.interleave(ways, device=device)
sdpa = gpuguide.compare(attention["SDPA"], attention["written out"])
print(f"one block's bf16 attention, forward and backward: {sdpa}")

# %%
# What to take away
# -----------------
# MFU sets a step against the device, not against another step: read the table for
# which change paid on this device, and the budget for where the rest of the time
# goes.
gpuguide.takeaway()
plt.show()
