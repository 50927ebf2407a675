"""
In-place updates and memory layout
==================================

Two habits are often recommended for fast PyTorch code: update tensors in place
instead of allocating new ones, and make strided views contiguous. This page
measures what each buys on your device: the time and peak memory of ``x * a + b``
against ``x.mul_(a).add_(b)``, and three operations on a transposed view, with the
``.contiguous()`` copy timed on its own to see after how many uses it pays.

See also :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# Each lesson is a comparison: one thread on a CPU (two: 3-4x the spread). On a
# host clock each timed sample is a block of calls of at least 5 ms
# (``sample_ms``), timed per call.
from functools import partial

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, break_even, compare, interleave, plot_bars, report

if not torch.cuda.is_available():
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
opts = {"device": device, "sample_ms": 5}


# %%
# In place or out of place
# ------------------------
# ``x * a + b`` allocates a temporary for ``x * a`` and a new tensor for the result;
# ``x.mul_(a).add_(b)`` overwrites ``x`` and allocates nothing. Both move the same
# bytes, so their times differ only by the cost of allocating: small on a GPU,
# whose caching allocator reuses freed blocks; on a CPU, large blocks come fresh
# from the OS and each page is faulted in. With ``a = 0.5`` and ``b = 1``, repeated
# in-place updates converge to 2.
def out_of_place(x):
    return x * 0.5 + 1.0


def in_place(x):
    return x.mul_(0.5).add_(1.0)


# %%
# Time and peak memory
# --------------------
# On a CPU the tracker reads the process's resident memory (RSS), which sees a
# tensor only if it gets fresh pages; blocks of 32 MiB and more always do, so the
# CPU run uses at least that size.
numel = gpuguide.largest_size(
    2**12, 2**26, memory_at=lambda k: 16 * k, traffic_at=lambda k: 32 * k
)
numel = max(numel, 2**23) if device.type == "cpu" else numel
x = torch.randn(numel, device=device)
assert torch.allclose(in_place(x.clone()), out_of_place(x))
versions = {"out of place": out_of_place, "in place": in_place}
shares = {}  # peak memory increase, in multiples of x's size
for name, fn in versions.items():
    with gpuguide.track_memory(device) as tracker:
        result = fn(x)
    peak = tracker.report.peak_increase_bytes  # None on MPS: no peak counter there
    shares[name] = (tracker.report.net_bytes if peak is None else peak) / (4 * numel)
    del result
times = interleave({name: partial(fn, x) for name, fn in versions.items()}, **opts)
for name, m in times.items():
    report(f"{name} update", m, size=numel)
verdict = compare(times["in place"], times["out of place"])
for name, (low, high) in {"in place": (0, 0.1), "out of place": (1.5, 2.5)}.items():
    gpuguide.claim(
        f"{name}, the peak memory increase is {low}-{high}x x's size",
        shares[name],
        at_least=low,
        at_most=high,
        unless="no peak counter on this device" if peak is None else None,
    )
gpuguide.claim(
    "on a GPU, in place's speed-up is within 0.8-1.25x",
    verdict,
    at_least=0.8,
    at_most=1.25,
    on="cuda",
)
gpuguide.claim(
    "on a CPU, in place is at least 2x faster", verdict, at_least=2, on="cpu"
)
fig, (ax_t, ax_m) = plt.subplots(1, 2)
plot_bars(ax_t, times, ylabel="time (ms)", title=verdict.short)
plot_bars(ax_m, shares, ylabel="peak increase (x's size)", title=tracker.method)
plt.show()

# %%
# In-place updates and autograd
# -----------------------------
# Autograd saves some tensors for the backward pass, and an in-place update of a
# saved tensor would make its gradient wrong. PyTorch detects this with version
# counters and refuses: ``sigmoid`` saves its output, which ``mul_`` overwrites.
y = torch.sigmoid(torch.randn(3, requires_grad=True)).mul_(2)
try:
    y.sum().backward()
except RuntimeError as err:
    print(f"backward() refused: {str(err).split(':')[0]}")

# %%
# Contiguous or strided
# ---------------------
# ``x.t()`` is a view: the same memory with swapped strides. ``.contiguous()``
# copies it into row-major order. A copy used ``k`` times pays off once ``copy + k
# * contiguous < k * strided`` (:func:`gpuguide.break_even`: no number unless the
# copy is measurably faster to work on). Matmul reads transposed operands without a
# copy and reductions can reorder their loops, so the penalty differs per operation.
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
contiguous = view.contiguous()
copy = benchmark(view.contiguous, label=".contiguous()", device=device, sample_ms=5)
report(".contiguous() copy", copy, size=f"{side}x{side}")
ops = {
    "view + y": lambda v: torch.add(v, y, out=out),
    "sum(view, dim=1)": lambda v: torch.sum(v, dim=1),
    "view @ w": lambda v: torch.mm(v, w),
}
fig, axes = plt.subplots(1, len(ops))
rows, gains = [], []
for ax, (name, op) in zip(axes, ops.items(), strict=True):
    assert torch.allclose(op(view), op(contiguous), rtol=1e-4, atol=1e-3)
    variants = {"view": partial(op, view), "contig.": partial(op, contiguous)}
    strided, packed = interleave(variants, **opts).values()
    gains.append(compare(packed, strided))
    uses = break_even(copy, strided, packed)
    pays = f"pays after {uses} uses" if uses else f"no break-even: {gains[-1].short}"
    rows.append({"operation": name, "view": strided, "contig.": packed, "copy": pays})
    bars = {"view": strided, "copy+op": 1e3 * (copy.median_s + packed.median_s)}
    plot_bars(ax, bars | {"contig.": packed}, ylabel="time (ms)", title=name)
print(gpuguide.table(rows))
gpuguide.claim(
    "adding to the transposed view is at least 1.5x slower than to its contiguous "
    "copy: the view's reads jump across memory",
    gains[0],
    at_least=1.5,
)
paid = sum(row["copy"].startswith("pays") for row in rows)
fig.suptitle(f".contiguous() paid off for {paid} of {len(ops)} operations")
plt.show()

# %%
# What to take away
# -----------------
# In place saves memory, and time only where allocating is expensive; make a view
# contiguous only when the operation is measurably slower on it and the copy is
# reused, timing the copy apart from the operation.
gpuguide.takeaway()
