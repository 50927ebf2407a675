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
from dataclasses import replace
from functools import partial

import torch
from torch import nn

import gpuguide
from gpuguide import record, report, sweep, table
from gpuguide.chapters.timeline import synchronizes
from gpuguide.timing import host_and_gpu_times

page = gpuguide.setup()
device, on_gpu = page.device, page.cuda
steps, batch = (10 if page.small else 50), 256
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
# A :class:`gpuguide.Sweep` over widths times the three loops in turns. On a GPU,
# :func:`~gpuguide.timing.host_and_gpu_times` says which side is slower: the host's
# time to issue a step, while the GPU is kept busy so that the host never waits, and
# the GPU's time for the step's kernels, from CUDA events. On a CPU, with no queue,
# ``.item()`` only converts a number.


reads = {"once at the end": steps, "every 10 steps": 10, "every step": 1}
loops = gpuguide.Sweep(
    f"{steps} training steps",
    lambda width, dev: [make_model(width)],
    sizes=widths,
    size_label="width (features)",
).run(
    {read: partial(train_loop, read_every=k) for read, k in reads.items()}, paired=True
)
print(loops)
for read in ("once at the end", "every step"):  # per step, at the largest width
    m = loops.at(read)
    per_step = replace(m, times_s=tuple(t / steps for t in m.times_s))
    record("training step", per_step, size=widths[-1], read=read)
if on_gpu:
    split = {w: host_and_gpu_times(make_model(w), device=device) for w in widths}
    rows = [{"width": w, "host": s.host, "GPU": s.gpu} for w, s in split.items()]
    print(table(rows, title="time per training step"))
    record("host: issuing a step", split[widths[-1]].host, size=widths[-1])
    record("GPU: the step's kernels", split[widths[-1]].gpu, size=widths[-1])

# %%
# What the numbers say
# --------------------
# A read every step costs what could otherwise overlap across the step boundary:
# the GPU idles while the host prepares the next step's first kernels, and the
# host idles while the GPU finishes this step's last ones. That idle time is at
# most the shorter side's share of a step. Reading every tenth step pays it once
# in ten steps.
gains = {w: loops.compare("once at the end", "every step", w) for w in widths}
worst = max(gains, key=lambda w: (gains[w].measurable, gains[w].speedup))
report("speed-up of reading once", gains[worst], size=f"width {worst}")
for where, on, verdict in [("a GPU", "cuda", "faster"), ("a CPU", "cpu", "not faster")]:
    text = f"on {where}, reading once is {verdict} than reading every step"
    gpuguide.claim(f"{text} (at width {worst})", gains[worst], verdict=verdict, on=on)
text = f"reading once is not faster than reading every tenth step (at width {worst})"
tenth = loops.compare("once at the end", "every 10 steps", worst)
gpuguide.claim(text, tenth, verdict="not faster")
loops.plot(title=f"Reading once instead of every step: {gains[worst].short}")

# %%
# Finding the synchronizations
# ----------------------------
# Some synchronizations hide in innocent-looking code: a Python ``if`` on a tensor,
# boolean-mask indexing (the result's size depends on the data), ``torch.nonzero``.
# ``torch.cuda.set_sync_debug_mode("warn")`` makes PyTorch warn at each operation
# that synchronizes; :func:`~gpuguide.chapters.timeline.synchronizes` catches the
# warnings:
#
# .. literalinclude:: /../src/gpuguide/chapters/timeline.py
#    :pyobject: synchronizes
#
# On a CPU nothing is queued, so nothing synchronizes.
if page.needs_cuda("torch.cuda.set_sync_debug_mode"):
    x = torch.randn(batch, widths[0], device=device)
    loss = make_model(widths[0])()
    suspects = {
        "loss.item()": lambda: loss.item(),
        "if loss > 1:": lambda: bool(loss > 1),
        "x[x > 0] (boolean mask)": lambda: x[x > 0],
        "torch.nonzero(x)": lambda: torch.nonzero(x),
        "loss.detach() (no sync)": lambda: loss.detach(),
        "x.sum(dim=0) (no sync)": lambda: x.sum(dim=0),
    }
    found = {code: synchronizes(run) for code, run in suspects.items()}
    print(table([{"code": code, "synchronizes": s} for code, s in found.items()]))
    gpuguide.claim(
        "the four suspects synchronize; the two marked (no sync) do not",
        holds=all(sync == ("(no sync)" not in code) for code, sync in found.items()),
        measured=", ".join(f"{code}: {sync}" for code, sync in found.items()),
    )

# %%
# What to take away
# -----------------
# Keep values on the device (``running += loss.detach()``) and read them back once
# per logging interval; find hidden synchronizations with ``set_sync_debug_mode``.
gpuguide.takeaway()
