"""
What GPU utilization measures
=============================

``nvidia-smi`` says 100%: is the GPU doing all it can? NVML's utilization, the
figure ``nvidia-smi`` and :func:`torch.cuda.utilization` show, is the share of time,
over a sample period of 1/6 s to 1 s depending on the GPU, during which at least one
kernel was running, however little of the GPU it used. This page runs three loops
for a second or two each, samples the utilization meanwhile, and sets it beside the
share of the measured matmul ceiling each loop delivers: kernels that run on one of
the GPU's SMs, large matrix products, and a host-bound loop of tiny kernels. On a
CPU, the time a loop keeps a core busy tells the same story.
"""

import importlib.util
import time

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide.chapters.utilization import core_seconds, kernel_occupancy, sampling

page = gpuguide.setup()
device = page.device
torch.set_num_threads(1)  # on a CPU: one core, the whole device here
sync = torch.cuda.synchronize if page.cuda else lambda: None
nvml = page.cuda and importlib.util.find_spec("pynvml") is not None
if not nvml:
    why = "needs nvidia-ml-py" if page.cuda else "and SM occupancy are GPU-only"
    print(f"NVML {why}: utilization is not read here")


# %%
# Run a loop, and sample the utilization meanwhile
# ------------------------------------------------
# A thread reads NVML every 50 ms while the loop runs; only the samples of the
# loop's second half count, so that each of NVML's windows lies inside the loop.
# A core's figure is the time the loop's thread ran over the time it could have:
# on a shared machine, time spent waiting for a core is not the loop's (Linux counts
# both, in ``schedstat``; elsewhere, the thread's CPU time over the wall time).
# The profiler records the first step's kernels, and estimates from each launch the
# share of the GPU's warp slots its blocks hold ("est. achieved occupancy %").
def run(step, flop, seconds):
    with torch.profiler.profile() as prof:  # a warm-up (and Triton's compilation)
        step()
        sync()
    read = (lambda: torch.cuda.utilization(device)) if nvml else None
    start, (run0, wait0), steps = time.perf_counter(), core_seconds(), 0
    with sampling(read, every_s=0.05) as samples:
        while time.perf_counter() - start < seconds:
            step()
            sync()
            steps += 1
        (run1, wait1), wall_s = core_seconds(), time.perf_counter() - start
    kept = sorted(samples[len(samples) // 2 :]) or [None]
    busy = (run1 - run0) / (wall_s - wait1 + wait0)
    rate = flop * steps / wall_s
    return rate, kept[len(kept) // 2], 100 * busy, kernel_occupancy(prof)


# %%
# Three loops
# -----------
# A kernel launched with one block runs on one SM (an H100 SXM has 132): this Triton
# kernel sums a vector in a single program. A large matrix product fills every SM.
# The tiny loop scales 256 numbers a hundred times: each kernel is done before
# Python has launched the next.
n_sum, n_mm = (2**20, 1024) if page.small else (2**24, 8192)
n_mm, dtype = (n_mm, torch.bfloat16) if page.cuda else (n_mm // 8, torch.float32)
x, out = torch.randn(n_sum, device=device), torch.empty(1, device=device)
a, b, c = (torch.randn(n_mm, n_mm, device=device, dtype=dtype) for _ in range(3))
tiny = torch.randn(256, device=device)
loops = {  # name: (one step, its FLOP)
    "large GEMM": (lambda: torch.mm(a, b, out=c), 2 * n_mm**3),
    "tiny ops": (lambda: [tiny.mul_(1.0) for _ in range(100)], 100 * 256),
}
if page.needs_cuda("The one-block loop"):
    import triton
    import triton.language as tl

    @triton.jit
    def one_block_sum(x, out, n, BLOCK: tl.constexpr):
        total = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n, BLOCK):
            i = start + tl.arange(0, BLOCK)
            total += tl.load(x + i, mask=i < n, other=0.0)
        tl.store(out, tl.sum(total))

    step = lambda: one_block_sum[(1,)](x, out, n_sum, BLOCK=1024)  # noqa: E731
    loops = {"one block": (step, n_sum), **loops}

# %%
# Utilization beside what each loop delivers
# ------------------------------------------
# The ceiling is the GEMM above, timed on its own (its best call): this device's
# measured matmul rate. Occupancy is weighted by kernel time. On a GPU, the core
# figure is the host thread's: its launches, and its waits in ``synchronize``.
ceiling = 2 * n_mm**3 / gpuguide.benchmark(torch.mm, args=(a, b)).min_s
print(f"measured {dtype} matmul ceiling (n={n_mm}): {ceiling / 1e12:.3f} TFLOP/s")
rows, seconds = {}, 0.2 if page.small else (2.0 if page.cuda else 1.0)
for name, (step, flop) in loops.items():
    rate, util, busy, occupancy = run(step, flop, seconds)
    rows[name] = {"loop": name, "GPU util (%)": util, "occupancy (%)": occupancy}
    rows[name] |= {"core busy (%)": busy, "TFLOP/s": rate / 1e12}
    rows[name] |= {"of ceiling": rate / ceiling}
print(gpuguide.table(rows.values(), title=f"{len(rows)} loops on {page.peaks.name}"))
one = rows.get("one block", {})
if page.cuda and all(r["occupancy (%)"] is None for r in rows.values()):
    print("The profiler gives no SM occupancy here: its trace has no such field")

# %%
# Busy is not fast
# ----------------
# A GPU at 100% may be running one SM of its many; a core at 100% may be launching
# tiny operators. The share of the ceiling tells them apart.
util = one.get("GPU util (%)")
gpuguide.claim(
    "the one-block loop shows at least 90% utilization while delivering at most 1% "
    "of the measured matmul ceiling",
    holds=util is not None and util >= 90 and one["of ceiling"] <= 0.01,
    measured=f"{util}% utilization, {one.get('of ceiling', 0):.4%} of the ceiling",
    on="cuda",
    unless=None if nvml else "nvidia-ml-py is not installed",
    timed=True,
)
gpuguide.claim(
    "the large GEMM loop delivers at least 70% of the measured matmul ceiling",
    rows["large GEMM"]["of ceiling"],
    at_least=0.7,
    on="cuda",
    timed=True,
)
host = rows["tiny ops"]
gpuguide.claim(
    "the loop of tiny operators keeps its core at least 90% busy while delivering "
    "at most 1% of the measured matmul ceiling",
    holds=host["core busy (%)"] >= 90 and host["of ceiling"] <= 0.01,
    measured=f"{host['core busy (%)']:.0f}% busy, {host['of ceiling']:.4%} of it",
    on="cpu",
    timed=True,
)
fig, ax = plt.subplots()
y = "GPU util (%)" if page.cuda else "core busy (%)"
for r in rows.values():
    ax.scatter(100 * r["of ceiling"], r[y] or 0, label=r["loop"])
ax.set(xscale="log", xlabel="share of the measured matmul ceiling (%)", ylabel=y)
ax.set_title("Busy is not fast: utilization does not say how much work is done")
ax.set_ylim(0, 105)
ax.legend(loc="lower center")
gpuguide.label_device(fig, device)
plt.show()

# %%
# What to take away
# -----------------
# Utilization counts the time any kernel runs (on a CPU, the time on a core), not
# the share of the device at work: read it beside the share of the measured ceiling
# the work delivers, and the profiler's occupancy.
gpuguide.takeaway()
