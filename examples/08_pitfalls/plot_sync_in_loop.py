"""
Reading values back every step
==============================

A GPU runs work from a queue: each PyTorch call on a CUDA tensor queues a kernel
and returns, so the Python loop can run ahead of the GPU and keep the queue full.
Anything that needs a *value* on the host (``loss.item()``, ``.cpu()``,
``.tolist()``, ``print(tensor)``, ``if tensor > 0:``) makes the host wait until the
queue has drained: a synchronization. Once per step, it costs the overlap between
the host preparing step ``n + 1`` and the GPU running step ``n``.

This page times the same training loop three ways, changing only how often the
loss is read back: every step, every tenth step, or once at the end. On a GPU it
also lists the operations in a step that synchronize, as PyTorch reports them.
"""

# %%
# Setup
# -----
# A small MLP regression, with the batch and targets created once, outside the
# timed loops. The width is planned so that one step's device time is short (a
# fraction of a millisecond on a GPU), where the host's work per step is of the
# same order as the device's and the overlap matters most.
import warnings

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
steps = 10 if gpuguide.small_mode() else 50
batch = 256
# A GPU plans with its datasheet peak; elsewhere the helpers' fixed, modest
# fallback rate (None) keeps the plan independent of the machine's current load.
width = gpuguide.largest_size(
    16,
    4096,
    memory_at=lambda w: 4 * (12 * w * w + 8 * batch * w),
    flop_at=lambda w: 18 * batch * w * w,
    call_s=5e-4 if device.type == "cpu" else 2e-4,
    peaks=gpuguide.device_peaks(device) if device.type == "cuda" else None,
    multiple_of=16,
)
print(f"MLP: 3 layers of width {width}, batch {batch}, {steps} steps per loop")

torch.manual_seed(0)
model = nn.Sequential(
    nn.Linear(width, width),
    nn.ReLU(),
    nn.Linear(width, width),
    nn.ReLU(),
    nn.Linear(width, width),
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, width, device=device)
y = torch.randn(batch, width, device=device)


def train_step():
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


# %%
# One loop, three reading frequencies
# -----------------------------------
# The loss is summed on the device with ``running += loss.detach()``, which only
# queues an addition. ``running.item()`` copies the sum to the host and waits for
# everything queued before it. The three variants differ only in ``read_every``,
# and all of them read the total at the end. They take turns for a few rounds and
# each one's times are pooled, so that a machine whose speed drifts during the run
# does not favour whichever went first.


def train_loop(read_every):
    running, logged = torch.zeros((), device=device), None
    for i in range(1, steps + 1):
        running += train_step().detach()
        if i % read_every == 0:
            logged = running.item()  # a synchronization on a GPU
    return logged


variants = {"once at the end": steps, "every 10 steps": 10, "every step": 1}
pooled = {label: [] for label in variants}
for _ in range(3):
    for label, k in variants.items():
        m = gpuguide.benchmark(train_loop, args=(k,), device=device)
        pooled[label] += m.times_s
loops = {
    label: gpuguide.Measurement(f".item() {label}", times, m.device, m.method)
    for label, times in pooled.items()
}
base = loops["once at the end"]
rows = [
    {
        ".item()": label,
        "per step": gpuguide.format_time(m.median_s / steps),
        f"loop of {steps} steps": m,
        "vs read once": gpuguide.format_ratio(m.median_s / base.median_s),
    }
    for label, m in loops.items()
]
print(gpuguide.table(rows))

# %%
# What the numbers say
# --------------------
# On a GPU, expect reading every step to cost anything from a few percent (when
# the GPU work per step is long and the host is far ahead anyway) to about twice
# the time (when host and device take about as long per step). Reading every tenth
# step recovers nearly all of it. A CPU has no queue: a call returns when its work
# is done, so ``.item()`` only converts a number and the three loops should match
# within noise.
cost = loops["every step"].median_s / base.median_s - 1
spread = max(m.relative_iqr for m in loops.values())
within = "within" if abs(cost) <= spread else "beyond"
print(
    f"reading the loss every step costs {cost:+.1%} compared with reading it once, "
    f"{within} the spread of the loops (IQR up to {spread:.0%} of the median)"
)
if device.type == "cpu":
    print(
        "The cost of synchronizing needs a GPU's asynchronous queue to show; on a "
        "CPU any difference between these loops is noise or the conversion itself."
    )
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {f".item()\n{label}": m for label, m in loops.items()},
    ylabel="time per training step (ms)",
    title=f"Reading the loss every step: {cost:+.0%} time per step",
    value=lambda s: s / steps * 1e3,
)
plt.show()

# %%
# Finding the synchronizations
# ----------------------------
# Some synchronizations hide in innocent-looking code: a Python ``if`` on a tensor,
# boolean-mask indexing (the result's size depends on the data), ``torch.nonzero``,
# printing a tensor. ``torch.cuda.set_sync_debug_mode("warn")`` makes PyTorch warn
# at each operation that synchronizes; here the warnings are recorded and listed.
if device.type == "cuda":
    suspects = {
        "loss.item()": lambda loss: loss.item(),
        "if loss > 1:": lambda loss: bool(loss > 1),
        "x[x > 0] (boolean mask)": lambda loss: x[x > 0],
        "torch.nonzero(x)": lambda loss: torch.nonzero(x),
        "loss.detach() (no sync)": lambda loss: loss.detach(),
        "x.sum(dim=0) (no sync)": lambda loss: x.sum(dim=0),
    }
    loss = train_step()
    torch.cuda.synchronize()
    rows = []
    for code, run in suspects.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run(loss)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        found = [str(w.message).splitlines()[0] for w in caught]
        rows.append(
            {
                "code": code,
                "synchronizes": "yes" if found else "no",
                "PyTorch's warning": found[0] if found else None,
            }
        )
    print(gpuguide.table(rows))
else:
    print(
        "torch.cuda.set_sync_debug_mode needs a CUDA GPU; on a CPU nothing is "
        "queued, so nothing synchronizes."
    )
