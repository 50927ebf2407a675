"""
Transfer bandwidth and pinned memory
====================================

Data reaches a GPU over the host link (PCIe on most machines), one to two orders of
magnitude slower than the GPU's own memory. This page measures what that link
delivers, host to device (H2D) and back (D2H), for copies from 4 KiB upwards: from
*pageable* host memory, from *pinned* (page-locked) memory, and from pinned memory
with ``non_blocking=True``; then, on a GPU, what ``pin_memory()`` costs, and after
how many copies it pays off. On a CPU-only machine it times copies between host
buffers instead, and the GPU's claims are not checked here.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# Without a CUDA GPU (``pin_memory()`` then raises) the page times host copies.
import math
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, break_even, compare, format_bytes, format_time, report
from gpuguide.chapters import data

page = gpuguide.setup()
device, cpu, peaks = page.device, torch.device("cpu"), page.peaks
on_gpu = page.needs_cuda("H2D and D2H copies, pinned memory and pin_memory()")
# Copy sizes double from 4 KiB up to what fits (on a GPU: four host buffers and one on
# the device) and the time budget (planned at 10 GB/s, or at the CPU's bandwidth).
sizes = data.copy_sizes(on_gpu=on_gpu, peaks=peaks)
n_max = sizes[-1]
# The headline figures are taken at 64 MiB (or the largest size below it): past the
# CPU's caches, where GPU copies level off, and the same size on every device. A
# copy's bandwidth depends on its size, so each figure names it.
at = max(i for i, n in enumerate(sizes) if n <= 2**26)
n_head = sizes[at]
print(f"{len(sizes)} sizes from {format_bytes(sizes[0])} to {format_bytes(n_max)}")


# %%
# What is timed
# -------------
# The call is ``dst.copy_(src)`` into a destination made beforehand (``.to()`` would
# time the allocator too). A ``non_blocking=True`` copy's end event is recorded on
# the stream right after it, so the time still covers the copy: non-blocking frees the
# host, it does not make the copy faster. At each size the six ways take turns
# (:func:`gpuguide.interleave`); on the CPU, ``copy_`` between two CPU tensors.
def copy(dst, src, non_blocking=False):
    return dst.copy_(src, non_blocking=non_blocking)


WAYS = ("pageable", "pinned", "pinned + non_blocking")


def time_transfers(n):
    if not on_gpu:
        src, dst = torch.randn(n // 4), torch.empty(n // 4)
        m = benchmark(copy, args=(dst, src), warmup_ms=10, rep_ms=50)
        return {("host-to-host", "copy_ between CPU tensors"): m}
    pageable, on_device = torch.randn(n // 4), torch.empty(n // 4, device=device)
    pinned = pageable.pin_memory()
    pageable_out, pinned_out = torch.empty(n // 4), torch.empty(n // 4, pin_memory=True)
    plans = {
        ("H2D", "pageable"): (on_device, pageable, False),
        ("H2D", "pinned"): (on_device, pinned, False),
        ("H2D", "pinned + non_blocking"): (on_device, pinned, True),
        ("D2H", "pageable"): (pageable_out, on_device, False),
        ("D2H", "pinned"): (pinned_out, on_device, False),
        ("D2H", "pinned + non_blocking"): (pinned_out, on_device, True),
    }
    found = gpuguide.interleave(
        {" ".join(key): partial(copy, *plan) for key, plan in plans.items()},
        device=device,
        warmup_ms=10,
        rep_ms=50,
    )
    return dict(zip(plans, found.values(), strict=True))


found = [time_transfers(n) for n in sizes]
results = {key: [at_size[key] for at_size in found] for key in found[0]}

# %%
# Pinned against pageable
# -----------------------
# The GPU's copy engines read host memory by DMA, which needs pages the operating
# system cannot move: from pageable memory the driver first copies each chunk into a
# pinned staging buffer. Expect pinned copies to be faster and nearer the link's
# peak, at least 60% of it, and the gain over pageable to be larger the faster the
# link. The link's peak is the one the card negotiates in its slot where NVML says
# so plausibly, else the datasheet's (also for a copy that ran faster than NVML's
# link: NVML then does not see the real one, as in some virtual machines).
if on_gpu:
    fastest = max(
        n / m.median_s
        for ms in results.values()
        for n, m in zip(sizes, ms, strict=True)
    )
    link_bytes_s, which = peaks.host_link_for(fastest)
    link_text = gpuguide.format_rate(link_bytes_s, "B/s")
    print(f"host link peak per direction: {link_text} ({which})")
for (direction, way), ms in results.items():
    config = {"peak": "host_link", "memory": way} if on_gpu else {}
    rate = ms[at].rate(n_head, "B/s")
    report(
        f"{direction} bandwidth", rate, size=n_head, copy=format_bytes(n_head), **config
    )
for direction in ("H2D", "D2H"):  # the GPU's claims; on a CPU, not checked here
    versus = rate = grows = spread = None
    if on_gpu:
        pageable, pinned, pinned_async = (results[direction, w][at] for w in WAYS)
        versus, rate = compare(pinned, pageable), pinned.rate(n_head, "B/s")
        both = f"{versus}; {compare(pinned_async, pinned)}"
        print(f"{direction} at {format_bytes(n_head)}: {both}")
        small = results[direction, "pinned"][0].rate(sizes[0], "B/s")
        grows = rate.value / small.value
        spread = (rate.low / small.high, rate.high / small.low)
    copy_text = f"a pinned {direction} copy of {format_bytes(n_head)}"
    gpuguide.claim(
        f"{copy_text} is faster than a pageable one",
        versus,
        verdict="faster",
        on="cuda",
    )
    gpuguide.claim(
        f"{copy_text} reaches at least 60% of the link's peak",
        rate,
        at_least=0.6 * link_bytes_s if on_gpu else 0,
        on="cuda",
    )
    gpuguide.claim(
        f"{copy_text} runs at least 10x the bytes/s of one of {format_bytes(sizes[0])}",
        grows,
        spread=spread,
        at_least=10,
        timed=True,
        on="cuda",
    )
if on_gpu:
    small, large = results["H2D", "pageable"][0], results["H2D", "pageable"][-1]
    bytes_s = sizes[0] / n_max * large.median_s  # its bytes at the large-copy rate
    print(
        f"smallest pageable H2D copy, {format_bytes(sizes[0])}: "
        f"{format_time(small.median_s)}, {format_time(bytes_s)} of it for the bytes"
    )
    src = torch.randn(sizes[0] // 4).pin_memory()
    to = torch.empty(sizes[0] // 4, device=device)
    engine = benchmark(copy, args=(to, src, True), device=device, measure="kernel")
    print(f"on the copy engine alone, a pinned one: {format_time(engine.median_s)}")

# %%
# Plot
# ----
# On a GPU, expect every curve to rise with size, as a fixed cost per copy (the
# launch, setting up the transfer, a blocking copy's wait) dominates small copies,
# and to level off from about a megabyte. On the CPU, expect copies in the caches to
# run at least 1.5x the largest copy's rate, through main memory.
for direction in ("H2D", "D2H") if on_gpu else ("host-to-host",):
    ways = {way: ms for (d, way), ms in results.items() if d == direction}
    # GB/s by size; on a GPU, each way against pageable at the largest size
    series = data.bandwidth_series(sizes, ways, vs_first=on_gpu)
    best = max(max(rates) for rates in series.values()) * 1e9
    if on_gpu:
        finding = peaks.share(best, "host_link", peak="the link peak")
        ref, what = link_bytes_s, "link peak"
    else:  # the largest copy runs through main memory; the best, in a cache
        (ms,) = ways.values()
        i = max(range(len(sizes)), key=lambda i: sizes[i] / ms[i].median_s)
        fast, large = ms[i].rate(sizes[i], "B/s"), ms[-1].rate(n_max, "B/s")
        ref, what = large.value, f"a {format_bytes(n_max)} copy (main memory)"
        finding = f"{best / ref:.3g}x {what} at {format_bytes(sizes[i])}"
        gpuguide.claim(
            "the fastest copy, in a cache, runs at least 1.5x the rate of the "
            "largest copy, through main memory",
            fast.value / large.value,
            spread=(fast.low / large.high, fast.high / large.low),
            at_least=1.5,
            timed=True,
            measured=f"{fast} at {format_bytes(sizes[i])} against {large}",
        )
    fig, ax = plt.subplots()
    gpuguide.plot_sweep(
        ax,
        sizes,
        series,
        xlabel="copy size (bytes)",
        ylabel="bandwidth (GB/s)",
        title=f"{direction}: up to {best / 1e9:.3g} GB/s, {finding}",
    )
    if ref is not None:  # an unknown GPU without NVML has no link peak
        label = f"{what}: {ref / 1e9:.1f} GB/s"
        ax.axhline(ref / 1e9, color="0.3", ls="--", label=label)
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.5 * ref / 1e9))
    ax.legend(title="vs pageable at the largest size" if on_gpu else None)
    plt.show()

# %%
# What does ``pin_memory()`` cost?
# --------------------------------
# ``pin_memory()`` copies the tensor into a pinned buffer (the first allocation also
# page-locks it, a repeat reuses PyTorch's cache). It pays off after ``pin time /
# (pageable - pinned copy)`` copies of one buffer, if pinned is measurably faster.
if on_gpu:
    host, stat = torch.randn(n_max // 4), "host_alloc_time.total"  # in us
    empty = data.host_cache_emptier()  # gives the cached pinned buffers back
    torch.cuda.synchronize()  # every earlier copy is done, so its buffer is free
    if empty is not None:
        empty()  # the next pin must allocate
    stats = getattr(torch.cuda, "host_memory_stats", dict)
    before = stats()
    pin = benchmark(host.pin_memory, device=cpu, label="pin_memory()")
    after = stats()
    alloc_s = (after[stat] - before.get(stat, 0)) / 1e6 if stat in after else math.nan
    spent = "an unreported time" if math.isnan(alloc_s) else format_time(alloc_s)
    if empty is None:
        spent += " (this torch cannot empty the pinned cache: maybe reused)"
    pageable, pinned = (results["H2D", w][-1] for w in WAYS[:2])
    report("pin_memory()", pin, size=n_max)
    print(f"the first call also spent {spent} allocating")
    print(f"pin_memory() is {pin.median_s / pageable.median_s:.3g}x one pageable copy")
    copies = break_even(pin, pageable, pinned)
    alloc = "unknown"
    if math.isfinite(alloc_s):
        alloc = break_even(pin.median_s + alloc_s, pageable, pinned)
    if copies is None:
        print("pinned copies were not measurably faster here: pinning never pays off")
    else:
        print(f"break-even: {copies} copies of one pinned buffer ({alloc} with alloc)")
    del host
    if empty is not None:
        empty()  # give the pinned memory back

# %%
# What to take away
# -----------------
# Pinned memory usually speeds up each transfer and ``non_blocking=True`` frees the
# host meanwhile, but pinning is itself a copy and takes memory from the system: pin
# buffers you reuse (``DataLoader(pin_memory=True)``), not tensors you send once.
gpuguide.takeaway()
