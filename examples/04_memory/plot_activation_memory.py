"""
Spending less memory on activations
===================================

The previous page found that activations, the tensors autograd keeps for backward,
are often the largest part of a training step's memory. Two tools cut them. For
inference, ``torch.no_grad()`` and ``torch.inference_mode()`` keep no graph, so each
activation can be freed as soon as the next layer has read it. For training,
activation checkpointing (``torch.utils.checkpoint``) keeps only each block's input
and recomputes the rest during backward: memory for time.

This page measures both on the previous page's MLP: a forward pass's peak memory rise
and time in each mode, then what checkpointing saves in a training step and costs.
"""

# %%
# Setup
# -----
# The model, its batch and the memory measurement are those of the previous page:
# on a GPU the rise of the bytes held by tensors, on the CPU the rise of the
# process's RSS (:func:`~gpuguide.chapters.precision.peak_rise` takes the lowest of
# three runs, as glibc's kept memory only adds).
# :func:`~gpuguide.chapters.precision.kept_for_backward` counts what autograd saves,
# once per storage, without the weights and the batch. On a CPU torch runs on one
# thread: the times compare modes, and one thread times them steadily.
import contextlib
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import gpuguide
from gpuguide import compare, interleave, plot_bars, report
from gpuguide.chapters import precision

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
width, depth = (1024, 8) if page.cuda and not page.small else (64, 4)
batch = precision.mlp_batch(width, depth, device=device)
model = precision.mlp(width, depth).to(device)  # the previous page's MLP
x, y = (torch.randn(batch, width, device=device) for _ in range(2))
dims = f"{depth}x{width}, batch {batch}"  # shown with the recorded figures
print(f"{depth} blocks, width {width}, batch {batch}")


# %%
# Inference: grad mode, ``no_grad`` and ``inference_mode``
# --------------------------------------------------------
# The same forward pass three ways, taking turns. With gradients enabled (the
# default), every block's saved tensors stay alive as long as the output does, even
# if backward never comes. Under ``no_grad`` nothing is saved: a block's output is
# freed once the next block has read it, so the peak holds a few of the widest
# (``4 width``) activations, not all of them. (On the CPU the RSS also keeps what
# glibc did not hand back.) ``inference_mode`` also skips autograd's version counters
# and view tracking; its tensors cannot enter autograd.
def run(mode):
    with mode():
        return model(x)


modes = {"grad enabled": contextlib.nullcontext, "no_grad": torch.no_grad}
modes["inference_mode"] = torch.inference_mode
forwards = {name: partial(run, mode) for name, mode in modes.items()}
times = interleave(forwards, device=device, rep_ms=200 if page.cuda else 1000)
memory = {
    name: precision.peak_rise(forward, device) for name, forward in forwards.items()
}
for mode, rise in memory.items():
    report("forward peak rise", rise, unit="B", size=dims, mode=mode)
graphless = memory["no_grad"] / max(memory["grad enabled"], 1)
speed = compare(times["inference_mode"], times["grad enabled"])
wide = 4 * batch * width * 4  # bytes of one block's widest activation (fp32)
gpuguide.claim(  # on a CPU the RSS rise also holds what glibc kept: it varies
    "on a GPU, without a graph (no_grad) the forward pass's peak rise is at most a "
    "quarter of the rise with grad enabled, and at most three widest activations",
    holds=graphless <= 0.25 and memory["no_grad"] <= 3 * wide,
    measured=f"{graphless:.2f} of it, {memory['no_grad'] / wide:.1f} activations",
    on="cuda",
)
report("inference_mode against grad enabled", speed, size=dims)
fig, ax = plt.subplots()
title = f"Without a graph, {1 - graphless:.0%} less"
plot_bars(ax, precision.mib(memory), ylabel="peak memory rise (MiB)", title=title)
plt.show()

# %%
# Training: activation checkpointing
# ----------------------------------
# ``checkpoint(block, h, use_reentrant=False)`` keeps only the block's input and runs
# the block again during backward to get its inner tensors back (the older reentrant
# variant, PyTorch's warned-about default, gives a block's weights no gradient when
# none of its inputs requires grad). Expect the saved tensors to shrink to about a
# ninth (block inputs only, of 9 floats a sample per block); the peak falls less,
# because backward still rebuilds one block's activations at a time.
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)


def checkpointed_forward(h):
    for block in model:
        h = checkpoint(block, h, use_reentrant=False)
    return h


def loss(net):
    return nn.functional.mse_loss(net(x), y)


def train_step(net):
    optimizer.zero_grad(set_to_none=False)  # gradients stay allocated between steps
    loss(net).backward()
    optimizer.step()


variants = {"plain": model, "checkpointed": checkpointed_forward}
steps = {name: partial(train_step, net) for name, net in variants.items()}
# A CPU's steps vary more: more of them.
step_time = interleave(steps, device=device, rep_ms=400 if page.cuda else 2000)
resident = (*model.parameters(), x, y)  # held anyway: not what autograd keeps
kept, peak = {}, {}
for name, net in variants.items():
    kept[name] = precision.kept_for_backward(partial(loss, net), resident=resident)
    peak[name] = precision.peak_rise(lambda net=net: loss(net).backward(), device)
    report("backward peak rise", peak[name], unit="B", size=dims, variant=name)
    report("step time", step_time[name], size=dims, variant=name)

# %%
# Memory saved against time added
# -------------------------------
# Checkpointing stops recomputing a block once it has rebuilt what backward needs,
# the second ``Linear``'s input: forward hooks count the layers run again. So where
# the matmuls dominate (a large model on a GPU) expect about half a forward pass
# more, and less than a whole one; where per-call overheads weigh (a small model, a
# CPU), checkpointing's bookkeeping adds to that.
again, linears = precision.rerun_in_backward(model, partial(loss, checkpointed_forward))
gpuguide.claim(
    "checkpointed backward runs half of the Linear layers again (each block's first)",
    holds=again == linears // 2,
    measured=f"{again} of {linears}",
)
share = 1 - peak["checkpointed"] / max(peak["plain"], 1)
kept_share = 1 - kept["checkpointed"] / max(kept["plain"], 1)
gpuguide.claim(
    "checkpointing keeps about a ninth of what autograd keeps without it (at most "
    "1/8), and lowers the backward peak by less than it cuts what is kept",
    holds=kept_share >= 7 / 8 and share < kept_share,
    measured=f"peak {share:.0%} lower, kept {kept_share:.0%} less",
    unless="small sizes: RSS moves by whole pages and arenas" if page.small else None,
)
cost = compare(step_time["plain"], step_time["checkpointed"])
report("checkpointing's cost", cost, size=dims)
step_passes = step_time["plain"].median_s / times["grad enabled"].median_s
extra = [(ratio - 1) * step_passes for ratio in (cost.speedup, cost.low, cost.high)]
gpuguide.claim(  # a CPU shared with other work times these steps too unsteadily
    "on a GPU, checkpointing makes a step slower, by under one forward pass",
    holds=cost.verdict == "faster" and max(extra) < 1.0,
    measured=f"{cost.short}, up to {max(extra):.2f} forward passes more",
    on="cuda",
    timed=True,
)
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
title = f"{kept_share:.0%} less kept"
plot_bars(left, precision.mib(kept), ylabel="kept for backward (MiB)", title=title)
title = f"{share:.0%} lower peak; plain/checkpointed time {cost.short}"
plot_bars(right, precision.mib(peak), ylabel="peak memory rise (MiB)", title=title)
plt.show()

# %%
# What to take away
# -----------------
# Inference needs no graph; checkpointing trades memory for time, keeping each
# block's input and running half the layers again in backward.
gpuguide.takeaway()
