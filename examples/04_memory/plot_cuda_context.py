"""
Three views of GPU memory, and what a CUDA context costs
========================================================

"How much GPU memory am I using?" has three answers: ``torch.cuda.memory_allocated``
(bytes held by live tensors), ``torch.cuda.memory_reserved`` (what PyTorch's caching
allocator holds from the driver, see :doc:`the caching allocator
</auto_examples/04_memory/plot_allocator>`) and the driver's ``total - free``
(``torch.cuda.mem_get_info``, as ``nvidia-smi`` shows it), which counts everything on
the GPU, CUDA contexts and other processes included.

This page reads the three numbers and measures what a CUDA context costs (a popular
notebook printed 0 MB for it: ``memory_allocated`` cannot see it). See also the
concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Setup
# -----
# Without CUDA the page shows the process's resident memory (RSS) on the CPU
# (MPS has no allocator statistics).
import sys

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import plot_bars, report, table
from gpuguide.chapters import precision
from gpuguide.chapters.precision import gpu_memory
from gpuguide.memory import rss_bytes

page = gpuguide.setup(None if torch.cuda.is_available() else "cpu")
device = page.device
fmt = gpuguide.format_bytes


# %%
# Three views of GPU memory
# -------------------------
# ``memory_allocated <= memory_reserved <= driver used`` always holds. The gap between
# the last two is memory PyTorch's allocator never sees: this process's CUDA context
# and kernel code, libraries' own allocations, and other processes on the same GPU.
# (``torch.cuda.device_memory_used`` reads the driver's figure through NVML, as
# ``nvidia-smi`` does, where the ``nvidia-ml-py`` package is installed.) On a CPU the
# operating system's one view, the process's resident memory (RSS), likewise counts
# more than tensors: Python, torch and every library loaded, before the first tensor.
# :func:`~gpuguide.chapters.precision.gpu_memory`, shown on the previous page, reads
# the three.
if page.needs_cuda("The allocator's and the driver's counters"):
    now = gpu_memory(device)
    print(", ".join(f"{name} {fmt(v)}" for name, v in now.items()))
    outside = fmt(now["driver used"] - now["reserved"])
    print(f"outside the allocator: {outside} (contexts, kernels, other processes)")
else:
    print(f"process RSS before this page makes a tensor: {fmt(rss_bytes())}")

# %%
# What a CUDA context costs
# -------------------------
# Asking the driver anything initialises CUDA, and this process already has, so a
# fresh child process goes through three stages, pausing after each while this one
# reads the driver's used memory. Expect importing torch to cost next to nothing on
# the GPU, the context a few hundred MiB (it depends on the GPU, the driver and how
# many kernels CUDA loads eagerly), and the first matmul more for cuBLAS
# (:func:`~gpuguide.chapters.precision.child_stages` runs the child). The context is
# what the driver lost at the second stage beyond the allocator's reserved bytes;
# ``memory_allocated()`` sees only the one small tensor (its column). On a CPU the same
# three stages show the process's resident memory instead: importing torch is most of
# it, and there is no context to pay.
PROBE = """
import sys, torch
cuda = sys.argv[1].startswith("cuda")
def stage(name):  # report, then wait while the parent reads the memory numbers
    mem = torch.cuda
    counts = (mem.memory_reserved(), mem.memory_allocated()) if cuda else (0, 0)
    print(*counts, name, flush=True)
    sys.stdin.readline()
stage("python + import torch")
x = torch.ones(1, device=sys.argv[1])
stage("+ CUDA context + 1-element tensor" if cuda else "+ 1-element tensor")
(x.new_ones(1024, 1024) @ x.new_ones(1024, 1024)).sum().item()
stage("+ first matmul (cuBLAS)" if cuda else "+ first matmul")
"""
if page.cuda:
    index = device.index if device.index is not None else torch.cuda.current_device()
    stages, code = precision.child_stages(PROBE, f"cuda:{index}")
elif sys.platform.startswith("linux"):  # on a CPU: the same stages, in resident memory
    stages, code = precision.child_stages(PROBE, "cpu")
else:
    stages, code = [], None
    print("A child's resident memory is read from Linux's /proc: not on this system.")
if stages:  # on a CPU: resident memory, and no allocator to count
    rows = [precision.Stage(s.child, *map(fmt, s[1:])) for s in stages]
    cpu_rows = ({"child": r.child, "resident": r.driver_used} for r in rows)
    print(table(rows if page.cuda else cpu_rows))
if len(stages) == 3 and code == 0:
    imported, context, matmul = stages
    if page.cuda:
        context_bytes = context.driver_used - imported.driver_used - context.reserved
        report("CUDA context", context_bytes, unit="B")
    gpuguide.claim(
        "on a GPU, importing torch takes at most 16 MiB of GPU memory",
        imported.driver_used / 2**20 if page.cuda else None,
        at_most=16,
        on="cuda",
    )
    gpuguide.claim(
        "on a GPU, the CUDA context costs a few hundred MiB (100 MiB to 2 GiB)",
        context_bytes / 2**20 if page.cuda else None,
        at_least=100,
        at_most=2048,
        on="cuda",
    )
    gpuguide.claim(
        "on a GPU, memory_allocated sees only the one small tensor, not the context",
        holds=page.cuda and context.allocated < 2**20,
        measured=f"memory_allocated {fmt(context.allocated)}",
        on="cuda",
    )
    gpuguide.claim(
        "on a CPU, importing torch is most of a fresh process's resident memory",
        imported.driver_used / max(matmul.driver_used, 1),
        at_least=0.5,
        on="cpu",
    )
    gpuguide.claim(
        "on a CPU, the first tensor adds at most 16 MiB: no context to pay",
        (context.driver_used - imported.driver_used) / 2**20,
        at_most=16,
        on="cpu",
    )
    steps = {
        "import torch": imported.driver_used,
        "first tensor": context.driver_used - imported.driver_used,
        "first matmul": matmul.driver_used - context.driver_used,
    }
    what = "GPU memory the driver lost" if page.cuda else "resident memory"
    title = (
        f"A fresh process: {fmt(steps['import torch'])} for import torch, "
        f"{fmt(steps['first tensor'])} more for its first tensor"
    )
    _, ax = plt.subplots()
    plot_bars(ax, steps, ylabel=f"{what} (MiB)", value=lambda b: b / 2**20, title=title)
    plt.show()
elif code not in (0, None):
    print(f"The child process failed (exit code {code}); its error went to stderr.")

# %%
# What to take away
# -----------------
# Read ``memory_allocated`` for what tensors need, ``memory_reserved`` for what PyTorch
# holds and the driver for what is left, contexts included: every process that uses a
# GPU pays for its context there, before its first tensor. Next: a training step's
# memory, by part. This page's claims, and where they held in this run:
gpuguide.takeaway()
