"""
CPU vs GPU: where the crossover is
==================================

How much faster is a GPU? Claims such as "100-1000x" leave out the conditions: the
ratio depends on the operation, its size, the dtype, and whether copying data to and
from the GPU is counted. This page measures it over a range of sizes for two float32
operations: a square matrix multiplication (``2 n^3`` FLOP on ``3 n^2`` numbers,
compute-bound once ``n`` is large) and an elementwise ``y = x * a + b`` (one
multiply-add per 16 bytes of memory traffic, memory-bound at every size).

Each size is timed on the CPU, on the GPU with the data already there, and on the GPU
including copying the inputs in and the result out. The printout gives the crossover
sizes, the speed-up, and the achieved FLOP/s and GB/s as a percentage of peak.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# The CPU series runs in every case. On a GPU run the CPU gets a longer time per call
# than usual, so that its curve reaches the sizes where the GPU takes over. A CPU has
# no datasheet figures here, so its ceilings are measured: the best fp32 matmul rate
# over square sizes that double while a call stays short, with all of torch's
# threads, and the best bandwidth of a copy, an add and a sum through main memory.
# They are lower bounds on the true peaks; the line under the provenance says where
# each was found and what the median call reached (the spread).
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.host import last_level_cache_bytes

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
cpu = torch.device("cpu")
on_gpu = device.type != "cpu"
cpu_name = gpuguide.describe_device(cpu).short_name
peaks = gpuguide.device_peaks(device)
cpu_peaks = gpuguide.device_peaks(cpu)
cache_bytes = last_level_cache_bytes()  # None where the host does not say
tf32 = torch.get_float32_matmul_precision() != "highest"
print(f"CPU series: {cpu_name}; CPU ceilings: {cpu_peaks.source}")
print(f"  {cpu_peaks.detail}")
if on_gpu and not peaks.known:
    print(f"{peaks.name}: peak FLOP/s and bandwidth unknown, so no percentages")
if not on_gpu:
    print(
        "The GPU curves need a GPU to measure; this run shows the CPU curves, and "
        "those of the recorded GPUs faintly, with their figures at the end."
    )

# %%
# The two operations
# ------------------
# Both write into a preallocated ``out``, so that the CPU and device-resident timings
# measure the arithmetic, not the allocator. ``torch.addcmul(b, x, a)`` computes
# ``b + x * a`` in one pass; ``x * a + b`` would run two kernels and move 50% more
# bytes.


def matmul(a, b, out):
    return torch.matmul(a, b, out=out)


def scale_shift(x, a, b, out):
    return torch.addcmul(b, x, a, out=out)


# %%
# One sweep, three ways
# ---------------------
# ``gpuguide.sweep`` picks the sizes that fit each device's budget, from what one size
# allocates, computes and moves (``fit``). For each size the inputs are made on the
# CPU once. The "copies" variant is what a program that keeps its data on the host
# pays for every call: ``.to(device)`` for each input, the operation, and ``.cpu()``
# for the result, which also waits for the GPU to finish. With the data on the GPU,
# each call is timed as one of a loop of such calls, its launch included
# (``measure="call"``, the default): at small sizes the launch, not the arithmetic,
# decides whether the GPU wins, and inputs that fit the GPU's L2 cache stay there
# from call to call, as they would in such a loop.


def run_sweep(op, shape_at, n_tensors, lo, hi, **fit):
    def with_copies(*host_inputs):
        return op(*(t.to(device) for t in host_inputs), None).cpu()

    cpu_call_s = 0.25 if on_gpu else None
    cpu_sizes = gpuguide.sweep(lo, hi, device=cpu, call_s=cpu_call_s, **fit)
    gpu_sizes = gpuguide.sweep(lo, hi, **fit) if on_gpu else []
    sizes = sorted(set(cpu_sizes) | set(gpu_sizes))
    series = {"CPU": [], "GPU, data on device": [], "GPU incl. copies": []}
    for n in sizes:
        host = [torch.randn(shape_at(n)) for _ in range(n_tensors)]  # last: `out`
        on_cpu = on_device = copies = None
        if n in cpu_sizes:
            on_cpu = gpuguide.benchmark(op, args=host, device=cpu)
        if n in gpu_sizes:
            resident = [t.to(device) for t in host]
            on_device = gpuguide.benchmark(op, args=resident, device=device)
            copies = gpuguide.benchmark(with_copies, args=host[:-1], device=device)
        for label, m in zip(series, (on_cpu, on_device, copies), strict=True):
            series[label].append(m)
    return sizes, series if on_gpu else {"CPU": series["CPU"]}


# %%
# Reading off the crossover
# -------------------------
# The crossover is the smallest size from which on the GPU was measurably faster
# (:func:`gpuguide.compare`: the interquartile ranges apart, the medians 5% or more) at
# every size where both ran. Rates are taken at the largest size each series reached and
# compared with the GPU's datasheet peak or the CPU's measured ceiling; for the "copies"
# series no peak applies. A rate above the CPU's ceiling is a new best rate, so it reads
# "at the ceiling": the memory ceiling streams tensors four times the CPU's last-level
# cache, and ``x * a + b`` writes one byte in four, the ceiling's copy and add one in
# two and one in three (a write also costs a read that none of them counts), so it can
# stream a little faster. Only where all its tensors fit that cache is a higher
# bandwidth the cache's. No share is printed above 100%.


def crossover(sizes, cpu_times, gpu_times):
    both = [
        (n, c, g)
        for n, c, g in zip(sizes, cpu_times, gpu_times, strict=True)
        if c is not None and g is not None
    ]
    found = None
    for n, c, g in reversed(both):
        if gpuguide.compare(g, c).verdict != "faster":  # with the spread
            break
        found = n
    return found, both[-1]


def size_text(n):
    return f"2^{n.bit_length() - 1}" if n >= 2**14 and n & (n - 1) == 0 else str(n)


def share(of, label, rate, work):
    if "copies" in label:
        return ""
    on = cpu_peaks if label == "CPU" else peaks
    if not on.measured:  # a datasheet's: a share, or a flag above the sheet
        flag = on.share(rate, of, tf32=tf32)
        return "" if flag.endswith("unknown") else f" ({flag})"
    pct = on.percent_of(rate, of, tf32=tf32)
    if pct is None:
        return ""
    if pct < 100:
        return f" ({pct:.0f}% of the CPU's measured ceiling)"
    if of == "memory" and work <= (cache_bytes or 0):  # bytes: each tensor once
        tensors, cache = map(gpuguide.format_bytes, (work, cache_bytes))
        fit = f"its {tensors} of tensors fit the {cache} last-level cache"
        return f" (above the CPU's measured memory ceiling: {fit})"
    return " (at the CPU's measured ceiling: the best rate seen on it)"


def summarize(name, sizes, series, work_at, unit, of):
    labelled, finding = {}, []
    peak = "memory" if of == "memory" else "tf32" if tf32 else "fp32"
    for label, times in series.items():
        n, m = [(n, m) for n, m in zip(sizes, times, strict=True) if m][-1]
        work = work_at(n)
        note = share(of, label, work / m.median_s, work)
        rate = gpuguide.format_rate(work / m.median_s, unit)
        print(f"{name}, {label}, n={size_text(n)}: {rate}{note}")
        # Recorded: each processor's own rate, as a share of the peak of the run's
        # device (a GPU run's CPU series is its host's, with no recorded peak).
        if "copies" not in label:
            gpuguide.record(
                f"{name} rate", work / m.median_s, unit=unit, size=n, on=label,
                spread=(work / m.q75_s, work / m.q25_s),
                peak=peak if (label == "CPU") != on_gpu else None,
            )  # fmt: skip
        if label == "CPU":
            labelled[f"CPU ({cpu_name.removeprefix('CPU: ')})"] = times
            finding.append(f"the CPU reaches {rate}")
            continue
        found, (n, c, g) = crossover(sizes, series["CPU"], times)
        versus = gpuguide.compare(g, c)
        if versus.measurable:
            speed = f"{gpuguide.format_ratio(versus.speedup)} CPU speed"
        else:
            speed = "no measurable difference from the CPU"
        speed += f" at n={size_text(n)}"
        where = f"from n={size_text(found)} on" if found else "at no measured size"
        print(f"{name}, {label}: faster than the CPU {where}; {speed}")
        labelled[f"{label} ({speed})"] = times
        how = "with copies" if "copies" in label else "on device"
        finding.append(f"from n={size_text(found)} {how}" if found else f"never {how}")
    if on_gpu:
        return labelled, "GPU faster " + ", ".join(finding[1:])
    return labelled, finding[0]


# %%
# Matrix multiplication
# ---------------------
# Expect the CPU to win at small ``n``, where launching GPU work and copying cost
# more than the arithmetic, and the device-resident GPU to win by a large factor at
# large ``n``. The copies grow as ``n^2`` and the arithmetic as ``n^3``, so counting
# them moves the crossover up but matters less and less beyond it.
def matmul_flop(n):
    return gpuguide.matmul_flop(n, n, n)


sizes, mm = run_sweep(
    matmul,
    lambda n: (n, n),
    3,
    16,
    8192,
    memory_at=lambda n: 12 * n * n,
    flop_at=matmul_flop,
    traffic_at=lambda n: 12 * n * n,
    per_octave=2,
    multiple_of=8,
)
mm, finding = summarize(
    "matmul",
    sizes,
    mm,
    matmul_flop,
    "FLOP/s",
    torch.float32,
)
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    sizes,
    mm,
    xlabel="matrix side n (elements)",
    ylabel="time (ms)",
    title=f"matmul: {finding}",
    record="matmul time",
)
plt.show()

# %%
# Elementwise ``y = x * a + b``
# -----------------------------
# Each element is used once, so both devices run at memory speed. The device-resident
# GPU should win at large sizes by about the ratio of the two memory bandwidths (often
# 10-100x). With copies the data crosses the host link, which is slower than the
# CPU's own memory, so expect the GPU to lose at every size: memory-bound work is worth
# moving to the GPU only if the data is already there or stays there for more work.
sizes, ew = run_sweep(
    scale_shift,
    lambda n: (n,),
    4,
    2**10,
    2**27,
    memory_at=lambda n: 16 * n,
    flop_at=lambda n: 2 * n,
    traffic_at=lambda n: 16 * n,
)
ew, finding = summarize(
    "x * a + b",
    sizes,
    ew,
    lambda n: 16 * n,
    "B/s",
    "memory",
)
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    sizes,
    ew,
    xlabel="vector length (elements)",
    ylabel="time (ms)",
    title=f"x*a+b: {finding}",
    record="x * a + b time",
)
plt.show()

# %%
# What to take away
# -----------------
# A GPU's speed-up is not one number: read it off the printout for your size and
# operation. Large matrix multiplications gain the most, elementwise work at best the
# bandwidth ratio, and data that crosses the host link for one use may be better
# left on the CPU. Faster copies (pinned memory, non-blocking) come later.
