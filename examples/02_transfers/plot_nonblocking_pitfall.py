"""
Reading a non-blocking copy too early
=====================================

``non_blocking=True`` lets ``copy_`` and ``.to()`` return before the copy has
finished. For a copy *to the GPU* that is safe: later GPU work on the same stream
waits for it. For a copy *to the host* into pinned memory it is a trap: the host can
read the destination before the data has arrived, and gets whatever was there before.

This page provokes that race and counts the wrong elements, checks two fixes (waiting
on an event, or a blocking copy), and times them, also with host work between the
copy and the wait, which is what non-blocking copies are for.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The race needs a CUDA GPU. Without one the same code runs on the CPU, where
# ``copy_`` is synchronous even with ``non_blocking=True``: expect 0 wrong there.
from functools import partial
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import compare, interleave, plot_bars, report
from gpuguide.chapters.data import matmul_side

page = gpuguide.setup()
on_gpu = page.needs_cuda("The race of a non-blocking copy to the host")
device = page.device if on_gpu else torch.device("cpu")
trials = 5 if page.small else 20

# %%
# The source and the destination
# -------------------------------
# The source is the result of a float32 matmul sized to take milliseconds, so a copy
# queued after it waits that long on the GPU. The destination is pinned: into
# pageable memory the CUDA driver finishes a device-to-host copy before returning,
# ``non_blocking`` or not, and there is no race (and no overlap either).
n = matmul_side(device=device, call_s=0.01)
a, b, src = (torch.randn(n, n, device=device) for _ in range(3))
dst = torch.empty(n, n, pin_memory=on_gpu)
nbytes = src.nbytes  # one n x n float32 matrix, the size of each copy
# On the CPU a copy is done when copy_ returns: the event is a stand-in doing nothing.
nothing = SimpleNamespace(record=lambda: None, synchronize=lambda: None)
done = torch.cuda.Event() if on_gpu else nothing
produce = partial(torch.matmul, a, b, out=src)  # src = a @ b


# %%
# Three ways to copy to the host
# ------------------------------
# ``unsafe`` returns as soon as the copy is queued and nothing waits for it. The two
# fixes: record an event on the stream after the copy and wait on it before reading
# (the host may do other work in between), or make the copy blocking.
unsafe = partial(dst.copy_, src, non_blocking=True)


def with_event(host_work=None):
    dst.copy_(src, non_blocking=True)
    done.record()  # a marker on the stream, after the copy
    if host_work is not None:
        host_work()  # the host is free while the copy runs
    done.synchronize()  # wait until the GPU has passed the marker


def blocking():
    dst.copy_(src)  # returns when the data is in dst


# %%
# Catching the wrong values
# -------------------------
# Each trial fills the destination with NaN, a value the copy never writes, queues the
# work and the copy, and lets the host read the buffer at once (a clone keeps what it
# saw). After a full ``synchronize()`` the buffer holds the right values, and every
# element the host saw differently is counted as wrong.
def trial(make_source, copy_to_host):
    dst.fill_(float("nan"))
    make_source()
    copy_to_host()
    seen = dst.clone()  # the host reads the buffer now
    getattr(torch, device.type).synchronize()  # torch.cuda / torch.cpu
    return int((seen != dst).sum())


cases = {"copy behind a matmul": produce, "copy alone": lambda: None}
wrong = {
    name: [trial(prep, unsafe) for _ in range(trials)] for name, prep in cases.items()
}
for name, counts in wrong.items():
    mean = 100 * sum(counts) / (trials * n * n)
    report("wrong elements, unsafe read", mean, unit="%", size=nbytes, case=name)
fixed = sum(trial(produce, f) for f in (with_event, blocking) for _ in range(trials))
equal = torch.equal(dst, src.cpu())
gpuguide.claim(
    "both fixes, the event and the blocking copy, read no wrong element, and after "
    "synchronize() the destination holds the source's values",
    holds=fixed == 0 and equal,
    measured=f"{fixed} wrong elements in {2 * trials} trials; torch.equal: {equal}",
)
behind = wrong["copy behind a matmul"]
gpuguide.claim(
    "on a GPU, the unsafe read behind a matmul sees wrong elements",
    holds=any(behind),
    measured=f"wrong in {sum(c > 0 for c in behind)} of {trials} trials",
    on="cuda",
)
runs = sum(c > 0 for counts in wrong.values() for c in counts)
gpuguide.claim(
    "on a CPU, where copy_ is synchronous, the unsafe read sees no wrong element",
    holds=runs == 0,
    measured=f"wrong in {runs} of {2 * trials} trials",
    on="cpu",
)

# %%
# How often was the read wrong?
# -----------------------------
# On a GPU, behind a matmul the copy has not even started when the host begins to
# read, so expect a large share of the buffer to be wrong. A copy alone races the
# host's read through the buffer: the outcome depends on which is faster, so expect
# anything from none to many wrong elements.
title = f"Read before waiting for the copy: wrong in {runs} of {2 * trials} trials"
fig, ax = plt.subplots()
for name, counts in wrong.items():
    ax.plot(range(1, trials + 1), [100 * c / (n * n) for c in counts], "o-", label=name)
ax.set(xlabel="trial (index)", ylabel="wrong elements (%)", ylim=(-5, 105), title=title)
ax.legend()
gpuguide.label_device(fig, device)
plt.show()

# %%
# What the fix costs, and what non-blocking buys
# ----------------------------------------------
# First the copy alone: blocking, and non-blocking followed by the event wait, which
# wait for the same copy. Then with host work (copying a batch of the same size
# between two pageable buffers): after a blocking copy the two run one after the
# other; on a GPU, between a non-blocking copy and the wait they can overlap. On the
# CPU nothing overlaps: the copy is done before the host work starts. The four take
# turns for five rounds (:func:`gpuguide.interleave`).
host_work = partial(torch.empty(n, n).copy_, torch.randn(n, n))  # a batch, copied
times = interleave(
    {
        "blocking copy": blocking,
        "non_blocking + event": with_event,
        "blocking, then host work": lambda: (blocking(), host_work()),
        "non_blocking, host work, event": lambda: with_event(host_work),
    },
    device=device,
)
copy, event, serial, overlap = times.values()
waiting = compare(event, copy)
gpuguide.claim(
    "the event wait is not slower than a blocking copy", waiting, verdict="not slower"
)
report("copy + host work", serial, size=nbytes, order="blocking copy first")
report("copy + host work", overlap, size=nbytes, order="non-blocking copy first")
gain = compare(overlap, serial)
gpuguide.claim(
    "on a GPU, non-blocking + host work is faster", gain, verdict="faster", on="cuda"
)
gpuguide.claim(
    "on a CPU, non-blocking is not faster", gain, verdict="not faster", on="cpu"
)
title = f"Event wait: {compare(copy, event).short}; with host work: {gain.short}"
fig, ax = plt.subplots()
plot_bars(ax, times, ylabel="time (ms)", device=device, title=title)
plt.show()

# %%
# What to take away
# -----------------
# A non-blocking copy to the host is finished only when an event's ``synchronize()``,
# ``torch.cuda.synchronize()`` or a later blocking call says so; it pays only when the
# host has work to do before it needs the data.
gpuguide.takeaway()
