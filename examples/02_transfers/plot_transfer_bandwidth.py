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
"""

# %%
# Setup
# -----
# The comparison needs a CUDA GPU. Without one, ``pin_memory()`` raises in recent
# PyTorch, so it is never called; the page measures host-to-host copies instead.
import math

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import format_bytes, format_rate, format_ratio, format_time

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
        "this run measures host-to-host copy_ bandwidth instead."
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
# copy itself faster. Each copy gets 10 ms of warm-up and 50 ms of timed calls, below
# the defaults, to keep the sweep (six ways at every size) short.


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
    return {
        key: gpuguide.benchmark(
            copy, args=plan, device=device, label=" ".join(key), warmup_ms=10, rep_ms=50
        )
        for key, plan in plans.items()
    }


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
# Seed 004 says pinning helps because the pages cannot be swapped out. That is what
# pinning does; the speed comes from how the GPU copies: its copy engines read host
# memory by DMA, which needs pages the operating system cannot move. From pageable
# memory the driver first copies each chunk into a pinned staging buffer, then sends
# it, so expect pinned copies to be faster, often close to twice, and nearer the
# link's peak (70-90% on a healthy PCIe link). The seeds quote 16 and 32 GB/s for the
# link: the peaks of PCIe 3.0 and 4.0 x16, not of every machine.
for key, ms in results.items():
    rate, m = n_max / ms[-1].median_s, ms[-1]
    pct = gpuguide.percent_of_peak(rate, link)
    print(
        f"{' '.join(key)} at {format_bytes(n_max)}: {format_rate(rate, 'B/s')}"
        f"{'' if pct is None else f', {pct:.0f}% of the link peak'} "
        f"(median {format_time(m.median_s)} ± {format_time(m.iqr_s / 2)})"
    )
for direction in ("H2D", "D2H") if on_gpu else ():
    pageable_s, pinned_s, async_s = (results[direction, w][-1].median_s for w in WAYS)
    ratio = pageable_s / pinned_s
    verdict = (
        "faster, as the seeds say" if ratio > 1.1
        else "slower, unlike what the seeds say" if ratio < 0.9
        else "within 10%: no clear gain here"
    )  # fmt: skip
    print(
        f"{direction}: pinned is {format_ratio(ratio)} the pageable bandwidth "
        f"({verdict}); non_blocking: {format_ratio(pinned_s / async_s)} blocking"
    )
    if direction == "H2D":
        first, last = results["H2D", "pageable"][0], results["H2D", "pageable"][-1]
        bytes_s = sizes[0] * last.median_s / n_max  # its bytes at the large-copy rate
        near = "in line with" if 0.5 < first.median_s / 10e-6 < 2 else "unlike"
        print(
            f"smallest copy: {format_time(first.median_s)} ({near} 002's ~10 us), "
            f"{format_time(bytes_s)} of it for the bytes, the rest a fixed cost"
        )

# %%
# Plot
# ----
# One figure per direction, bandwidth against copy size on log axes, with the link's
# datasheet peak as a dashed line and, in the legend, each way's bandwidth at the
# largest size relative to pageable memory. Expect every curve to rise with size,
# because a fixed cost of a few microseconds per copy dominates small copies, and to
# level off from roughly a megabyte. On the CPU, expect copies that fit in the caches
# to beat the ones that go to main memory, whose rate is the dashed line.


for direction in ("H2D", "D2H") if on_gpu else ("host-to-host",):
    keys = [key for key in results if key[0] == direction]
    base_s = results[keys[0]][-1].median_s
    series = {
        f"{key[1]} ({format_ratio(base_s / results[key][-1].median_s)})": gbps(key)
        for key in keys
    }
    best = max(max(rates) for rates in series.values()) * 1e9
    pct = gpuguide.percent_of_peak(best, link)
    of_link = f", {pct:.0f}% of the link peak" if pct else " (link peak unknown)"
    if not on_gpu:
        series = {"copy_ between CPU tensors": gbps(keys[0])}
        of_link = f"; {format_rate(gbps(keys[0])[-1] * 1e9, 'B/s')} at the largest"
    fig, ax = plt.subplots()
    gpuguide.plot_sweep(
        ax, sizes, series, xlabel="copy size (bytes)", ylabel="bandwidth (GB/s)",
        title=f"{direction}: up to {format_rate(best, 'B/s')}{of_link}",
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
# ``pin time / (pageable copy - pinned copy)`` copies of the same buffer.
if on_gpu:
    host = torch.randn(n_max // 4)
    torch.cuda.synchronize()  # every earlier copy is done, so its buffer is free
    torch.accelerator.empty_host_cache()  # the next pin must allocate
    before = torch.cuda.host_memory_stats()
    pin = gpuguide.benchmark(host.pin_memory, device=cpu, label="pin_memory()")
    after = torch.cuda.host_memory_stats()
    stat = "host_alloc_time.total"  # microseconds, timed by the pinned allocator
    alloc_s = (after[stat] - before.get(stat, 0)) / 1e6 if stat in after else math.nan
    pageable, pinned = (results["H2D", w][-1].median_s for w in WAYS[:2])
    spent = "an unreported time" if math.isnan(alloc_s) else format_time(alloc_s)
    print(f"{pin}; the first call also spent {spent} allocating")
    once = pin.median_s + pinned
    print(
        f"pin_memory() is {format_ratio(pin.median_s / pageable)} one pageable H2D "
        f"copy; pin + one pinned copy {format_time(once)} vs pageable copy "
        f"{format_time(pageable)}: {'slower' if once > pageable else 'faster'} here"
    )
    if pageable > pinned:
        copies = math.ceil(pin.median_s / (pageable - pinned))
        first = (pin.median_s + alloc_s) / (pageable - pinned)
        first = math.ceil(first) if math.isfinite(first) else "unknown"
        print(f"break-even: {copies} copies of one pinned buffer ({first} with alloc)")
    else:
        print("pinned copies were not faster here, so pinning never pays off")
    del host
    torch.accelerator.empty_host_cache()  # give the pinned memory back
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
