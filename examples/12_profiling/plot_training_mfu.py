"""
A training step's time, and its MFU
===================================

How far is a training step from what the device can do? Model-FLOP utilization
(MFU) answers it: the FLOP the model needs per step, divided by the step time and
by a peak. This page trains a GPT-style model sized to the device, counts its FLOP
by formula and with :class:`torch.utils.flop_counter.FlopCounterMode`, sets the
step's rate against the datasheet peak and the measured matmul ceiling, splits the
step's time by the profiler, and measures what each usual change adds.
"""

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
print(config)


# %%
# The step, and the changes to it
# -------------------------------
# Each change keeps the ones before it: bf16 autocast (tensor cores), PyTorch's
# fused attention (SDPA) in place of the written-out one, ``torch.compile`` on each
# block, AdamW's fused kernel, and a batch twice as large.
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
# which a causal mask needs half. ``FlopCounterMode`` counts every matmul it sees.
L, H, T = config.layers, config.heads, config.context
Q = config.width // H
model, step = make_step(torch.float32, True, False, False, config.batch)
N = sum(p.numel() for p in model.parameters())
tokens = config.batch * T
formula = tokens * (6 * N + 12 * L * H * Q * T / 2)
with FlopCounterMode(display=False) as counter:
    step()
counted = counter.get_total_flops()
counts = {str(op): f for op, f in counter.get_flop_counts()["Global"].items()}
matmuls = counts.get("aten.mm", 0) + counts.get("aten.addmm", 0)
weights = sum(p.numel() for p in model.parameters() if p.dim() == 2)
weights -= model.position.weight.numel()  # a lookup table: no matmul
causal = tokens * 12 * L * H * Q * T / 2
print(f"{N / 1e6:.2f}M parameters, {tokens} tokens per step")
print(f"formula: {formula / 1e9:.3f} GFLOP; FlopCounterMode: {counted / 1e9:.3f} GFLOP")
print(
    f"matmuls: {matmuls / 1e9:.3f} GFLOP counted = 6 x {weights / 1e6:.2f}M weight "
    f"matrix parameters x tokens ({6 * weights * tokens / 1e9:.3f}): the formula's N "
    "also holds the position table, biases and norms, which multiply no matrix"
)
print(
    f"attention: {(counted - matmuls) / 1e9:.3f} GFLOP counted, the formula's causal "
    f"half {causal / 1e9:.3f}: the counter counts the whole square, and nothing for "
    "a kernel it has no formula for (the CPU's SDPA)"
)
del model, step

# %%
# Step time as the step improves
# ------------------------------
# One row per change; the CPU skips what it cannot show in the page's time.
bf16 = torch.bfloat16
changes = {
    "fp32, eager": (torch.float32, False, False, False, config.batch),
    "+ bf16 autocast": (bf16, False, False, False, config.batch),
    "+ SDPA": (bf16, True, False, False, config.batch),
    "+ compile": (bf16, True, True, False, config.batch),
    "+ fused AdamW": (bf16, True, True, True, config.batch),
    "+ 2x batch": (bf16, True, True, True, 2 * config.batch),
}
if not page.cuda:
    print(
        "On a CPU, compiling a model takes longer than this page's budget: no compile"
    )
    changes = {
        k: (*v[:2], False, *v[3:]) for k, v in changes.items() if "comp" not in k
    }
n = 8192 if page.cuda else 512
a, b = (torch.randn(n, n, device=device, dtype=bf16) for _ in range(2))
measured = gpuguide.benchmark(torch.mm, args=(a, b)).rate(2 * n**3).value
# a CPU has no datasheet: its MFU is of the measured matmul
ceiling = (page.peaks.flops_for(bf16) if page.cuda else None) or measured
rows, times = [], {}
for name, (dtype, sdpa, compiled, fused, batch) in changes.items():
    model, step = make_step(dtype, sdpa, compiled, fused, batch)
    times[name] = gpuguide.benchmark(step, device=device)
    rate = formula * batch / config.batch / times[name].median_s
    rows.append({"change": name, "step": times[name], "TFLOP/s": rate / 1e12})
    rows[-1] |= {"MFU": rate / ceiling, "of bf16 matmul": rate / measured}
peak = "datasheet bf16 peak" if page.cuda else "measured bf16 matmul"
print(gpuguide.table(rows, title=f"GPT step on {page.peaks.name}; MFU of the {peak}"))
print(f"peak {ceiling / 1e12:.1f} TFLOP/s; measured bf16 matmul {measured / 1e12:.1f}")

# %%
# Where the last step's time goes
# -------------------------------
# The profiler's kernels (on a CPU, its operators) by category, and ``idle``: the
# time with nothing running. The categories add up to the step timed without the
# profiler.
budget = time_budget(step, steps=10, device=str(device))
print(budget)
gpuguide.claim(
    "the time budget sums to within 5% of the measured step",
    budget.gap,
    at_most=0.05,
    timed=True,
)
fig, ax = plt.subplots()
ax.barh([r["change"] for r in rows], [t.median_s * 1e3 for t in times.values()])
ax.set_xlabel("step time (ms)")
gpuguide.takeaway()
