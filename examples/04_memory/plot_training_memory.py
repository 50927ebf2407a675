"""
Where a training step's memory goes
===================================

In training each parameter also gets a gradient, Adam keeps two running averages per
parameter, and the forward pass keeps activations alive until backward has used
them. This page counts each part of one training step of a small MLP from its
tensors, and measures the peak rise of memory beside them. On a GPU it also records
a memory snapshot of two training steps, for PyTorch's memory viewer.
"""

# %%
# Setup
# -----
import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import format_bytes, plot_bars, report
from gpuguide.chapters import precision

page = gpuguide.setup()
device = page.device

# %%
# The model and its size
# ----------------------
# ``depth`` blocks of ``Linear(width, 4 width) -> GELU -> Linear(4 width, width)``, the
# feed-forward half of a transformer layer:
#
# .. literalinclude:: /../src/gpuguide/chapters/precision.py
#    :pyobject: mlp
#
# Autograd keeps three tensors per block for backward: the block's input (for the
# first ``Linear``'s weight gradient), the ``4 width`` pre-activation (for GELU's
# derivative) and GELU's output (for the second ``Linear``), about
# ``9 * batch * width`` floats in all. The batch is the largest that fits the
# device's time and memory budget for one step
# (:func:`~gpuguide.chapters.precision.mlp_batch`).
width, depth = (1024, 8) if page.cuda and not page.small else (64, 4)
params = depth * (8 * width * width + 5 * width)
batch = precision.mlp_batch(width, depth, device=device)
model = precision.mlp(width, depth).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
loss_fn = nn.MSELoss()
x, y = (torch.randn(batch, width, device=device) for _ in range(2))
print(f"{depth} blocks, width {width}, batch {batch}: {params:,} parameters")
dims = f"{depth}x{width}, batch {batch}"  # shown with the recorded figures


def train_step():
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()


train_step()  # the first step creates the gradients and Adam's state


# %%
# Count every part from its tensors
# ---------------------------------
# Weights, gradients and Adam's two moments stay allocated between steps, so their
# size is the sum of ``numel() * element_size()``. The activations exist only during
# the step: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor the forward
# pass saves for backward. Counting them once each (by storage), without the
# parameters and the batch that were resident anyway, gives their exact size:
#
# .. literalinclude:: /../src/gpuguide/chapters/precision.py
#    :pyobject: kept_for_backward
def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


parts = {"weights": nbytes(model.parameters())}
parts["gradients"] = nbytes(p.grad for p in model.parameters())
adam = [t for state in optimizer.state.values() for t in state.values() if t.dim()]
parts["Adam state"] = nbytes(adam)
resident = (*model.parameters(), x, y)


def forward():
    return loss_fn(model(x), y)


parts["activations"] = precision.kept_for_backward(forward, resident=resident)
report("saved for backward", parts["activations"], unit="B", size=dims)
gpuguide.claim(
    "autograd saves 9 floats a sample per block (within 1%)",
    parts["activations"] / (4 * 9 * batch * width * depth),  # 9 fp32 floats
    at_least=0.99,
    at_most=1.01,
)

# %%
# The measured peak holds more than the activations
# -------------------------------------------------
# :func:`~gpuguide.chapters.precision.peak_rise` measures how far memory rises above
# what was resident before the forward pass, the lowest of three runs
# (``zero_grad(set_to_none=False)`` keeps the gradient buffers allocated, so that the
# rise does not count them again). Expect the rise to exceed the saved activations:
# at the peak, backward's gradients and temporaries sit on top of them. On the CPU it
# is the process's resident memory (RSS), which also holds what the C allocator
# keeps after frees.
optimizer.zero_grad(set_to_none=False)
rise = precision.peak_rise(lambda: forward().backward(), device)
report("peak rise in forward + backward", rise, unit="B", size=dims)
gpuguide.claim(
    "the peak rise during forward and backward exceeds the saved activations",
    rise / parts["activations"],
    at_least=1.0,
    unless="small sizes: RSS moves by whole pages and arenas" if page.small else None,
)

# %%
# The breakdown
# -------------
# With fp32 weights, weights + gradients + Adam take 16 bytes per parameter before a
# single activation. How large the activations are depends on the batch and the
# architecture, not on the parameter count.
weights = parts["weights"]
state = weights + parts["gradients"] + parts["Adam state"]
report("weights, gradients and Adam", state, unit="B", size=dims)
gpuguide.claim(
    "the gradients take as much as the weights and Adam's state twice as much: "
    "fp32 weights, gradients and Adam take 16 bytes per parameter",
    holds=parts["gradients"] == weights and parts["Adam state"] == 2 * weights,
    measured=f"{parts['gradients'] / weights:g}x and {parts['Adam state'] / weights:g}x"
    f" the weights, {state / params:g} bytes per parameter",
)
title = f"Batch {batch}: activations {parts['activations'] / weights:.1f}x the weights"
fig, ax = plt.subplots()
plot_bars(
    ax, precision.mib(parts), ylabel="memory (MiB)", title=title, baseline="weights"
)
plt.show()

# %%
# A memory snapshot of two training steps
# ---------------------------------------
# ``torch.cuda.memory._record_memory_history`` makes the caching allocator log every
# allocation and free with a Python stack; ``_dump_snapshot`` writes it to a pickle.
# Summing its ``alloc`` and ``free_completed`` events
# (:func:`~gpuguide.chapters.precision.allocated_over_events`) draws the memory held
# by tensors. Open the downloadable file at https://pytorch.org/memory_viz: its
# "Active Memory Timeline" shows every allocation with the Python line that made it.
left = peak_rise = 0
if page.needs_cuda("A memory snapshot of the CUDA caching allocator"):
    path = gpuguide.artifact_path("training_step_memory_snapshot.pickle")
    torch.cuda.synchronize(device)
    start = torch.cuda.memory_allocated(device)
    torch.cuda.memory._record_memory_history(
        max_entries=100_000, stacks="python", clear_history=True
    )
    try:
        for _ in range(2):
            train_step()
        torch.cuda.synchronize(device)
        torch.cuda.memory._dump_snapshot(str(path))
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    allocated = precision.allocated_over_events(path, device, start=start)
    peak_rise, left = max(allocated) - start, allocated[-1] - start
    report("snapshot peak rise", peak_rise, unit="B", size=dims)
    drained = abs(left) < peak_rise / 10
    shape = "Activations pile up and drain each step" if drained else "Two steps"
    fig, ax = plt.subplots()
    ax.plot([b / 2**20 for b in allocated], label="allocated (tensors)")
    title = f"{shape}: {format_bytes(peak_rise)} above the start"
    ax.set(xlabel="allocator event (index)", ylabel="memory (MiB)", title=title)
    gpuguide.label_device(fig, device)
    plt.show()
    link = "memory snapshot (pickle; open it at https://pytorch.org/memory_viz)"
    gpuguide.download_link(path, link)
gpuguide.claim(
    "on a GPU, two training steps end within a tenth of their peak rise of where they "
    "started: the activations are freed",
    holds=page.cuda and abs(left) < peak_rise / 10,
    measured=f"{format_bytes(left)} left, peak rise {format_bytes(peak_rise)}",
    on="cuda",
)

# %%
# What to take away
# -----------------
# Plan for 16 bytes per parameter for fp32 training with Adam, plus activations that
# grow with the batch.
gpuguide.takeaway()
