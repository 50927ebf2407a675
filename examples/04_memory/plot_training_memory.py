"""
Where a training step's memory goes
===================================

A model that fits in memory for inference can still run out of memory in training.
Each parameter also gets a gradient, Adam keeps two running averages per parameter,
and the forward pass keeps activations alive until backward has used them. This page
takes one training step of a small MLP apart: weights, gradients, optimizer state and
the activations are counted from their tensors, and the peak rise of memory during
forward and backward is measured beside them.

On a GPU it also records a memory snapshot of two training steps, draws the memory in
use after every allocator event, and offers the snapshot for download, to explore in
PyTorch's memory viewer.
"""

# %%
# Setup
# -----
import itertools
import pickle

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import format_bytes, largest_size, plot_bars, plot_sweep, report, table

page = gpuguide.setup()
device = page.device

# %%
# The model and its size
# ----------------------
# ``depth`` blocks of ``Linear(width, 4 width) -> GELU -> Linear(4 width, width)``, the
# feed-forward half of a transformer layer. Autograd keeps three tensors per block for
# backward: the block's input (for the first ``Linear``'s weight gradient), the
# ``4 width`` pre-activation (for GELU's derivative) and GELU's output (for the second
# ``Linear``), about ``9 * batch * width`` floats in all. The batch is the largest that
# fits the device's time and memory budget for one step (``6 * params * batch`` FLOP).
width, depth = (1024, 8) if page.cuda and not page.small else (64, 4)
params = depth * (8 * width * width + 5 * width)
resident = 16 * params  # bytes: fp32 weights, gradients and Adam's two moments
saved_per_row = 4 * 9 * width * depth  # bytes autograd saves per sample (fp32)
batch = largest_size(
    64, 2**16, call_s=0.05,
    memory_at=lambda b: resident + saved_per_row * b,
    flop_at=lambda b: 6 * params * b,
    peaks=page.peaks if page.cuda else None,  # None: low fallback rates on a CPU
)  # fmt: skip
wide = 4 * width
blocks = (
    nn.Sequential(nn.Linear(width, wide), nn.GELU(), nn.Linear(wide, width))
    for _ in range(depth)
)
model = nn.Sequential(*blocks).to(device)
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
# Count every part from its tensors
# ---------------------------------
# Weights, gradients and Adam's two moments stay allocated between steps, so their
# size is the sum of ``numel() * element_size()``. The activations exist only during
# the step: ``torch.autograd.graph.saved_tensors_hooks`` sees every tensor the forward
# pass saves for backward. Counting them once each (by storage), without the
# parameters and the batch that were resident anyway, gives their exact size.
def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


parts = {
    "weights": nbytes(model.parameters()),
    "gradients": nbytes(p.grad for p in model.parameters()),
    "Adam state": nbytes(
        t for state in optimizer.state.values() for t in state.values() if t.dim()
    ),
}
resident_ptrs = {t.untyped_storage().data_ptr() for t in (*model.parameters(), x, y)}
saved = {}


def count_saved(t):
    storage = t.untyped_storage()
    if storage.data_ptr() not in resident_ptrs:
        saved[storage.data_ptr()] = storage.nbytes()
    return t


with torch.autograd.graph.saved_tensors_hooks(count_saved, lambda t: t):
    loss_fn(model(x), y)  # the graph, and what it saved, is freed at once
parts["activations"] = sum(saved.values())
report("saved for backward", parts["activations"], unit="B", size=dims)
print(f"(expected {format_bytes(saved_per_row * batch)}: 9 floats a sample per block)")
gpuguide.claim(
    "autograd saves 9 floats a sample per block (within 1%)",
    parts["activations"] / (saved_per_row * batch),
    at_least=0.99,
    at_most=1.01,
)

# %%
# The measured peak holds more than the activations
# -------------------------------------------------
# :func:`gpuguide.track_memory` measures how far memory rises above what was resident
# before the forward pass (``zero_grad(set_to_none=False)`` keeps the gradient buffers
# allocated, so that the rise does not count them again). Expect the rise to exceed
# the saved activations: at the peak, backward's gradients and temporaries sit on top
# of them. On a GPU the rise counts bytes held by tensors; on the CPU it is the
# process's resident memory (RSS), which also holds what the C allocator keeps after
# frees, so it is not a count of activations.
optimizer.zero_grad(set_to_none=False)
gpuguide.release_host_memory()  # malloc_trim(0): freed memory leaves RSS first
with gpuguide.track_memory(device) as tracked:
    loss_fn(model(x), y).backward()
rise = tracked.report.peak_increase_bytes
report("peak rise in forward + backward", rise, unit="B", size=dims)
print(f"The rise is {rise / parts['activations']:.2f}x the saved activations.")
gpuguide.claim(
    "the peak rise during forward and backward exceeds the saved activations",
    rise / parts["activations"],
    at_least=1.0,
    unless="small sizes: RSS moves by whole pages and arenas" if page.small else None,
)
print(f"How the rise was measured: {tracked.report.note}")

# %%
# The breakdown
# -------------
# Expect the gradients to match the weights and Adam's state to be twice the weights:
# with fp32 weights, weights + gradients + Adam take 16 bytes per parameter before a
# single activation. How large the activations are depends on the batch and the
# architecture, not on the parameter count.
weights = parts["weights"]
state = weights + parts["gradients"] + parts["Adam state"]
report("weights, gradients and Adam", state, unit="B", size=dims)
print(table({"part": k, "size": format_bytes(v), "vs weights": f"{v / weights:.2f}x"}
            for k, v in parts.items()))  # fmt: skip
gpuguide.claim(
    "the gradients take as much as the weights and Adam's state twice as much",
    holds=parts["gradients"] == weights and parts["Adam state"] == 2 * weights,
    measured=f"{parts['gradients'] / weights:g}x and {parts['Adam state'] / weights:g}x",
)
gpuguide.claim(
    "fp32 weights, gradients and Adam take 16 bytes per parameter",
    holds=state == 16 * params,
    measured=f"{state / params:g} bytes per parameter",
)
fig, ax = plt.subplots()
plot_bars(
    ax, {name: size / 2**20 for name, size in parts.items()}, ylabel="memory (MiB)",
    title=f"Batch {batch}: activations are {parts['activations'] / weights:.1f}x the weights",
    baseline="weights",
)  # fmt: skip
plt.show()

# %%
# A memory snapshot of two training steps
# ---------------------------------------
# ``torch.cuda.memory._record_memory_history`` makes the caching allocator log every
# allocation and free with a Python stack; ``_dump_snapshot`` writes the log and the
# allocator's state to a pickle. Each ``alloc`` event in the log adds its size to the
# memory held by tensors and each ``free_completed`` removes it, so a running sum from
# ``memory_allocated()`` read before recording draws that memory over the steps. Expect
# each step to climb through the forward pass as activations pile up, peak around the
# start of backward, and fall back as backward frees them. Open the downloadable file at
# https://pytorch.org/memory_viz: its "Active Memory Timeline" shows every allocation
# as a band, with the Python line that made it.
if page.needs_cuda("A memory snapshot of the CUDA caching allocator"):
    index = device.index if device.index is not None else torch.cuda.current_device()
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
    events = pickle.loads(path.read_bytes())["device_traces"][index]
    sign = {"alloc": 1, "free_completed": -1}
    steps = [sign.get(e["action"], 0) * e["size"] for e in events]
    allocated = list(itertools.accumulate(steps, initial=start))
    peak_rise = max(allocated) - start
    print(f"{len(events)} allocator events; peak {format_bytes(max(allocated))}")
    report("snapshot peak rise", peak_rise, unit="B", size=dims)
    left = allocated[-1] - start
    drained = abs(left) < peak_rise / 10
    print(f"after two steps, {format_bytes(left)} more than at the start")
    shape = "Activations pile up and drain each step" if drained else "Two steps"
    fig, ax = plt.subplots()
    plot_sweep(
        ax, range(len(allocated)), {"allocated (tensors)": [b / 2**20 for b in allocated]},
        xlabel="allocator event (index)", ylabel="memory (MiB)", logx=False, logy=False,
        title=f"{shape}: {format_bytes(peak_rise)} above the start",
    )  # fmt: skip
    plt.show()
gpuguide.claim(
    "on a GPU, two training steps end within a tenth of their peak rise of where they "
    "started: the activations are freed",
    holds=page.cuda and drained,
    measured=f"{format_bytes(left)} left, peak rise {format_bytes(peak_rise)}"
    if page.cuda
    else "-",
    on="cuda",
)
gpuguide.download_link(
    path, "memory snapshot (pickle; open it at https://pytorch.org/memory_viz)"
) if page.cuda else None

# %%
# What to take away
# -----------------
# Plan for 16 bytes per parameter for fp32 training with Adam, plus activations that
# grow with the batch. The next page cuts the activations: no graph at all for
# inference, and checkpointing for training. This page's claims, and where they held:
gpuguide.takeaway()
