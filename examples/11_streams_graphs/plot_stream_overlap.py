"""
Overlapping copies with compute: CUDA streams done right
========================================================

A GPU's copy engines move data over PCIe while its SMs compute, if the program
lets them: work split into chunks, copies and compute on streams tied together by
events, pinned host memory. This page builds that pipeline and measures how much of
the shorter stage it hides, against one stage after the other and two ways the
overlap silently disappears. The next page draws the work on each stream.

See also :doc:`how a GPU runs PyTorch </concepts/gpu>` and :doc:`Amdahl's law for a
training step </concepts/amdahl>`.
"""

# %%
# Setup
# -----
# Chunks, pageable and pinned on the host: copy one in, run ``tanh(x @ w)`` on it a
# few rounds (as many as balance copying and computing), copy the result back.
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, interleave, largest_size, report

page = gpuguide.setup()
device, rounds = page.device, 1
cuda = page.needs_cuda("Overlapping copies with compute on streams")
d, n_chunks = (1024 if cuda else 64), (8 if page.small else 16)
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


def compute_only():  # each chunk's result dropped, as in the versions below
    for x in x_dev:
        compute(x)


def copies_only(x_host, out_host):
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        out_host[i].copy_(x_dev[i], non_blocking=True)


copies = benchmark(copies_only, args=(x_pinned, out_pinned), device=device)
one_round = benchmark(compute, args=(x_dev[0],), device=device)
rounds = max(1, min(64, round(copies.median_s / n_chunks / one_round.median_s)))

# %%
# Serialized, then pipelined on a copy stream and a compute stream
# ----------------------------------------------------------------
# One stream runs its work in order: the total is the sum of its stages.


def serialized(x_host, out_host):
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        y = compute(x_dev[i])
        out_host[i].copy_(y, non_blocking=True)


# The copy stream copies chunk ``i + 1`` in while the compute stream works on chunk
# ``i``; ``wait_event`` makes a stream wait for another's event without blocking the
# host. The next copy in is queued *before* this chunk's copy out, which waits for
# its compute; ``y.record_stream`` keeps the allocator from reusing ``y`` too soon.
if cuda:
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copied = [torch.cuda.Event() for _ in range(n_chunks)]
    computed = [torch.cuda.Event() for _ in range(n_chunks)]


def pipelined(x_host, out_host, wait=lambda: None):  # wait: after every stage
    main = torch.cuda.current_stream()
    copy_stream.wait_stream(main)
    compute_stream.wait_stream(main)

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


if cuda:  # the pipeline's output against the serialized one
    expected = torch.empty_like(out_pinned)
    serialized(x_pinned, expected)
    pipelined(x_pinned, out_pinned)
    torch.cuda.synchronize()
gpuguide.claim(
    "the pipelined output equals the serialized one",
    holds=cuda and torch.equal(out_pinned, expected),
    measured="compared with torch.equal",
    on="cuda",
)

# %%
# How the overlap silently fails, and how much each version hid
# -------------------------------------------------------------
# Each failure changes one thing in the pipeline. "pageable": a copy to pageable
# memory makes the host wait, so it cannot queue ahead. "sync per stage" waits for
# the GPU after every stage, as an ``.item()`` in the loop does. ``copies alone +
# compute alone - version``, over the shorter stage, is the share a version hid (0%:
# none, 100%: all of it); the quartiles give its range. A CPU runs all in turn.
stages = {"copies alone": partial(copies_only, x_pinned, out_pinned)}
stages["compute alone"] = compute_only
versions = {"serialized": partial(serialized, x_pinned, out_pinned)}
if cuda:
    stages["copies alone, pageable"] = partial(copies_only, x_pageable, out_pageable)
    versions["pipelined"] = partial(pipelined, x_pinned, out_pinned)
    versions["pipelined, pageable"] = partial(pipelined, x_pageable, out_pageable)
    versions["pipelined, sync per stage"] = partial(
        pipelined, x_pinned, out_pinned, wait=torch.cuda.synchronize
    )
results = interleave({**stages, **versions}, device=device)
pipeline = {}
for name in versions:
    c = results["copies alone, pageable" if "pageable" in name else "copies alone"]
    k, v = results["compute alone"], results[name]
    ends = (min(c.q25_s, k.q25_s), min(c.q75_s, k.q75_s))  # of the shorter stage
    low = min(100 * (c.q25_s + k.q25_s - v.q75_s) / end for end in ends)
    high = max(100 * (c.q75_s + k.q75_s - v.q25_s) / end for end in ends)
    share = 100 * (c.median_s + k.median_s - v.median_s) / min(c.median_s, k.median_s)
    report("shorter stage hidden", share, unit="%", spread=(low, high), version=name)
    noisy = [m.label for m in (c, k, v) if m.is_noisy]
    unless = f"{', '.join(noisy)} NOISY here: no check" if noisy else None
    if name == "pipelined":
        pipeline = {"value": share, "spread": (low, high), "unless": unless}
    elif name == "serialized":
        gpuguide.claim(
            "serialized takes at least 90% of its stages' time in turn",
            v.median_s / (c.median_s + k.median_s),
            spread=(v.q25_s / (c.q75_s + k.q75_s), v.q75_s / (c.q25_s + k.q25_s)),
            at_least=0.9,
            timed=True,
            unless=unless,
        )
gpuguide.claim(
    "the pinned pipeline hides more than half of the shorter stage",
    **pipeline,
    at_least=50,
    timed=True,
    on="cuda",
)
for failure in ("pipelined, pageable", "pipelined, sync per stage"):
    gpuguide.claim(
        f"the pinned pipeline is at least 1.2x faster than {failure}",
        compare(results["pipelined"], results[failure]) if cuda else None,
        at_least=1.2,
        on="cuda",
    )
best = min(versions, key=lambda k: results[k].median_s)
gain = compare(results[best], results["serialized"])
title = f"Fastest: {best}, {gain.short}" if gain.measurable else "No measurable gain"
_, ax = plt.subplots()
gpuguide.plot_bars(
    ax, results, ylabel="time for all chunks (ms)", title=title, baseline="serialized"
)
plt.show()
