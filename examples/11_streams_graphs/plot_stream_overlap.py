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
# few rounds (as many as balance copying and computing), copy the result back. One
# stream runs its work in order: serialized, the total is the sum of its stages.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, interleave, report

page = gpuguide.setup()
device, rounds = page.device, 1
cuda = page.needs_cuda("Overlapping copies with compute on streams")
n_chunks, rows, d = (16, 4096, 1024) if cuda and not page.small else (16, 512, 64)
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


def serialized(x_host, out_host, work=compute):  # work=lambda x: x: copies alone
    for i in range(n_chunks):
        x_dev[i].copy_(x_host[i], non_blocking=True)
        out_host[i].copy_(work(x_dev[i]), non_blocking=True)


copies = benchmark(serialized, args=(x_pinned, out_pinned, lambda x: x), device=device)
one_round = benchmark(compute, args=(x_dev[0],), device=device)
rounds = max(1, min(64, round(copies.median_s / n_chunks / one_round.median_s)))


# %%
# Pipelined on a copy stream and a compute stream
# -----------------------------------------------
# The copy stream copies chunk ``i + 1`` in while the compute stream works on chunk
# ``i``; ``wait_event`` makes a stream wait for another's event without blocking the
# host. The next copy in is queued *before* this chunk's copy out, which waits for
# its compute; ``y.record_stream`` keeps the allocator from reusing ``y`` too soon.
def pipelined(x_host, out_host, wait=lambda: None):  # wait: after every stage
    main = torch.cuda.current_stream()
    copy_stream, compute_stream = torch.cuda.Stream(), torch.cuda.Stream()
    copy_stream.wait_stream(main)  # the compute stream waits on the copy stream

    def copy_in(i):  # an event recorded after the copy, for the compute to wait on
        with torch.cuda.stream(copy_stream):
            x_dev[i].copy_(x_host[i], non_blocking=True)
            return copy_stream.record_event()

    copied = [copy_in(0)]
    for i in range(n_chunks):
        if i + 1 < n_chunks:
            copied.append(copy_in(i + 1))
        wait()
        with torch.cuda.stream(compute_stream):
            compute_stream.wait_event(copied[i])
            y = compute(x_dev[i])
            computed = compute_stream.record_event()
        wait()
        with torch.cuda.stream(copy_stream):
            copy_stream.wait_event(computed)
            out_host[i].copy_(y, non_blocking=True)
            y.record_stream(copy_stream)
        wait()
    main.wait_stream(copy_stream)  # which waited for the last compute


if cuda:  # the pipeline's output is each chunk's compute (.cpu() waits for it)
    pipelined(x_pinned, out_pinned)
    assert torch.equal(out_pinned, torch.stack([compute(x) for x in x_dev]).cpu())

# %%
# How much the pipeline hid, and how the overlap silently fails
# -------------------------------------------------------------
# ``copies alone + compute alone - version``, over the shorter stage, is the share
# a version hid (0%: none, 100%: all of it); the quartiles give its range. Each
# failure changes one thing in the pipeline. "pageable": a copy to pageable memory
# makes the host wait, so it cannot queue ahead. "sync per stage" waits for the GPU
# after every stage, as an ``.item()`` in the loop does. A CPU runs all in turn.
stages = {
    "serialized": lambda: serialized(x_pinned, out_pinned),
    "copies alone": lambda: serialized(x_pinned, out_pinned, lambda x: x),
    "compute alone": lambda: [compute(x) for x in x_dev],
}
if cuda:
    stages["pipelined"] = lambda: pipelined(x_pinned, out_pinned)
    stages["pipelined, pageable"] = lambda: pipelined(x_pageable, out_pageable)
    stages["pipelined, sync per stage"] = lambda: pipelined(
        x_pinned, out_pinned, wait=torch.cuda.synchronize
    )
results = interleave(stages, device=device)
c, k, v = (results[n] for n in ("copies alone", "compute alone", "serialized"))
p = results.get("pipelined", v)  # a CPU has no pipeline: the serialized share
noisy = [m.label for m in dict.fromkeys((c, k, v, p)) if m.is_noisy]
gpuguide.claim(
    "serialized takes at least 90% of its stages' time in turn",
    v.median_s / (c.median_s + k.median_s),
    spread=(v.q25_s / (c.q75_s + k.q75_s), v.q75_s / (c.q25_s + k.q25_s)),
    at_least=0.9,
    timed=True,
    unless=f"{', '.join(noisy)} NOISY here: no check" if noisy else None,
)
ends = (min(c.q25_s, k.q25_s), min(c.q75_s, k.q75_s))  # of the shorter stage
low = min(100 * (c.q25_s + k.q25_s - p.q75_s) / end for end in ends)
high = max(100 * (c.q75_s + k.q75_s - p.q25_s) / end for end in ends)
share = 100 * (c.median_s + k.median_s - p.median_s) / min(c.median_s, k.median_s)
report("shorter stage hidden", share, unit="%", spread=(low, high), version=p.label)
gpuguide.claim(
    "the pinned pipeline hides more than half of the shorter stage",
    share,
    spread=(low, high),
    at_least=50,
    timed=True,
    on="cuda",
    unless=f"{', '.join(noisy)} NOISY here: no check" if noisy else None,
)
for failure in ("pipelined, pageable", "pipelined, sync per stage"):
    gpuguide.claim(
        f"the pinned pipeline is at least 1.2x faster than {failure}",
        compare(results["pipelined"], results[failure]) if cuda else None,
        at_least=1.2,
        on="cuda",
    )
title = f"{p.label}: {share:.0f}% of the shorter stage hidden"
_, ax = plt.subplots()
gpuguide.plot_bars(ax, results, ylabel="time for all chunks (ms)", title=title)
plt.show()
