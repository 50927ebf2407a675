"""
Keeping losses: memory that grows every step
============================================

A loss holds a reference to the autograd graph that produced it, and the graph
holds the activations saved for the backward pass. Appending ``loss`` to a list
keeps all of that alive: in an evaluation loop (no ``backward``) a whole step's
activations per kept loss; in a training loop, where ``backward()`` freed them,
only the graph's small bookkeeping. This page runs six loops that keep something
of each loss and measures, after every step, the memory each one holds.
"""

# %%
# Setup
# -----
# A small MLP and one batch. The tensors that live all along (the batch and the
# weights) are left out of the exact counts below.
import math
import weakref

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import format_bytes, plot_sweep, report, table, track_memory

page = gpuguide.setup()
device = page.device
batch = (4096 if device.type == "cpu" else 65536) // (8 if page.small else 1)
steps = 8 if page.small else 16
net = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(64, 64), nn.ReLU())])
net = net.to(device)
optimizer = torch.optim.SGD(net.parameters(), lr=1e-3)
xb, yb = (torch.randn(batch, 64, device=device) for _ in range(2))
own = {t.untyped_storage().data_ptr() for t in (xb, yb, *net.parameters())}

# %%
# A detached loss still holds a large storage
# -------------------------------------------
# The usual advice is ``loss.detach()``: a tensor without the graph. But it shares
# its storage, and a 0-dim loss can sit on a large one: ``mse_loss`` allocates its
# output with the shape of its input, then shrinks it in place to the 0-dim result,
# keeping the storage, as large as the model's output. What holds nothing is
# ``loss.detach().clone()`` (its own storage, on the device, without waiting) or
# ``loss.item()`` (a number, which waits for the device: see the next page); in
# evaluation, also wrap the loop in ``torch.no_grad()``, which builds no graph.
loss = nn.functional.mse_loss(net(xb), yb)
loss.backward()  # the first backward allocates the gradients
optimizer.step()
print(
    f"the loss has shape {tuple(loss.shape)}, one float32; its storage holds "
    f"{format_bytes(loss.untyped_storage().nbytes())}, as much as the model's "
    f"output ({format_bytes(4 * batch * 64)}); loss.detach().clone() holds "
    f"{format_bytes(loss.detach().clone().untyped_storage().nbytes())}"
)


# %%
# Six loops, measured after every step
# ------------------------------------
# Each loop runs ``steps`` steps and is measured after every step, twice: with
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
        with track_memory(device) as tracker, hooks:
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


def per_step(series):
    """MiB more held after each step, on average over the loop."""
    return (series[-1] - series[0]) / (steps - 1)


loops = {  # the loop that holds the most memory runs last
    "train: append(loss.item())": (torch.Tensor.item, True),
    "train: append(loss.detach().clone())": (lambda t: t.detach().clone(), True),
    "train: append(loss.detach())": (torch.Tensor.detach, True),
    "train: append(loss)": (lambda t: t, True),
    "eval: append(loss.detach().clone())": (lambda t: t.detach().clone(), False),
    "eval: append(loss)": (lambda t: t, False),
}
tracked, exact, rows = {}, {}, []
for label, (keep, train) in loops.items():
    tracked[label], exact[label], values, alive = held_after_each_step(keep, train)
    row = {"kept values": format_bytes(values), "activations": format_bytes(alive)}
    rows.append({"loop": label} | row)
print(table(rows, title=f"held after {steps} steps, batch {batch} x 64"))
# The headline figures: what two of the loops add per step, counted exactly.
added = {label: per_step(series) * 2**20 for label, series in exact.items()}
for loop in ("eval: append(loss)", "train: append(loss.detach())"):
    report("memory growth per step", added[loop], unit="B", size=batch, loop=loop)
output = 4 * batch * 64  # bytes of the model's output, and of each loss's storage
one_each = ["train: append(loss.detach())", "train: append(loss)"]
flat = ["train: append(loss.item())", "train: append(loss.detach().clone())"]
gpuguide.claim(
    "a training loop that keeps loss.detach() or loss holds one output-sized "
    f"storage ({format_bytes(output)}) more per step, counted exactly; one that "
    "keeps loss.item() or loss.detach().clone() at most 4 B",
    holds=all(math.isclose(added[label], output) for label in one_each)
    and all(added[label] <= 4 + 1e-6 for label in flat),
    measured=", ".join(format_bytes(added[label]) for label in one_each + flat),
)
activations = alive / steps  # per step, in the last loop: eval, append(loss)
gpuguide.claim(
    "the evaluation loop that keeps loss holds one step's activations and one "
    "output-sized storage more per step",
    holds=math.isclose(added["eval: append(loss)"], activations + output),
    measured=f"{format_bytes(added['eval: append(loss)'])} per step; activations "
    f"{format_bytes(activations)} + output {format_bytes(output)}",
)

# %%
# Plot: memory after each step
# ----------------------------
# Left, what ``track_memory`` sees: on CUDA the allocator's exact count; on a CPU
# the process's resident memory, which also holds what the C allocator keeps after
# tensors are freed (several MiB of noise: there, trust the exact count). Right,
# the exact count. (In the evaluation loops ``loss`` also keeps the last graph.)
fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
growth = per_step(tracked["eval: append(loss)"])
panels = {
    f"Tracked: eval loop keeping losses +{growth:.1f} MiB/step": tracked,
    f"Exact: a kept loss.detach() holds {added[one_each[0]] / 2**20:.1f} MiB": exact,
}
ylabel = "memory held since the loop began (MiB)"
for ax, (title, series) in zip(axes, panels.items(), strict=True):
    kw = {"xlabel": "step (count)", "ylabel": ylabel, "logx": False, "logy": False}
    plot_sweep(ax, list(range(1, steps + 1)), series, title=title, **kw)
axes[1].get_legend().remove()
plt.show()

# %%
# What to take away
# -----------------
# Keep a number (``loss.item()``, once per logging interval) or a clone
# (``loss.detach().clone()``), not the loss nor a detached view of its storage,
# and evaluate under ``torch.no_grad()``.
gpuguide.takeaway()
