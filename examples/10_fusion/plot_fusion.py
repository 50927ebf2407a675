"""
Fusing a chain of elementwise operations
========================================

``sin(sin(sin(x)))`` does almost no arithmetic per element, so on a GPU its speed is
set by memory traffic. Run eagerly, every ``sin`` is its own kernel: it reads the
whole tensor and writes a new one, so a chain of depth ``k`` moves the data ``k``
times. A fused kernel reads ``x`` once, applies all ``k`` sines in registers and
writes the result once.

This page runs the chain eagerly and under ``torch.compile`` for several depths. It
counts the kernels (on a CPU, the operators) of one call with the profiler, times the
steady state apart from the first calls, and turns the times into bandwidth: for the
bytes the chain must move, and for the bytes each way actually moves.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# The tensor is as large as the device's time budget allows for the deepest eager
# chain, so that on a GPU it is far larger than the caches.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.compiling import first_calls_s, passes

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small, on_cuda = gpuguide.small_mode(), device.type == "cuda"
depths = [1, 4] if small else [1, 4, 16]
deepest = depths[-1]

peaks = gpuguide.device_peaks(device)
peak_bw = peaks.memory_bandwidth_bytes_per_s
# x plus two intermediates alive at once; each sin moves 8 bytes per value
n = gpuguide.largest_size(
    2**12, 2**28, memory_at=lambda n: 3 * 4 * n, traffic_at=lambda n: 8 * deepest * n
)
x = torch.randn(n, device=device)
min_bytes = 2 * x.numel() * x.element_size()  # read x once, write the result once
x_size = gpuguide.format_bytes(min_bytes // 2)
print(f"x: {n:,} float32 ({x_size}); depths {depths}")
peak_text = gpuguide.format_rate(peak_bw, "B/s") if peak_bw else "unknown"
print(f"peak memory bandwidth: {peak_text} ({peaks.source})")
if not on_cuda:
    print("Kernel launches need a GPU; on this CPU the profiler counts aten operator "
          "calls per call instead, and a compiled graph's generated C++ loop as one.")  # fmt: skip


def nested_sin(x, depth):
    for _ in range(depth):
        x = torch.sin(x)
    return x


# %%
# Counting passes with the profiler
# ---------------------------------
# ``passes`` runs one call under the profiler and lists what it ran. On a GPU every
# device event that is neither a copy nor an annotation is a kernel. On a CPU the
# count is of ``aten::`` operators not called by another one, plus calls into a
# compiled graph. Each counted pass reads and writes the tensor once, which gives the
# bytes a way moves. The profiling chapter explains the profiler itself.
#
# Each depth gets its own compiled function: ``torch._dynamo.reset()`` forgets the
# previous one and ``dynamic=False`` fixes the depth and shape. The first three calls
# are timed apart; their total minus three steady-state calls is the one-off cost.
# Then eager and compiled run in five alternating rounds, so that a drift of the
# machine falls on both. (The first compile in a process imports the compiler;
# whether that warns depends on the torch release, and such warnings about torch's
# own code are ignored when gpuguide is imported: :mod:`gpuguide.quiet`.)
ways = ["eager", "torch.compile"]
times, counts, names = {w: [] for w in ways}, {w: [] for w in ways}, {}
one_off = []
for depth in depths:
    torch._dynamo.reset()
    compiled = torch.compile(nested_sin, dynamic=False, fullgraph=True)
    first = first_calls_s(compiled, x, depth, device=device)
    fns = {"eager": nested_sin, "torch.compile": compiled}
    timed = gpuguide.interleave(
        {w: lambda f=f, k=depth: f(x, k) for w, f in fns.items()}, device=device
    )
    for way, fn in fns.items():
        names[way] = passes(fn, x, depth, device=device)
        times[way].append(timed[way])
        counts[way].append(len(names[way]))
    one_off.append(max(first - 3 * times["torch.compile"][-1].median_s, 0.0))

# %%
# Time, passes and bandwidth
# --------------------------
# "useful" bandwidth divides the bytes the chain must move (read ``x``, write the
# result) by the time; "moved" counts one read and one write per counted pass. Expect
# eager's "moved" rate to stay at about the same share of the peak at every depth while
# its "useful" rate falls as ``1/k``; for a fused chain the two are the same.


def rate_text(rate):
    p = gpuguide.percent_of_peak(rate, peak_bw)
    # Above the memory peak, the data came from a cache: not a % of that peak.
    share = "n/a" if p is None else f"{p:.0f}%" if p <= 100 else "> peak: cached"
    return f"{gpuguide.format_rate(rate, 'B/s')} ({share})"


rows = []
for i, depth in enumerate(depths):
    for way in ways:
        m, k = times[way][i], counts[way][i]
        useful = gpuguide.bytes_per_s(min_bytes, m.median_s)
        if depth == deepest:  # recorded for the last cell
            spread = (k * min_bytes / m.q75_s, k * min_bytes / m.q25_s)
            gpuguide.record("moved bandwidth", k * useful, unit="B/s", size=x_size,
                            spread=spread, peak="memory", mode=way,
                            depth=depth)  # fmt: skip
        rows.append(
            {
                "depth, way": f"k={depth}, {way}",
                "median ± IQR/2": m,
                "passes": k,
                "useful (% of peak)": rate_text(useful),
                "moved (% of peak)": rate_text(k * useful),
            }
        )
print(gpuguide.table(rows))
for way in ways:
    kinds = {name: names[way].count(name) for name in names[way]}
    print(f"k={deepest}, {way}: " + ", ".join(f"{c} x {s}" for s, c in kinds.items()))

# %%
# What fusion bought
# ------------------
# On a GPU with a large tensor, expect the fused chain to take about as long as a
# single ``sin`` until the depth is large enough for the arithmetic to matter, so it
# runs close to ``k`` times faster than eager. On a CPU expect less: a vectorised sine
# costs more arithmetic per byte than a CPU's memory delivers, so fusion saves the
# extra passes, each operator's fixed cost and each intermediate's allocation, but
# not the arithmetic.
gains = [gpuguide.compare(c, e) for e, c in zip(*times.values(), strict=True)]
speedups = [g.speedup for g in gains]
gpuguide.record("compiled speed-up", gains[-1].speedup, unit="x", size=x_size,
                spread=(gains[-1].low, gains[-1].high), depth=deepest)  # fmt: skip
print(f"depth {deepest}: torch.compile ran {counts['torch.compile'][-1]} pass(es) "
      f"instead of {counts['eager'][-1]}; {gains[-1]}")  # fmt: skip
moved = counts["torch.compile"][-1] * min_bytes / times["torch.compile"][-1].median_s
share = gpuguide.percent_of_peak(moved, peak_bw)
short_of_k = gains[-1].against(deepest, deepest) == "below"  # all of its spread
if share is not None and share < 50 and short_of_k:
    print(f"The compiled chain moved data at {share:.0f}% of the peak bandwidth: "
          "something other than memory traffic (most likely the sines' arithmetic) "
          "limited it, so fusion could not give a k-fold gain.")  # fmt: skip
rates = [c * min_bytes / m.median_s for w in ways
         for c, m in zip(counts[w], times[w], strict=True)]  # fmt: skip
if max(gpuguide.percent_of_peak(r, peak_bw) or 0 for r in rates) > 100:
    print(f"Some rates exceed the peak: x ({gpuguide.format_bytes(min_bytes // 2)}) "
          "fits in this device's caches, so repeated passes are served from there.")  # fmt: skip

fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    depths,
    {
        "eager": times["eager"],
        f"torch.compile ({gpuguide.format_ratio(speedups[-1])} eager speed "
        f"at k={deepest})": times["torch.compile"],
    },
    xlabel="chain depth k (sin calls)",
    ylabel="time per call (ms)",
    title=f"Compiled at depth {deepest}: {gpuguide.format_ratio(speedups[-1])} eager speed",
    record="time by depth",
)
plt.show()

# %%
# Speed-up by depth
# -----------------
# Each bar is eager's median time divided by the compiled one's at the same depth;
# the first bar is eager itself, so the labels read as speed-ups. Expect them to grow
# with the depth on a GPU, towards ``k``.
bars = {"eager": 1.0} | {f"compiled, k={d}": s for d, s in zip(depths, speedups, strict=True)}  # fmt: skip
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    bars,
    ylabel="speed-up over eager (x)",
    title=f"Fusion's speed-up over eager: up to {gpuguide.format_ratio(max(speedups))}",
)
plt.show()

# %%
# Compile time, and when it pays off
# ----------------------------------
# Compiling costs seconds per function (less when inductor's on-disk cache already
# holds it; the torch.compile chapter covers caching). It pays off after
# ``one-off cost / time saved per call`` calls; where the compiled call is not
# measurably faster (the saving is within the spread), there is no such number.
for depth, cost, e, c in zip(depths, one_off, *times.values(), strict=True):
    calls = gpuguide.break_even(cost, e, c)
    even = (
        "no measurable saving" if calls is None else f"pays off after {calls:,} calls"
    )
    print(f"k={depth}: compile and first calls cost {cost:.2f} s; {even}")

# %%
# What to take away
# -----------------
# Eagerly, a chain of elementwise operations costs one pass over memory per
# operation; fused, one pass in all. ``torch.compile`` fuses such chains on GPUs and
# CPUs. Check that it did by counting kernels in the profiler, and compare the
# achieved bandwidth with the peak to see whether memory still limits the fused code.
# The next page shows the older tool for this, ``torch.jit.script``.
