"""
Spending less memory on activations
===================================

The previous page found that activations, the tensors autograd keeps for backward,
are often the largest part of a training step's memory. Two tools cut them. For
inference, ``torch.no_grad()`` and ``torch.inference_mode()`` keep no graph, so each
activation can be freed as soon as the next layer has read it. For training,
activation checkpointing (``torch.utils.checkpoint``) keeps only each block's input
and recomputes the rest during backward: memory for time.

This page measures both on the same MLP as the previous page: the peak memory rise of
a forward pass in each mode and its time, then a training step with and without
checkpointing, and prints what checkpointing saved against what it cost.
"""

# %%
# Setup
# -----
# The model, its size and the memory measurement are those of the previous page: on
# the CPU the rise is read from the process's RSS after ``malloc_trim(0)`` has handed
# back what glibc kept from earlier frees.
import contextlib
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import gpuguide

page = gpuguide.setup()
device = page.device
fmt = gpuguide.format_bytes


def mib(sizes):
    return {name: size / 2**20 for name, size in sizes.items()}


def peak_rise(fn, repeats=3):
    """Lowest rise of memory over ``repeats`` runs of ``fn()`` (what glibc keeps
    from frees inside a run only adds to RSS), and how it was measured."""
    reports = []
    for _ in range(repeats):
        gpuguide.release_host_memory()
        with gpuguide.track_memory(device) as tracked:
            fn()
        reports.append(tracked.report)
    return min(r.peak_increase_bytes for r in reports), reports[0].note


def kept_for_backward(fn):
    """Bytes of the tensors autograd saves while ``fn()`` runs, once per storage,
    without the weights and the batch (resident anyway)."""
    resident = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x, y)}
    saved = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in resident:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(saved.values())


width, depth = (1024, 8) if page.cuda and not page.small else (64, 4)
params = depth * (8 * width * width + 5 * width)
batch = gpuguide.largest_size(
    64, 2**16, call_s=0.05,
    memory_at=lambda b: 4 * (4 * params + 9 * b * width * depth),  # bytes, fp32
    flop_at=lambda b: 6 * params * b,  # a training step
    peaks=page.peaks if page.cuda else None,  # None: low fallback rates on a CPU
)  # fmt: skip
wide = 4 * width
blocks = [
    nn.Sequential(nn.Linear(width, wide), nn.GELU(), nn.Linear(wide, width))
    for _ in range(depth)
]
model = nn.Sequential(*blocks).to(device)
x = torch.randn(batch, width, device=device)
y = torch.randn(batch, width, device=device)
dims = f"{depth}x{width}, batch {batch}"  # shown with the recorded figures
print(f"{depth} blocks, width {width}, batch {batch}")

# %%
# Inference: grad mode, ``no_grad`` and ``inference_mode``
# --------------------------------------------------------
# The same forward pass three ways. With gradients enabled (the default), every
# block's saved tensors stay alive as long as the output does, even if backward never
# comes. Under ``no_grad`` nothing is saved, so expect the peak to drop to about two
# layers' worth of activations. ``inference_mode`` also skips autograd's version
# counters and view tracking; its tensors cannot be used in autograd later.
modes = {
    "grad enabled": contextlib.nullcontext,
    "no_grad": torch.no_grad,
    "inference_mode": torch.inference_mode,
}


def run(mode):
    with mode():
        return model(x)


# The three take turns for five rounds, so that a drift of the machine falls on all.
times = gpuguide.interleave(
    {name: partial(run, mode) for name, mode in modes.items()}, device=device
)
memory = {name: peak_rise(partial(run, mode))[0] for name, mode in modes.items()}
rows = [{"mode": k, "peak rise": fmt(memory[k]), "time": t} for k, t in times.items()]
print(gpuguide.table(rows))
for mode in ("grad enabled", "no_grad"):
    gpuguide.record("forward peak rise", memory[mode], unit="B", size=dims, mode=mode)
saving = 1 - memory["no_grad"] / max(memory["grad enabled"], 1)
print(f"no_grad's peak is {saving:.0%} lower than with grad enabled")
speed = gpuguide.compare(times["inference_mode"], times["grad enabled"])
print(f"time: {speed}")
fig, axes = plt.subplots(1, 2, figsize=(9, 4))
panels = [
    ("peak memory rise (MiB)", mib(memory), f"Without a graph, {saving:.0%} less"),
    ("forward time (ms)", times, f"inference_mode against grad:\n{speed.short}"),
]
for ax, (ylabel, values, title) in zip(axes, panels, strict=True):
    gpuguide.plot_bars(ax, values, ylabel=ylabel, title=title)
plt.show()

# %%
# Training: activation checkpointing
# ----------------------------------
# ``checkpoint(block, h, use_reentrant=False)`` runs the block without saving its
# inner tensors, keeps only its input, and runs the block again during backward to
# get them back. Pass ``use_reentrant=False`` explicitly: without it, PyTorch warns and
# falls back to the older reentrant variant, which among other limits gives a block's
# weights no gradient when none of its inputs requires grad (the first block here).
# The same weights and optimizer serve both variants: checkpointing is the only change.
# Expect the saved tensors to shrink to about a ninth (block inputs only); the peak
# falls less, because backward still rebuilds one block's activations at a time next
# to the gradients flowing back. The time it costs is the layers it runs again plus
# its own work per block. It stops recomputing a block once it has rebuilt every
# tensor backward needs: backward needs the second ``Linear``'s input, not its
# output, so that layer is not run again (counted below). Where the matmuls dominate
# (a large model on a GPU), expect about half a forward pass more, a sixth more time
# per step; where per-call overheads weigh (a small model, a CPU), its bookkeeping
# adds to that, and the cost can pass a whole forward pass.
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
step_time = gpuguide.interleave(
    {name: partial(train_step, net) for name, net in variants.items()}, device=device
)
kept, peak = {}, {}
for name, net in variants.items():
    kept[name] = kept_for_backward(lambda net=net: loss_fn(net(x), y))
    peak[name], note = peak_rise(lambda net=net: loss_fn(net(x), y).backward())
rows = [
    {"variant": k, "kept": fmt(kept[k]), "peak rise": fmt(peak[k]), "step time": t}
    for k, t in step_time.items()
]
print(gpuguide.table(rows))
print(f"How the peak was measured: {note}")
for name in variants:  # the table's figures, recorded
    gpuguide.record("backward peak rise", peak[name], unit="B", size=dims, variant=name)
    gpuguide.record("step time", step_time[name], size=dims, variant=name)

# Which layers did the checkpointed step run again? Count the Linear layers' calls.
linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
calls = []
hooks = [m.register_forward_hook(lambda m, *_: calls.append(m)) for m in linears]
loss = loss_fn(checkpointed_forward(x), y)
forward_calls = len(calls)
loss.backward()
for hook in hooks:
    hook.remove()
print(
    f"backward ran {len(calls) - forward_calls} of {len(linears)} Linear layers again"
)

# %%
# Memory saved against time added
# -------------------------------
# Three numbers per variant: the tensors autograd keeps between forward and backward
# (counted exactly, as on the previous page), the measured peak, and the time. The
# last line counts the times in forward passes (with grad enabled, timed above); in
# brackets, the range of the step times' ratio.
saved = peak["plain"] - peak["checkpointed"]
share = saved / max(peak["plain"], 1)
kept_share = 1 - kept["checkpointed"] / max(kept["plain"], 1)
print(
    f"checkpointing keeps {kept_share:.0%} less and lowers the peak rise by {fmt(saved)} ({share:.0%})"
)
cost = gpuguide.compare(step_time["plain"], step_time["checkpointed"])
gpuguide.report("checkpointing's cost", cost, size=dims)
step_passes = step_time["plain"].median_s / times["grad enabled"].median_s
extra = [(ratio - 1) * step_passes for ratio in (cost.speedup, cost.low, cost.high)]
print(
    f"in forward passes: a plain step takes {step_passes:.2f}, checkpointing adds "
    f"{extra[0]:.2f} ({extra[1]:.2f} to {extra[2]:.2f})"
)
fig, axes = plt.subplots(1, 3, figsize=(11, 4))
panels = [
    ("kept for backward (MiB)", mib(kept), f"{kept_share:.0%} less kept"),
    ("peak memory rise (MiB)", mib(peak), f"{share:.0%} lower peak"),
    ("step time (ms)", step_time, f"plain against checkpointed:\n{cost.short}"),
]
for ax, (ylabel, values, title) in zip(axes, panels, strict=True):
    gpuguide.plot_bars(ax, values, ylabel=ylabel, title=title)
plt.show()

# %%
# What to take away
# -----------------
# Wrap inference in ``torch.inference_mode()`` (or ``no_grad`` where the results
# must later enter autograd): the memory of a graph nobody will use is the largest
# waste here. Checkpoint blocks when activations, not weights, are what does not
# fit: it buys a larger batch or a deeper model for the layers it recomputes and its
# own per-block work, a cost to measure on your model as this page did.
