"""
Overlapping copies with compute: CUDA streams done right
========================================================

A GPU's copy engines move data over PCIe while its SMs compute, if the program
lets them: work split into chunks, copies and compute on streams tied together by
events, pinned host memory. This page builds that pipeline and measures how much
of the shorter stage it hides, against one stage after the other and against two
ways the overlap silently disappears. The next page draws the work on each stream
from CUDA events.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`Amdahl's law for a training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# Chunks: copy one to the device, run a few rounds of ``tanh(x @ w)`` on it, copy
# the result back. The host holds all chunks, pageable and pinned (page-locked, which
# the copy engines can read asynchronously). Overlap helps most when copying and
# computing take about as long: the rounds per chunk are chosen to balance them.
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, interleave, largest_size, report, table

page = gpuguide.setup()
device, rounds = page.device, 1
cuda = page.needs_cuda("Overlapping copies with compute on streams")
sync = getattr(torch, device.type).synchronize  # torch.cpu.synchronize does nothing
d, n_chunks = (1024 if cuda else 64), (8 if page.small else 16)
# Every chunk three times (pageable, pinned, on the device), 4 bytes per element:
rows = largest_size(
    64, 4096 if cuda else 512, multiple_of=64, memory_at=lambda r: 12 * n_chunks * r * d
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


def map_chunks(fn):  # each chunk's result dropped, as in the versions below
    for x in x_dev:
        fn(x)


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
# (a) Serialized: everything on the default stream
# ------------------------------------------------
# One stream runs its work in order: each chunk's copy in, compute and copy out wait
# for the previous one, and the total is the sum of the stages, ``non_blocking`` or
# not.


def serialized(x_host, out_host):
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        y = compute(x_dev[i])
        out_host[i].copy_(y, non_blocking=True)


# %%
# (b) Pipelined: a copy stream, a compute stream, events between them
# -------------------------------------------------------------------
# The copy stream copies chunk ``i + 1`` in while the compute stream works on chunk
# ``i``. ``wait_event`` makes a stream wait for an event of another stream without
# blocking the host. A stream runs in issue order, so the next chunk's copy in is
# queued *before* this chunk's copy out, which must wait for its compute. The copy
# stream reads ``y``, allocated on the compute stream: ``y.record_stream`` keeps the
# caching allocator from handing its memory to the next chunk before the copy is
# done. ``wait_stream`` orders the pipeline after earlier work, and back.
if cuda:
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copied = [torch.cuda.Event() for _ in range(n_chunks)]
    computed = [torch.cuda.Event() for _ in range(n_chunks)]


def pipelined(x_host, out_host, sync_every_stage=False):
    main = torch.cuda.current_stream()
    copy_stream.wait_stream(main)
    compute_stream.wait_stream(main)
    wait = torch.cuda.synchronize if sync_every_stage else lambda: None

    def copy_in(i):
        with torch.cuda.stream(copy_stream):
            x_dev[i].copy_(x_host[i], non_blocking=True)
        copied[i].record(copy_stream)

    copy_in(0)
    for i in range(n_chunks):
        if i + 1 < n_chunks:
            copy_in(i + 1)
        wait()
        with torch.cuda.stream(compute_stream):
            compute_stream.wait_event(copied[i])
            y = compute(x_dev[i])
            computed[i].record(compute_stream)
        wait()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(computed[i])
            out_host[i].copy_(y, non_blocking=True)
            y.record_stream(copy_stream)
        wait()
    main.wait_stream(copy_stream)
    main.wait_stream(compute_stream)


if not cuda:  # the claims of the parts that run on a GPU only
    gpuguide.claim("the pipelined output equals the serialized one", on="cuda")
    gpuguide.claim(
        "the pinned pipeline hides more than half of the shorter stage", on="cuda"
    )
    for failure in ("pipelined, pageable", "pipelined, sync per stage"):
        gpuguide.claim(
            f"the pinned pipeline is at least 1.2x faster than {failure}", on="cuda"
        )
else:
    serialized(x_pinned, out_pinned)
    sync()
    expected = out_pinned.clone()
    out_pinned.zero_()
    pipelined(x_pinned, out_pinned)
    sync()
    gpuguide.claim(
        "the pipelined output equals the serialized one",
        holds=torch.equal(out_pinned, expected),
        measured="compared with torch.equal",
    )

# %%
# (c) How the overlap silently fails, and how much each version hid
# -----------------------------------------------------------------
# Each failure changes one thing in (b). "pageable": the driver stages such copies
# through a pinned buffer of its own, and a copy to pageable memory makes the host
# wait, so it cannot queue ahead. "sync per stage" waits for the GPU after every
# stage, as a popular blog post did (an ``.item()`` in the loop does the same).
#
# The stages alone and the versions take turns in the same rounds. ``copies alone +
# compute alone - version`` is the time a version saved by running its stages at
# once: over the shorter stage, 0% when it took as long as its stages in turn, 100%
# when it hid the shorter stage completely. The quartiles of the three times give
# its range; a range that holds 0% is no measurable overlap. The claims below state
# what to expect: on a GPU the pinned pipeline above 50% (the first copy in and the
# last copy out cannot hide), the failures far below it; on any device, the
# serialized version no faster than its stages in turn (on a CPU, everything runs in
# turn).
stages = {
    "copies alone": partial(copies_only, x_pinned, out_pinned),
    "compute alone": partial(map_chunks, compute),
}
versions = {"serialized": partial(serialized, x_pinned, out_pinned)}
if cuda:
    stages["copies alone, pageable"] = partial(copies_only, x_pageable, out_pageable)
    versions["pipelined"] = partial(pipelined, x_pinned, out_pinned)
    versions["pipelined, pageable"] = partial(pipelined, x_pageable, out_pageable)
    versions["pipelined, sync per stage"] = partial(
        pipelined, x_pinned, out_pinned, sync_every_stage=True
    )
results = interleave({**stages, **versions}, device=device)
print(table([{"version": k, "time": m} for k, m in results.items()]))
for name in versions:
    c = results["copies alone, pageable" if "pageable" in name else "copies alone"]
    k, v = results["compute alone"], results[name]
    # saved / shorter stage, at the median and at the ends the quartiles allow
    low_saved = c.q25_s + k.q25_s - v.q75_s
    high_saved = c.q75_s + k.q75_s - v.q25_s
    low = (
        100 * low_saved / min(c.q75_s, k.q75_s)
        if low_saved >= 0
        else (100 * low_saved / min(c.q25_s, k.q25_s))
    )
    high = (
        100 * high_saved / min(c.q25_s, k.q25_s)
        if high_saved >= 0
        else (100 * high_saved / min(c.q75_s, k.q75_s))
    )
    verdict = "overlap"
    if high < 0:
        verdict = "slower than its stages in turn"
    elif low <= 0:
        verdict = "no measurable overlap (its range holds 0%)"
    elif low > 100:
        verdict = "saved more than the shorter stage: its stages ran faster inside it"
    print(f"{name}: {verdict}")
    share = 100 * (c.median_s + k.median_s - v.median_s) / min(c.median_s, k.median_s)
    noisy = [m.label for m in (c, k, v) if m.is_noisy]
    unsteady = f"{', '.join(noisy)} NOISY here: no check" if noisy else None
    report(
        "shorter stage hidden",
        share,
        unit="%",
        spread=(low, high),
        version=name,
        size=f"{n_chunks} x {chunk}",
    )
    if name == "serialized":
        gpuguide.claim(
            "serialized takes at least 90% of its stages' time in turn",
            v.median_s / (c.median_s + k.median_s),
            spread=(v.q25_s / (c.q75_s + k.q75_s), v.q75_s / (c.q25_s + k.q25_s)),
            at_least=0.9,
            timed=True,
            unless=unsteady,
        )
    elif name == "pipelined":
        gpuguide.claim(
            "the pinned pipeline hides more than half of the shorter stage",
            share,
            spread=(low, high),
            at_least=50,
            timed=True,
            unless=unsteady,
        )
if cuda:
    for failure in ("pipelined, pageable", "pipelined, sync per stage"):
        gpuguide.claim(
            f"the pinned pipeline is at least 1.2x faster than {failure}",
            compare(results["pipelined"], results[failure]),
            at_least=1.2,
        )
best = min(versions, key=lambda k: results[k].median_s)
gain = compare(results[best], results["serialized"])
title = "No measurable gain over one stage at a time"
if gain.measurable:
    title = f"Fastest: {best}, {gain.short}"
print(f"fastest: {gain}" if gain.measurable else title)
_, ax = plt.subplots()
gpuguide.plot_bars(
    ax, results, ylabel="time for all chunks (ms)", title=title, baseline="serialized"
)
plt.show()
