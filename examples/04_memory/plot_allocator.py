"""
The caching allocator: reuse, release and out of memory
=======================================================

"How much GPU memory am I using?" has three answers: ``torch.cuda.memory_allocated``
(bytes held by live tensors), ``torch.cuda.memory_reserved`` (what PyTorch's caching
allocator holds from the driver: live tensors plus freed blocks kept for reuse) and the
driver's ``total - free`` (``torch.cuda.mem_get_info``, as ``nvidia-smi`` shows it),
which counts everything on the GPU, CUDA contexts and other processes included.

This page follows the three numbers as a tensor is made, deleted, reused and released,
and recovers from an out-of-memory error. The next page, :doc:`three views of GPU
memory </auto_examples/04_memory/plot_cuda_context>`, measures what the driver counts
beyond the allocator, a CUDA context first. See also the concept page :doc:`how a GPU
runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# Without CUDA the page follows the process's resident memory (RSS) on the CPU
# (MPS has no allocator statistics).
import itertools

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import largest_size, release_host_memory, report, table
from gpuguide.chapters.precision import gpu_memory
from gpuguide.memory import rss_bytes
from gpuguide.sizes import free_memory_bytes

page = gpuguide.setup(None if torch.cuda.is_available() else "cpu")
device, on_gpu = page.device, page.cuda
fmt = gpuguide.format_bytes


# ``memory_allocated <= memory_reserved <= driver used`` always holds; read all three:
#
# .. literalinclude:: /../src/gpuguide/chapters/precision.py
#    :pyobject: gpu_memory

# %%
# Allocate, delete, reuse, release
# --------------------------------
# A large tensor (sized by the device's budget, in powers of two from 2 MiB: whole
# blocks of the allocator's large pool) is created, deleted, created again, deleted,
# and then the cache is released with ``torch.cuda.empty_cache()``. On the CPU,
# ``malloc_trim(0)`` (``release_host_memory``) hands back what glibc kept
# from frees, the nearest equivalent of ``empty_cache``.
release = torch.cuda.empty_cache if on_gpu else release_host_memory
peaks = page.peaks if on_gpu else None  # None: low fallback rates on a CPU
n = largest_size(
    2**21, 2**40, memory_at=int, traffic_at=int, device=device, peaks=peaks
)
history, rows = {}, []


def log_step(label):
    history[label] = gpu_memory(device) if on_gpu else {"process RSS": rss_bytes()}
    rows.append({"step": label} | {k: fmt(v) for k, v in history[label].items()})


release()
log_step("start")
a = torch.ones(n, dtype=torch.uint8, device=device)
log_step("a = ones(n)")
del a
log_step("del a")
b = torch.ones(n, dtype=torch.uint8, device=device)
log_step("b = ones(n), same size")
del b
log_step("del b")
release()
log_step("empty_cache()" if on_gpu else "malloc_trim(0)")
print(table(rows, title=f"a tensor of {fmt(n)}, made and deleted twice"))

# %%
# What each step did
# ------------------
# On a GPU, expect ``del`` to lower only the allocated bytes: the block goes back to
# PyTorch's cache, not to the driver. The second tensor reuses it (reserved does not
# grow); only ``empty_cache`` returns memory to the driver, which helps other
# processes, not this one: its next large allocation must ask the driver again. On
# the CPU, glibc unmaps a large block on ``del`` if it got it with ``mmap``, and may
# keep it if it came from its heap (a heap with room, or an ``mmap`` threshold raised
# by an earlier free, up to 32 MiB); the next tensor may or may not reuse a kept block.
series = {key: [step[key] for step in history.values()] for key in history["start"]}
change = {k: [y - x for x, y in itertools.pairwise(v)] for k, v in series.items()}
if on_gpu:
    held = change["driver used"]
    cached = series["reserved"][2] - series["reserved"][0]  # still reserved after del
    report("cached after del", cached, unit="B", size=fmt(n))
    report("returned by empty_cache", -held[4], unit="B", size=fmt(n))
    kept = abs(held[1]) < n / 2 and cached >= n  # del a: the driver sees no change
    reused = change["reserved"][2] < n / 2  # b = ones(n): reserved does not grow
    returned = held[4] < -n / 2
    story = kept and reused and returned
    title = "del caches a block; empty_cache frees it" if story else "Memory per step"
else:
    held = change["process RSS"]  # after a, del a, b, del b, malloc_trim
    freed = ["kept it" if d > -n / 2 else "returned it to the OS" for d in held[1:4:2]]
    took = "reused the kept block" if held[2] < n / 2 else "took new memory"
    title = f"del a: glibc {freed[0]}; b {took}"
    print(f"{title}; del b: glibc {freed[1]}.")
    report("returned by malloc_trim", -held[4], unit="B", size=fmt(n))
    story = False  # the GPU's claim below is not checked here
gpuguide.claim(
    "on a GPU, del keeps the block reserved and the driver sees no change, the "
    "second tensor of the same size reuses it, and only empty_cache returns it to "
    "the driver",
    holds=story,
    measured=f"reserved after del {fmt(cached)}, then grew by "
    f"{fmt(change['reserved'][2])}; empty_cache returned {fmt(-held[4])}"
    if on_gpu
    else "-",
    on="cuda",
)
# On a CPU, whether glibc hands a freed tensor back to the OS at once depends on
# its thresholds, which earlier allocations in the process move (a tensor above its
# largest mmap threshold, 32 MiB, usually goes back): the line above says what
# happened in this run, and no claim is made of it.
fig, ax = plt.subplots()
for key, values in series.items():
    ax.plot([v / 2**20 for v in values], "o-", label=key)
ax.set_xticks(range(len(history)), list(history), rotation=20, ha="right")
ax.set(ylabel="memory (MiB)", title=title)
ax.legend()
gpuguide.label_device(fig, device)
plt.show()

# %%
# Out of memory, caught and recovered from
# ----------------------------------------
# Asking for more than the driver has free raises ``torch.OutOfMemoryError`` at once
# (after the allocator has released its cache and tried again); nothing stays
# allocated. Retry with a smaller batch *after* the ``except`` block: inside it, the
# exception's traceback keeps the failed call's frames and their tensors alive. (A
# CPU is not pushed this far: Linux may kill a process that asks too much.)
ROW_BYTES = 2**20  # one sample's activations in this stand-in for a training step


def run_with_fallback(rows):
    """Halve the batch until a step fits; return the batch that ran."""
    while rows > 0:
        try:
            step = torch.empty(rows, ROW_BYTES, dtype=torch.uint8, device=device)
            return step.shape[0]
        except torch.OutOfMemoryError:  # free_memory_bytes: GPUGUIDE_GPU_MEMORY's
            print(f"batch {rows}: out of memory, {fmt(free_memory_bytes(device))} free")
        torch.cuda.empty_cache()
        rows //= 2
    msg = "not even one sample fits on the GPU"
    raise RuntimeError(msg)


if page.needs_cuda("Recovering from CUDA out-of-memory"):
    release()
    # 1 GiB more than is free: free_memory_bytes honours GPUGUIDE_GPU_MEMORY.
    asked = (free_memory_bytes(device) + 2**30) // ROW_BYTES
    ran = run_with_fallback(asked)
    release()
    left = torch.cuda.memory_allocated(device)
    print(f"batch {ran} ran after the error; {fmt(left)} allocated now")
    recovered = 0 < ran < asked and left <= history["start"]["allocated"]
gpuguide.claim(
    "on a GPU, a smaller batch runs after the out-of-memory error, and nothing the "
    "failed call asked for stays allocated",
    holds=on_gpu and recovered,
    measured=f"batch {ran} of {asked}, {fmt(left)} allocated" if on_gpu else "-",
    on="cuda",
)

# %%
# What to take away
# -----------------
# A reserved-minus-allocated gap is the cache doing its job, not a leak: freed blocks
# wait for the next tensor of their size, and ``empty_cache`` only helps other
# processes. After an out-of-memory error, retry outside the ``except`` block.
gpuguide.takeaway()
