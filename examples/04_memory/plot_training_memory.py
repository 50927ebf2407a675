"""
Where a training step's memory goes
===================================

A model that fits in memory for inference can still run out of memory in training.
Each parameter also gets a gradient, Adam keeps two running averages per parameter,
and the forward pass keeps activations alive until backward has used them. This page
takes one training step of a small MLP apart: weights, gradients and optimizer state
are counted from their tensors, the activations are measured as the rise of memory
during forward and backward.

On a GPU it also records a memory snapshot of two training steps, draws the memory in
use after every allocator event, and offers the snapshot for download, to explore in
PyTorch's memory viewer.
"""

# %%
# Setup
# -----
# On the CPU the activations are measured from the process's resident memory (RSS):
# before each measurement ``malloc_trim(0)`` asks glibc to hand back the memory it
# kept from earlier frees, so that new tensors show up as new resident pages.
import pickle

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide.chapters.snapshot import memory_timeline, plot_memory_timeline

device = gpuguide.pick_device()
torch.manual_seed(0)
print(gpuguide.provenance(device))
on_gpu = device.type == "cuda"
fmt = gpuguide.format_bytes


# %%
# The model and its size
# ----------------------
# ``depth`` blocks of ``Linear(width, 4 width) -> GELU -> Linear(4 width, width)``, the
# feed-forward half of a transformer layer. Autograd keeps three tensors per block for
# backward: the block's input (for the first ``Linear``'s weight gradient), the
# ``4 width`` pre-activation (for GELU's derivative) and GELU's output (for the second
# ``Linear``), about ``9 * batch * width`` floats in all. The batch is the largest that
# fits the device's time and memory budget for one step (``6 * params * batch`` FLOP).
width, depth = (1024, 8) if on_gpu and not gpuguide.small_mode() else (64, 4)
params = depth * (8 * width * width + 5 * width)
resident = 16 * params  # bytes: fp32 weights, gradients and Adam's two moments
saved_per_row = 4 * 9 * width * depth  # bytes autograd saves per sample (fp32)
batch = gpuguide.largest_size(
    64,
    2**16,
    memory_at=lambda b: resident + saved_per_row * b,
    flop_at=lambda b: 6 * params * b,
    call_s=0.05,
    peaks=gpuguide.device_peaks(device) if on_gpu else None,  # None: low fallback rates
)


def block():
    return nn.Sequential(
        nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
    )


model = nn.Sequential(*(block() for _ in range(depth))).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
loss_fn = nn.MSELoss()
x = torch.randn(batch, width, device=device)
y = torch.randn(batch, width, device=device)
print(f"{depth} blocks, width {width}, batch {batch}: {params:,} parameters")
dims = f"{depth}x{width}, batch {batch}"  # shown with the recorded figures


def train_step():
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()


train_step()  # the first step creates the gradients and Adam's state

# %%
# Count the resident parts, measure the activations
# -------------------------------------------------
# Weights, gradients and Adam's two moments are tensors that stay allocated between
# steps, so their size is the sum of ``numel() * element_size()``. The activations
# exist only during the step: ``gpuguide.track_memory`` measures how far memory rises
# above what was resident before the forward pass. ``zero_grad(set_to_none=False)``
# keeps the gradient buffers allocated, so that the rise does not count them again.


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


parts = {
    "weights": nbytes(model.parameters()),
    "gradients": nbytes(p.grad for p in model.parameters()),
    "Adam state": nbytes(
        t for state in optimizer.state.values() for t in state.values() if t.dim()
    ),
}
optimizer.zero_grad(set_to_none=False)
gpuguide.release_host_memory()
with gpuguide.track_memory(device) as tracked:
    loss_fn(model(x), y).backward()
parts["activations"] = tracked.report.peak_increase_bytes
print(tracked.report)

# %%
# What autograd saved
# -------------------
# ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor the forward pass
# saves for backward. Counting them once each (by storage), without the parameters
# and the batch that were resident anyway, gives the exact size of the activations;
# the measured rise also holds the gradients flowing backward and temporaries.
resident = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x, y)}
saved = {}


def count_saved(t):
    storage = t.untyped_storage()
    if storage.data_ptr() not in resident:
        saved[storage.data_ptr()] = storage.nbytes()
    return t


with torch.autograd.graph.saved_tensors_hooks(count_saved, lambda t: t):
    loss = loss_fn(model(x), y)
del loss
expected = fmt(saved_per_row * batch)  # 9 fp32 numbers per row and block
gpuguide.record("saved for backward", sum(saved.values()), unit="B", size=dims)
gpuguide.record("activations", parts["activations"], unit="B", size=dims)
print(f"saved for backward: {fmt(sum(saved.values()))} (expected {expected})")
print(f"measured rise during forward + backward: {fmt(parts['activations'])}")

# %%
# The breakdown
# -------------
# Expect the gradients to match the weights and Adam's state to be twice the weights:
# with fp32 weights, weights + gradients + Adam take 16 bytes per parameter before a
# single activation. How large the activations are depends on the batch and the
# architecture, not on the parameter count; here they usually dominate.
weights = parts["weights"]
state = weights + parts["gradients"] + parts["Adam state"]
gpuguide.record("weights, gradients and Adam", state, unit="B", size=dims)
rows = [
    {"part": k, "size": fmt(v), "vs weights": f"{v / weights:.2f}x"}
    for k, v in parts.items()
]
print(gpuguide.table(rows))
print(f"How this was measured: {tracked.report.note}")
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {name: size / 2**20 for name, size in parts.items()},
    ylabel="memory (MiB)",
    title=f"Batch {batch}: activations are {parts['activations'] / weights:.1f}x the weights",
    baseline="weights",
)
plt.show()

# %%
# A memory snapshot of two training steps
# ---------------------------------------
# ``torch.cuda.memory._record_memory_history`` makes the caching allocator log every
# allocation and free with a Python stack; ``_dump_snapshot`` writes the log and the
# allocator's state to a pickle. The drawing below adds up the allocation sizes event
# by event: each step climbs through the forward pass as activations pile up, peaks
# around the start of backward, and falls as backward frees them; ``zero_grad`` frees
# the gradients and backward allocates them again. Open the downloadable file at
# https://pytorch.org/memory_viz: its "Active Memory Timeline" shows every allocation
# as a band, with the Python line that made it.
if on_gpu:
    index = device.index if device.index is not None else torch.cuda.current_device()
    path = gpuguide.artifact_path("training_step_memory_snapshot.pickle")
    torch.cuda.synchronize(device)
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
    snapshot = pickle.loads(path.read_bytes())
    timeline = memory_timeline(snapshot, trace=index)
    rise = timeline.peak_allocated_bytes - timeline.allocated_bytes[0]
    peak = fmt(timeline.peak_allocated_bytes)
    gpuguide.record("snapshot peak rise", rise, unit="B", size=dims)
    print(
        f"{timeline.events} allocator events; peak {peak}, {fmt(rise)} above the start"
    )
    fig, ax = plt.subplots()
    plot_memory_timeline(
        ax,
        snapshot,
        title=f"Activations pile up and drain each step: {fmt(rise)} above the start",
        trace=index,
    )
    plt.show()
else:
    print("A memory snapshot logs the CUDA caching allocator's events: it needs a GPU.")
gpuguide.download_link(
    path, "memory snapshot (pickle; open it at https://pytorch.org/memory_viz)"
) if on_gpu else None

# %%
# What to take away
# -----------------
# Plan for 16 bytes per parameter for fp32 training with Adam, plus activations that
# grow with the batch. The next page cuts the activations: no graph at all for
# inference, and checkpointing for training.
