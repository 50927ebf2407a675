"""
Reading a non-blocking copy too early
=====================================

``non_blocking=True`` lets ``copy_`` and ``.to()`` return before the copy has
finished. For a copy *to the GPU* that is safe: later GPU work on the same stream
waits for it. For a copy *to the host* into pinned memory it is a trap: the host can
read the destination before the data has arrived, and gets whatever was there before.

This page provokes that race on purpose and counts the wrong elements, then checks two
fixes (waiting on an event, or a blocking copy) and times them against each other, and
with host work placed between the copy and the wait, which is what non-blocking copies
are for.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The race needs a CUDA GPU. Without one the page runs the same code on the CPU.
import matplotlib.pyplot as plt
import torch
from matplotlib.ticker import MaxNLocator

import gpuguide
from gpuguide import format_bytes, format_ratio, format_time

device = gpuguide.pick_device()
on_gpu = device.type == "cuda" and torch.cuda.is_available()
if not on_gpu:
    device = torch.device("cpu")
print(gpuguide.provenance(device))
trials = 5 if gpuguide.small_mode() else 20
synchronize = torch.cuda.synchronize if on_gpu else torch.cpu.synchronize
if not on_gpu:
    print(
        "On a CPU-only machine copy_ is synchronous even with non_blocking=True, so "
        "the race cannot happen; the same code runs here and should find 0 wrong."
    )

# %%
# The source and the destination
# -------------------------------
# The source is the result of a float32 matmul sized to take milliseconds, so a copy
# queued after it waits that long on the GPU. The destination is pinned: into
# pageable memory the CUDA driver finishes a device-to-host copy before returning,
# ``non_blocking`` or not, and there is no race (and no overlap either).
n = gpuguide.largest_size(
    64, 8192, memory_at=lambda n: 16 * n * n, multiple_of=64,
    flop_at=lambda n: gpuguide.matmul_flop(n, n, n), traffic_at=lambda n: 12 * n * n,
    device=device, call_s=0.01,
)  # fmt: skip
a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
src = torch.empty(n, n, device=device)
dst = torch.empty(n, n, pin_memory=on_gpu)
print(f"source: the {n} x {n} float32 result of a matmul, {format_bytes(4 * n * n)}")


class HostEvent:
    """Stands in for ``torch.cuda.Event`` on the CPU, where a copy is done on return."""

    def record(self):
        pass

    def synchronize(self):
        pass


done = torch.cuda.Event() if on_gpu else HostEvent()


def produce():
    torch.matmul(a, b, out=src)


# %%
# Three ways to copy to the host
# ------------------------------
# ``unsafe`` returns as soon as the copy is queued and nothing waits for it. The two
# fixes: record an event on the stream after the copy and wait on it before reading
# (the host may do other work in between), or make the copy blocking.
def unsafe():
    dst.copy_(src, non_blocking=True)


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
    synchronize()
    return int((seen != dst).sum())


cases = {"copy behind a matmul": produce, "copy alone": lambda: None}
wrong = {
    name: [trial(prep, unsafe) for _ in range(trials)] for name, prep in cases.items()
}
fixes = {"event": with_event, "blocking": blocking}
fixed = {
    name: sum(trial(produce, fix) for _ in range(trials)) for name, fix in fixes.items()
}
print(f"after synchronize(), dst equals src.cpu(): {torch.equal(dst, src.cpu())}")

numel = n * n
for name, counts in wrong.items():
    bad = sum(c > 0 for c in counts)
    mean = sum(counts) / len(counts) / numel
    gpuguide.record("wrong elements, unsafe read", 100 * mean, unit="%", case=name)
    print(
        f"unsafe read, {name}: wrong in {bad} of {trials} trials, "
        f"{max(counts)} of {numel} elements at worst, {mean:.1%} on average"
    )
for name, total in fixed.items():
    print(f"fix '{name}': {total} wrong elements in {trials} trials")
if on_gpu and not any(any(c) for c in wrong.values()):
    print(
        "The race did not show up in this run, but nothing prevents it: a check "
        "that passes by luck proves nothing about the next run."
    )

# %%
# How often was the read wrong?
# -----------------------------
# Behind a matmul the copy has not even started when the host begins to read, so
# expect a large share of the buffer to be wrong. A copy alone races the host's
# read through the buffer: the outcome depends on which is faster, so expect anything
# from none to many wrong elements.
runs = sum(c > 0 for counts in wrong.values() for c in counts)
title = (
    f"Read before the copy finished: wrong in {runs} of {2 * trials} trials"
    if on_gpu
    else f"CPU copies are synchronous: {runs} wrong reads in {2 * trials} trials"
)
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax, list(range(1, trials + 1)),
    {name: [100 * c / numel for c in counts] for name, counts in wrong.items()},
    xlabel="trial (index)", ylabel="wrong elements (%)", title=title,
    device=device, logx=False, logy=False,
)  # fmt: skip
ax.set_ylim(-5, 105)
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
plt.show()

# %%
# What the fix costs, and what non-blocking buys
# ----------------------------------------------
# First the copy alone: blocking, and non-blocking followed by the event wait. Both
# wait for the same copy, so expect the same time. Then with host work (copying a
# batch of the same size between two pageable buffers): after a blocking copy the two
# run one after the other; between a non-blocking copy and the wait they overlap, so
# expect the time of the longer one instead of the sum. On the CPU the event is a
# stand-in that does nothing and nothing overlaps: the pairs differ only by the
# stand-in's own calls (a fraction of a microsecond) and noise.
# The four take turns for five rounds (:func:`gpuguide.interleave`), and each pair is
# compared with its spread (:func:`gpuguide.compare`).
batch, staging = torch.randn(n, n), torch.empty(n, n)


def host_work():
    staging.copy_(batch)


def blocking_then_work():
    blocking()
    host_work()


times = gpuguide.interleave(
    {
        "blocking copy": blocking,
        "non_blocking + event": with_event,
        "blocking, then host work": blocking_then_work,
        "non_blocking, host work, event": lambda: with_event(host_work),
    },
    device=device,
)
for m in times.values():
    print(m)
copy, event, serial, overlap = times.values()
gpuguide.record("copy + host work", serial, size=4 * n * n, order="one after the other")
gpuguide.record("copy + host work", overlap, size=4 * n * n, order="overlapped")
copy_s, serial_s = copy.median_s, serial.median_s
wait = gpuguide.compare(event, copy)
print(f"the event wait against a blocking copy: {wait}")
noisy = " (NOISY)" if copy.is_noisy or serial.is_noisy else ""
shorter_s = max(min(copy_s, serial_s - copy_s), 0)  # the most overlap can save
print(
    f"the most overlap could save (the shorter part): {format_time(shorter_s)}{noisy}"
)
gain = gpuguide.compare(overlap, serial)
print(f"with host work: {gain}")
if gain.verdict == "faster":
    saved = f"overlap saves {format_time(serial_s - overlap.median_s)}"
    print(f"{saved}, {1 - overlap.median_s / serial_s:.0%} of the serial time{noisy}")
else:
    saved = "no measurable overlap"
    if not on_gpu:
        print("(on a CPU the copy is done before the host work starts)")
scale, unit = (1e6, "us") if copy_s < 1e-3 else (1e3, "ms")
fig, ax = plt.subplots()
bars = {k.replace(", ", ",\n").replace(" + ", "\n+ "): m for k, m in times.items()}
gpuguide.plot_bars(
    ax, bars, ylabel=f"time ({unit})", device=device, value=lambda s: s * scale,
    title=f"Event wait: {format_ratio(event.median_s / copy_s)} a blocking copy; "
    f"with host work: {saved}",
)  # fmt: skip
plt.show()

# %%
# What to take away
# -----------------
# A non-blocking copy to the host is finished only when something says so: an event's
# ``synchronize()``, ``torch.cuda.synchronize()``, or a later blocking call. Reading
# before that is a race that may pass a test and fail in production. Non-blocking is
# worth it only when the host has work to do before it needs the data. A pinned
# *source* of a host-to-device copy has the mirror-image hazard: do not overwrite it
# until the copy is done.
