"""
CPU vs GPU: where the crossover is
==================================

"A GPU is 100-1000x faster than a CPU" is a claim without its conditions. The ratio
depends on the operation, its size, the dtype, and whether the copies to and from the
GPU are counted. This page measures it for two operations over a range of sizes:

- a square float32 matrix multiplication, ``2 n^3`` FLOP on ``3 n^2`` numbers, which
  becomes compute-bound as ``n`` grows;
- an elementwise ``y = x * a + b`` on float32 vectors, which does one multiply-add
  per 16 bytes of memory traffic (three arrays read, one written) and is memory-bound
  at every size.

Each size is timed on the CPU, on the GPU with the data already there, and on the GPU
including copying the inputs over and the result back. The printout gives the
crossover sizes, the measured speed-up, and the achieved FLOP/s and GB/s as a
percentage of the device's peak.
"""

# %%
# Setup
# -----
# The CPU runs the CPU series in every case. On a GPU run it gets a longer call-time
# budget than usual, so that its curve reaches the sizes where the GPU takes over.
import matplotlib.pyplot as plt
import torch

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
cpu = torch.device("cpu")
on_gpu = device.type != "cpu"
cpu_name = gpuguide.describe_device(cpu).short_name
bench = {"warmup_ms": 2.0, "rep_ms": 10.0} if gpuguide.small_mode() else {}

budget = gpuguide.size_budget(device)
cpu_budget = gpuguide.size_budget(cpu, call_s=0.25 if on_gpu else None)
peaks = gpuguide.device_peaks(device)
cpu_peaks = gpuguide.device_peaks(cpu)
print(f"CPU series measured on {cpu_name}")
print(f"CPU peaks are a measured estimate ({cpu_peaks.source}), not a datasheet figure")
if on_gpu and not peaks.known:
    print(f"{peaks.name}: peak FLOP/s and bandwidth unknown, so no percentages")
if not on_gpu:
    print(
        "The GPU curves (with and without copies) need a GPU; this run shows the CPU."
    )

# %%
# The two operations
# ------------------
# Each takes a preallocated ``out`` so that the CPU and device-resident timings
# measure the arithmetic, not the allocator. ``torch.addcmul(b, x, a)`` computes
# ``b + x * a`` in a single pass; ``x * a + b`` would run two kernels and move 50%
# more bytes.


def matmul_inputs(n):
    return torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)


def matmul(a, b, out):
    return torch.matmul(a, b, out=out)


def scale_shift_inputs(n):
    return torch.randn(n), torch.randn(n), torch.randn(n), torch.empty(n)


def scale_shift(x, a, b, out):
    return torch.addcmul(b, x, a, out=out)


# %%
# One sweep, three ways
# ---------------------
# For each size the inputs are made on the CPU once. The "copies" variant is what a
# program that keeps its data on the host pays: ``.to(device)`` for every input, the
# operation, and ``.cpu()`` for the result (which also waits for the GPU).


def run_sweep(op, make_inputs, cpu_sizes, gpu_sizes):
    def with_copies(*host_inputs):
        return op(*(t.to(device) for t in host_inputs), None).cpu()

    series = {cpu_name: [], "GPU, data on device": [], "GPU incl. copies": []}
    sizes = sorted(set(cpu_sizes) | set(gpu_sizes))
    for n in sizes:
        host = make_inputs(n)
        run_cpu = n in cpu_sizes
        series[cpu_name].append(
            gpuguide.benchmark(op, args=host, device=cpu, **bench) if run_cpu else None
        )
        if n not in gpu_sizes:
            series["GPU, data on device"].append(None)
            series["GPU incl. copies"].append(None)
            continue
        resident = [t.to(device) for t in host]
        series["GPU, data on device"].append(
            gpuguide.benchmark(op, args=resident, device=device, **bench)
        )
        series["GPU incl. copies"].append(
            gpuguide.benchmark(with_copies, args=host[:-1], device=device, **bench)
        )
    if not on_gpu:
        series = {cpu_name: series[cpu_name]}
    return sizes, series


def crossover(sizes, cpu_times, gpu_times):
    """Smallest size from which on the GPU was faster at every size both ran."""
    both = [
        (n, c, g)
        for n, c, g in zip(sizes, cpu_times, gpu_times, strict=True)
        if c is not None and g is not None
    ]
    found = None
    for n, c, g in reversed(both):
        if g.median_s >= c.median_s:
            break
        found = n
    return found, both[-1]


def summarize(name, sizes, series, work_at, unit, cpu_peak, gpu_peak):
    """Print rates and crossovers; return the series relabelled, and the finding."""
    labelled, finding = {}, []
    for label, times in series.items():
        n, m = [(n, m) for n, m in zip(sizes, times, strict=True) if m is not None][-1]
        rate = work_at(n) / m.median_s
        peak = cpu_peak if label == cpu_name else gpu_peak
        pct = None if "copies" in label else gpuguide.percent_of_peak(rate, peak)
        share = "" if pct is None else f" ({pct:.0f}% of peak)"
        if pct is not None and pct > 100:
            share += ", above the estimated peak, so the estimate is too low"
        print(f"{name}, {label}, n={n}: {gpuguide.format_rate(rate, unit)}{share}")
        if label == cpu_name:
            labelled[label] = times
            if not on_gpu:
                finding.append(f"the CPU reaches {gpuguide.format_rate(rate, unit)}")
            continue
        found, (n, c, g) = crossover(sizes, series[cpu_name], times)
        speed = gpuguide.format_ratio(c.median_s / g.median_s)
        where = f"from n={found} on" if found else "at no measured size"
        print(
            f"{name}, {label}: faster than the CPU {where}; {speed} its speed at n={n}"
        )
        labelled[f"{label}: {speed} CPU speed at n={n}"] = times
        how = "with copies" if "copies" in label else "on device"
        finding.append(f"from n={found} {how}" if found else f"never {how}")
    if on_gpu:
        return labelled, "GPU faster " + ", ".join(finding)
    return labelled, finding[0]


# %%
# Matrix multiplication
# ---------------------
# Expect the CPU to win at small ``n``, where a GPU launch and the copies cost more
# than the arithmetic, and the device-resident GPU to win by a large factor at large
# ``n``. The copies scale as ``n^2`` and the arithmetic as ``n^3``, so counting them
# moves the crossover up but matters less and less beyond it.
def matmul_seconds(p):
    return lambda n: gpuguide.estimate_seconds(
        flop=gpuguide.matmul_flop(n, n, n), nbytes=12 * n * n, peaks=p
    )


mm_cpu = gpuguide.sweep(
    16,
    8192,
    budget=cpu_budget,
    bytes_at=lambda n: 12 * n * n,
    seconds_at=matmul_seconds(cpu_peaks),
    per_octave=2,
    multiple_of=8,
)
mm_gpu = []
if on_gpu:
    mm_gpu = gpuguide.sweep(
        16,
        8192,
        budget=budget,
        bytes_at=lambda n: 12 * n * n,
        seconds_at=matmul_seconds(peaks),
        per_octave=2,
        multiple_of=8,
    )
mm_sizes, mm = run_sweep(matmul, matmul_inputs, mm_cpu, mm_gpu)
tf32 = torch.get_float32_matmul_precision() != "highest"
mm_labelled, mm_finding = summarize(
    "matmul",
    mm_sizes,
    mm,
    lambda n: gpuguide.matmul_flop(n, n, n),
    "FLOP/s",
    cpu_peaks.flops_for(torch.float32),
    peaks.flops_for(torch.float32, tf32=tf32),
)

fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    mm_sizes,
    mm_labelled,
    xlabel="matrix side n (elements)",
    ylabel="time (ms)",
    title=f"matmul: {mm_finding}",
    device=device,
)
plt.show()


# %%
# Elementwise ``y = x * a + b``
# -----------------------------
# Here each element is used once, so the operation runs at memory speed on both
# devices. The device-resident GPU should still win at large sizes by roughly the
# ratio of GPU to CPU memory bandwidth (often 10-100x). With copies, the data crosses
# the host link, which is slower than the CPU's own memory, so expect the GPU to lose
# at every size: a memory-bound operation is only worth moving to the GPU if the data
# is already there or stays there for further work.
def ew_seconds(p):
    return lambda n: gpuguide.estimate_seconds(nbytes=16 * n, peaks=p)


ew_cpu = gpuguide.sweep(
    2**10,
    2**27,
    budget=cpu_budget,
    bytes_at=lambda n: 16 * n,
    seconds_at=ew_seconds(cpu_peaks),
)
ew_gpu = []
if on_gpu:
    ew_gpu = gpuguide.sweep(
        2**10,
        2**27,
        budget=budget,
        bytes_at=lambda n: 16 * n,
        seconds_at=ew_seconds(peaks),
    )
ew_sizes, ew = run_sweep(scale_shift, scale_shift_inputs, ew_cpu, ew_gpu)
ew_labelled, ew_finding = summarize(
    "x * a + b",
    ew_sizes,
    ew,
    lambda n: 16 * n,
    "B/s",
    cpu_peaks.memory_bandwidth_bytes_per_s,
    peaks.memory_bandwidth_bytes_per_s,
)

fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    ew_sizes,
    ew_labelled,
    xlabel="vector length (elements)",
    ylabel="time (ms)",
    title=f"x*a+b: {ew_finding}",
    device=device,
)
plt.show()

# %%
# What to take away
# -----------------
# The speed-up of a GPU is not one number. Read it off the printout above for the
# size and operation you care about: large matrix multiplications gain the most,
# elementwise work gains only the bandwidth ratio, and any operation whose data has
# to cross the host link for a single use may be faster left on the CPU. Faster
# copies (pinned memory, non-blocking transfers) come in a later chapter.
