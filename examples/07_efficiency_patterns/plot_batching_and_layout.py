"""
Batching, in-place updates and memory layout
============================================

Three habits are often recommended for fast PyTorch code: replace a Python loop of
small operations by one batched call, update tensors in place instead of allocating
new ones, and make strided views contiguous. This page measures each one, changing
one thing at a time, so you can see what each habit buys on your device.

You will measure a loop of small matrix multiplications against one ``torch.bmm``
over a range of batch sizes; the time and the peak memory of ``x * a + b`` against
``x.mul_(a).add_(b)``; and three operations on a transposed view, with the
``.contiguous()`` copy timed on its own so that you can see after how many uses it
pays for itself.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
from collections import namedtuple
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import format_bytes, format_ratio
from gpuguide.tables import format_cell

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()


def timed(variants):
    """Time the variants, taking turns for five rounds (a drift falls on all)."""
    return gpuguide.interleave(variants, device=device).values()


# %%
# One batched call instead of a loop
# ----------------------------------
# ``B`` pairs of small ``n x n`` matrices are stacked into ``(B, n, n)`` tensors once,
# outside the timed region. The loop multiplies them one pair at a time; the batched
# version makes one ``torch.bmm`` call. Both write into the same preallocated
# ``out``, so the only difference is the number of calls. Each call pays a fixed cost
# (Python, PyTorch's dispatcher and, on a GPU, a kernel launch) that the arithmetic
# of a small matrix cannot hide. That cost is the point here, so each time is per
# call as a loop of calls runs it, launches included (``measure="call"``, the
# default). Expect the loop to be a little slower already at ``B = 1``, where it
# also pays for indexing ``a[i]``, ``b[i]`` and ``out[i]``, and the batched call to
# pull ahead as ``B`` grows, typically by one to two orders of magnitude on a GPU and
# less on a CPU.
n = 32 if small else 64
batches = [1, 4, 16, 64] if small else [1, 4, 16, 64, 256]


def loop_mm(a, b, out):
    for i in range(a.shape[0]):
        torch.mm(a[i], b[i], out=out[i])
    return out


def batched_mm(a, b, out):
    return torch.bmm(a, b, out=out)


loops, batched, rows = [], [], []
for B in batches:
    a, b, out = (torch.randn(B, n, n, device=device) for _ in range(3))
    looped = loop_mm(a, b, torch.empty_like(out))
    assert torch.allclose(looped, batched_mm(a, b, out), atol=1e-4), "results differ"
    loop, bmm = timed(
        {
            f"loop, B={B}": partial(loop_mm, a, b, out),
            f"bmm, B={B}": partial(batched_mm, a, b, out),
        }
    )
    loops.append(loop)
    batched.append(bmm)
    rows.append(
        {
            "B": B,
            "loop": loop,
            "bmm": bmm,
            "bmm speed vs loop": gpuguide.compare(bmm, loop).short,
        }
    )
print(gpuguide.table(rows, title=f"{n}x{n} matrices (results allclose)"))
if device.type == "cuda":  # how much of bmm's time per call is the GPU's work?
    work = gpuguide.benchmark(batched_mm, args=(a, b, out), measure="kernel")
    print(
        f"the GPU's own work in one bmm of {B} products: {format_cell(work)} "
        f'(measure="kernel"), of {format_cell(batched[-1])} per call'
    )

last = gpuguide.compare(batched[-1], loops[-1])
gpuguide.record(
    "bmm speed-up over a loop",
    last.speedup,
    unit="x",
    spread=(last.low, last.high),
    size=f"B={B}, {n}x{n}",
)
ratio = f"{format_ratio(last.speedup)} the speed"
ratio = ratio if last.measurable else "no measurable difference"
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    batches,
    {"loop of torch.mm": loops, f"torch.bmm ({ratio} at B={B})": batched},
    xlabel="batch size B (matrices)",
    ylabel="time per call (ms)",
    title=f"One bmm call against {B} mm calls: {ratio}",
    record="loop against bmm",
)
plt.show()

# %%
# In place or out of place
# ------------------------
# ``x * a + b`` allocates a temporary for ``x * a`` and a new tensor for the result;
# ``x.mul_(a).add_(b)`` overwrites ``x`` and allocates nothing. Both read and write
# the same number of bytes, so their times can differ only by the cost of
# allocating. On a GPU, PyTorch's caching allocator reuses freed blocks, so expect
# similar times; on a CPU, large blocks come fresh from the operating system on
# every call and each new page must be faulted in, which can cost more than the
# arithmetic. Memory is where in place reliably wins: the out-of-place version
# holds two extra tensors of ``x``'s size at its peak.
#
# On a CPU the tracker reads the resident memory (RSS) of the whole process, which
# sees a tensor only if the C allocator takes fresh pages for it; blocks of 32 MiB
# and more always get them, so the CPU run uses at least that size. With ``a = 0.5``
# and ``b = 1``, repeated in-place updates converge to 2 and stay finite.
numel = gpuguide.largest_size(
    2**12, 2**26, memory_at=lambda k: 16 * k, traffic_at=lambda k: 32 * k
)
if device.type == "cpu":
    numel = max(numel, 2**23)
scale, shift = 0.5, 1.0


def out_of_place(x):
    return x * scale + shift


def in_place(x):
    return x.mul_(scale).add_(shift)


x = torch.randn(numel, device=device)
assert torch.allclose(in_place(x.clone()), out_of_place(x))
versions = {"out of place": out_of_place, "in place": in_place}
memory = {}
for name, fn in versions.items():
    with gpuguide.track_memory(device) as tracker:
        result = fn(x)
    report = tracker.report
    peak = report.peak_increase_bytes  # None on MPS, which keeps no peak counter
    memory[name] = report.net_bytes if peak is None else peak
    del result
times = gpuguide.interleave(
    {name: partial(fn, x) for name, fn in versions.items()}, device=device
)
for name, m in times.items():
    gpuguide.record(f"{name} update", m, size=numel)
print(f"x: {numel} float32 ({format_bytes(4 * numel)}); memory from {report.method}")
Version = namedtuple("Version", "version time peak peak_in_sizes_of_x")
rows = [
    Version(k, m, f"+{format_bytes(memory[k])}", f"{memory[k] / (4 * numel):.1f}")
    for k, m in times.items()
]
print(gpuguide.table(rows))
verdict = str(gpuguide.compare(times["in place"], times["out of place"]))
saved = memory["out of place"] - memory["in place"]
print(f"Time: {verdict}; memory: in place peaks {format_bytes(saved)} lower")

fig, (ax_t, ax_m) = plt.subplots(1, 2)
gpuguide.plot_bars(ax_t, times, ylabel="time (ms)", title=verdict.split(" (")[0])
in_mib = {name: b / 2**20 for name, b in memory.items()}
gpuguide.plot_bars(ax_m, in_mib, ylabel="peak increase (MiB)", title="peak memory")
fig.supxlabel(f"x * a + b vs x.mul_(a).add_(b), {numel} float32", fontsize="small")
plt.show()

# %%
# In-place updates and autograd
# -----------------------------
# Autograd saves some tensors for the backward pass, and an in-place update of a
# saved tensor makes its gradient wrong. PyTorch detects this with version counters
# and refuses, as here: ``sigmoid`` saves its output, which ``mul_`` then overwrites.
w = torch.randn(3, requires_grad=True)
y = torch.sigmoid(w)
y.mul_(2)
try:
    y.sum().backward()
except RuntimeError as err:
    print(f"backward() refused: {str(err).split(':')[0]}")

# %%
# Contiguous or strided
# ---------------------
# ``x.t()`` is a view: the same memory with swapped strides, so stepping along one of
# its rows jumps across memory. ``.contiguous()`` copies it into row-major order,
# which reads and writes the whole tensor. Whether that pays depends on the
# operation, so the view, the copy alone, and the operation on the copy are timed
# separately; a copy used ``k`` times pays off once ``copy + k * contiguous < k *
# strided``. Matmul libraries read transposed operands natively and reductions
# reorder their loops to follow memory, so expect the penalty to vary widely from
# one operation to the next. (Summing ``x.t()`` over dim 0 would read ``x`` row by
# row, contiguously; dim 1 is the strided direction.) The view and the copy take
# turns, and the break-even number of uses is printed only when the copy is
# measurably faster to work on (:func:`gpuguide.break_even`); otherwise making the
# view contiguous never measurably pays.
side = gpuguide.largest_size(
    64,
    16384,
    memory_at=lambda s: 16 * s * s,
    traffic_at=lambda s: 12 * s * s,
    call_s=0.005,
)
x, y, out = (torch.randn(side, side, device=device) for _ in range(3))
w = torch.randn(side, 64, device=device)
view = x.t()
copy = gpuguide.benchmark(
    torch.Tensor.contiguous, args=(view,), label=".contiguous()", device=device
)
print(f"{side}x{side} float32; view.is_contiguous() = {view.is_contiguous()}")
print(f".contiguous() copy alone: {format_cell(copy)}")
gpuguide.record(".contiguous() copy", copy, size=f"{side}x{side}")
ops = {
    "view + y": lambda v: torch.add(v, y, out=out),
    "sum(view, dim=1)": lambda v: torch.sum(v, dim=1),
    "view @ w": lambda v: torch.mm(v, w),
}
fig, axes = plt.subplots(1, len(ops))
paid = 0
for ax, (name, op) in zip(axes, ops.items(), strict=True):
    contiguous = view.contiguous()
    assert torch.allclose(op(view), op(contiguous), rtol=1e-4, atol=1e-3)
    strided, packed = timed(
        {
            f"{name}, strided": partial(op, view),
            f"{name}, contiguous": partial(op, contiguous),
        }
    )
    uses = gpuguide.break_even(copy, strided, packed)
    if uses is None:
        verdict = "never measurably pays: the view is not measurably slower"
    else:
        verdict = "pays on the first use" if uses == 1 else f"pays after {uses} uses"
        paid += 1
    print(
        f"{name}: view {format_cell(strided)}, contiguous {format_cell(packed)}; "
        f"making it contiguous {verdict}"
    )
    bars = {"view": strided, "copy+op": copy.median_ms + packed.median_ms}
    bars["contig."] = packed
    gpuguide.plot_bars(ax, bars, ylabel="time (ms)", title=name)
    ax.set_xlabel(verdict.split(":")[0], fontsize="small")
fig.suptitle(f".contiguous() paid off for {paid} of {len(ops)} operations")
fig.supxlabel(f"{side}x{side} float32; view = x.t()", fontsize="small")
plt.show()

# %%
# What to take away
# -----------------
# Batch small operations into one call whenever the data allows it. Prefer in-place
# updates to save memory when autograd does not need the old values; they save time
# only where allocating is expensive, which the printout above shows for this
# device. Make a view contiguous only when the operation is measurably slower on it
# and the copy is reused enough times: time the copy apart from the operation,
# never inside it.
