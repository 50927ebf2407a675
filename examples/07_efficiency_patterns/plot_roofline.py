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
# peaks, raised to the best rate on this page. All the roofline needs of an
# operation is its FLOP, its bytes and its time: ``roofline.measure`` times a call
# and keeps the three.
import math

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Sweep, benchmark, largest_size, report
from gpuguide.chapters.roofline import Roofline, streaming_elements

page = gpuguide.setup()
device = page.device
roofline = Roofline.of(device)
measure = roofline.measure


# %%
# Elementwise operations, tiny and large
# --------------------------------------
# In float32, each operand read or written once: ``x + y`` is 1 FLOP and 12 bytes
# per element (intensity 1/12), ``z + x * y`` 2 FLOP and 16 bytes (1/8), ``x.sum()``
# 1 FLOP and 4 bytes (1/4): far left of any ridge, so at large sizes expect them on
# the slanted memory roof (on a GPU at 70-95% of the datasheet bandwidth). Outside
# small mode each large tensor holds at least 64 MiB (on a CPU, eight times its
# last-level cache), so that main memory, not a cache, feeds them. The tiny add's
# time is the fixed cost of one call, launch included, so it should land far below
# the roof; on a GPU its kernel's own time is printed too.
x, y, out = (torch.randn(128, device=device) for _ in range(3))
tiny = measure("x + y, 128", torch.add, x, y, out=out, flop=128, nbytes=12 * 128)
report("tiny add call", tiny, size=128)
if device.type == "cuda":
    kernel = benchmark(torch.add, args=(x, y), kwargs={"out": out}, measure="kernel")
    print(f"x + y, 128: the kernel alone takes {kernel}")
big = streaming_elements(device=device)
x, y, z, out = (torch.randn(big, device=device) for _ in range(4))
n = f"2^{math.log2(big):.3g}"
add = measure(f"x + y, {n}", torch.add, x, y, out=out, flop=big, nbytes=12 * big)
measure(f"z + x*y, {n}", torch.addcmul, z, x, y, out=out, flop=2 * big, nbytes=16 * big)
measure(f"x.sum(), {n}", torch.sum, x, flop=big, nbytes=4 * big)
report("x + y bandwidth", add.rate(12 * big, "B/s"), peak="memory", size=big)
fixed = max(0.0, 1 - add.median_s / tiny.median_s * 128 / big)
print(f"At 128 elements, about {fixed:.0%} of x + y's time is the call's fixed cost")

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
    64, 16384, memory_at=mm_bytes, flop_at=mm_flop, per_octave=2, multiple_of=64
)
a, b, out = (torch.randn(side, side, device=device) for _ in range(3))
flop, nbytes = mm_flop(side), mm_bytes(side)
mm = measure(f"matmul {side}", torch.mm, a, b, out=out, flop=flop, nbytes=nbytes)
report("float32 matmul rate", mm.rate(flop), peak=roofline.matmul, size=side)

# %%
# From memory- to compute-bound: growing the inner dimension
# ----------------------------------------------------------
# ``(m x k) @ (k x m)`` writes an ``m x m`` result whatever ``k`` is, while its work
# grows with ``k``: ``2 m^2 k`` FLOP for ``4 (2 m k + m^2)`` bytes, about ``k / 2``
# FLOP/byte while ``k`` is much smaller than ``m``. As ``k`` grows the points move
# right, towards and past the ridge, and their FLOP/s rises (overall, not at every
# step of ``k``); how close each stays to its roof depends on the matmul library's
# handling of thin shapes (the table below gives each one's share of its roof).
# ``k`` doubles while a call fits the budget; ``m`` >= 4096 outside small mode.
m = largest_size(
    64, 8192, memory_at=lambda s: 8 * s * s, traffic_at=lambda s: 8 * s * s
)
m = m if page.small else max(m, 4096)
inner = Sweep(
    f"({m} x k) @ (k x {m})",
    lambda k, dev: [torch.randn(s, device=dev) for s in ((m, k), (k, m), (m, m))],
    lo=1,
    hi=m,
    flop=lambda k: 2 * m * m * k,
    traffic=lambda k: 4 * (2 * m * k + m * m),
    rate="FLOP/s",
    peak=roofline.matmul,
    size_label="inner dimension k (elements)",
).run({"torch.mm": lambda a, b, out: torch.mm(a, b, out=out)})
print(inner)
ks = roofline.add_sweep(inner, "torch.mm", "k")
first, last = inner.rate("torch.mm", 1), inner.rate("torch.mm")
gpuguide.claim(
    f"the k sweep's FLOP/s rises from its first k to its last: k={inner.sizes[-1]} "
    "reaches at least 1.5x k=1's",
    **last.over(first),
    at_least=1.5,
    timed=True,
)

# %%
# Where each one sits
# -------------------
# At an intensity ``I`` an operation can reach at most ``min(peak FLOP/s, I x peak
# bytes/s)``: its roof. The two roofs meet at the *ridge*, ``peak FLOP/s / peak
# bytes/s`` FLOP/byte. An operation is *overhead-bound* when it reaches less than a
# quarter of its roof in less than 50 us, so short that fixed costs (Python, the
# dispatcher, a launch) dominate; otherwise memory-bound left of the ridge and
# compute-bound right of it. On a measured roof, the operation that set it is "at
# the roof".
print(roofline)
gpuguide.claim(
    "the tiny add is far below its roof (under 25% of it)",
    **roofline.share(tiny.label),
    at_most=0.25,
    timed=True,
)
gpuguide.claim(
    "large x + y is memory-bound, at least 50% of the memory roof",
    **roofline.share(add.label),
    at_least=0.5,
    timed=True,
)
gpuguide.claim(
    "on a GPU, large x + y reaches at least 70% of the datasheet bandwidth",
    **roofline.share(add.label),
    at_least=0.7,
    timed=True,
    on="cuda",
)
gpuguide.claim(
    "the large matmul is compute-bound: right of the ridge, not overhead-bound",
    holds=roofline.regime(mm.label) == "compute-bound",
    measured=f"{roofline.regime(mm.label)}, {roofline.share(mm.label)['measured']}",
    timed=True,
)
gpuguide.claim(
    "on a GPU, the large matmul reaches at least 50% of the flat roof",
    **roofline.share(mm.label),
    at_least=0.5,
    timed=True,
    on="cuda",
)

# %%
# The roofline
# ------------
# Read it from left to right: the elementwise points near the slanted roof, the tiny
# add far beneath it, the ``k`` sweep moving right towards the ridge and the large
# matmul under the flat roof, as the claims above checked. The title names the
# regimes measured.
short = [roofline.regime(t.label).split("-")[0] for t in (tiny, add, mm)]
roofline.plot(
    title=f"Bound by: tiny add {short[0]}, large add {short[1]}, matmul {short[2]}",
    runs={f"{inner.sweep.name}, k grows": ks},
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
