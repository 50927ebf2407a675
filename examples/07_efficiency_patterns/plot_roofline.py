"""
The roofline: overhead-, memory- and compute-bound
==================================================

Every operation is limited by one of three things: the fixed cost of each call
(overhead), moving its bytes to and from memory (bandwidth), or its arithmetic
(compute). The roofline model tells them apart with two numbers counted from the
operation's definition: the FLOP it performs and the bytes it must move. Their
ratio, the *arithmetic intensity* in FLOP/byte, says which roof applies: below the
device's ridge point the memory roof, above it the compute roof.

This page times a tiny elementwise add, three large elementwise operations, a
large matrix multiplication and a matrix multiplication whose inner dimension grows.
For each it prints the time, the achieved FLOP/s and GB/s, the intensity, the
percentage of the roof reached and the regime, and places all of them on a roofline
drawn from the device's peaks.

See also the concept page
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup: the device's roofs
# -------------------------
# On a GPU the roofs are datasheet peaks: float32 FLOP/s (the TF32 figure if float32
# matmuls may use TF32) and memory bandwidth. A CPU has no trustworthy datasheet
# here, so its roofs are measured: the best matmul rate and copy bandwidth that
# :func:`gpuguide.device_peaks` achieves, raised below to any better rate this
# page achieves. Both are lower bounds on the true peaks.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import format_rate
from gpuguide.chapters.roofline import (
    RooflinePoint,
    plot_roofline,
    streaming_elements,
)
from gpuguide.tables import format_cell

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
peaks = gpuguide.device_peaks(device)
tf32 = torch.get_float32_matmul_precision() != "highest"
peak_flops = peaks.flops_for(torch.float32, tf32=tf32)
peak_bytes = peaks.memory_bandwidth_bytes_per_s
print(peaks)
if device.type == "cpu":
    print(
        "Datasheet roofs, and the wide gap between a launch-bound kernel and them, "
        "need a GPU; on this CPU the roofs are measured lower bounds."
    )


times = {}


def measure(label, fn, *args, flop, nbytes, **kwargs):
    """Time ``fn(*args, **kwargs)``; return it as a roofline point at its median."""
    m = gpuguide.benchmark(fn, args=args, kwargs=kwargs, label=label, device=device)
    times[label] = m
    return RooflinePoint.from_measurement(
        label, flop=flop, nbytes=nbytes, measurement=m
    )


def size_text(n):
    return f"2^{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


# %%
# Elementwise operations, tiny and large
# --------------------------------------
# FLOP and bytes per element, in float32 (4 bytes), each operand read or written
# once:
#
# * ``x + y``: 1 FLOP, 12 bytes (two reads, one write): intensity 1/12.
# * ``z + x * y`` (``torch.addcmul``): 2 FLOP, 16 bytes: intensity 1/8.
# * ``x.sum()``: 1 FLOP, 4 bytes (the one output is negligible): intensity 1/4.
#
# All three sit far left of any ridge, so at large sizes expect them on the slanted
# memory roof: on a GPU at 70-95% of the datasheet bandwidth (the HBM of recent data
# centre GPUs reaches about 90%), on a CPU, whose roof here is the best rate this
# page measures, up to 100% of it by construction. The large tensors are as large as
# the device's budget allows (:func:`~gpuguide.chapters.roofline.streaming_elements`),
# and outside small mode each holds at least 64 MiB, more than a GPU's L2, and on a
# CPU four times its last-level cache, as the tensors its memory ceiling is measured
# with, so that main memory, not a cache, feeds them. The tiny add
# moves a few kilobytes: its time is the fixed cost of one call, so it should land
# far below the roof. Like every time on this page, it is the time per call of a
# loop of such calls, launch included (``measure="call"``, the default), because
# that fixed cost is what this page is about; on a GPU the add's own kernel time is
# printed too.
tiny = 128
x, y, out = (torch.randn(tiny, device=device) for _ in range(3))
tiny_add = measure(
    f"x + y, {tiny}", torch.add, x, y, out=out, flop=tiny, nbytes=12 * tiny
)
if device.type == "cuda":
    kernel = gpuguide.benchmark(
        torch.add, args=(x, y), kwargs={"out": out}, measure="kernel"
    )
    print(
        f"x + y, {tiny}: {format_cell(times[tiny_add.label])} per call, of which the "
        f'kernel alone takes {format_cell(kernel)} (measure="kernel")'
    )
big = streaming_elements(device=device)
x, y, z, out = (torch.randn(big, device=device) for _ in range(4))
n = size_text(big)
elementwise = [
    measure(f"x + y, {n}", torch.add, x, y, out=out, flop=big, nbytes=12 * big),
    measure(
        f"z + x*y, {n}",
        torch.addcmul,
        z,
        x,
        y,
        out=out,
        flop=2 * big,
        nbytes=16 * big,
    ),
    measure(f"x.sum(), {n}", torch.sum, x, flop=big, nbytes=4 * big),
]
add = times[elementwise[0].label]  # x + y on the large tensors: 12 bytes/element
gpuguide.record(
    "x + y bandwidth",
    12 * big / add.median_s,
    unit="B/s",
    spread=(12 * big / add.q75_s, 12 * big / add.q25_s),
    size=big,
    peak="memory",
)
gpuguide.record("tiny add call", times[tiny_add.label], size=tiny)
grow, slower = big / tiny, elementwise[0].seconds / tiny_add.seconds
fixed = max(0.0, 1.0 - slower / grow)
print(
    f"x + y on {grow:.0f}x more elements took {slower:.0f}x longer: at {tiny} "
    f"elements about {fixed:.0%} of the time is the call's fixed cost"
)

# %%
# A large matrix multiplication
# -----------------------------
# ``A @ B`` with square ``n x n`` float32 matrices performs ``2 n^3`` FLOP (one
# multiply and one add per term) and must at least read ``A`` and ``B`` and write
# the result once: ``12 n^2`` bytes. Its intensity, ``n / 6`` FLOP/byte, passes any
# ridge once ``n`` reaches a few hundred, so expect it near the flat compute roof:
# large matmuls commonly reach 60-90% of a GPU's peak.
side = gpuguide.largest_size(
    64,
    16384,
    memory_at=lambda s: 12 * s * s,
    flop_at=lambda s: gpuguide.matmul_flop(s, s, s),
    traffic_at=lambda s: 12 * s * s,
    per_octave=2,
    multiple_of=64,
)
a, b, out = (torch.randn(side, side, device=device) for _ in range(3))
flop = gpuguide.matmul_flop(side, side, side)
matmul = measure(
    f"matmul {side}", torch.mm, a, b, out=out, flop=flop, nbytes=12 * side**2
)
mm = times[matmul.label]
gpuguide.record(
    "float32 matmul rate",
    flop / mm.median_s,
    unit="FLOP/s",
    spread=(flop / mm.q75_s, flop / mm.q25_s),
    size=side,
    peak="tf32" if tf32 else "fp32",
)
print(mm)

# %%
# From memory- to compute-bound: growing the inner dimension
# ----------------------------------------------------------
# ``(m x k) @ (k x m)`` writes an ``m x m`` result whatever ``k`` is, while its work
# grows with ``k``: ``2 m^2 k`` FLOP for ``4 (2 m k + m^2)`` bytes, an intensity of
# about ``k / 2`` FLOP/byte while ``k`` is much smaller than ``m``. A small ``k`` is
# little more than writing the result (memory-bound); as ``k`` grows the points
# should climb the slanted roof and bend onto the flat one past the ridge. How close
# they stay to the roof depends on how well the matmul library handles thin shapes.
# ``k`` = 1, 4 and 16 always run, larger ``k`` while a call fits the budget.
m = gpuguide.largest_size(
    64, 8192, memory_at=lambda s: 8 * s * s, traffic_at=lambda s: 8 * s * s
)
m = m if small else max(m, 4096)  # a result of at least 64 MiB, as above
out = torch.empty(m, m, device=device)


def inner_bytes(k):
    return 4 * (2 * m * k + m * m)


k_fits = gpuguide.largest_size(
    1,
    m,
    memory_at=inner_bytes,
    flop_at=lambda k: gpuguide.matmul_flop(m, m, k),
    traffic_at=inner_bytes,
)
top = min(m, max(16, k_fits))
ks = [k for k in (1, 4, 16, 64, 256, 1024, 4096) if k <= top]
inner = []
for k in ks:
    a, b = torch.randn(m, k, device=device), torch.randn(k, m, device=device)
    flop = gpuguide.matmul_flop(m, m, k)
    inner.append(
        measure(f"k={k}", torch.mm, a, b, out=out, flop=flop, nbytes=inner_bytes(k))
    )

# %%
# Where each one sits
# -------------------
# On a CPU, or a GPU missing from gpuguide's table, each roof is the higher of the
# quick estimate and the best rate measured on this page: all of them are lower
# bounds on the true peak. The roofs meet at the *ridge*, ``peak FLOP/s / peak
# bytes/s`` FLOP/byte. At an intensity ``I`` a point can reach at most
# ``min(peak FLOP/s, I x peak bytes/s)``, its roof; the table gives the share of it
# that each point achieved. A point is *overhead-bound* when it reaches less than a
# quarter of its roof in less than 50 us: so short that fixed costs (Python, the
# dispatcher, a kernel launch) dominate, not its bytes or its FLOP. Otherwise the
# roof at its intensity names its regime: memory-bound left of the ridge,
# compute-bound right of it.
everything = [tiny_add, *elementwise, matmul, *inner]
if device.type == "cpu" or peak_flops is None or peak_bytes is None:
    # Measured roofs are lower bounds, and so is every rate measured here.
    peak_flops = max(peak_flops or 0.0, *(p.flops_per_s for p in [matmul, *inner]))
    peak_bytes = max(peak_bytes or 0.0, *(p.bytes_per_s for p in elementwise))
    print(
        f"Roofs: {format_rate(peak_flops, 'FLOP/s')} and "
        f"{format_rate(peak_bytes, 'B/s')}, the best of the measured CPU ceiling "
        "and the rates measured on this page"
    )
ridge = peak_flops / peak_bytes  # FLOP/byte where the two roofs meet
percent, regime = {}, {}  # label -> % of its roof reached, and the regime
for p in everything:
    roof = min(peak_flops, p.intensity * peak_bytes)  # attainable FLOP/s
    percent[p.label] = 100 * p.flops_per_s / roof
    if percent[p.label] < 25 and p.seconds < 50e-6:
        regime[p.label] = "overhead-bound"
    elif p.intensity < ridge:
        regime[p.label] = "memory-bound"
    else:
        regime[p.label] = "compute-bound"
print(f"ridge: {ridge:.3g} FLOP/byte (m = {m} for the k sweep)")
rows = [
    {
        "operation": p.label,
        "time": times[p.label],
        "compute": format_rate(p.flops_per_s, "FLOP/s"),
        "bandwidth": format_rate(p.bytes_per_s, "B/s"),
        "FLOP/byte": f"{p.intensity:.3g}",
        # Above 100% the roof was not the limit (a cache, or a measured lower
        # bound on a CPU): no percentage is printed for it.
        "% roof": f"{percent[p.label]:.0f}%" if percent[p.label] <= 100 else "> roof",
        "regime": regime[p.label],
    }
    for p in everything
]
print(gpuguide.table(rows))
above = [p.label for p in everything if percent[p.label] > 100]
if above:
    print(
        f"Above the roof: {', '.join(above)}. The roof is a lower bound here, or "
        "the data came from a cache faster than main memory."
    )

# %%
# The roofline
# ------------
# Read it from left to right: the elementwise points should hug the slanted roof,
# the tiny add sit far beneath it, the ``k`` sweep climb towards the ridge and the
# large matmul sit under the flat roof. The title names the regime measured for the
# tiny add, the large add and the large matmul.
short = [regime[p.label].split("-")[0] for p in (tiny_add, elementwise[0], matmul)]
fig, ax = plt.subplots()
plot_roofline(
    ax,
    [tiny_add, *elementwise, matmul],
    regimes=regime,
    peak_flops_per_s=peak_flops,
    peak_bytes_per_s=peak_bytes,
    sweeps={f"({m} x k) @ (k x {m}), k grows": inner},
    title=f"Bound by: tiny add {short[0]}, large add {short[1]}, matmul {short[2]}",
)
plt.show()

# %%
# What to take away
# -----------------
# Count FLOP and bytes before optimizing. An overhead-bound program gains from doing
# fewer, larger calls (batching, fusion, CUDA graphs), a memory-bound one from moving
# fewer bytes (fusion, smaller dtypes), and only a compute-bound one from faster
# arithmetic (tensor cores, lower precision).
