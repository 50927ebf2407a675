"""
CPU vs GPU: where the crossover is
==================================

How much faster is a GPU? It depends on the operation, its size and whether the
copies to and from the GPU count. This page times a float32 matrix multiplication and
an elementwise ``y = x * a + b`` over a range of sizes, on the CPU, on the GPU with
the data there, and on the GPU counting the copies. See also :doc:`how a GPU runs
PyTorch </concepts/gpu>` and :doc:`the roofline </concepts/roofline>`.
"""

import torch

import gpuguide
from gpuguide import Sweep, Variant

page = gpuguide.setup()
device, cpu = page.device, torch.device("cpu")
on_gpu = device.type == "mps" or page.needs_cuda("The GPU curves")
# A CPU has no datasheet, so its ceilings are measured: lower bounds on its peaks.
print(f"CPU ceilings: {gpuguide.device_peaks(cpu).detail}")


# %%
# The two operations
# ------------------
# Both write into a preallocated ``out``: the timings measure the arithmetic, not the
# allocator. Each call is timed in a loop of such calls, launch included.
def matmul(a, b, out):
    return torch.matmul(a, b, out=out)


def scale_shift(x, a, b, out):
    return torch.addcmul(b, x, a, out=out)


# The "copies" variant is what a program that keeps its data on the host pays per
# call: ``.to(device)`` for each input, the operation, and ``.cpu()``, which waits.
def with_copies(op):
    def run(*host):  # the inputs on the host; the last, `out`, is not used
        return op(*(t.to(device) for t in host[:-1]), None).cpu()

    return run


def ways(op):
    if not on_gpu:
        return {"CPU": op}
    return {
        "CPU": Variant(op, device=cpu, call_s=0.1),  # long calls: reach the GPU's sizes
        "GPU, data on device": op,
        "GPU incl. copies": Variant(
            with_copies(op), inputs_on=cpu, within="CPU", peak=False
        ),
    }


budget = {"warmup_ms": 10, "rep_ms": 25} if on_gpu else {}  # three series: shorter

# %%
# Matrix multiplication
# ---------------------
# ``2 n^3`` FLOP on ``3 n^2`` numbers: the copies grow as ``n^2``, the arithmetic as
# ``n^3``, so the larger ``n``, the more the GPU's arithmetic counts.
matmuls = Sweep(
    "matmul",
    lambda n, dev: [torch.randn(n, n, device=dev) for _ in range(3)],
    lo=16,
    hi=8192,
    per_octave=2,
    multiple_of=8,
    flop=lambda n: 2 * n**3,
    traffic=lambda n: 3 * 4 * n * n,
    rate="FLOP/s",
    peak="fp32",
    size_label="matrix side n (elements)",
).run(ways(matmul), **budget)
print(matmuls)
matmuls.report()
matmuls.against("CPU")
matmuls.plot(title="matmul: the FLOP rate grows with n")

first, last = matmuls.rate("CPU", matmuls.sizes[0]), matmuls.rate("CPU")
gpuguide.claim(
    f"the CPU's matmul FLOP rate at the largest size is at least 4x its rate at "
    f"n={matmuls.sizes[0]}",
    **last.over(first),
    at_least=4,
    timed=True,
)
gpuguide.claim(
    "with the data on the GPU, the largest matmul both ran is faster on the GPU",
    matmuls.compare("GPU, data on device", "CPU") if on_gpu else None,
    verdict="faster",
    on="cuda",
)

# %%
# Elementwise ``y = x * a + b``
# -----------------------------
# Two FLOP per 16 bytes moved: memory traffic, not arithmetic, sets the time, and
# counting the copies the data crosses the host link, slower than the CPU's memory.
# Shares stop at 100%: sizes that fit in a cache beat the ceiling (main memory's).
elementwise = Sweep(
    "x * a + b",
    lambda n, dev: [torch.randn(n, device=dev) for _ in range(4)],
    lo=2**10,
    hi=2**27,
    flop=lambda n: 2 * n,
    traffic=lambda n: 4 * 4 * n,
    rate="B/s",
    peak="memory",
    size_label="vector length n (elements)",
).run(ways(scale_shift), **budget)
print(elementwise)
elementwise.report()
elementwise.against("CPU")
elementwise.plot(title="x * a + b: bound by memory bandwidth")

n = elementwise.largest("CPU")
flops = elementwise.at("CPU", n).rate(2 * n, "FLOP/s")
gpuguide.claim(
    "on the CPU, x * a + b at its largest size runs at most a tenth of the matmul's "
    "FLOP/s: memory, not arithmetic, limits it",
    flops,
    at_most=last.low / 10,
)
gpuguide.claim(
    "with the data on the GPU, x * a + b at the largest size both ran is at least "
    "10x faster on the GPU",
    elementwise.compare("GPU, data on device", "CPU") if on_gpu else None,
    at_least=10,
    on="cuda",
)
gpuguide.claim(
    "counting the copies, the GPU is not faster than the CPU for x * a + b at the "
    "largest size both ran",
    elementwise.compare("GPU incl. copies", "CPU") if on_gpu else None,
    verdict="not faster",
    on="cuda",
)

# %%
# What to take away
# -----------------
# A GPU's speed-up is not one number: read it off the tables for your size and
# operation. Memory-bound work gains at most the bandwidth ratio, and data that
# crosses the host link for one use may be better left on the CPU.
gpuguide.takeaway()
