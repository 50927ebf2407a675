"""
The roofline: overhead-, memory- and compute-bound
==================================================

Every operation is limited by the fixed cost of each call (overhead), by moving its
bytes to and from memory (bandwidth), or by its arithmetic (compute). The roofline
model tells them apart with two numbers counted from the operation's definition:
the FLOP it performs and the bytes it must move. Their ratio, the *arithmetic
intensity* in FLOP/byte, says which roof applies. This page times a tiny add, three
large elementwise operations and matrix multiplications, and places each on this
device's roofline (see also :doc:`the roofline and its three regimes
</concepts/roofline>`).
"""

# %%
# Setup: the device's roofs
# -------------------------
# On a GPU the roofs are datasheet peaks: float32 FLOP/s (TF32 if float32 matmuls
# may use it) and memory bandwidth; a CPU's are measured, lower bounds on its true
# peaks. All the roofline needs of an operation is its FLOP, its bytes and its
# time: ``measure`` keeps the three.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, format_rate, largest_size, report, table
from gpuguide.chapters import roofline
from gpuguide.tables import format_cell

page = gpuguide.setup()
device = page.device
tf32 = torch.get_float32_matmul_precision() != "highest"
peak_flops = page.peaks.flops_for(torch.float32, tf32=tf32)
peak_bytes = page.peaks.memory_bandwidth_bytes_per_s
print(
    f"{page.peaks.name}: float32 {'TF32 ' if tf32 else ''}matmul "
    f"{format_rate(peak_flops, 'FLOP/s')}, memory {format_rate(peak_bytes, 'B/s')} "
    f"({page.peaks.source})"
)
ops = {}  # label -> (FLOP, bytes, Measurement)


def measure(label, fn, *args, flop, nbytes, **kwargs):
    m = benchmark(fn, args=args, kwargs=kwargs, label=label, device=device)
    ops[label] = (flop, nbytes, m)
    return m


# %%
# Elementwise operations, tiny and large
# --------------------------------------
# In float32, each operand read or written once: ``x + y`` is 1 FLOP and 12 bytes
# per element (intensity 1/12), ``z + x * y`` 2 FLOP and 16 bytes (1/8), ``x.sum()``
# 1 FLOP and 4 bytes (1/4): far left of any ridge, so at large sizes expect them on
# the slanted memory roof (on a GPU at 70-95% of the datasheet bandwidth). Outside
# small mode each large tensor holds at least 64 MiB (on a CPU, four times its
# last-level cache), so that main memory, not a cache, feeds them. The tiny add's
# time is the fixed cost of one call, launch included, so it should land far below
# the roof; on a GPU its kernel's own time is printed too.
x, y, out = (torch.randn(128, device=device) for _ in range(3))
tiny_add = measure("x + y, 128", torch.add, x, y, out=out, flop=128, nbytes=12 * 128)
report("tiny add call", tiny_add, size=128)
if device.type == "cuda":
    kernel = benchmark(torch.add, args=(x, y), kwargs={"out": out}, measure="kernel")
    print(f"x + y, 128: the kernel alone takes {format_cell(kernel)}")
big = roofline.streaming_elements(device=device)
x, y, z, out = (torch.randn(big, device=device) for _ in range(4))
n = roofline.size_text(big, least=1)
streams = [
    measure(f"x + y, {n}", torch.add, x, y, out=out, flop=big, nbytes=12 * big),
    measure(
        f"z + x*y, {n}", torch.addcmul, z, x, y, out=out, flop=2 * big, nbytes=16 * big
    ),
    measure(f"x.sum(), {n}", torch.sum, x, flop=big, nbytes=4 * big),
]
add = streams[0]
report("x + y bandwidth", add.rate(12 * big, "B/s"), peak="memory", size=big)
slower = add.median_s / tiny_add.median_s
fixed = max(0.0, 1 - slower * 128 / big)
print(
    f"x + y on {big / 128:.0f}x more elements took {slower:.0f}x longer: at 128 "
    f"elements about {fixed:.0%} of the time is the call's fixed cost"
)

# %%
# A large matrix multiplication
# -----------------------------
# ``A @ B`` with square ``n x n`` float32 matrices performs ``2 n^3`` FLOP (one
# multiply and one add per term) and must at least read ``A`` and ``B`` and write
# the result once: ``12 n^2`` bytes. Its intensity, ``n / 6`` FLOP/byte, passes any
# ridge once ``n`` reaches a few hundred, so expect it under the flat compute roof
# (on a GPU, large matmuls commonly reach 60-90% of the peak; a claim below checks
# at least half).
mm_flop, mm_bytes = (lambda n: 2 * n**3), (lambda n: 12 * n * n)
side = largest_size(
    64, 16384, memory_at=mm_bytes, flop_at=mm_flop, traffic_at=mm_bytes,
    per_octave=2, multiple_of=64,
)  # fmt: skip
a, b, out = (torch.randn(side, side, device=device) for _ in range(3))
flop, nbytes, precision = mm_flop(side), mm_bytes(side), "tf32" if tf32 else "fp32"
mm = measure(f"matmul {side}", torch.mm, a, b, out=out, flop=flop, nbytes=nbytes)
report("float32 matmul rate", mm.rate(flop), peak=precision, size=side)

# %%
# From memory- to compute-bound: growing the inner dimension
# ----------------------------------------------------------
# ``(m x k) @ (k x m)`` writes an ``m x m`` result whatever ``k`` is, while its work
# grows with ``k``: ``2 m^2 k`` FLOP for ``4 (2 m k + m^2)`` bytes, about ``k / 2``
# FLOP/byte while ``k`` is much smaller than ``m``. As ``k`` grows the points move
# right, towards and past the ridge, and their FLOP/s rises; how close each stays to
# its roof depends on the matmul library's handling of thin shapes (the table below
# gives each one's share of its roof). ``k`` = 1, 4 and 16 always run,
# larger ``k`` while a call fits the budget; ``m`` >= 4096 outside small mode.
m = largest_size(
    64, 8192, memory_at=lambda s: 8 * s * s, traffic_at=lambda s: 8 * s * s
)
m = m if page.small else max(m, 4096)
k_flop, k_bytes = (lambda k: 2 * m * m * k), (lambda k: 4 * (2 * m * k + m * m))
k_fits = largest_size(1, m, memory_at=k_bytes, flop_at=k_flop, traffic_at=k_bytes)
out = torch.empty(m, m, device=device)
ks = [k for k in (1, 4, 16, 64, 256, 1024, 4096) if k <= min(m, max(16, k_fits))]
for k in ks:
    a, b = torch.randn(m, k, device=device), torch.randn(k, m, device=device)
    measure(f"k={k}", torch.mm, a, b, out=out, flop=k_flop(k), nbytes=k_bytes(k))
inner = [f"k={k}" for k in ks]

# %%
# Where each one sits
# -------------------
# At an intensity ``I`` an operation can reach at most ``min(peak FLOP/s, I x peak
# bytes/s)``: its roof. The two roofs meet at the *ridge*, ``peak FLOP/s / peak
# bytes/s`` FLOP/byte. Measured roofs (a CPU's) are raised to the best rate on this
# page, so the operation that set one is "at the roof". An operation is
# *overhead-bound* when it reaches less than a quarter of its roof in less than
# 50 us, so short that fixed costs (Python, the dispatcher, a launch) dominate;
# otherwise memory-bound left of the ridge and compute-bound right of it.
rates = {label: (f / t.median_s, b / t.median_s) for label, (f, b, t) in ops.items()}
if device.type == "cpu" or peak_flops is None or peak_bytes is None:
    peak_flops = max(peak_flops or 0.0, *(rates[op][0] for op in [mm.label, *inner]))
    peak_bytes = max(peak_bytes or 0.0, *(rates[op.label][1] for op in streams))
ridge = peak_flops / peak_bytes  # FLOP/byte where the two roofs meet
print(
    f"roofs: {format_rate(peak_flops, 'FLOP/s')} and {format_rate(peak_bytes, 'B/s')}; "
    f"ridge: {ridge:.3g} FLOP/byte (m = {m} for the k sweep)"
)


def roof(intensity):
    """The most FLOP/s an operation of this intensity can reach: the roofline."""
    return min(peak_flops, intensity * peak_bytes)


points = {label: (f / b, rates[label][0]) for label, (f, b, _) in ops.items()}
shares = {label: flops / roof(i) for label, (i, flops) in points.items()}


def share_of_roof(label):
    """A claim's value: the share of the roof, with its spread over the quartile calls."""
    flop, _, t = ops[label]
    low, high = (flop / q / roof(points[label][0]) for q in (t.q75_s, t.q25_s))
    measured = f"{shares[label]:.0%} ({low:.0%}-{high:.0%})"
    return {"value": shares[label], "spread": (low, high), "measured": measured}


regime = {}
for label, (intensity, _) in points.items():
    if shares[label] < 0.25 and ops[label][2].median_s < 50e-6:
        regime[label] = "overhead-bound"
    else:
        regime[label] = "memory-bound" if intensity < ridge else "compute-bound"
rows = roofline.roofline_rows(ops, shares, regime)
print(table(rows))
gpuguide.claim(
    "the tiny add is far below its roof (under 25% of it)",
    **share_of_roof(tiny_add.label),
    at_most=0.25,
    timed=True,
)
gpuguide.claim(
    "large x + y is memory-bound, at least 50% of the memory roof",
    **share_of_roof(add.label),
    at_least=0.5,
    timed=True,
)
gpuguide.claim(
    "on a GPU, large x + y reaches at least 70% of the datasheet bandwidth",
    **share_of_roof(add.label),
    at_least=0.7,
    timed=True,
    on="cuda",
)
gpuguide.claim(
    "the large matmul is compute-bound: right of the ridge, not overhead-bound",
    holds=regime[mm.label] == "compute-bound",
    measured=f"{regime[mm.label]}, {shares[mm.label]:.0%} of its roof",
    timed=True,
)
gpuguide.claim(
    "on a GPU, the large matmul reaches at least 50% of the flat roof",
    **share_of_roof(mm.label),
    at_least=0.5,
    timed=True,
    on="cuda",
)
first, last = ops[inner[0]], ops[inner[-1]]
grew = gpuguide.compare(last[2], first[2])
work = last[0] / first[0]  # FLOP per call, k=max against k=1
gpuguide.claim(
    f"the k sweep's FLOP/s rises with k: {inner[-1]} reaches at least "
    f"1.5x {inner[0]}'s",
    grew.speedup * work,
    at_least=1.5,
    timed=True,
    spread=(grew.low * work, grew.high * work),
)
if above := [row.operation for row in rows if row.of_roof == "> roof"]:
    print(
        f"Above the roof: {', '.join(above)}. The roof is a lower bound here, or "
        "the data came from a cache faster than main memory."
    )

# %%
# The roofline
# ------------
# Read it from left to right: the elementwise points near the slanted roof, the tiny
# add far beneath it, the ``k`` sweep moving right towards the ridge and the large
# matmul under the flat roof, as the claims above checked. The title names the
# regimes measured.
short = [regime[t.label].split("-")[0] for t in (tiny_add, add, mm)]
fig, ax = plt.subplots()
roofline.plot_roofline(
    ax,
    {label: p for label, p in points.items() if label not in inner},
    regimes=regime,
    peak_flops_per_s=peak_flops,
    peak_bytes_per_s=peak_bytes,
    sweeps={f"({m} x k) @ (k x {m}), k grows": {k: points[k] for k in inner}},
    title=f"Bound by: tiny add {short[0]}, large add {short[1]}, matmul {short[2]}",
)
plt.show()

# %%
# What to take away
# -----------------
# Count FLOP and bytes before optimizing. An overhead-bound program gains from doing
# fewer, larger calls (batching, fusion, CUDA graphs), a memory-bound one from moving
# fewer bytes (fusion, smaller dtypes), and only a compute-bound one from faster
# arithmetic (tensor cores, lower precision). What this run found:
gpuguide.takeaway()
