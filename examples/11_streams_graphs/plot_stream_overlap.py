"""
Overlapping copies with compute: CUDA streams done right
========================================================

A GPU's copy engines move data over PCIe while its SMs compute, but only if the
program lets them: the work split into chunks, copies and compute on different
streams tied together by events, and pinned host memory. This page builds that
pipeline and times it against one stage after the other, then shows two ways the
overlap silently disappears: pageable memory and a synchronization inside the loop.

A popular blog post put upload, compute and download on three streams but
synchronized each stream before starting the next, and saw little gain: with a wait
between stages no overlap is possible. Here the overlap is computed from timings of
the stages and the versions taken in the same rounds, and drawn from CUDA events
recorded on each stream.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# A workload of chunks: copy a chunk to the device, run a few rounds of
# ``tanh(x @ w)`` on it, copy the result back. Host tensors hold all chunks; the
# device buffers ``x_dev`` are allocated once, one per chunk.
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.timeline import (
    NO_OVERLAP,
    overlap_s,
    plot_timeline,
    record_timeline,
    stage_overlap,
)

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
on_cuda = device.type == "cuda"
sync = getattr(torch, device.type).synchronize  # torch.cpu.synchronize does nothing

d = 1024 if on_cuda else 64
n_chunks = 8 if small else 16
hi = 4096 if on_cuda else 512
rows = gpuguide.largest_size(  # pageable, pinned, device buffers: 12 B per element
    64, hi, memory_at=lambda r: 12 * n_chunks * r * d, multiple_of=64
)
chunk_bytes = gpuguide.format_bytes(rows * d * 4)
print(f"{n_chunks} chunks of {chunk_bytes} each")

x_pageable = torch.randn(n_chunks, rows, d)
out_pageable = torch.empty_like(x_pageable)
# Pinned (page-locked) memory is what the copy engines can read asynchronously.
x_pinned = x_pageable.pin_memory() if on_cuda else x_pageable
out_pinned = out_pageable.pin_memory() if on_cuda else out_pageable
x_dev = torch.empty(n_chunks, rows, d, device=device)
w = torch.randn(d, d, device=device) / d**0.5
rounds = 1
# The stages get a timeline recorder (last cell); the timed runs get one that is off.
untraced = record_timeline(device, enabled=False)

if not on_cuda:
    print("Overlap needs a GPU's streams and copy engine; the CPU runs stages in turn.")


def compute(x):
    for _ in range(rounds):
        x = torch.tanh(x @ w)
    return x


# %%
# The stages, and balancing them
# -------------------------------
# Overlap helps most when copying and computing take about as long, so the number of
# matmul rounds per chunk is chosen from two measurements: one chunk's copies in and
# out, and one round. The stages of all chunks are timed alone further down, in the
# same rounds as the versions that combine them.


def copies_only(x_host, out_host):
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        out_host[i].copy_(x_dev[i], non_blocking=True)


def compute_only():
    for i in range(n_chunks):
        compute(x_dev[i])


copies = gpuguide.benchmark(copies_only, args=(x_pinned, out_pinned), device=device)
one_round = gpuguide.benchmark(compute, args=(x_dev[0],), device=device)
rounds = max(1, min(64, round(copies.median_s / n_chunks / one_round.median_s)))
print(f"{rounds} matmul round(s) per chunk")


# %%
# (a) Serialized: everything on the default stream
# ------------------------------------------------
# One stream runs its work in order, so each chunk's copy in, compute and copy out
# wait for the previous one: the total is the sum of the stages, whatever
# ``non_blocking`` says.


def serialized(x_host, out_host, rec=untraced):
    lane = "default stream" if on_cuda else "CPU"
    for i in range(n_chunks):
        with rec.span(lane, "copy in"):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        with rec.span(lane, "compute"):
            y = compute(x_dev[i])
        with rec.span(lane, "copy out"):
            out_host[i].copy_(y, non_blocking=True)


serialized(x_pinned, out_pinned)
sync()
expected = out_pinned.clone()

# %%
# (b) Pipelined: a copy stream, a compute stream, events between them
# -------------------------------------------------------------------
# The copy stream copies chunk ``i + 1`` in while the compute stream works on chunk
# ``i``. ``wait_event`` makes a stream wait for one event on another stream without
# blocking the host. A stream runs in issue order, so the next chunk's copy in is
# queued *before* this chunk's copy out, which must wait for its compute. ``x_dev``
# is never freed, so its chunks stay valid; ``y`` is allocated on the compute stream
# and read by the copy stream, so ``y.record_stream(copy_stream)`` stops the caching
# allocator from handing its memory to the next chunk before the copy is done. The
# ``wait_stream`` calls at both ends order the pipeline after earlier work and the
# default stream (where the timer's end event goes) after the pipeline.
if on_cuda:
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copied = [torch.cuda.Event() for _ in range(n_chunks)]
    computed = [torch.cuda.Event() for _ in range(n_chunks)]


def pipelined(x_host, out_host, rec=untraced, sync_every_stage=False):
    main = torch.cuda.current_stream()
    copy_stream.wait_stream(main)
    compute_stream.wait_stream(main)
    wait = torch.cuda.synchronize if sync_every_stage else lambda: None

    def copy_in(i):
        with torch.cuda.stream(copy_stream), rec.span("copy stream", "copy in"):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        copied[i].record(copy_stream)

    copy_in(0)
    for i in range(n_chunks):
        if i + 1 < n_chunks:
            copy_in(i + 1)
        wait()
        with torch.cuda.stream(compute_stream):
            compute_stream.wait_event(copied[i])
            with rec.span("compute stream", "compute"):
                y = compute(x_dev[i])
            computed[i].record(compute_stream)
        wait()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(computed[i])
            with rec.span("copy stream", "copy out"):
                out_host[i].copy_(y, non_blocking=True)
            y.record_stream(copy_stream)
        wait()
    main.wait_stream(copy_stream)
    main.wait_stream(compute_stream)


if on_cuda:
    out_pinned.zero_()
    pipelined(x_pinned, out_pinned)
    sync()
    print(f"pipelined output equals serialized: {torch.equal(out_pinned, expected)}")

# %%
# (c) How the overlap silently fails
# ----------------------------------
# Each variant changes one thing in (b). (c1) uses pageable host memory: the driver
# stages such copies through a pinned buffer of its own, and a copy to pageable
# memory makes the host wait, so it cannot queue ahead. (c2) waits for the GPU after
# every stage, as the blog post did; an ``.item()``, ``.cpu()`` or ``print`` of a
# CUDA tensor in the loop blocks the host the same way.
versions = {"serialized": partial(serialized, x_pinned, out_pinned)}
if on_cuda:
    versions["pipelined"] = partial(pipelined, x_pinned, out_pinned)
    versions["pipelined, pageable"] = partial(pipelined, x_pageable, out_pageable)
    versions["pipelined, sync per stage"] = partial(
        pipelined, x_pinned, out_pinned, sync_every_stage=True
    )

# %%
# Timing the stages and the versions in rounds
# --------------------------------------------
# Overlap is a small difference of larger times, so the stages alone (the pageable
# version's copies from pageable memory) and every version take turns in the same
# rounds (:func:`gpuguide.interleave`): a drift of the machine (other processes,
# clocks, the host's memory) falls on all alike and shows in their spread.
stages = {
    "copies alone": partial(copies_only, x_pinned, out_pinned),
    "compute alone": compute_only,
}
if on_cuda:
    stages["copies alone, pageable"] = partial(copies_only, x_pageable, out_pageable)
results = gpuguide.interleave({**stages, **versions}, device=device)

# %%
# How much of the shorter stage was hidden?
# -----------------------------------------
# A version's overlap fraction is
# ``(copies alone + compute alone - version) / min(copies alone, compute alone)``
# (:func:`~gpuguide.chapters.timeline.stage_overlap`): 0% when it took as long as
# its stages one after the other, 100% when it hid the shorter stage completely, the
# most overlap can hide, below 0% when it took longer than its stages in turn. Its
# range comes from the quartiles of the three times; a range that holds 0% is no
# measurable overlap. The first copy in and the last copy out cannot hide; on a
# recent data-center GPU expect the pinned pipeline well above 50% and the two
# failures near 0% or below: waiting for the GPU after every stage adds a round trip
# per stage, and pageable copies pass through the driver's staging buffer while the
# host waits. Data-center GPUs have a copy engine per direction: a third stream for
# the copies out would overlap them too.
alone = results["compute alone"]
summary, hidden = [], {}
for name, m in results.items():
    row = {"version": name, "median ± IQR/2": m, "overlap fraction": "-"}
    if name in versions:
        c = results["copies alone, pageable" if "pageable" in name else "copies alone"]
        hidden[name] = stage_overlap(m, (c, alone))
        row["overlap fraction"] = hidden[name].short
        if name != "serialized":  # the pipelines' figures for the last cell
            percent, spread = hidden[name].percent
            gpuguide.record("shorter stage hidden", percent, unit="%", spread=spread,
                            version=name, size=f"{n_chunks} x {chunk_bytes}")  # fmt: skip
    summary.append(row)
print(gpuguide.table(summary))
for name in versions:
    print(hidden[name])
best = min(versions, key=lambda k: results[k].median_s)
speedup = results["serialized"].median_s / results[best].median_s
if not on_cuda:
    why = {
        NO_OVERLAP: "took as long as its stages alone, within the spread",
        "slower than its stages in turn": "lost time switching stages chunk by chunk",
    }.get(hidden["serialized"].verdict, "ran its stages faster than they ran alone")
    print(f"On the CPU stages run in turn, nothing overlaps: serialized {why}.")
elif (
    best != "pipelined"
    and gpuguide.compare(results[best], results["pipelined"]).measurable
):
    print(f"Unexpected: {best} beat the pinned pipeline here; see the timeline below.")

gain = gpuguide.compare(results[best], results["serialized"])
title = f"Fastest: {best}, {gpuguide.format_ratio(speedup)} faster than serialized"
if best == "serialized" or not gain.measurable:
    title = "No measurable gain over one stage at a time"
fig, ax = plt.subplots()
kw = {"title": title, "device": device, "baseline": "serialized"}
gpuguide.plot_bars(ax, results, ylabel="time for all chunks (ms)", **kw)
plt.show()

# %%
# The timeline, from events on each stream
# ----------------------------------------
# One more run of each version (so one run, not a median) with a recorder from
# :func:`~gpuguide.chapters.timeline.record_timeline`. It brackets each stage with
# two CUDA events on the stream doing the work, reads each as
# ``origin.elapsed_time(event)`` against an event recorded before the run (on the
# CPU, a host clock), and draws one row per stream: a single row when serialized,
# copy and compute side by side when pipelined.
timelines = {}
for name, pipeline in {"serialized": serialized, "pipelined": pipelined}.items():
    if name == "pipelined" and not on_cuda:
        break
    with record_timeline(device) as rec:
        pipeline(x_pinned, out_pinned, rec)
    timelines[name] = rec.spans

fig, axes = plt.subplots(len(timelines), 1, sharex=True, squeeze=False)
for ax, (name, spans) in zip(axes[:, 0], timelines.items(), strict=True):
    end = gpuguide.format_time(max(s.end_s for s in spans))
    both = overlap_s(spans, "copy stream", "compute stream")
    copying = sum(s.duration_s for s in spans if s.label != "compute")
    finding = f"copies overlap compute {both / copying:.0%} of their time"
    if both == 0:
        finding = "one stage at a time, no overlap"
    print(f"timeline, {name}: done after {end}; {finding}")
    plot_timeline(ax, spans, title=f"{name}: {end}, {finding}")
plt.show()
