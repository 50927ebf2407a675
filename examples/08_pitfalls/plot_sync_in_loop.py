"""
Reading values back every step
==============================

A GPU runs work from a queue: each PyTorch call on a CUDA tensor queues a kernel
and returns, so the Python loop can run ahead of the GPU and keep the queue full.
Anything that needs a *value* on the host (``loss.item()``, ``.cpu()``,
``.tolist()``, ``print(tensor)``, ``if tensor > 0:``) makes the host wait until the
queue has drained: a synchronization. Once per step, it stops the host from
preparing step ``n + 1`` while the GPU runs step ``n``.

This page times the same training loop three ways, changing only how often the
loss is read back: every step, every tenth step, or once at the end, for models of
growing width. What a read costs depends on how the host's time per step compares
with the GPU's, so both are printed next to it. On a GPU the page also lists the
operations in a step that synchronize, as PyTorch reports them.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# A small MLP regression, with the batch and targets created once, outside the
# timed loops. Its width sets the GPU's work per step (``18 * batch * width**2``
# FLOP) while the host's work, launching the same kernels, stays about the same:
# on a GPU the widths below run from steps where the GPU waits for the host to steps
# where the host waits for the GPU. A CPU, which has no queue, runs one width.
import warnings
from collections import namedtuple
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide.quiet import warning_text

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
on_gpu = device.type == "cuda"
steps = 10 if gpuguide.small_mode() else 50
batch = 256
# A GPU plans with its datasheet peak; elsewhere the helpers' fixed, modest
# fallback rate (None) keeps the plan independent of the machine's current load.
widths = gpuguide.sweep(
    16,
    4096,
    memory_at=lambda w: 4 * (12 * w * w + 8 * batch * w),
    flop_at=lambda w: 18 * batch * w * w,
    call_s=4e-3 if on_gpu else 5e-4,
    peaks=gpuguide.device_peaks(device) if on_gpu else None,
    multiple_of=16,
)
widths = widths[-4:] if on_gpu else widths[-1:]  # a CPU has no GPU side to vary
print(
    f"MLP: 3 layers of width {', '.join(map(str, widths))}; batch {batch}, "
    f"{steps} steps per loop"
)


def make_model(width):
    """A fresh model, optimizer and batch of the given width; one training step."""
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

    return train_step


# %%
# One loop, three reading frequencies
# -----------------------------------
# The loss is summed on the device with ``running += loss.detach()``, which only
# queues an addition. ``running.item()`` copies the sum to the host and waits for
# everything queued before it. The three variants differ only in ``read_every``,
# and all of them read the total at the end. They take turns for five rounds
# (:func:`gpuguide.interleave`), so that a machine whose speed drifts during the run
# does not favour whichever went first.


def train_loop(train_step, read_every):
    running, logged = torch.zeros((), device=device), None
    for i in range(1, steps + 1):
        running += train_step().detach()
        if i % read_every == 0:
            logged = running.item()  # a synchronization on a GPU
    return logged


# %%
# Host time and GPU time per step
# -------------------------------
# Two more measurements per width say which side is slower. The GPU's time is that
# of the step's kernels alone (``measure="kernel"``: the launches hidden behind work
# queued ahead). The host's time is what the loop's Python code takes to issue a
# step: a host clock that does *not* wait for the GPU, the first pitfall of the
# timing page, measures exactly that, for a few steps after an empty queue, so that
# the queue never fills and makes the host wait.


def per_step(m):
    """A loop's measurement as times per step."""
    times = tuple(t / steps for t in m.times_s)
    return gpuguide.Measurement(m.label, times, m.device, m.method)


def issue_time(train_step):
    """The host's time to issue one step, not waiting for the GPU."""
    torch.cuda.synchronize()
    m = gpuguide.benchmark(
        train_step, device="cpu", warmup_ms=1, min_reps=5, max_reps=10, label="host"
    )
    torch.cuda.synchronize()
    return m


variants = {"once at the end": steps, "every 10 steps": 10, "every step": 1}
results = []
for width in widths:
    train_step = make_model(width)
    loops = gpuguide.interleave(
        {label: partial(train_loop, train_step, k) for label, k in variants.items()},
        device=device,
    )
    host = issue_time(train_step) if on_gpu else None
    kernels = None
    if on_gpu:
        kernels = gpuguide.benchmark(
            train_step, device=device, measure="kernel", label="GPU"
        )
    results.append((width, host, kernels, {k: per_step(m) for k, m in loops.items()}))


def cost(m, base):
    """Extra time per step over ``base``, with its range, or that there is none."""
    c = gpuguide.compare(base, m)  # "faster" when base is measurably faster than m
    span = f"{c.low - 1:+.0%} to {c.high - 1:+.0%}"
    return (
        f"{c.speedup - 1:+.0%} ({span})" if c.verdict == "faster" else f"none ({span})"
    )


Row = namedtuple("Row", "width host GPU read_once every_10 every_step cost_every_step")
rows = [
    Row(
        width,
        host,
        kernels,
        loops["once at the end"],
        loops["every 10 steps"],
        loops["every step"],
        cost(loops["every step"], loops["once at the end"]),
    )
    for width, host, kernels, loops in results
]
print(gpuguide.table(rows, title="time per training step"))
width, host, kernels, loops = results[-1]  # the widest model: record its step
for read in ("once at the end", "every step"):
    gpuguide.record("training step", loops[read], size=width, read=read)
if on_gpu:
    gpuguide.record("host: issuing a step", host, size=width)
    gpuguide.record("GPU: the step's kernels", kernels, size=width)
if not on_gpu:
    print(
        "On a CPU there is no queue: a call returns when its work is done, so the host "
        "time is the step, there is no separate GPU time, and .item() only converts "
        "a number. Any difference between the loops is noise or the conversion."
    )

# %%
# What the numbers say
# --------------------
# A read every step costs what could otherwise overlap across the step boundary:
# the GPU sits idle while the host, just woken up, prepares the next step's first
# kernels, and the host sits idle while the GPU finishes this step's last ones.
# Where the GPU waits for the host anyway (host time well above GPU time), only the
# GPU's last kernels and the wake-up are lost, tens of microseconds; where the GPU's
# work dwarfs the host's, the idle moments are small next to the step. Expect the
# cost to matter most where the two are comparable, and reading every tenth step to
# recover nearly all of it: anything from no measurable cost to a few tens of
# percent. The table's last column gives each width's, with its range.
width_axis = [width for width, *_ in results]
series = {
    ".item() once at the end": [loops["once at the end"] for *_, loops in results],
    ".item() every step": [loops["every step"] for *_, loops in results],
}
if on_gpu:
    series["host: issuing a step"] = [host for _, host, _, _ in results]
    series["GPU: the step's kernels"] = [kernels for _, _, kernels, _ in results]
costs = [
    gpuguide.compare(loops["once at the end"], loops["every step"])
    for *_, loops in results
]
measurable = [i for i, c in enumerate(costs) if c.verdict == "faster"]
if measurable:
    worst = max(measurable, key=lambda i: costs[i].speedup)
    extra = costs[worst].speedup - 1
    title = f"Reading every step costs up to {extra:.0%}, at width {widths[worst]}"
else:
    title = "Reading every step: no measurable cost at any width"
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    width_axis,
    series,
    xlabel="width (features)",
    ylabel="time per training step (ms)",
    title=title,
    record="time per training step",
)
plt.show()

# %%
# Finding the synchronizations
# ----------------------------
# Some synchronizations hide in innocent-looking code: a Python ``if`` on a tensor,
# boolean-mask indexing (the result's size depends on the data), ``torch.nonzero``,
# printing a tensor. ``torch.cuda.set_sync_debug_mode("warn")`` makes PyTorch warn
# at each operation that synchronizes; here the warnings are recorded and listed.
# Switching the mode on also warns once that it is a prototype; that notice is shown
# on its own line, not counted as a synchronization.
if on_gpu:
    x = torch.randn(batch, widths[0], device=device)
    suspects = {
        "loss.item()": lambda loss: loss.item(),
        "if loss > 1:": lambda loss: bool(loss > 1),
        "x[x > 0] (boolean mask)": lambda loss: x[x > 0],
        "torch.nonzero(x)": lambda loss: torch.nonzero(x),
        "loss.detach() (no sync)": lambda loss: loss.detach(),
        "x.sum(dim=0) (no sync)": lambda loss: x.sum(dim=0),
    }
    loss = make_model(widths[0])()
    torch.cuda.synchronize()
    rows, notices = [], set()
    for code, run in suspects.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run(loss)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        texts = [warning_text(w) for w in caught]
        notices.update(t for t in texts if "prototype" in t)
        found = [t for t in texts if "prototype" not in t]
        rows.append(
            {
                "code": code,
                "synchronizes": "yes" if found else "no",
                "PyTorch's warning": found[0] if found else None,
            }
        )
    for notice in sorted(notices):
        print(f"PyTorch notes: {notice}")
    print(gpuguide.table(rows))
else:
    print(
        "torch.cuda.set_sync_debug_mode needs a CUDA GPU; on a CPU nothing is "
        "queued, so nothing synchronizes."
    )
