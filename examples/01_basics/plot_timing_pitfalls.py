"""
Timing pitfalls on every device: first calls, one sample, what is in the timed call
===================================================================================

A timing is only as good as what it actually measures. After the previous page's
asynchronous execution, four more ways to time one matrix multiplication wrongly,
which apply on a CPU as on a GPU: timing the first call, trusting one sample,
creating the inputs inside the timed call, and ``torch.utils.benchmark.Timer``'s
default of one CPU thread. Each is set against the median of a careful benchmark,
with a verdict that carries its spread.

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
from gpuguide import Measurement, benchmark, compare, plot_bars, plot_sweep, report

page = gpuguide.setup()
device = page.device
n = gpuguide.largest_size(
    64, 16384, memory_at=lambda n: 12 * n * n, flop_at=lambda n: 2 * n**3,
    traffic_at=lambda n: 12 * n * n, call_s=0.005, multiple_of=64,
)  # fmt: skip
a, b, out = (torch.randn(n, n, device=device) for _ in range(3))
print(f"float32 matmul, n = {n}")

# %%
# The reference
# -------------
# :func:`gpuguide.benchmark` warms up, then times each call on its own (CUDA events
# on a GPU, a monotonic clock on the CPU) and reports the median and the IQR. One
# untimed call comes first: the first matmul of a size can pay one-time costs
# (pitfall 1), which would make the warm-up's estimate of a call, and with it the
# number of timed calls, far too small.
torch.matmul(a, b, out=out)
ref = benchmark(torch.matmul, args=(a, b), kwargs={"out": out}, label="the reference")
report("reference matmul", ref, size=n)


def as_measurement(label, times_s, method):
    return Measurement(label, tuple(times_s), str(device), method)


def against_reference(m):
    """Print and record how ``m`` compares with the reference, with the spread."""
    report("against the reference", compare(m, ref), size=n, method=m.label)


# %%
# Pitfall 1: the first call
# -------------------------
# The first matmul in a process can pay one-time costs: on a GPU, creating the cuBLAS
# handle and workspace and loading kernels; on a CPU, starting the thread pool.
# Earlier pages of this gallery ran in this process and paid them already, so the
# first three calls are timed in a fresh process, after making the inputs there.
# The first call often pays the most, but the ones after it need not be back at the
# reference's speed either: each allocates a fresh result, in a process that is still
# cold. Each call is one sample, with no spread and so no verdict of its own: the
# lines below set each against the reference's median, and the claim is that the
# first call took at least 1.25x the reference's time (not checked when the
# reference itself is NOISY: one sample cannot be placed against a wide spread).
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
run = subprocess.run(
    [sys.executable, "-c", FIRST_CALLS, str(device), str(n)],
    capture_output=True,
    text=True,
    check=True,
)
calls = [
    as_measurement(f"{nth} call", [float(s)], "wall-clock+sync")
    for nth, s in zip(("first", "second", "third"), run.stdout.split(), strict=True)
]
print(
    "fresh process: "
    + ", ".join(f"{c.label} {c.median_s / ref.median_s:.3g}x" for c in calls)
    + f" the reference's median; its slowest warm call {ref.max_s / ref.median_s:.3g}x"
)
cold = calls[0]
against_reference(cold)
gpuguide.claim(
    "the first call in a fresh process takes at least 1.25x the reference's time",
    cold.median_s / ref.median_s,
    spread=(cold.median_s / ref.q75_s, cold.median_s / ref.q25_s),
    at_least=1.25,
    timed=True,
    unless="the reference is NOISY here" if ref.is_noisy else None,
)


# %%
# Pitfall 2: trusting one sample
# ------------------------------
# Even warm, single calls differ (other processes, clock changes, page faults, the
# GPU's power state). The reference's calls, in order, show the spread a one-shot
# timing draws from: expect a few percent on a quiet GPU (claimed below), more on a
# shared CPU.
print(
    f"{ref.n} single calls: min {ref.min_s * 1e3:.3g} ms, median "
    f"{ref.median_s * 1e3:.3g} ms, max {ref.max_s * 1e3:.3g} ms"
)
fig, ax = plt.subplots()
plot_sweep(
    ax, list(range(1, ref.n + 1)), {"one call": [t * 1e3 for t in ref.times_s]},
    xlabel="call (index)", ylabel="time (ms)", logx=False, logy=False,
    title=f"Single calls vary: the slowest is {ref.max_s / ref.median_s:.3g}x the median",
)  # fmt: skip
ax.axhline(ref.median_ms, color="0.3", linestyle="--", label="median")
ax.set_ylim(bottom=0)
ax.legend()
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
# A popular notebook timed functions that call ``torch.randn`` for their own inputs,
# so every timing included the random number generator and the allocator. The error
# shrinks as the operation grows relative to its inputs: a few percent for a large
# matmul on a GPU, up to several times the real cost for cheap operations.


def matmul_with_fresh_inputs():
    x = torch.randn(n, n, device=device)
    y = torch.randn(n, n, device=device)
    return torch.matmul(x, y)


inside = benchmark(matmul_with_fresh_inputs, device=device, label="randn inside")
against_reference(inside)
gpuguide.claim(
    "on a CPU, making the inputs inside the timed call reads at least 1.25x the "
    "reference's time",
    compare(inside, ref),
    at_most=0.8,
    on="cpu",
    unless="a side is NOISY here" if inside.is_noisy or ref.is_noisy else None,
)

# %%
# Pitfall 4: ``torch.utils.benchmark.Timer``'s thread count
# ---------------------------------------------------------
# ``Timer`` synchronizes CUDA and reports the median over blocks of calls, so with
# the same thread count it should agree with ``benchmark`` within their
# spread (on a GPU its host clock also counts one launch and one synchronize per
# block, so it may read slightly higher). A shared machine drifts between two
# measurements taken one after the other, so the two tools take turns for a few
# rounds and each one's times are pooled. ``Timer`` uses one thread unless told
# otherwise: on a CPU with idle cores it is then slower, by up to the number of cores;
# on a busy one, where torch's threads wait for each other's cores, it can even be
# faster. On a GPU it makes little difference. ``Timer``'s IQR is the spread of block
# means, not of single calls.
method = "wall-clock" if device.type == "cpu" else "wall-clock+sync"


def make_timer(num_threads):
    return torch_benchmark.Timer(
        "torch.matmul(a, b, out=out)",
        globals={"torch": torch, "a": a, "b": b, "out": out},
        num_threads=num_threads,
    )


all_threads = make_timer(torch.get_num_threads())
ours_s, theirs_s = [], []
for _ in range(1 if page.small else 2 if page.cuda else 3):  # rounds
    ours_s += benchmark(torch.matmul, args=(a, b), kwargs={"out": out}).times_s
    theirs_s += all_threads.blocked_autorange(min_run_time=ref.n * ref.median_s).times
ours = as_measurement("gpuguide, taking turns", ours_s, ref.method)
timer = as_measurement(f"Timer, {torch.get_num_threads()} threads", theirs_s, method)
one_s = make_timer(1).blocked_autorange(min_run_time=0.02 if page.small else 0.2).times
one_thread = as_measurement("Timer, 1 thread", one_s, method)
for m in (ours, timer, one_thread):
    report(m.label, m, size=n)
same_threads = compare(timer, ours)
report("Timer against gpuguide", same_threads, size=n)
gpuguide.claim(
    "with torch's thread count, Timer and gpuguide show no measurable difference",
    same_threads,
    verdict="no measurable difference",
)
against_reference(one_thread)

# %%
# How wrong is each method?
# -------------------------
# Each bar is a median with its IQR, labelled with its ratio to the reference: 1.00x
# is right, above 1 overestimates. The y axis turns logarithmic when the methods
# differ by more than 10x.
methods = {"reference": ref, "first call": cold, "randn inside": inside}
methods.update({"Timer, all threads": timer, "Timer, 1 thread": one_thread})
worst = max(methods.values(), key=lambda m: abs(math.log(m.median_s / ref.median_s)))
fig, ax = plt.subplots()
plot_bars(
    ax, methods, ylabel="median time (ms)",
    title=f"Worst method here: {worst.label}; time / reference "
    f"{compare(ref, worst).short}",
)  # fmt: skip
medians = [m.median_s for m in methods.values()]
if max(medians) > 10 * min(medians):
    ax.set_yscale("log")
plt.show()
