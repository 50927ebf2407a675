"""
Three common training-loop bugs
===============================

Some training-loop mistakes crash at once, others quietly cost memory or
correctness. This page makes three happen, measures them and fixes each: operands
on different devices (an error), losses kept with their autograd graphs (memory
that grows every step), and gradients never zeroed (no convergence).
"""

# %%
# Setup
# -----
import weakref
from collections import namedtuple

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

import gpuguide

page = gpuguide.setup()
device, small = page.device, page.small
fmt = gpuguide.format_bytes

# %%
# Pitfall 1: operands on different devices
# ----------------------------------------
# ``.to(device)`` moves a module's parameters, but a tensor created later lands on
# the CPU unless given ``device=``, and the first operation that mixes devices
# raises a ``RuntimeError``: PyTorch never copies between them silently.
model = nn.Linear(64, 8).to(device)
x = torch.randn(16, 64)  # no device=: this is a CPU tensor
if device.type == "cpu" and not page.needs_cuda("A real CPU/GPU mismatch"):
    print("Here a 'meta' tensor (shape and dtype, no data) plays the other device.")
    x = torch.randn(16, 64, device="meta")
try:
    model(x)
except RuntimeError as err:
    print(f"RuntimeError: {err}")

# A close relative on every device: NumPy arrays are float64 by default and
# ``torch.from_numpy`` keeps their dtype, while the model's weights are float32.
x_np = torch.from_numpy(np.random.default_rng(0).standard_normal((16, 64)))
try:
    model(x_np.to(device))
except RuntimeError as err:
    print(f"RuntimeError: {err}")

# %%
# The fix: take device and dtype from the model, once
# ---------------------------------------------------
# Create inputs on the right device from the start, and convert anything that comes
# from outside (NumPy, a data loader) with a single ``.to(device=..., dtype=...)``.
weight = next(model.parameters())
fixed = model(x_np.to(device=weight.device, dtype=weight.dtype))
print(f"fixed: input moved to {weight.device} as {weight.dtype}, output {fixed.shape}")

# %%
# Pitfall 2: keeping losses, and what they hold
# ---------------------------------------------
# A loss holds a reference to the autograd graph that produced it, and the graph
# holds the activations saved for the backward pass. Appending ``loss`` to a list
# keeps all of that alive: in an evaluation loop (no ``backward``) a whole step's
# activations per kept loss; in a training loop, where ``backward()`` freed them,
# only the graph's small bookkeeping.
#
# The usual advice is ``loss.detach()``: a tensor without the graph. But it shares
# its storage, and a 0-dim loss can sit on a large one: ``mse_loss`` allocates its
# output with the shape of its input, then shrinks it in place to the 0-dim result,
# keeping the storage, as large as the model's output. What holds nothing is
# ``loss.detach().clone()`` (its own storage, on the device, without waiting) or
# ``loss.item()`` (a number, which waits for the device: see the next page); in
# evaluation, also wrap the loop in ``torch.no_grad()``, which builds no graph.
batch = (4096 if device.type == "cpu" else 65536) // (8 if small else 1)
steps = 8 if small else 16
net = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.ReLU())])
net = net.to(device)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
xb, yb = (torch.randn(batch, 64, device=device) for _ in range(2))
own = {t.untyped_storage().data_ptr() for t in (xb, yb, *net.parameters())}
loss = nn.functional.mse_loss(net(xb), yb)
loss.backward()  # the first backward allocates the gradients
optimizer.step()
print(
    f"the loss has shape {tuple(loss.shape)}, one float32; its storage holds "
    f"{fmt(loss.untyped_storage().nbytes())}, as much as the model's output "
    f"({fmt(4 * batch * 64)}); loss.detach().clone() holds "
    f"{fmt(loss.detach().clone().untyped_storage().nbytes())}"
)


# %%
# Each variant runs ``steps`` steps and is measured after every step, twice: with
# :func:`gpuguide.track_memory`, and exactly on any device by adding up the storages
# of the kept values and of the saved activations still alive, which
# ``saved_tensors_hooks`` lets us see.
def storages(tensors):
    """Bytes of the distinct storages of ``tensors``, without the resident ones."""
    found = (t.untyped_storage() for t in tensors if isinstance(t, torch.Tensor))
    return {s.data_ptr(): s.nbytes() for s in found if s.data_ptr() not in own}


def held_after_each_step(keep, train):
    """MiB held after each step: tracked, and exactly (kept values + activations)."""
    kept, saved, held, exact, start = [], [], [], [], None

    def pack(t):  # sees every tensor saved for backward
        t = t.detach()  # no grad_fn, so the graph and t form no reference cycle
        saved.append(weakref.ref(t))
        return t

    hooks = torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)
    for _ in range(steps):
        with gpuguide.track_memory(device) as tracker, hooks:
            loss = nn.functional.mse_loss(net(xb), yb)
            if train:
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            kept.append(keep(loss))
        start = tracker.report.start_bytes if start is None else start
        activations = storages(ref() for ref in saved)
        values = storages(kept)
        held.append((tracker.report.end_bytes - start) / 2**20)
        exact.append(sum({**activations, **values}.values()) / 2**20)
    return held, exact, sum(values.values()), sum(activations.values())


def per_step(label, series):
    """MiB more held after each step, on average over the loop."""
    return (series[label][-1] - series[label][0]) / (steps - 1)


variants, exact, split = {}, {}, {}
for label, keep, train in [  # the variant that holds the most memory runs last
    ("train: append(loss.item())", torch.Tensor.item, True),
    ("train: append(loss.detach().clone())", lambda t: t.detach().clone(), True),
    ("train: append(loss.detach())", torch.Tensor.detach, True),
    ("train: append(loss)", lambda t: t, True),
    ("eval: append(loss.detach().clone())", lambda t: t.detach().clone(), False),
    ("eval: append(loss)", lambda t: t, False),
]:
    variants[label], exact[label], *split[label] = held_after_each_step(keep, train)
print(f"batch {batch} x 64 features, {steps} steps")
Held = namedtuple("Held", "variant tracked_per_step kept_values activations_alive")
rows = [
    Held(label, f"{per_step(label, variants):+.2f} MiB", *map(fmt, split[label]))
    for label in variants
]
title = f"after {steps} steps: memory tracked per step; held exactly at the end"
print(gpuguide.table(rows, title=title))
drift = variants["train: append(loss.detach().clone())"][-1]
if device.type == "cpu" and drift > 1:
    print(
        f"The fixed training loop holds nothing, yet resident memory grew "
        f"{drift:.1f} MiB: the C allocator keeps blocks that tensors freed. On a CPU, "
        "trust the exact count."
    )

# %%
# Plot: memory after each step
# ----------------------------
# Expect the evaluation loop that keeps ``loss`` to climb by one step's activations
# (and one output-sized storage) per step, the loops that keep ``loss.detach()`` or
# a training ``loss`` by one output-sized storage per step, and those that keep a
# clone or a number to stay flat. Left, what :func:`gpuguide.track_memory` sees: on
# CUDA the allocator's exact count; on a CPU the process's resident memory, with
# what the C allocator keeps after tensors are freed (noise of several MiB). Right,
# the exact count. (In the evaluation loops ``loss`` also keeps the last graph.)
fig, (ax, ax_exact) = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
steps_axis = list(range(1, steps + 1))
linear = {"xlabel": "step (count)", "logx": False, "logy": False}
growth = per_step("eval: append(loss)", variants)  # MiB per step, tracked
detached = per_step("train: append(loss.detach())", exact)  # MiB per step, exact
gpuguide.report("eval loop keeping losses", growth * 2**20, unit="B", size=batch)
gpuguide.report("kept loss.detach()", detached * 2**20, unit="B", size=batch)
method = gpuguide.track_memory(device).method
clone = per_step("train: append(loss.detach().clone())", exact)
for where, series, ylabel, title in [
    (ax, variants, "memory held since the loop began (MiB)",
     f"Tracked ({method}): eval loop keeping losses +{growth:.1f} MiB/step"),
    (ax_exact, exact, "held by kept values and live activations (MiB)",
     f"Exact: a kept loss.detach() holds {detached:.1f} MiB, a clone {clone:.1f}"),
]:  # fmt: skip
    gpuguide.plot_sweep(where, steps_axis, series, ylabel=ylabel, title=title, **linear)
ax_exact.get_legend().remove()
plt.show()

# %%
# Pitfall 3: gradients that are never zeroed
# ------------------------------------------
# ``backward()`` *adds* to ``.grad``: called ``k`` times on the same batch without
# zeroing, the gradient is ``k`` times that of one batch. (Gradient accumulation
# uses exactly this, on purpose, and zeroes after the optimizer step.)
true_w = torch.randn(16, 1, device=device)
model = nn.Linear(16, 1).to(device)
x = torch.randn(64, 16, device=device)
norms = []
for _ in range(4):
    nn.functional.mse_loss(model(x), x @ true_w).backward()
    norms.append(model.weight.grad.norm().item())
for k, norm in enumerate(norms, start=1):
    print(f"after {k} backward calls: |grad| = {norm:.4g} ({norm / norms[0]:.2f}x)")

# %%
# The cost: a run that does not converge
# --------------------------------------
# Two runs of plain SGD on a linear regression, from the same weights on the same
# batches, differ only by ``optimizer.zero_grad(set_to_none=True)`` at each step.
# Without it every update uses the sum of all gradients so far, which overshoots.
start_weights = nn.Linear(16, 1).to(device).state_dict()
Run = namedtuple("Run", "run grad_norm_every_8_steps loss_after_40_steps")
curves, rows = {}, []
for label, zero in [("zero_grad each step", True), ("never zeroed", False)]:
    model = nn.Linear(16, 1).to(device)
    model.load_state_dict(start_weights)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator(device).manual_seed(1)
    losses, norms = torch.zeros(40, device=device), torch.zeros(40, device=device)
    for i in range(40):
        x = torch.randn(64, 16, device=device, generator=generator)
        if zero:
            optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), x @ true_w)
        loss.backward()
        norms[i] = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
        optimizer.step()
        losses[i] = loss.detach()
    curves[label] = losses.tolist()
    picks = ", ".join(f"{n:.3g}" for n in norms.tolist()[::8])
    rows.append(Run(label, picks, f"{curves[label][-1]:.3g}"))
print(gpuguide.table(rows))

fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    list(range(1, 41)),
    curves,
    xlabel="step (count)",
    ylabel="training loss (squared units)",
    title=f"Loss after 40 steps: {curves['zero_grad each step'][-1]:.2g} with "
    f"zero_grad, {curves['never zeroed'][-1]:.2g} without",
    logx=False,
)
plt.show()
