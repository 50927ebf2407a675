"""
Timing pitfalls on every device: first calls, one sample, what is in the timed call
===================================================================================

After the previous page's asynchronous execution, four more ways to time one matrix
multiplication wrongly, which apply on a CPU as on a GPU: timing the first call,
trusting one sample, creating the inputs inside the timed call, and
``torch.utils.benchmark.Timer``'s default of one CPU thread. Each is set against the
median of a careful benchmark, with a verdict that carries its spread.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# The size is chosen so that one multiplication takes a few milliseconds here.
import math
import subprocess
import sys

import matplotlib.pyplot as plt
import torch
from torch.utils import benchmark as torch_benchmark

import gpuguide
from gpuguide import Measurement, benchmark, compare, plot_bars, report
from gpuguide.chapters.data import matmul_side

page = gpuguide.setup()
device = page.device
n = matmul_side(device=device, call_s=0.005)
a, b, out = (torch.randn(n, n, device=device) for _ in range(3))
print(f"float32 matmul, n = {n}")

# %%
# The reference
# -------------
# :func:`gpuguide.benchmark` warms up, then times each call on its own (CUDA events
# on a GPU, a monotonic clock on the CPU) and reports the median and the IQR. One
# untimed call comes first, so that the one-time costs of pitfall 1 do not skew the
# warm-up's estimate of how many calls to time.
torch.matmul(a, b, out=out)
ref = benchmark(torch.matmul, args=(a, b), kwargs={"out": out}, label="the reference")
report("reference matmul", ref, size=n)

# %%
# Pitfall 1: the first call
# -------------------------
# The first matmul in a process can pay one-time costs: on a GPU, creating the cuBLAS
# handle and loading kernels; on a CPU, starting the thread pool. Earlier pages ran
# in this process, so the first three calls are timed in a fresh one. Each call is
# one sample, with no spread: the claim sets the first against the reference's
# spread (not checked when the reference is NOISY).
FIRST_CALLS = """
import sys, time, torch
device, n = torch.device(sys.argv[1]), int(sys.argv[2])
sync = getattr(torch, device.type).synchronize  # torch.cuda / mps / cpu
a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
for _ in range(3):
    sync()
    t0 = time.perf_counter()
    torch.matmul(a, b)
    sync()
    print(time.perf_counter() - t0)
"""
command = [sys.executable, "-c", FIRST_CALLS, str(device), str(n)]
firsts = subprocess.check_output(command, text=True).split()
print("first three calls:", *(f"{float(t) / ref.median_s:.3g}x" for t in firsts))
cold = Measurement("first call", (float(firsts[0]),), str(device), "wall-clock+sync")
gpuguide.claim(
    "the first call in a fresh process takes at least 1.25x the reference's time",
    compare(ref, cold),
    at_least=1.25,
    unless="the reference is NOISY here" if ref.is_noisy else None,
)

# %%
# Pitfall 2: trusting one sample
# ------------------------------
# Even warm, single calls differ (other processes, clock changes, page faults, the
# GPU's power state). The reference's calls, in order, show the spread a one-shot
# timing draws from: a few percent on a quiet GPU (claimed below), more on a shared
# CPU.
title = f"Single calls vary: the slowest is {ref.max_s / ref.median_s:.3g}x the median"
fig, ax = plt.subplots()
ax.plot(range(1, ref.n + 1), [t * 1e3 for t in ref.times_s], ".-")
ax.set(xlabel="call (index)", ylabel="time (ms)", title=title)
gpuguide.label_device(fig, device)
plt.show()
gpuguide.claim(
    "on a GPU, the reference's interquartile range is at most 5% of its median",
    ref.relative_iqr,
    at_most=0.05,
    timed=True,
    on="cuda",
)

# %%
# Pitfall 3: creating the inputs inside the timed call
# ----------------------------------------------------
# Timing a function that calls ``torch.randn`` for its own inputs times the random
# number generator and the allocator too. The error shrinks as the operation grows
# relative to its inputs.


def matmul_with_fresh_inputs():
    x = torch.randn(n, n, device=device)
    y = torch.randn(n, n, device=device)
    return torch.matmul(x, y)


inside = benchmark(matmul_with_fresh_inputs, device=device, label="randn inside")
gpuguide.claim(
    "on a CPU, inputs made inside the timed call read at least 1.25x the reference",
    compare(ref, inside),
    at_least=1.25,
    on="cpu",
    unless="a side is NOISY here" if inside.is_noisy or ref.is_noisy else None,
)

# %%
# Pitfall 4: ``torch.utils.benchmark.Timer``'s thread count
# ---------------------------------------------------------
# ``Timer`` synchronizes CUDA and reports the median over blocks of calls (its IQR is
# the spread of block means), so with the same thread count it should agree with
# ``benchmark``; the two take turns for a few rounds, so that a drifting machine
# slows both. ``Timer`` uses one thread unless told otherwise: on a CPU with idle
# cores it is then slower; on a busy one it can even be faster.
method = "wall-clock" if device.type == "cpu" else "wall-clock+sync"


stmt = "torch.matmul(a, b, out=out)"
threads = torch.get_num_threads()
all_threads = torch_benchmark.Timer(stmt, globals=globals(), num_threads=threads)
one_thread_timer = torch_benchmark.Timer(stmt, globals=globals())  # the default
ours_s, theirs_s = [], []
for _ in range(1 if page.small else 2 if page.cuda else 3):  # rounds
    ours_s += benchmark(torch.matmul, args=(a, b), kwargs={"out": out}).times_s
    theirs_s += all_threads.blocked_autorange(min_run_time=ref.n * ref.median_s).times
one_s = one_thread_timer.blocked_autorange(
    min_run_time=0.02 if page.small else 0.2
).times
ours = Measurement("gpuguide, taking turns", tuple(ours_s), str(device), ref.method)
timer = Measurement(f"Timer, {threads} threads", tuple(theirs_s), str(device), method)
one_thread = Measurement("Timer, 1 thread", tuple(one_s), str(device), method)
for m in (ours, timer, one_thread):
    report(m.label, m, size=n)
same_threads = compare(timer, ours)
report("Timer against gpuguide", same_threads, size=n)
gpuguide.claim(
    "with torch's thread count, Timer and gpuguide show no measurable difference",
    same_threads,
    verdict="no measurable difference",
)

# %%
# How wrong is each method?
# -------------------------
# Each bar is a median with its IQR, labelled with its ratio to the reference: 1.00x
# is right, above 1 overestimates. The y axis turns logarithmic when the methods
# differ by more than 10x.
methods = {m.label: m for m in (ref, cold, inside, timer, one_thread)}
for m in (cold, inside, one_thread):
    report("against the reference", compare(m, ref), size=n, method=m.label)
worst = max(methods.values(), key=lambda m: abs(math.log(m.median_s / ref.median_s)))
title = f"Worst method here: {worst.label}, {compare(ref, worst).short}"
fig, ax = plt.subplots()
plot_bars(ax, methods, ylabel="median time (ms)", title=title)
medians = [m.median_s for m in methods.values()]
if max(medians) > 10 * min(medians):
    ax.set_yscale("log")
plt.show()
