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
# One pass over ``x`` reads every value and writes one result: its bytes are
# declared once, and size ``x`` (as large as the device's time budget allows for
# the deepest eager chain, so that on a GPU it is far larger than the caches) as
# well as give the rates below. On a GPU the deepest chain has 8 sines, not 16 (a
# longer chain takes seconds more to compile), and each way is timed for 40 ms:
# streaming a tensor this large takes nearly the same time at every call. A CPU's
# calls vary more, so there each way is timed for 1 s, on one thread: the lesson
# is eager against compiled, and two threads on a two-core machine stall whenever
# any other work runs.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.compiling import first_calls_s, passes

if not torch.cuda.is_available():  # a relative lesson: one thread times it steadily
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
depths = [1, 4] if page.small else [1, 4, 8] if page.cuda else [1, 4, 16]
rep_ms = 40 if page.cuda else 1000  # a CPU's timings need more calls to settle
deepest = depths[-1]


def pass_bytes(n):  # read n float32 values, write n
    return 2 * 4 * n


n = gpuguide.largest_size(2**12, 2**28, memory_at=lambda n: 3 * 4 * n,
                          traffic_at=lambda n: deepest * pass_bytes(n))  # fmt: skip
x = torch.randn(n, device=device)
x_size = gpuguide.format_bytes(4 * n)
peak_bw = page.peaks.memory_bandwidth_bytes_per_s
peak_text = gpuguide.format_rate(peak_bw, "B/s") if peak_bw else "unknown"
print(f"x: {n:,} float32 ({x_size}); depths {depths}; "
      f"peak memory bandwidth {peak_text} ({page.peaks.source})")  # fmt: skip
if not page.cuda:
    print("Kernel launches need a GPU; on this CPU the profiler counts aten operator "
          "calls per call instead, and a compiled graph's generated C++ loop as one.")  # fmt: skip


def nested_sin(x, depth):
    for _ in range(depth):
        x = torch.sin(x)
    return x


# %%
# Counting passes with the profiler
# ---------------------------------
# ``passes`` runs one call under the profiler and lists what it ran: on a GPU every
# kernel, on a CPU every ``aten::`` operator that no other one called, plus calls
# into a compiled graph. Each depth gets its own compiled function
# (``torch._dynamo.reset()`` forgets the previous one). The first three calls are
# timed apart: their total minus three steady-state calls is the one-off cost. Then
# eager and compiled run in five alternating rounds, so that a drift of the machine
# falls on both.
ways = ["eager", "torch.compile"]
times, counts, names = {w: [] for w in ways}, {w: [] for w in ways}, {}
one_off = []
for depth in depths:
    torch._dynamo.reset()
    compiled = torch.compile(nested_sin, dynamic=False, fullgraph=True)
    first = first_calls_s(compiled, x, depth, device=device)
    fns = {"eager": nested_sin, "torch.compile": compiled}
    timed = gpuguide.interleave(
        {w: lambda f=f, k=depth: f(x, k) for w, f in fns.items()},
        device=device,
        rep_ms=rep_ms,
    )
    for way, fn in fns.items():
        names[way] = passes(fn, x, depth, device=device)
        times[way].append(timed[way])
        counts[way].append(len(names[way]))
    one_off.append(max(first - 3 * times["torch.compile"][-1].median_s, 0.0))

# %%
# Time, passes and bandwidth
# --------------------------
# "useful" bandwidth divides the bytes the chain must move (one pass) by the time;
# "moved" counts one pass per kernel or operator counted. Where each pass is
# limited by memory (a GPU, with ``x`` far larger than its caches), every eager pass
# takes the same time, so eager's "moved" rate is the memory's at every depth while
# its "useful" rate falls as ``1/k``. Where a pass is limited by something else (on
# a CPU the sine's arithmetic and each operator's fixed costs, with caches that may
# hold ``x``), its time can change with the depth: below the table, the slowest
# eager pass against the fastest. For a fused chain, useful and moved are the same.


def rate_text(rate):  # a Rate, with its share of the memory peak
    p = 100 * rate.value / peak_bw if peak_bw else None
    # Above the memory peak, the data came from a cache: not a % of that peak.
    return f"{rate}, " + (
        "n/a" if p is None else f"{p:.0f}%" if p <= 100 else "> peak: cached"
    )


rows, moved = [], {w: [] for w in ways}
for i, depth in enumerate(depths):
    for way in ways:
        m, k = times[way][i], counts[way][i]
        moved[way].append(m.rate(k * pass_bytes(n), "B/s"))
        rows.append({"depth, way": f"k={depth}, {way}", "median ± IQR/2": m, "passes": k,
                     "useful, % of peak": rate_text(m.rate(pass_bytes(n), "B/s")),
                     "moved, % of peak": rate_text(moved[way][-1])})  # fmt: skip
print(gpuguide.table(rows))
for way in ways:
    kinds = {name: names[way].count(name) for name in names[way]}
    print(f"k={deepest}, {way}: " + ", ".join(f"{c} x {s}" for s, c in kinds.items()))
per_pass = [gpuguide.Measurement(f"a pass at k={d}", tuple(t / k for t in m.times_s),
                                 m.device, m.method)
            for d, k, m in zip(depths, counts["eager"], times["eager"], strict=True)]  # fmt: skip
ordered = sorted(per_pass, key=lambda m: m.median_s)
spread = gpuguide.compare(ordered[-1], ordered[0])
print(f"eager, time per pass: {spread}")
gpuguide.claim(
    "on a GPU, an eager pass takes the same time at every depth: the "
    "slowest runs at least 0.9x the fastest's speed",
    spread,
    at_least=0.9,
    on="cuda",
)
if peak_bw:
    gpuguide.claim(
        f"on a GPU, eager moves data at least at 70% of the memory peak at k={deepest}",
        moved["eager"][-1],
        at_least=0.7 * peak_bw,
        on="cuda",
    )
for way in ways:  # the deepest chain's
    gpuguide.report("moved bandwidth", moved[way][-1], peak="memory", size=x_size,
                    mode=way, depth=deepest)  # fmt: skip

# %%
# What fusion bought
# ------------------
# On a GPU with a large tensor, each eager pass is limited by memory, and the fused
# chain reads and writes once: it takes about as long as a single ``sin`` while the
# sines' arithmetic is cheap next to a pass, and longer as the depth makes the
# arithmetic matter. So its speed-up grows with ``k`` but stays below ``k`` (the
# recorded GPU figures under Recorded results show how far). On a CPU expect less: a
# vectorised sine costs more arithmetic per byte than a CPU's memory delivers, so
# fusion saves the extra passes, each operator's fixed cost and each intermediate's
# allocation, but not the arithmetic. At ``k=1`` there is nothing to fuse: a
# difference there comes from the compiled code itself (on a CPU, inductor's own
# vectorised loop against ATen's ``sin``), not from fusion. On a GPU, fusion's part
# shows as the speed-up growing beyond ``k=1``; on a CPU, where the compiled loop's
# own gain at ``k=1`` can exceed what fusion adds, the speed-up need not grow. The
# claims below say what this run found.
gains = [gpuguide.compare(c, e) for e, c in zip(*times.values(), strict=True)]
for depth, c in zip(depths[:-1], gains, strict=False):
    print(f"k={depth}{' (nothing to fuse)' if depth == 1 else ''}: {c}")
gpuguide.report("compiled speed-up", gains[-1], size=x_size, depth=deepest)
gpuguide.claim(
    f"at k={deepest}, the fused chain is at least 1.3x faster than eager",
    gains[-1],
    at_least=1.3,
)
grows = gains[-1].speedup / gains[0].speedup
gpuguide.claim(
    f"on a GPU, the speed-up grows beyond k=1: at k={deepest} at least 2x "
    "the speed-up at k=1",
    grows,
    at_least=2,
    timed=True,
    on="cuda",
    spread=(gains[-1].low / gains[0].high, gains[-1].high / gains[0].low),
)
gpuguide.claim(
    f"on a GPU, the speed-up stays below k: at k={deepest} at most {deepest}x",
    gains[-1],
    at_most=deepest,
    on="cuda",
)
if peak_bw:
    gpuguide.claim(
        f"on a CPU, the fused chain at k={deepest} moves data at under 50% "
        "of the memory peak: the arithmetic limits it",
        moved["torch.compile"][-1],
        at_most=0.5 * peak_bw,
        on="cpu",
    )
share = gpuguide.percent_of_peak(moved["torch.compile"][-1].value, peak_bw)
if share is not None and share < 50 and gains[-1].against(deepest, deepest) == "below":
    print(f"The compiled chain moved data at {share:.0f}% of the peak bandwidth: "
          "something other than memory traffic (most likely the sines' arithmetic) "
          "limited it, so fusion could not give a k-fold gain.")  # fmt: skip
if peak_bw and max(r.value for w in ways for r in moved[w]) > peak_bw:
    print(f"Some rates exceed the peak: x ({x_size}) fits in this device's caches, "
          "so repeated passes are served from there.")  # fmt: skip

fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax, depths, {"eager": times["eager"], "torch.compile": times["torch.compile"]},
    xlabel="chain depth k (sin calls)", ylabel="time per call (ms)",
    title=f"torch.compile against eager: {gains[0].short} at k=1 (nothing fused),\n"
    f"{gains[-1].short} at k={deepest}")  # fmt: skip
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
# The next page shows the older tool for this, ``torch.jit.script``. What this run
# found:
gpuguide.takeaway()
