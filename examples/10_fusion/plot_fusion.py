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
steady state apart from the first calls, and turns the times into bandwidth.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# One pass over ``x`` reads every value and writes one result. ``x`` is as large as
# the time budget allows for the deepest eager chain (on a GPU, far larger than the
# caches). On a GPU the deepest chain has 8 sines (a longer one takes seconds more
# to compile); a CPU's calls vary more, so there each way is timed for 1 s, on one
# thread.
import matplotlib.pyplot as plt
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import gpuguide
from gpuguide.timing import first_calls_s

if not torch.cuda.is_available():  # a relative lesson: one thread times it steadily
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
depths = [1, 4] if page.small else [1, 4, 8] if page.cuda else [1, 4, 16]
deepest = depths[-1]


fits = {"memory_at": lambda n: 3 * 4 * n, "traffic_at": lambda n: deepest * 8 * n}
n = gpuguide.largest_size(2**12, 2**28, **fits)
x, pass_bytes = torch.randn(n, device=device), 2 * 4 * n  # read n float32, write n
x_size = gpuguide.format_bytes(4 * n)
peak_bw = page.peaks.memory_bandwidth_bytes_per_s
print(f"x: {n:,} float32 ({x_size}); depths {depths}; memory: {page.peaks.source}")


def nested_sin(x, depth):
    for _ in range(depth):
        x = torch.sin(x)
    return x


# %%
# Counting passes with the profiler
# ---------------------------------
# One call under ``torch.profiler`` lists what ran: on a GPU every kernel; on a
# CPU, where there are no kernels, every ``sin`` operator and every call into a
# compiled graph (its generated C++ loop). Each depth gets its own compiled
# function (``torch._dynamo.reset()`` forgets the previous one); its first three
# calls are timed apart. Then eager and compiled run in alternating rounds, so that
# a drift of the machine falls on both.
activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * page.cuda


def passes(fn, *args):
    with profile(activities=activities) as prof:
        fn(*args)
    if page.cuda:
        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        return [e.name[:48] for e in kernels if not e.is_user_annotation]
    calls = [e.name[:32] for e in prof.events() if "CompiledFxGraph" in e.name]
    return calls + [e.name for e in prof.events() if e.name == "aten::sin"]


ways = ["eager", "torch.compile"]
times, names, firsts = {w: [] for w in ways}, {w: [] for w in ways}, []
for depth in depths:
    torch._dynamo.reset()
    compiled = torch.compile(nested_sin, dynamic=False, fullgraph=True)
    firsts.append(first_calls_s(compiled, x, depth, device=device))
    fns = {"eager": nested_sin, "torch.compile": compiled}
    calls = {w: lambda f=f, k=depth: f(x, k) for w, f in fns.items()}
    timed = gpuguide.interleave(calls, device=device, rep_ms=40 if page.cuda else 1000)
    for way, fn in fns.items():
        names[way].append(passes(fn, x, depth))
        times[way].append(timed[way])

# %%
# Time, passes and bandwidth
# --------------------------
# "useful" bandwidth divides the bytes the chain must move (one pass) by the time;
# "moved" counts one pass per kernel or operator. Where each pass is limited by
# memory (a GPU, with ``x`` far larger than its caches), eager's "moved" rate is
# the memory's at every depth while its "useful" rate falls as ``1/k``. On a CPU
# the sine's arithmetic and each operator's fixed costs limit a pass instead.
rows, moved = [], {w: [] for w in ways}
for i, depth in enumerate(depths):
    for way in ways:
        m, k = times[way][i], len(names[way][i])
        moved[way].append(m.rate(k * pass_bytes, "B/s"))
        share = page.peaks.percent_of(moved[way][-1].value, "memory")
        rows.append({"k": depth, "way": way, "time": m, "passes": k})
        rows[-1] |= {"useful": m.rate(pass_bytes, "B/s"), "moved": moved[way][-1]}
        rows[-1]["% of peak"] = share
print(gpuguide.table(rows))
for way in ways:
    ran = names[way][-1]
    print(f"k={deepest}, {way}: {len(ran)} x {', '.join(sorted(set(ran)))}")
per_pass = []  # eager's time per pass at each depth
for d, m, ran in zip(depths, times["eager"], names["eager"], strict=True):
    each = tuple(t / len(ran) for t in m.times_s)
    per_pass.append(gpuguide.Measurement(f"a pass at k={d}", each, m.device, m.method))
ordered = sorted(per_pass, key=lambda m: m.median_s)
spread = gpuguide.compare(ordered[-1], ordered[0])
print(f"eager, time per pass: {spread}")
same = "on a GPU, every eager pass runs at least at 0.9x the fastest pass's speed"
gpuguide.claim(same, spread, at_least=0.9, on="cuda")
if peak_bw:
    streams = f"on a GPU, eager moves at least 70% of the memory peak at k={deepest}"
    gpuguide.claim(streams, moved["eager"][-1], at_least=0.7 * peak_bw, on="cuda")
    if max(r.value for w in ways for r in moved[w]) > peak_bw:
        print(f"Some rates exceed the peak: x ({x_size}) fits in the caches.")
for way in ways:  # the deepest chain's
    at = {"size": x_size, "mode": way, "depth": deepest}
    gpuguide.report("moved bandwidth", moved[way][-1], peak="memory", **at)

# %%
# What fusion bought
# ------------------
# On a GPU, the fused chain reads and writes once: it takes about as long as one
# ``sin`` while the arithmetic is cheap next to a pass. So its speed-up grows with
# ``k`` but stays below ``k``. On a CPU a vectorised sine costs more arithmetic per
# byte than memory delivers: fusion saves the extra passes, each operator's fixed
# cost and each intermediate's allocation, but not the arithmetic. At ``k=1``
# there is nothing to fuse: a difference there comes from the compiled code itself
# (on a CPU, inductor's vectorised loop against ATen's ``sin``), so on a CPU the
# speed-up need not grow with ``k``. The claims say what this run found.
gains = [gpuguide.compare(c, e) for e, c in zip(*times.values(), strict=True)]
for depth, c in zip(depths, gains, strict=True):
    print(f"k={depth}{' (nothing to fuse)' if depth == 1 else ''}: {c}")
first, top = gains[0], gains[-1]
gpuguide.report("compiled speed-up", top, size=x_size, depth=deepest)
gpuguide.claim(f"at k={deepest}, fused is at least 1.3x faster", top, at_least=1.3)
grows = f"on a GPU, the speed-up grows beyond k=1: at k={deepest}, 2x k=1's or more"
band = {"spread": (top.low / first.high, top.high / first.low), "timed": True}
gpuguide.claim(grows, top.speedup / first.speedup, at_least=2, on="cuda", **band)
below = f"on a GPU, the speed-up stays below k: at most {deepest}x at k={deepest}"
gpuguide.claim(below, top, at_most=deepest, on="cuda")
if peak_bw:
    math = f"on a CPU, fused at k={deepest} moves under 50% of the memory peak"
    gpuguide.claim(math, moved["torch.compile"][-1], at_most=0.5 * peak_bw, on="cpu")
fig, ax = plt.subplots()
title = f"torch.compile: {first.short} at k=1, {top.short} at k={deepest}"
labels = {"xlabel": "chain depth k (sin calls)", "ylabel": "time per call (ms)"}
gpuguide.plot_sweep(ax, depths, times, **labels, title=title)
plt.show()

# %%
# Compile time, and when it pays off
# ----------------------------------
# The first three calls, less three steady calls, are the one-off cost (less when
# inductor's on-disk cache already holds the code). It pays off after ``one-off
# cost / time saved per call`` calls, where the compiled call is measurably faster.
for depth, first_s, e, c in zip(depths, firsts, *times.values(), strict=True):
    cost = max(first_s - 3 * c.median_s, 0.0)
    calls = gpuguide.break_even(cost, e, c)
    even = f"pays off after {calls:,} calls" if calls else "no measurable saving"
    print(f"k={depth}: compile and first calls cost {cost:.2f} s; {even}")

# %%
# What to take away
# -----------------
# Eagerly, a chain of elementwise operations costs one pass over memory per
# operation; fused, one pass in all. ``torch.compile`` fuses such chains on GPUs and
# CPUs. Check that it did by counting kernels in the profiler, and compare the
# achieved bandwidth with the peak to see whether memory still limits the fused code.
# The next page shows the older tool for this, ``torch.jit.script``.
gpuguide.takeaway()
