"""
A timeline of CUDA streams, from events
=======================================

The previous page measured how much of its copies a pipeline of CUDA streams hides
behind compute. This page shows it: each stage of the same pipeline is marked with
a CUDA event on its stream before and after it, and the events, read against one
recorded before the run, draw which stream ran what, and when.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The previous page's chunks: copy one to the device, run a few rounds of
# ``tanh(x @ w)`` on it, copy the result back, from and to host memory (pinned on a
# GPU); the rounds per chunk balance copying and computing.
import itertools
import time
from contextlib import contextmanager

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, largest_size
from gpuguide.chapters.timeline import Span, plot_timeline

page = gpuguide.setup()
device, rounds = page.device, 1
cuda = page.needs_cuda("Copies and compute on two streams")
sync = getattr(torch, device.type).synchronize  # torch.cpu.synchronize does nothing
d, n_chunks = (1024 if cuda else 64), (8 if page.small else 16)
# Every chunk three times (pageable, pinned, on the device), 4 bytes per element:
rows = largest_size(
    64,
    4096 if cuda else 512,
    multiple_of=64,
    memory_at=lambda r: 3 * n_chunks * 4 * r * d,
)
x_pageable = torch.randn(n_chunks, rows, d)
out_pageable = torch.empty_like(x_pageable)
x_pinned = x_pageable.pin_memory() if cuda else x_pageable
out_pinned = out_pageable.pin_memory() if cuda else out_pageable
x_dev = torch.empty(n_chunks, rows, d, device=device)
w = torch.randn(d, d, device=device) / d**0.5


def compute(x):
    for _ in range(rounds):
        x = torch.tanh(x @ w)
    return x


def copies_only(x_host, out_host):
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        out_host[i].copy_(x_dev[i], non_blocking=True)


copies = benchmark(copies_only, args=(x_pinned, out_pinned), device=device)
one_round = benchmark(compute, args=(x_dev[0],), device=device)
rounds = max(1, min(64, round(copies.median_s / n_chunks / one_round.median_s)))
chunk = gpuguide.format_bytes(x_pinned[0].nbytes)
print(f"{n_chunks} chunks of {chunk} each, {rounds} matmul round(s) per chunk")

# %%
# Marking work with events
# ------------------------
# Each stage runs inside ``span``, which records a CUDA event on the current stream
# before and after the work (a CPU reads its clock). An event completes when the
# work queued on its stream before it is done, so two events bracket that work as
# the GPU ran it, whatever the host was doing meanwhile.


def now():
    if not cuda:
        sync()
        return time.perf_counter()
    event = torch.cuda.Event(enable_timing=True)
    event.record()  # on the current stream
    return event


@contextmanager
def span(marks, lane, label):
    start = now()
    yield
    marks.append((lane, label, start, now()))


# %%
# The two versions, marked
# ------------------------
# Serialized, everything on the default stream; pipelined, as on the previous page:
# the copy stream copies chunk ``i + 1`` in while the compute stream works on chunk
# ``i``, events between them.


def serialized(x_host, out_host, marks):
    lane = "default stream" if cuda else "CPU"
    for i in range(n_chunks):
        with span(marks, lane, "copy in"):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        with span(marks, lane, "compute"):
            y = compute(x_dev[i])
        with span(marks, lane, "copy out"):
            out_host[i].copy_(y, non_blocking=True)


if cuda:
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copied = [torch.cuda.Event() for _ in range(n_chunks)]
    computed = [torch.cuda.Event() for _ in range(n_chunks)]


def pipelined(x_host, out_host, marks):
    main = torch.cuda.current_stream()
    copy_stream.wait_stream(main)
    compute_stream.wait_stream(main)

    def copy_in(i):
        with torch.cuda.stream(copy_stream), span(marks, "copy stream", "copy in"):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        copied[i].record(copy_stream)

    copy_in(0)
    for i in range(n_chunks):
        if i + 1 < n_chunks:
            copy_in(i + 1)
        with torch.cuda.stream(compute_stream):
            compute_stream.wait_event(copied[i])
            with span(marks, "compute stream", "compute"):
                y = compute(x_dev[i])
            computed[i].record(compute_stream)
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(computed[i])
            with span(marks, "copy stream", "copy out"):
                out_host[i].copy_(y, non_blocking=True)
            y.record_stream(copy_stream)
    main.wait_stream(copy_stream)
    main.wait_stream(compute_stream)


# %%
# The timeline
# ------------
# One run of each version (one run, not a median: the previous page measures in
# rounds), after a first run that warms it up (it allocates its streams' memory),
# its spans read against an event recorded before it: one row per stream. The
# claims say what the timelines should show: one stage at a time on one stream,
# and on a GPU copies side by side with compute when pipelined.


def timeline(run):
    marks = []
    sync()
    origin = now()
    run(x_pinned, out_pinned, marks)
    sync()
    read = (lambda m: origin.elapsed_time(m) / 1e3) if cuda else (lambda m: m - origin)
    return [Span(lane, label, read(s), read(e)) for lane, label, s, e in marks]


versions = {"serialized": serialized} | ({"pipelined": pipelined} if cuda else {})
for run in versions.values():  # the warm-up runs
    run(x_pinned, out_pinned, [])
sync()
ends, shares = {}, {}
fig, axes = plt.subplots(len(versions), 1, sharex=True, squeeze=False)
for ax, (name, run) in zip(axes[:, 0], versions.items(), strict=True):
    spans = timeline(run)
    end = gpuguide.format_time(max(s.end_s for s in spans))
    copying = [s for s in spans if s.lane == "copy stream"]
    both = sum(
        max(0.0, min(a.end_s, b.end_s) - max(a.start_s, b.start_s))
        for a in copying
        for b in spans
        if b.lane == "compute stream"
    )
    finding = "one stage at a time, no overlap"
    if both > 0:
        shares[name] = both / sum(s.duration_s for s in copying)
        finding = f"copies overlap compute {shares[name]:.0%} of their time"
    print(f"timeline, {name}: done after {end}; {finding}")
    plot_timeline(ax, spans, title=f"{name}: {end}, {finding}")
    ends[name] = max(s.end_s for s in spans)
    if name == "serialized":  # each span starts after the one before ends (1 us slack)
        order = sorted(spans, key=lambda s: s.start_s)
        apart = all(b.start_s >= a.end_s - 1e-6 for a, b in itertools.pairwise(order))
        gpuguide.claim(
            "serialized on one stream, no two stages overlap",
            holds=apart,
            measured=f"{len(spans)} spans, {'none' if apart else 'some'} overlapping",
        )
plt.show()
gpuguide.claim(
    "on a GPU, pipelined copies overlap compute at least half of their time",
    shares.get("pipelined", 0.0),
    at_least=0.5,
    on="cuda",
    timed=True,
)
gpuguide.claim(
    "on a GPU, the pipelined run ends in at most 80% of the serialized run's time",
    ends.get("pipelined", 0.0) / ends["serialized"],
    at_most=0.8,
    on="cuda",
    timed=True,
)
