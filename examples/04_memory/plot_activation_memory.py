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
# The model, its size and the memory measurement are those of the previous page
# (:func:`gpuguide.track_memory`): on a GPU the rise of the bytes held by tensors; on
# the CPU the rise of the process's RSS, after ``malloc_trim(0)`` has handed back what
# glibc kept from earlier frees (what it still keeps only adds, so
# :func:`~gpuguide.chapters.precision.peak_rise` takes the lowest of three runs).
# :func:`~gpuguide.chapters.precision.kept_for_backward` counts what autograd saves
# as the previous page did, once per storage, without the weights and the batch.
# On a CPU torch runs on one thread: the times compare modes, and two threads on a
# two-core machine stall whenever any other work runs.
import contextlib
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import gpuguide
from gpuguide import compare, format_bytes, interleave, plot_bars, record, report, table
from gpuguide.chapters.precision import kept_for_backward, mib, peak_rise

if not torch.cuda.is_available():  # a relative lesson: one thread times it steadily
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
width, depth = (1024, 8) if page.cuda and not page.small else (64, 4)
params = depth * (8 * width * width + 5 * width)
batch = gpuguide.largest_size(
    64, 2**16, call_s=0.05,
    memory_at=lambda b: 4 * (4 * params + 9 * b * width * depth),  # bytes, fp32
    flop_at=lambda b: 6 * params * b,  # a training step
    peaks=page.peaks if page.cuda else None,  # None: low fallback rates on a CPU
)  # fmt: skip
blocks = [
    nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
    for _ in range(depth)
]
model = nn.Sequential(*blocks).to(device)
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
# (``4 width``) activations, not all of them; the page counts how many. (On the CPU
# the rise is the process's RSS, which also keeps what glibc did not hand back, so it
# counts more, by a different amount from run to run.) ``inference_mode`` also skips
# autograd's version counters and view tracking; its tensors cannot enter autograd.
def run(mode):
    with mode():
        return model(x)


forwards = {
    "grad enabled": partial(run, contextlib.nullcontext),
    "no_grad": partial(run, torch.no_grad),
    "inference_mode": partial(run, torch.inference_mode),
}
times = interleave(forwards, device=device, rep_ms=200 if page.cuda else 1000)
memory = {name: peak_rise(forward, device) for name, forward in forwards.items()}
print(table({"mode": k, "peak rise": format_bytes(memory[k]), "time": t}
            for k, t in times.items()))  # fmt: skip
for mode in ("grad enabled", "no_grad"):
    record("forward peak rise", memory[mode], unit="B", size=dims, mode=mode)
saving = 1 - memory["no_grad"] / max(memory["grad enabled"], 1)
speed = compare(times["inference_mode"], times["grad enabled"])
print(f"no_grad's peak is {saving:.0%} lower than with grad enabled; time: {speed}")
wide = 4 * batch * width * 4  # bytes of one block's widest activation (fp32)
print(f"no_grad's peak rise: {memory['no_grad'] / wide:.1f} widest activations")
gpuguide.claim(  # on a CPU the RSS rise also holds what glibc kept: it varies
    "on a GPU, without a graph (no_grad) the forward pass's peak rise is at most a "
    "quarter of the rise with grad enabled",
    memory["no_grad"] / max(memory["grad enabled"], 1),
    at_most=0.25,
    on="cuda",
)
gpuguide.claim(
    "on a GPU, no_grad's peak rise is at most three of the widest activations",
    memory["no_grad"] / wide,
    at_most=3,
    on="cuda",
)
fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
plot_bars(left, mib(memory), ylabel="peak memory rise (MiB)",
          title=f"Without a graph, {saving:.0%} less")  # fmt: skip
plot_bars(right, times, ylabel="forward time (ms)",
          title=f"inference_mode against grad:\n{speed.short}")  # fmt: skip
plt.show()

# %%
# Training: activation checkpointing
# ----------------------------------
# ``checkpoint(block, h, use_reentrant=False)`` keeps only the block's input and runs
# the block again during backward to get its inner tensors back. Without
# ``use_reentrant=False`` PyTorch warns and falls back to the older reentrant variant,
# which among other limits gives a block's weights no gradient when none of its inputs
# requires grad (the first block here). Expect the saved tensors to shrink to about a
# ninth (block inputs only, of 9 floats a sample per block); the peak falls less,
# because backward still rebuilds one block's activations at a time next to the
# gradients flowing back.
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
loss_fn = nn.MSELoss()


def checkpointed_forward(h):
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False)
    return h


def train_step(net):
    optimizer.zero_grad(set_to_none=False)  # gradients stay allocated between steps
    loss_fn(net(x), y).backward()
    optimizer.step()


train_step(model)  # creates the gradients and Adam's state
variants = {"plain": model, "checkpointed": checkpointed_forward}
step_time = interleave(
    {name: partial(train_step, net) for name, net in variants.items()},
    device=device,
    rep_ms=400 if page.cuda else 2000,  # a CPU's steps vary more: more of them
)
kept, peak = {}, {}
resident = (*model.parameters(), x, y)  # held anyway: not what autograd keeps
for name, net in variants.items():
    kept[name] = kept_for_backward(
        lambda net=net: loss_fn(net(x), y), resident=resident
    )
    peak[name] = peak_rise(lambda net=net: loss_fn(net(x), y).backward(), device)
    report("backward peak rise", peak[name], unit="B", size=dims, variant=name)
    report("step time", step_time[name], size=dims, variant=name)

# %%
# Memory saved against time added
# -------------------------------
# What autograd keeps (counted exactly, as on the previous page), the peak, and the
# time, also in forward passes (grad enabled, timed above): the layers run again plus
# checkpointing's own work per block. It stops recomputing a block once it has rebuilt
# what backward needs, the second ``Linear``'s input, not its output: forward hooks
# count the layers run again: half of them, so where the matmuls dominate (a large
# model on a GPU) expect about half a forward pass more, and less than a whole one.
# Where per-call overheads weigh (a small model, a CPU), checkpointing's bookkeeping
# adds to that; the line below says how much it added here.
linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
calls = []
hooks = [m.register_forward_hook(lambda m, *_: calls.append(m)) for m in linears]
loss = loss_fn(checkpointed_forward(x), y)
forward = len(calls)
loss.backward()
for hook in hooks:
    hook.remove()
again = len(calls) - forward
print(f"backward ran {again} of {len(linears)} Linear layers again")
gpuguide.claim(
    "checkpointed backward runs half of the Linear layers again (each block's first)",
    holds=again == len(linears) // 2,
    measured=f"{again} of {len(linears)}",
)
saved = peak["plain"] - peak["checkpointed"]
share = saved / max(peak["plain"], 1)
kept_share = 1 - kept["checkpointed"] / max(kept["plain"], 1)
print(
    f"checkpointing keeps {kept_share:.0%} less ({format_bytes(kept['checkpointed'])} "
    f"against {format_bytes(kept['plain'])}) and lowers the peak rise by "
    f"{format_bytes(saved)} ({share:.0%})"
)
gpuguide.claim(
    "checkpointing keeps about a ninth of what autograd keeps without it (at most 1/8)",
    kept["checkpointed"] / max(kept["plain"], 1),
    at_most=1 / 8,
)
gpuguide.claim(
    "checkpointing lowers the backward peak by less than it cuts what is kept",
    holds=share < kept_share,
    measured=f"peak {share:.0%} lower, kept {kept_share:.0%} less",
    unless="small sizes: RSS moves by whole pages and arenas" if page.small else None,
)
cost = compare(step_time["plain"], step_time["checkpointed"])
report("checkpointing's cost", cost, size=dims)
gpuguide.claim(  # a CPU shared with other work times these steps too unsteadily
    "on a GPU, checkpointing makes a training step slower",
    cost,
    verdict="faster",
    on="cuda",
)
step_passes = step_time["plain"].median_s / times["grad enabled"].median_s
extra = [(ratio - 1) * step_passes for ratio in (cost.speedup, cost.low, cost.high)]
print(
    f"in forward passes: a plain step takes {step_passes:.2f}, checkpointing adds "
    f"{extra[0]:.2f} ({extra[1]:.2f} to {extra[2]:.2f})"
)
gpuguide.claim(
    "on a GPU, checkpointing adds less than one forward pass to a training step",
    extra[0],
    spread=(min(extra), max(extra)),
    at_most=1.0,
    on="cuda",
)
fig, (left, middle, right) = plt.subplots(1, 3, figsize=(11, 4))
plot_bars(left, mib(kept), ylabel="kept for backward (MiB)",
          title=f"{kept_share:.0%} less kept")  # fmt: skip
plot_bars(middle, mib(peak), ylabel="peak memory rise (MiB)",
          title=f"{share:.0%} lower peak")  # fmt: skip
plot_bars(right, step_time, ylabel="step time (ms)",
          title=f"plain against checkpointed:\n{cost.short}")  # fmt: skip
plt.show()

# %%
# What to take away
# -----------------
# Inference needs no graph: ``no_grad`` or ``inference_mode`` keep only what the next
# layer reads. Checkpointing trades memory for time: it keeps each block's input and
# runs half the layers again in backward. This page's claims, and where they held:
gpuguide.takeaway()
