"""
Reading values back every step
==============================

A GPU runs work from a queue: each PyTorch call on a CUDA tensor queues a kernel
and returns, so the Python loop can run ahead of the GPU. Anything that needs a
*value* on the host (``loss.item()``, ``if tensor > 0:``) waits until the queue has
drained: a synchronization (see :doc:`how a GPU runs PyTorch </concepts/gpu>`).
Once per step, it stops the host from preparing step ``n + 1`` while the GPU runs
step ``n``. This page times a training loop reading the loss back every step,
every tenth step or once at the end, and lists the operations that synchronize.
"""

# %%
# Setup
# -----
# A small MLP regression. Its width sets the GPU's work per step (``18 * batch *
# width**2`` FLOP) while the host's work, launching the same kernels, stays about
# the same. A CPU, which has no queue, runs one width.
import warnings
from dataclasses import replace
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide import benchmark, compare, interleave, plot_sweep, report, sweep, table
from gpuguide.quiet import warning_text

page = gpuguide.setup()
device, on_gpu = page.device, page.cuda
steps = 10 if page.small else 50
batch = 256
# A GPU plans with its datasheet peak, a CPU with a fixed rate, not its current load.
widths = sweep(
    16,
    4096,
    memory_at=lambda w: 4 * (12 * w * w + 8 * batch * w),
    flop_at=lambda w: 18 * batch * w * w,
    call_s=4e-3 if on_gpu else 5e-4,
    peaks=page.peaks if on_gpu else None,
    multiple_of=16,
)
widths = widths[-4:] if on_gpu else widths[-1:]  # a CPU has no GPU side to vary


def make_model(width):
    """A fresh model, optimizer and batch of the given width; one training step."""
    torch.manual_seed(0)
    layers = [nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers, nn.Linear(width, width)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4)
    x, y = (torch.randn(batch, width, device=device) for _ in range(2))

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
# queues an addition; ``running.item()`` copies the sum to the host and waits for
# everything queued before it. The variants differ only in ``read_every``, and take
# turns for five rounds (:func:`gpuguide.interleave`) so that drift favours none.


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
# Two more measurements say which side is slower: the GPU's time for the step's
# kernels alone (``measure="kernel"``), and the host's time to issue a step, by a
# host clock that does *not* wait for the GPU, for a few steps after an empty
# queue. On a CPU, with no queue, ``.item()`` only converts a number.
def issue_time(train_step):
    """The host's time to issue one step, not waiting for the GPU."""
    torch.cuda.synchronize()
    m = benchmark(train_step, device="cpu", warmup_ms=1, max_reps=10)
    torch.cuda.synchronize()
    return m


def per_step(m):  # a loop's measurement, as times per step
    return replace(m, times_s=tuple(t / steps for t in m.times_s))


variants = {"once at the end": steps, "every 10 steps": 10, "every step": 1}
rows, gains, tenth = [], {}, {}
for width in widths:
    train_step = make_model(width)
    reads = {label: partial(train_loop, train_step, k) for label, k in variants.items()}
    once, every_10, every = map(per_step, interleave(reads, device=device).values())
    host = kernels = None
    if on_gpu:
        host = issue_time(train_step)
        kernels = benchmark(train_step, device=device, measure="kernel")
    gains[width] = compare(once, every)  # how much faster reading once is
    tenth[width] = compare(once, every_10)
    row = {"width": width, "host": host, "GPU": kernels, "read once": once}
    rows.append(row | {"every 10": every_10, "every step": every})
print(table(rows, title="time per training step"))
for read, m in [("once at the end", once), ("every step", every)]:
    gpuguide.record("training step", m, size=width, read=read)
if on_gpu:  # at the largest width, as the recorded devices have them
    gpuguide.record("host: issuing a step", host, size=width)
    gpuguide.record("GPU: the step's kernels", kernels, size=width)

# %%
# What the numbers say
# --------------------
# A read every step costs what could otherwise overlap across the step boundary:
# the GPU idles while the host prepares the next step's first kernels, and the
# host idles while the GPU finishes this step's last ones. That idle time is at
# most the shorter side's share of a step. Reading every tenth step pays it once
# in ten steps.
worst = max(gains, key=lambda w: (gains[w].measurable, gains[w].speedup))
report("speed-up of reading once", gains[worst], size=f"width {worst}")
gpuguide.claim(
    f"on a GPU, reading once is faster than reading every step (at width {worst})",
    gains[worst],
    verdict="faster",
    on="cuda",
)
gpuguide.claim(
    "on a CPU, with no queue to drain, reading once is not faster than "
    "reading every step",
    gains[worst],
    verdict="not faster",
    on="cpu",
)
gpuguide.claim(
    f"reading every tenth step recovers it: reading once is not faster "
    f"than that (at width {worst})",
    tenth[worst],
    verdict="not faster",
)
lines = {"read once": ".item() once at the end", "every step": ".item() every step"}
if on_gpu:
    lines |= {"host": "host: issuing a step", "GPU": "GPU: the step's kernels"}
fig, ax = plt.subplots()
plot_sweep(
    ax,
    widths,
    {name: [row[field] for row in rows] for field, name in lines.items()},
    xlabel="width (features)",
    ylabel="time per training step (ms)",
    title=f"Reading once instead of every step: {gains[worst].short} at {worst}",
    record="time per training step",
)
plt.show()

# %%
# Finding the synchronizations
# ----------------------------
# Some synchronizations hide in innocent-looking code: a Python ``if`` on a tensor,
# boolean-mask indexing (the result's size depends on the data), ``torch.nonzero``.
# ``torch.cuda.set_sync_debug_mode("warn")`` makes PyTorch warn at each operation
# that synchronizes; here the warnings are caught and listed, apart from the notice
# that the mode is a prototype. On a CPU nothing is queued, so nothing synchronizes.
if page.needs_cuda("torch.cuda.set_sync_debug_mode"):
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
    rows = []
    for code, run in suspects.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                run(loss)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        texts = [warning_text(w) for w in caught]
        found = [t for t in texts if "prototype" not in t]  # not the mode's notice
        rows.append({"code": code, "synchronizes": "yes" if found else "no"})
    print(table(rows))
    expected = {code: "no" if "(no sync)" in code else "yes" for code in suspects}
    found = {row["code"]: row["synchronizes"] for row in rows}
    gpuguide.claim(
        "the four suspects synchronize; the two marked (no sync) do not",
        holds=found == expected,
        measured=", ".join(f"{code}: {sync}" for code, sync in found.items()),
    )

# %%
# What to take away
# -----------------
# Keep values on the device (``running += loss.detach()``) and read them back once
# per logging interval; find hidden synchronizations with ``set_sync_debug_mode``.
gpuguide.takeaway()
