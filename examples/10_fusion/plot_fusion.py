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
from dataclasses import replace

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
# compiled graph (its generated C++ loop). The compiled function specializes on
# each depth: its first three calls at each are timed apart. Then eager and compiled
# run in alternating rounds, so that a drift of the machine falls on both.
activities = [ProfilerActivity.CPU] + [ProfilerActivity.CUDA] * page.cuda


def passes_of(fn, *args):
    with profile(activities=activities) as prof:
        fn(*args)
    if page.cuda:
        kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        return [e.name[:48] for e in kernels if not e.is_user_annotation]
    calls = [e.name[:32] for e in prof.events() if "CompiledFxGraph" in e.name]
    return calls + [e.name for e in prof.events() if e.name == "aten::sin"]


compiled = torch.compile(nested_sin, dynamic=False, fullgraph=True)
ways = {"eager": nested_sin, "torch.compile": compiled}
firsts = [first_calls_s(compiled, x, k, device=device) for k in depths]  # compiles
chain = gpuguide.Sweep(
    "sin chain",
    lambda depth, dev: [x, depth],
    sizes=depths,
    traffic=lambda depth: pass_bytes,  # what the chain must move: one pass
    rate="B/s",
    peak="memory",
    size_label="chain depth k (sin calls)",
).run(
    ways,
    paired=True,
    rep_ms=40 if page.cuda else 1000,
)
print(chain)  # "useful" bandwidth: one pass's bytes over the time
ran = {way: [passes_of(fn, x, k) for k in depths] for way, fn in ways.items()}
passes = {way: [len(names) for names in lists] for way, lists in ran.items()}
for way, lists in ran.items():
    print(f"{way}, passes at k={depths}: {passes[way]}; {sorted(set(lists[-1]))}")

# %%
# Moved bandwidth
# ---------------
# "Moved" counts one pass per kernel or operator. Where each pass is limited by
# memory (a GPU, with ``x`` far larger than its caches), eager's moved rate is the
# memory's at every depth while its useful rate falls as ``1/k``. On a CPU the
# sine's arithmetic and each operator's fixed costs limit a pass instead.
moved = {way: chain.at(way).rate(passes[way][-1] * pass_bytes, "B/s") for way in ways}
for way, rate in moved.items():  # the deepest chain's
    at = {"size": x_size, "mode": way, "depth": deepest}
    gpuguide.report("moved bandwidth", rate, peak="memory", **at)
per_pass = [  # eager's time per pass at each depth
    replace(m, label=f"a pass at k={k}", times_s=tuple(t / n for t in m.times_s))
    for k, n, m in zip(depths, passes["eager"], chain.times["eager"], strict=True)
]
ordered = sorted(per_pass, key=lambda m: m.median_s)
spread = gpuguide.compare(ordered[-1], ordered[0])
print(f"eager, time per pass: {spread}")
same = "on a GPU, every eager pass runs at least at 0.9x the fastest pass's speed"
gpuguide.claim(same, spread, at_least=0.9, on="cuda")
if peak_bw:
    streams = f"on a GPU, eager moves at least 70% of the memory peak at k={deepest}"
    gpuguide.claim(streams, moved["eager"], at_least=0.7 * peak_bw, on="cuda")

# %%
# What fusion bought
# ------------------
# On a GPU, the fused chain reads and writes once: while the arithmetic is cheap
# next to a pass, its speed-up grows with ``k`` but stays below ``k``. On a CPU a
# vectorised sine costs more arithmetic per byte than memory delivers: fusion saves
# the extra passes and each operator's fixed cost, not the arithmetic. At ``k=1``
# there is nothing to fuse: a difference there comes from the compiled code itself.
gains = chain.verdicts("torch.compile", "eager")
for depth, gain in gains:
    print(f"k={depth}{' (nothing to fuse)' if depth == 1 else ''}: {gain}")
first, top = gains[0][1], gains[-1][1]
gpuguide.report("compiled speed-up", top, size=x_size, depth=deepest)
gpuguide.claim(f"at k={deepest}, fused is at least 1.3x faster", top, at_least=1.3)
grows = f"on a GPU, the speed-up grows beyond k=1: at k={deepest}, 2x k=1's or more"
band = {"spread": (top.low / first.high, top.high / first.low), "timed": True}
gpuguide.claim(grows, top.speedup / first.speedup, at_least=2, on="cuda", **band)
below = f"on a GPU, the speed-up stays below k: at most {deepest}x at k={deepest}"
gpuguide.claim(below, top, at_most=deepest, on="cuda")
if peak_bw:
    math = f"on a CPU, fused at k={deepest} moves under 50% of the memory peak"
    gpuguide.claim(math, moved["torch.compile"], at_most=0.5 * peak_bw, on="cpu")
chain.plot(title=f"torch.compile: {first.short} at k=1, {top.short} at k={deepest}")

# %%
# Compile time, and when it pays off
# ----------------------------------
# The first three calls, less three steady calls, are the one-off cost (less when
# inductor's on-disk cache already holds the code). It pays off after ``one-off
# cost / time saved per call`` calls, where the compiled call is measurably faster.
for depth, first_s in zip(depths, firsts, strict=True):
    e, c = chain.at("eager", depth), chain.at("torch.compile", depth)
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
