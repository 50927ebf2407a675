"""
In-place updates and memory layout
==================================

Two habits are often recommended for fast PyTorch code: update tensors in place
instead of allocating new ones, and make strided views contiguous. This page
measures each one, changing one thing at a time, so you can see what each habit
buys on your device: the time and the peak memory of ``x * a + b`` against
``x.mul_(a).add_(b)``, and three operations on a transposed view, with the
``.contiguous()`` copy timed on its own so that you can see after how many uses it
pays for itself.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
import time
from dataclasses import replace
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, break_even, compare, interleave, plot_bars, report

# Each lesson is a comparison: one thread on a CPU (two: 3-4x the spread).
if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
# On a CPU a timed sample of a short call is a block of calls of about 5 ms (at
# most 10); every time is per call.


def calls_for(fn):
    if page.cuda:
        return 1
    start = time.perf_counter()
    fn()
    return max(1, min(10, round(5e-3 / (time.perf_counter() - start))))


def timed(variants):
    """Time zero-argument callables in interleaved rounds, per call."""
    calls = {name: calls_for(fn) for name, fn in variants.items()}
    samples = {name: partial(repeat, fn, calls[name]) for name, fn in variants.items()}
    return {
        name: replace(
            m,
            times_s=tuple(t / calls[name] for t in m.times_s),
            rounds=tuple(r / calls[name] for r in m.rounds),
        )
        for name, m in interleave(samples, device=device).items()
    }


def repeat(fn, calls):
    for _ in range(calls):
        fn()


# %%
# In place or out of place
# ------------------------
# ``x * a + b`` allocates a temporary for ``x * a`` and a new tensor for the result;
# ``x.mul_(a).add_(b)`` overwrites ``x`` and allocates nothing. Both read and write
# the same number of bytes, so their times can differ only by the cost of
# allocating. On a GPU, PyTorch's caching allocator reuses freed blocks, so expect
# similar times; on a CPU, large blocks come fresh from the operating system on
# every call and each new page must be faulted in, which can cost more than the
# arithmetic. With ``a = 0.5`` and ``b = 1``, repeated in-place updates converge to
# 2 and stay finite.
scale, shift = 0.5, 1.0


def out_of_place(x):
    return x * scale + shift


def in_place(x):
    return x.mul_(scale).add_(shift)


# %%
# Time and peak memory
# --------------------
# Memory is where in place reliably wins: the out-of-place version holds two extra
# tensors of ``x``'s size at its peak. On a CPU the tracker reads the resident
# memory (RSS) of the whole process, which sees a tensor only if the C allocator
# takes fresh pages for it; blocks of 32 MiB and more always get them, so the CPU
# run uses at least that size. The two versions take turns for five rounds.
numel = gpuguide.largest_size(
    2**12, 2**26, memory_at=lambda k: 16 * k, traffic_at=lambda k: 32 * k
)
numel = max(numel, 2**23) if device.type == "cpu" else numel
x = torch.randn(numel, device=device)
assert torch.allclose(in_place(x.clone()), out_of_place(x))
versions = {"out of place": out_of_place, "in place": in_place}
memory = {}
for name, fn in versions.items():
    with gpuguide.track_memory(device) as tracker:
        result = fn(x)
    peak = tracker.report.peak_increase_bytes  # None on MPS: no peak counter there
    memory[name] = tracker.report.net_bytes if peak is None else peak
    del result
size = gpuguide.format_bytes(4 * numel)
print(f"x: {numel} float32 ({size}); memory from {tracker.method}")
times = timed({name: partial(fn, x) for name, fn in versions.items()})
for name, m in times.items():
    report(f"{name} update", m, size=numel)
    share = memory[name] / (4 * numel)
    print(f"{name} peak memory: +{gpuguide.format_bytes(memory[name])}, "
          f"{share:.1f}x the size of x")  # fmt: skip
verdict = compare(times["in place"], times["out of place"])
print(f"Time: {verdict}")
shares = {name: memory[name] / (4 * numel) for name in versions}
gpuguide.claim(
    "in place allocates nothing: its peak increase is at most 0.1x x's size",
    holds=shares["in place"] <= 0.1,
    measured=f"{shares['in place']:.1f}x",
)
gpuguide.claim(
    "out of place holds two extra tensors of x's size at its peak (1.5x-2.5x x's size)",
    holds=1.5 <= shares["out of place"] <= 2.5,
    measured=f"{shares['out of place']:.1f}x",
    unless="no peak counter on this device" if peak is None else None,
)
gpuguide.claim(
    "on a GPU, the caching allocator makes the times similar: in place's "
    "speed-up is within 0.8-1.25x",
    verdict,
    at_least=0.8,
    at_most=1.25,
    on="cuda",
)
gpuguide.claim(
    "on a CPU, in place is at least 2x faster: every out-of-place result's fresh "
    "pages are faulted in",
    verdict,
    at_least=2,
    on="cpu",
)

fig, (ax_t, ax_m) = plt.subplots(1, 2)
plot_bars(ax_t, times, ylabel="time (ms)", title=str(verdict).split(" (")[0])
in_mib = {name: b / 2**20 for name, b in memory.items()}
plot_bars(ax_m, in_mib, ylabel="peak increase (MiB)", title="peak memory")
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
# strided`` (:func:`gpuguide.break_even`: no number unless the copy is measurably
# faster to work on). Matmul libraries read transposed operands without a copy and
# reductions can reorder their loops to follow memory, so the penalty differs from
# one operation to the next. (Summing ``x.t()`` over dim 0 would read ``x`` row by
# row, contiguously; dim 1 is the strided direction.)
side = gpuguide.largest_size(
    64, 16384, memory_at=lambda s: 16 * s * s, traffic_at=lambda s: 12 * s * s,
    call_s=0.005,
)  # fmt: skip
x, y, out = (torch.randn(side, side, device=device) for _ in range(3))
w = torch.randn(side, 64, device=device)
view = x.t()
print(f"{side}x{side} float32; view.is_contiguous() = {view.is_contiguous()}")
copy = benchmark(
    torch.Tensor.contiguous, args=(view,), label=".contiguous()", device=device
)
report(".contiguous() copy", copy, size=f"{side}x{side}")
ops = {
    "view + y": lambda v: torch.add(v, y, out=out),
    "sum(view, dim=1)": lambda v: torch.sum(v, dim=1),
    "view @ w": lambda v: torch.mm(v, w),
}
fig, axes = plt.subplots(1, len(ops))
rows, gains = [], []
for ax, (name, op) in zip(axes, ops.items(), strict=True):
    contiguous = view.contiguous()
    assert torch.allclose(op(view), op(contiguous), rtol=1e-4, atol=1e-3)
    strided, packed = timed(
        {
            f"{name}, strided": partial(op, view),
            f"{name}, contiguous": partial(op, contiguous),
        }
    ).values()
    gains.append(compare(packed, strided))
    uses = break_even(copy, strided, packed)
    verdict = "pays on the first use" if uses == 1 else f"pays after {uses} uses"
    if uses is None:
        verdict = f"no break-even: {gains[-1].short}"
    rows.append({"operation": name, "view": strided, "contiguous": packed,
                 "making it contiguous": verdict})  # fmt: skip
    bars = {"view": strided, "copy+op": copy.median_ms + packed.median_ms}
    bars["contig."] = packed
    plot_bars(ax, bars, ylabel="time (ms)", title=name)
    ax.set_xlabel(verdict.split(":")[0], fontsize="small")
print(gpuguide.table(rows))
gpuguide.claim(
    "adding to the transposed view is at least 1.5x slower than to its contiguous "
    "copy: the view's reads jump across memory",
    gains[0],
    at_least=1.5,
)
paid = sum(row["making it contiguous"].startswith("pays") for row in rows)
fig.suptitle(f".contiguous() paid off for {paid} of {len(ops)} operations")
fig.supxlabel(f"{side}x{side} float32; view = x.t()", fontsize="small")
plt.show()

# %%
# What to take away
# -----------------
# Prefer in-place updates to save memory when autograd does not need the old
# values; they save time only where allocating is expensive, which the printout
# above shows for this device. Make a view contiguous only when the operation is
# measurably slower on it and the copy is reused enough times: time the copy apart
# from the operation, never inside it. The claims this run checked:
gpuguide.takeaway()
