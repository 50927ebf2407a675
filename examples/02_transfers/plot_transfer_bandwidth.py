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
# The copies
# ----------
# Each copy is ``dst.copy_(src)`` into a buffer made beforehand (``.to()`` would time
# the allocator too). A ``non_blocking=True`` copy is timed to its end as well:
# non-blocking frees the host, it does not make the copy faster. At each size the
# ways take turns. Without a CUDA GPU (``pin_memory()`` then raises) the page times
# ``copy_`` between two host buffers. Sizes double from 4 KiB while the buffers fit
# (on a GPU, up to 128 MiB).
from types import SimpleNamespace

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Sweep, format_bytes

page = gpuguide.setup()
device, cpu = page.device, torch.device("cpu")
on_gpu = page.needs_cuda("H2D and D2H copies, pinned memory and pin_memory()")


def buffers(n, dev):  # n bytes each: pageable and pinned on the host, one on dev
    host, dst = torch.randn(n // 4), torch.empty(n // 4, device=dev)
    return [SimpleNamespace(host=host, pinned=on_gpu and host.pin_memory(), dev=dst)]


ways = {"host-to-host": lambda b: b.dev.copy_(b.host)}
if on_gpu:
    ways = {
        "H2D pageable": lambda b: b.dev.copy_(b.host),
        "H2D pinned": lambda b: b.dev.copy_(b.pinned),
        "H2D pinned + non_blocking": lambda b: b.dev.copy_(b.pinned, non_blocking=True),
        "D2H pageable": lambda b: b.host.copy_(b.dev),
        "D2H pinned": lambda b: b.pinned.copy_(b.dev),
        "D2H pinned + non_blocking": lambda b: b.pinned.copy_(b.dev, non_blocking=True),
    }
copies = Sweep(
    "copy",
    buffers,
    lo=4096,
    hi=2**27 if on_gpu else 2**30,
    memory=lambda n: 2 * n,
    traffic=lambda n: n,
    rate="B/s",
    peak="host_link" if on_gpu else None,
    size_label="copy size (bytes)",
).run(ways, paired=True, warmup_ms=10, rep_ms=50)
print(copies)


# %%
# Pinned against pageable
# -----------------------
# The GPU's copy engines read host memory by DMA, which needs pages the operating
# system cannot move: from pageable memory the driver first copies each chunk into a
# pinned staging buffer. Expect pinned copies to be faster and nearer the link's
# peak, at least 60% of it, and the gain over pageable to be larger the faster the
# link. The link's peak is the one the card negotiates in its slot where NVML says
# so plausibly, else the datasheet's (also for a copy that ran faster than NVML's
# link: NVML then does not see the real one, as in some virtual machines). The
# headline figures are at 64 MiB (or the largest size below it): past the CPU's
# caches, where GPU copies level off, the same size on every device.
sizes = copies.sizes
n_head = max(n for n in sizes if n <= 2**26)
copies.report(n=n_head, copy=format_bytes(n_head))
fastest = max(copies.rate(way, n).value for way in ways for n in sizes)
link, which = page.peaks.host_link_for(fastest)
for direction in ("H2D", "D2H"):  # the GPU's claims; on a CPU, not checked here
    pinned, pageable = f"{direction} pinned", f"{direction} pageable"
    versus = rate = None
    if on_gpu:
        versus, rate = (
            copies.compare(pinned, pageable, n_head),
            copies.rate(pinned, n_head),
        )
        print(f"{direction} at {format_bytes(n_head)}: {versus}")
    copy_text = f"a pinned {direction} copy of {format_bytes(n_head)}"
    gpuguide.claim(
        f"{copy_text} is faster than a pageable one",
        versus,
        verdict="faster",
        on="cuda",
    )
    gpuguide.claim(
        f"{copy_text} reaches at least 60% of the link's peak ({which})",
        rate,
        at_least=0.6 * (link or 0),
        on="cuda",
    )
    gpuguide.claim(
        f"{copy_text} runs at least 10x the bytes/s of one of {format_bytes(sizes[0])}",
        **(rate.over(copies.rate(pinned, sizes[0])) if on_gpu else {}),
        at_least=10,
        timed=True,
        on="cuda",
    )

# %%
# Plot
# ----
# On a GPU, expect every curve to rise with size, as a fixed cost per copy (the
# launch, setting up the transfer, a blocking copy's wait) dominates small copies,
# and to level off from about a megabyte. On the CPU, expect copies in the caches to
# run at least 1.5x the largest copy's rate, through main memory.
if not on_gpu:
    fast = max(sizes, key=lambda n: copies.rate("host-to-host", n).value)
    best, large = copies.rate("host-to-host", fast), copies.rate("host-to-host")
    gpuguide.claim(
        "the fastest copy, in a cache, runs at least 1.5x the rate of the "
        "largest copy, through main memory",
        **best.over(large),
        at_least=1.5,
        timed=True,
        measured=f"{best} at {format_bytes(fast)} against {large}",
    )
fig, ax = plt.subplots()
copies.plot(ax, title=f"Copies reach up to {gpuguide.format_value(fastest, 'B/s')}")
if on_gpu and link:  # an unknown GPU without NVML has no link peak
    ax.axhline(link / 1e9, color="0.3", ls="--", label=f"link peak ({which})")
    ax.legend()
plt.show()

# %%
# What does ``pin_memory()`` cost?
# --------------------------------
# ``pin_memory()`` copies the tensor into a pinned buffer (its first allocation also
# page-locks it; a repeat reuses PyTorch's cache). It pays off after ``pin time /
# (pageable - pinned copy)`` copies of one buffer, if pinned is measurably faster.
if on_gpu:
    host = torch.randn(sizes[-1] // 4)
    pin = gpuguide.benchmark(host.pin_memory, device=cpu, label="pin_memory()")
    gpuguide.report("pin_memory()", pin, size=sizes[-1])
    pageable, pinned = (copies.at(f"H2D {w}") for w in ("pageable", "pinned"))
    print(f"pin_memory() is {pin.median_s / pageable.median_s:.3g}x one pageable copy")
    copies_n = gpuguide.break_even(pin, pageable, pinned)
    print(f"pinning pays off after {copies_n or 'no number of'} copies of one buffer")

# %%
# What to take away
# -----------------
# Pinned memory usually speeds up each transfer and ``non_blocking=True`` frees the
# host meanwhile, but pinning is itself a copy and takes memory from the system: pin
# buffers you reuse (``DataLoader(pin_memory=True)``), not tensors you send once.
gpuguide.takeaway()
