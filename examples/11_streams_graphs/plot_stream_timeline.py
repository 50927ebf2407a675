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

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.timeline import Marks

page = gpuguide.setup()
device, rounds = page.device, 1
cuda = page.needs_cuda("Copies and compute on two streams")
d, n_chunks = (1024 if cuda else 64), (8 if page.small else 16)
# Every chunk three times (in, out, on the device), 4 bytes per element:
rows = gpuguide.largest_size(
    64, 4096 if cuda else 512, multiple_of=64, memory_at=lambda r: 12 * n_chunks * r * d
)
x_host = torch.randn(n_chunks, rows, d, pin_memory=cuda)
out_host = torch.empty(n_chunks, rows, d, pin_memory=cuda)
x_dev = torch.empty(n_chunks, rows, d, device=device)
w = torch.randn(d, d, device=device) / d**0.5


def compute(x):
    for _ in range(rounds):
        x = torch.tanh(x @ w)
    return x


def copies_only():
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        out_host[i].copy_(x_dev[i], non_blocking=True)


copies = gpuguide.benchmark(copies_only, device=device)
one_round = gpuguide.benchmark(compute, args=(x_dev[0],), device=device)
rounds = max(1, min(64, round(copies.median_s / n_chunks / one_round.median_s)))
chunk = gpuguide.format_bytes(x_host[0].nbytes)
print(f"{n_chunks} chunks of {chunk} each, {rounds} matmul round(s) per chunk")

# %%
# Marking work with events
# ------------------------
# Each stage runs inside ``marks.span``, which records a CUDA event on the current
# stream before and after the work (a CPU reads its clock). An event completes when
# the work queued on its stream before it is done, so two events bracket that work
# as the GPU ran it, whatever the host was doing meanwhile:
#
# .. literalinclude:: /../src/gpuguide/chapters/timeline.py
#    :pyobject: Marks
#
# Serialized, everything runs on the default stream; pipelined, as on the previous
# page, the copy stream copies chunk ``i + 1`` in while the compute stream works on
# chunk ``i``, events between them.


def serialized(marks):
    lane = "default stream" if cuda else "CPU"
    for i in range(n_chunks):
        with marks.span(lane, "copy in"):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        with marks.span(lane, "compute"):
            y = compute(x_dev[i])
        with marks.span(lane, "copy out"):
            out_host[i].copy_(y, non_blocking=True)


if cuda:
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copied = [torch.cuda.Event() for _ in range(n_chunks)]
    computed = [torch.cuda.Event() for _ in range(n_chunks)]


def pipelined(marks):
    main = torch.cuda.current_stream()
    copy_stream.wait_stream(main)
    compute_stream.wait_stream(main)

    def copy_in(i):
        with torch.cuda.stream(copy_stream), marks.span("copy stream", "copy in"):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        copied[i].record(copy_stream)

    copy_in(0)
    for i in range(n_chunks):
        if i + 1 < n_chunks:
            copy_in(i + 1)
        with torch.cuda.stream(compute_stream):
            compute_stream.wait_event(copied[i])
            with marks.span("compute stream", "compute"):
                y = compute(x_dev[i])
            computed[i].record(compute_stream)
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(computed[i])
            with marks.span("copy stream", "copy out"):
                out_host[i].copy_(y, non_blocking=True)
            y.record_stream(copy_stream)
    main.wait_stream(copy_stream)
    main.wait_stream(compute_stream)


# %%
# The timeline
# ------------
# One run of each version (not a median: the previous page measures in rounds),
# after a first run that warms it up: one row per stream. On one stream the stages
# should run one at a time; pipelined on a GPU, copies should run beside compute.
versions = {"serialized": serialized} | ({"pipelined": pipelined} if cuda else {})
ends, shares = {}, {}
fig, axes = plt.subplots(len(versions), 1, sharex=True, squeeze=False)
for ax, (name, run) in zip(axes[:, 0], versions.items(), strict=True):
    run(Marks(device))  # a warm-up run: it allocates its streams' memory
    marks = Marks(device)
    run(marks)
    spans = marks.spans()
    ends[name] = max(s.end_s for s in spans)
    shares[name] = spans.overlap("copy stream", "compute stream")
    title = f"{name}: {gpuguide.format_time(ends[name])}, copies overlap compute "
    title += f"{shares[name]:.0%} of their time"
    spans.plot(ax, title=title)
    if name == "serialized":  # a span starting before the last one ended (1 us slack)
        clash = sum(b.start_s < a.end_s - 1e-6 for a, b in itertools.pairwise(spans))
        text = "serialized on one stream, no two stages overlap"
        gpuguide.claim(
            text, holds=not clash, measured=f"{clash} of {len(spans)} spans overlap"
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
