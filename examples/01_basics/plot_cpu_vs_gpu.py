"""
CPU vs GPU: where the crossover is
==================================

How much faster is a GPU? Claims such as "100-1000x" leave out the conditions: the
ratio depends on the operation, its size, the dtype, and whether copying data to and
from the GPU is counted. This page times two float32 operations over a range of
sizes: a square matrix multiplication (``2 n^3`` FLOP on ``3 n^2`` numbers,
compute-bound once ``n`` is large) and an elementwise ``y = x * a + b`` (one
multiply-add per 16 bytes of memory traffic, memory-bound at every size).

Each size runs on the CPU, on the GPU with the data already there, and, where the
CPU ran too, on the GPU including the copies in and out. The page prints the achieved
FLOP/s and GB/s as a share of the device's peak and, where a GPU ran, the crossover
size of each GPU series and its speed-up at the largest size both devices ran. On a
CPU-only machine the GPU's claims are not checked; "Recorded results" has GPU figures.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# A CPU has no datasheet figures here, so its ceilings are measured: the best fp32
# matmul rate and the best bandwidth of a copy, an add and a sum through main memory.
# They are lower bounds on the true peaks (a rate above one reads 100%); the line
# under the provenance says where each was found and what the median call reached.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, plot_sweep, report, sweep
from gpuguide.chapters.roofline import crossover, size_text

page = gpuguide.setup()
device, cpu = page.device, torch.device("cpu")
cpu_name = gpuguide.describe_device(cpu).short_name
cpu_peaks = gpuguide.device_peaks(cpu)
print(f"CPU series: {cpu_name}; ceilings {cpu_peaks.source}\n  {cpu_peaks.detail}")
on_gpu = device.type == "mps" or page.needs_cuda("The GPU curves")


# %%
# The two operations
# ------------------
# Both write into a preallocated ``out``, so that the timings measure the arithmetic,
# not the allocator. ``torch.addcmul(b, x, a)`` computes ``b + x * a`` in one pass;
# ``x * a + b`` would run two kernels and move 50% more bytes.
def matmul(a, b, out):
    return torch.matmul(a, b, out=out)


def scale_shift(x, a, b, out):
    return torch.addcmul(b, x, a, out=out)


# %%
# One sweep, three ways
# ---------------------
# :func:`gpuguide.sweep` picks the sizes that fit each device's budget from what a
# size allocates, computes and moves (``fit``). The "copies" variant is what a program
# that keeps its data on the host pays per call: ``.to(device)`` for each input, the
# operation, and ``.cpu()`` for the result, which also waits for the GPU. Each call is
# timed as one of a loop of such calls, launch included: at small sizes the launch,
# not the arithmetic, decides whether the GPU wins. The copies are timed where the CPU
# ran (they answer whether to move work off it). Beside a GPU, the CPU series is sized
# for calls of about 0.1 s (to reach into the GPU's sizes) and, with three series at
# many sizes, each timing gets a shorter budget.
def time_sweep(op, shape, n_inputs, lo, hi, **fit):
    def with_copies(*host_inputs):
        return op(*(t.to(device) for t in host_inputs), None).cpu()

    cpu_s, budget = (0.1, {"warmup_ms": 10, "rep_ms": 25}) if on_gpu else (None, {})
    cpu_sizes = sweep(lo, hi, device=cpu, call_s=cpu_s, **fit)
    gpu_sizes = sweep(lo, hi, **fit) if on_gpu else []
    sizes = sorted(set(cpu_sizes) | set(gpu_sizes))
    times = {"CPU": [], "GPU, data on device": [], "GPU incl. copies": []}
    for n in sizes:
        drawn = [torch.randn(shape(n), device=device) for _ in range(n_inputs + 1)]
        on_cpu = on_device = copies = None
        if n in cpu_sizes:
            host = [t.cpu() for t in drawn]  # the last: `out`
            on_cpu = benchmark(op, args=host, device=cpu, label="CPU", **budget)
        if n in gpu_sizes:
            label = "GPU, data on device"
            on_device = benchmark(op, args=drawn, device=device, label=label, **budget)
        if n in gpu_sizes and n in cpu_sizes:
            label = "GPU incl. copies"
            copies = benchmark(
                with_copies, args=host[:-1], device=device, label=label, **budget
            )
        for label, m in zip(times, (on_cpu, on_device, copies), strict=True):
            times[label].append(m)
    return sizes, times if on_gpu else {"CPU": times["CPU"]}


# %%
# Reading off the crossover
# -------------------------
# Each size where both ran gets a verdict (:func:`gpuguide.compare`: "faster" only
# when the interquartile ranges are apart and the medians 5% or more); the crossover
# is the smallest size from which on the GPU was faster at every size. Rates are taken
# at the largest size of each series, as a share of the peak of the run's device (none
# for the copies). A CPU's elementwise rate is its memory's only when the tensors (16
# bytes per element) outgrow its last-level cache; smaller ones stream from the cache.
def show(name, sizes, times, work, unit, peak, xlabel):
    """Print and plot one sweep; return the rate at the largest size of each
    series and each GPU series' comparison at the largest size both ran."""
    rates, against_cpu = {}, {}
    last = {
        k: [(n, m) for n, m in zip(sizes, ms, strict=True) if m][-1]
        for k, ms in times.items()
    }
    print(
        f"{name}, largest sizes: "
        + ", ".join(f"{k} n={size_text(n)}" for k, (n, _) in last.items())
    )
    legend = {}
    for label, (n, m) in last.items():
        own = "copies" not in label and (label == "CPU") != on_gpu  # run's device
        rates[label] = rate = m.rate(work(n), unit)
        report(f"{name} rate", rate, peak=peak if own else None, size=n, on=label)
        if label == "CPU":
            legend[f"CPU ({cpu_name.removeprefix('CPU: ')})"] = times[label]
            title = f"the CPU reaches {rate}"
            continue
        pairs = zip(sizes, times["CPU"], times[label], strict=True)
        verdicts = [(n, compare(g, c)) for n, c, g in pairs if c and g]
        found = crossover(verdicts)
        n, versus = against_cpu[label] = verdicts[-1]
        where = f"from n={size_text(found)} on" if found else "at no measured size"
        print(f"{name}, {label}: faster than the CPU {where}")
        report(f"{name} speed-up", versus, size=n, on=label)
        legend[f"{label} vs CPU at n={size_text(n)}: {versus.short}"] = times[label]
        if "copies" not in label:
            title = f"the GPU, data on device, is faster {where}"
    _, ax = plt.subplots()
    plot_sweep(
        ax, sizes, legend, xlabel=f"{xlabel} (elements)", ylabel="time (ms)",
        title=f"{name}: {title}",
    )  # fmt: skip
    plt.show()
    return rates, against_cpu


# %%
# Matrix multiplication
# ---------------------
# Expect the CPU to win at small ``n``, where launching GPU work and copying cost
# more than the arithmetic, and the device-resident GPU to win by a large factor at
# large ``n``. The copies grow as ``n^2`` and the arithmetic as ``n^3``, so counting
# them moves the crossover up but matters less and less beyond it. On the CPU, the
# FLOP rate should grow with ``n`` as the arithmetic outgrows the fixed cost of a
# call, towards the ceiling measured above.
def matmul_flop(n):
    return 2 * n**3


def matmul_bytes(n):
    return 3 * 4 * n * n  # three n x n float32 matrices


sizes, mm = time_sweep(
    matmul, lambda n: (n, n), 2, 16, 8192, memory_at=matmul_bytes,
    flop_at=matmul_flop, traffic_at=matmul_bytes, per_octave=2, multiple_of=8,
)  # fmt: skip
mm_rates, mm_vs = show(
    "matmul", sizes, mm, matmul_flop, "FLOP/s", "fp32", "matrix side n"
)
small = mm["CPU"][0].rate(matmul_flop(sizes[0]), "FLOP/s")  # the smallest size
grows = mm_rates["CPU"].value / small.value
gpuguide.claim(
    f"the CPU's matmul FLOP rate grows with n: at the largest size at least 4x its "
    f"rate at n={sizes[0]}",
    grows,
    spread=(mm_rates["CPU"].low / small.high, mm_rates["CPU"].high / small.low),
    at_least=4,
    timed=True,
    measured=f"{mm_rates['CPU']} against {small}: {grows:.3g}x",
)
on_device = mm_vs.get("GPU, data on device", (None, None))[1]
gpuguide.claim(
    "with the data on the GPU, the largest matmul both ran is faster on the GPU",
    on_device,
    verdict="faster",
    on="cuda",
)


# %%
# Elementwise ``y = x * a + b``
# -----------------------------
# Each element is used once, so memory traffic, not arithmetic, sets the time: at
# the largest size the CPU's FLOP rate here should be at most a tenth of its matmul's.
# The printed share of the memory ceiling is against the best of a copy, an add and a
# sum, and a read-only sum outruns a kernel that also writes. The device-resident GPU
# should win at large sizes by about the ratio of the two memory bandwidths, at least
# 10x. With copies the data crosses the host link, which is slower than the CPU's own
# memory, so expect the GPU not to beat the CPU: memory-bound work is worth moving to
# the GPU only if the data is already there or stays there for more work.
def scale_shift_bytes(n):
    return 4 * 4 * n  # read x, a, b and write y, float32


sizes, ew = time_sweep(
    scale_shift, lambda n: (n,), 3, 2**10, 2**27, memory_at=scale_shift_bytes,
    flop_at=lambda n: 2 * n, traffic_at=scale_shift_bytes,
)  # fmt: skip
ew_rates, ew_vs = show(
    "x * a + b", sizes, ew, scale_shift_bytes, "B/s", "memory", "vector length"
)
ew_n = max(n for n, m in zip(sizes, ew["CPU"], strict=True) if m)
ew_flops = ew["CPU"][sizes.index(ew_n)].rate(2 * ew_n, "FLOP/s")
gpuguide.claim(
    "on the CPU, x * a + b at its largest size runs at most a tenth of the matmul's "
    "FLOP/s: memory, not arithmetic, limits it",
    ew_flops,
    at_most=mm_rates["CPU"].low / 10,
    measured=f"{ew_flops}, {ew_flops.value / mm_rates['CPU'].value:.1%} of the matmul's",
)
gpuguide.claim(
    "with the data on the GPU, x * a + b at the largest size both ran is at least "
    "10x faster on the GPU",
    ew_vs.get("GPU, data on device", (None, None))[1],
    at_least=10,
    on="cuda",
)
gpuguide.claim(
    "counting the copies, the GPU is not faster than the CPU for x * a + b at the "
    "largest size both ran",
    ew_vs.get("GPU incl. copies", (None, None))[1],
    verdict="not faster",
    on="cuda",
)

# %%
# What to take away
# -----------------
# A GPU's speed-up is not one number: read it off the printout for your size and
# operation, and the claims below for where each held. Elementwise work is bound by
# memory, so a GPU can gain at most its bandwidth ratio there, and data that crosses
# the host link for one use may be better left on the CPU. Faster copies (pinned
# memory, non-blocking) come later.
gpuguide.takeaway()
