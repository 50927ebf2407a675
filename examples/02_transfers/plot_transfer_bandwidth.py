"""
Transfer bandwidth and pinned memory
====================================

Data reaches a GPU over the host link (PCIe on most machines), which is one to two
orders of magnitude slower than the GPU's own memory. This page measures what that
link delivers for copies from 4 KiB upwards, host to device (H2D) and device to host
(D2H), three ways: from ordinary *pageable* host memory, from *pinned* (page-locked)
memory made with ``pin_memory()``, and from pinned memory with ``non_blocking=True``.

It then times ``pin_memory()`` itself. Pinning copies the tensor into a new buffer, so
it pays off only when that buffer is used for several transfers; the printout gives
the break-even number of copies.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The comparison needs a CUDA GPU. Without one, ``pin_memory()`` raises in recent
# PyTorch, so it is never called; the page measures host-to-host copies instead.
import math
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import format_bytes, format_rate, format_ratio, format_time
from gpuguide.tables import format_cell

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
on_gpu = device.type == "cuda" and torch.cuda.is_available()
cpu = torch.device("cpu")
peaks = gpuguide.device_peaks(device)
link = peaks.host_link_bytes_per_s if on_gpu else None
if on_gpu:
    print(f"host link peak per direction: {format_rate(link, 'B/s')} ({peaks.source})")
else:
    print(
        "H2D/D2H copies, pinned memory and the cost of pin_memory() need a CUDA GPU; "
        "this run measures host-to-host copy_ bandwidth instead. H2D and D2H figures "
        "recorded on GPUs are at the end of the page."
    )

# %%
# Sizes
# -----
# Copy sizes double from 4 KiB. On a GPU each size holds four host buffers (pageable
# and pinned, source and destination) and one on the device; the time per copy is
# planned at gpuguide's fallback rate of 10 GB/s, below any current host link. On the
# CPU a copy reads and writes ``n`` bytes, planned at the CPU's measured bandwidth.
sizes = gpuguide.sweep(
    4096, 2**30, memory_at=lambda n: (4 if on_gpu else 2) * n,
    traffic_at=lambda n: n if on_gpu else 2 * n, device=cpu,
    call_s=0.1 if on_gpu else None, peaks=None if on_gpu else peaks,
)  # fmt: skip
if on_gpu:
    fits = gpuguide.sweep(4096, 2**30, memory_at=lambda n: n)
    sizes = [n for n in sizes if n in fits]
n_max = sizes[-1]
print(f"{len(sizes)} sizes from {format_bytes(sizes[0])} to {format_bytes(n_max)}")

# %%
# What is timed
# -------------
# Every destination exists before timing starts, and the call is ``dst.copy_(src)``,
# so only the copy is timed, not the allocator (``src.to(device)`` would allocate a
# new tensor every call). With ``non_blocking=True``, ``copy_`` returns as soon as the
# copy is queued; the benchmark records its end event on the same stream right after
# the call, and that event completes only when the copy has, so the time still covers
# the whole copy. Non-blocking frees the host during the copy; it does not make the
# copy itself faster (a blocking copy may read a few microseconds longer: its end
# event is recorded only once the host has woken up from waiting for the copy).
#
# At each size the six ways take turns for five rounds (:func:`gpuguide.interleave`),
# each with 10 ms of warm-up and 50 ms of timed calls in all, below the defaults, to
# keep the sweep short. Every time is per call as a loop of copies runs it: a small
# copy's time is mostly its launch and, for a blocking copy, the host's wait
# (``measure="call"``, the default).


def copy(dst, src, non_blocking=False):
    return dst.copy_(src, non_blocking=non_blocking)


WAYS = ("pageable", "pinned", "pinned + non_blocking")


def time_transfers(n):
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


# %%
# The sweep
# ---------
# Bandwidth is bytes copied divided by the median time. On the CPU the sweep times
# ``copy_`` between two CPU tensors. ``.to("cpu")`` would not do: for a tensor already
# on the CPU it returns the same tensor and copies nothing.
x = torch.randn(4)
print(f'x.to("cpu") is x: {x.to("cpu") is x}, so it cannot be used to time a copy')
results = {}
for n in sizes:
    if on_gpu:
        found = time_transfers(n)
    else:
        src, dst = torch.randn(n // 4), torch.empty(n // 4)
        found = {
            ("host-to-host", "copy_"): gpuguide.benchmark(
                copy, args=(dst, src), warmup_ms=10, rep_ms=50
            )
        }
    for key, m in found.items():
        results.setdefault(key, []).append(m)


def gbps(key):
    return [n / m.median_s / 1e9 for n, m in zip(sizes, results[key], strict=True)]


# %%
# Pinned against pageable
# -----------------------
# Pinning is often explained as keeping the pages from being swapped out. That is
# what pinning does; the speed comes from how the GPU copies: its copy engines read
# host memory by DMA, which needs pages the operating system cannot move. From pageable
# memory the driver first copies each chunk into a pinned staging buffer, then sends
# it, so expect pinned copies to be faster and nearer the link's peak (70-90% on a
# healthy PCIe link). By how much depends on the link: a pageable copy is held back
# by the host's own copy into the staging buffer, a pinned one only by the link, so
# the faster the link, the larger the gain: well under 2x on PCIe 3.0, several times
# on PCIe 5.0. The 16 and 32 GB/s often quoted for the link are the peaks of PCIe
# 3.0 and 4.0 x16, not of every machine. The verdicts compare the medians with their
# spread (:func:`gpuguide.compare`). The rates at the largest size are recorded,
# pageable and pinned, with the range their quartiles give.
for key, ms in results.items():
    rate, m = n_max / ms[-1].median_s, ms[-1]
    of_link = f", {peaks.share(rate, 'host_link', peak='the link peak')}"
    print(
        f"{' '.join(key)} at {format_bytes(n_max)}: {format_rate(rate, 'B/s')}"
        f"{of_link if on_gpu else ''} (median {format_cell(m)})"
    )
    spread = (n_max / m.q75_s, n_max / m.q25_s)
    if on_gpu and key[1] in ("pageable", "pinned"):
        gpuguide.record(
            f"{key[0]} bandwidth", rate, unit="B/s", spread=spread, size=n_max,
            peak="host_link", memory=key[1],
        )  # fmt: skip
    elif not on_gpu:
        gpuguide.record(
            "host-to-host bandwidth", rate, unit="B/s", spread=spread, size=n_max
        )
for direction in ("H2D", "D2H") if on_gpu else ():
    pageable, pinned, pinned_async = (results[direction, w][-1] for w in WAYS)
    pinning = gpuguide.compare(pinned, pageable)
    print(f"{direction}: {pinning}")
    print(f"{direction}: {gpuguide.compare(pinned_async, pinned)}")
if on_gpu:
    first, last = results["H2D", "pageable"][0], results["H2D", "pageable"][-1]
    bytes_s = sizes[0] * last.median_s / n_max  # its bytes at the large-copy rate
    first_src = torch.randn(sizes[0] // 4).pin_memory()
    print(
        f"smallest pageable H2D copy, {format_bytes(sizes[0])}: {format_cell(first)} "
        f"per call, {format_time(bytes_s)} of it for the bytes at the large-copy "
        f"rate, the rest a fixed cost per copy (about 10 us on typical systems)"
    )
    # The copy engine's own time for a pinned copy of that size, launches hidden.
    engine = gpuguide.benchmark(
        copy,
        args=(torch.empty(sizes[0] // 4, device=device), first_src, True),
        device=device,
        measure="kernel",
    )
    print(f"the copy engine's own time for a pinned one: {format_cell(engine)}")

# %%
# Plot
# ----
# One figure per direction, bandwidth against copy size on log axes, with the link's
# datasheet peak as a dashed line and, in the legend, each way's bandwidth at the
# largest size relative to pageable memory. Expect every curve to rise with size,
# because a fixed cost per copy dominates small copies (on a GPU about ten to a few
# tens of microseconds per call: the launch, setting up the transfer and, for a
# blocking copy, the host's wait), and to level off from roughly a megabyte. On the
# CPU, expect copies that fit in the caches to beat the ones that go to main memory,
# whose rate is the dashed line.


for direction in ("H2D", "D2H") if on_gpu else ("host-to-host",):
    keys = [key for key in results if key[0] == direction]
    base_s = results[keys[0]][-1].median_s
    series = {
        f"{key[1]} ({format_ratio(base_s / results[key][-1].median_s)})": gbps(key)
        for key in keys
    }
    best = max(max(rates) for rates in series.values()) * 1e9
    of_link = f", {peaks.share(best, 'host_link', peak='the link peak')}"
    if not on_gpu:
        series = {"copy_ between CPU tensors": gbps(keys[0])}
        of_link = f"; {format_rate(gbps(keys[0])[-1] * 1e9, 'B/s')} at the largest"
    fig, ax = plt.subplots()
    gpuguide.plot_sweep(
        ax, sizes, series, xlabel="copy size (bytes)", ylabel="bandwidth (GB/s)",
        title=f"{direction}: up to {format_rate(best, 'B/s')}{of_link}",
        record=f"{direction} bandwidth by size",
    )  # fmt: skip
    # On the CPU: device_peaks' large-copy rate counts bytes read plus written.
    ref = link if on_gpu else peaks.memory_bandwidth_bytes_per_s / 2
    if ref is not None:
        what = "link peak (datasheet)" if on_gpu else "large copy_ (device_peaks)"
        ax.axhline(
            ref / 1e9, color="0.3", ls="--", label=f"{what}: {ref / 1e9:.1f} GB/s"
        )
        ax.set_ylim(top=max(ax.get_ylim()[1], 1.5 * ref / 1e9))
    ax.legend(title="vs pageable at the largest size" if on_gpu else None)
    plt.show()

# %%
# What does ``pin_memory()`` cost?
# --------------------------------
# ``pin_memory()`` allocates a pinned buffer and copies the tensor into it on the
# host. PyTorch caches pinned buffers, so after the first call the allocation is
# reused and a repeat costs about one host copy; the first allocation also page-locks
# the memory, which PyTorch's pinned allocator times itself. Pinning pays off after
# ``pin time / (pageable copy - pinned copy)`` copies of the same buffer, if a
# pinned copy is measurably faster at all (:func:`gpuguide.break_even`).


def empty_pinned_cache():
    """Give PyTorch's cached pinned buffers back; False where torch cannot."""
    accelerator = getattr(torch, "accelerator", None)
    empty = getattr(accelerator, "empty_host_cache", None)  # newer torch
    empty = empty or getattr(torch._C, "_host_emptyCache", None)  # torch 2.11
    if empty is not None:
        empty()
    return empty is not None


if on_gpu:
    host = torch.randn(n_max // 4)
    torch.cuda.synchronize()  # every earlier copy is done, so its buffer is free
    emptied = empty_pinned_cache()  # the next pin must allocate
    stats = getattr(torch.cuda, "host_memory_stats", dict)
    before = stats()
    pin = gpuguide.benchmark(host.pin_memory, device=cpu, label="pin_memory()")
    after = stats()
    stat = "host_alloc_time.total"  # microseconds, timed by the pinned allocator
    alloc_s = (after[stat] - before.get(stat, 0)) / 1e6 if stat in after else math.nan
    pageable, pinned = (results["H2D", w][-1] for w in WAYS[:2])
    spent = "an unreported time" if math.isnan(alloc_s) else format_time(alloc_s)
    if not emptied:
        spent += " (this torch cannot empty the pinned cache: maybe reused)"
    print(f"{pin}; the first call also spent {spent} allocating")
    ratio = format_ratio(pin.median_s / pageable.median_s)
    print(f"pin_memory() is {ratio} one pageable H2D copy")
    copies = gpuguide.break_even(pin, pageable, pinned)
    if copies is None:
        print("pinned copies were not measurably faster here: pinning never pays off")
    else:
        alloc = (
            gpuguide.break_even(pin.median_s + alloc_s, pageable, pinned)
            if math.isfinite(alloc_s)
            else "unknown"
        )
        print(f"break-even: {copies} copies of one pinned buffer ({alloc} with alloc)")
    del host
    empty_pinned_cache()  # give the pinned memory back
else:
    m = results["host-to-host", "copy_"][-1]
    print(
        f"pin_memory() copies the data into a new buffer, so it costs at least one "
        f"host copy: {format_time(m.median_s)} for {format_bytes(n_max)} here"
    )

# %%
# What to take away
# -----------------
# Pinned memory usually speeds up each transfer (the printout says by how much on
# this machine), and ``non_blocking=True`` frees the host while it runs, but pinning
# is itself a copy, and page-locked memory is taken away from the rest of the system.
# Pin buffers you reuse (a staging buffer, the batches of a
# ``DataLoader(pin_memory=True)``, which pins in a background thread), not tensors
# you send once. The next page shows what goes wrong when a non-blocking copy to the
# host is read too early.
