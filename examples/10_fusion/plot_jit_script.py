"""
torch.jit.script is deprecated: fuse with torch.compile
=======================================================

An older blog post fused a chain of sines with ``torch.jit.script`` and did not say
that TorchScript was on its way out. In current PyTorch, scripting a function emits
a deprecation warning that names ``torch.compile`` as the replacement. This page
catches that warning on purpose, shows when it is emitted, and checks the post's
claim that the scripted chain runs as one fused kernel from its second call on.

Then the same chain runs three ways (eager, scripted, compiled) with one change
between them. For each way it prints the kernels (on a CPU, operators) of one call,
the one-off cost of the first calls, the steady-state time and the bandwidth.

See also the concept page
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# One depth, and a tensor as large as the device's time budget allows for it.
from typing import Final

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide.chapters.compiling import first_calls_s, passes, recording

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small, on_cuda = gpuguide.small_mode(), device.type == "cuda"
depth = 4 if small else 8

peaks = gpuguide.device_peaks(device)
# x and two intermediates are alive at once; each sin reads and writes every value
n = gpuguide.largest_size(
    2**12, 2**28, memory_at=lambda n: 3 * 4 * n, traffic_at=lambda n: 8 * depth * n
)
x = torch.randn(n, device=device)
min_bytes = 2 * x.numel() * x.element_size()  # read x once, write the result once
x_size = gpuguide.format_bytes(min_bytes // 2)
print(f"x: {n:,} float32 ({x_size}); depth {depth}")
if not on_cuda:
    print("Kernel launches and TorchScript's fusers need a GPU; on this CPU the "
          "profiler counts aten operator calls per call instead.")  # fmt: skip

# %%
# The chain, as a module
# ----------------------
# TorchScript cannot read a number from a closure, so the depth is a ``Final``
# attribute of a module: a constant to TorchScript, which then unrolls the loop into
# ``depth`` calls of ``sin``. The same module runs all three ways.


class NestedSin(nn.Module):
    depth: Final[int]

    def __init__(self, depth):
        super().__init__()
        self.depth = depth

    def forward(self, x):
        for _ in range(self.depth):
            x = torch.sin(x)
        return x


# %%
# The warning, and when it comes
# ------------------------------
# The build turns warnings into errors, so every call that may warn runs inside
# ``recording``, which catches warnings and keeps them by phase: scripting, the
# first calls, the later calls. ``torch.jit.script`` attributes its deprecation
# warning to torch's own module, like the warnings torch raises about its own code
# (which ``recording`` leaves ignored, :mod:`gpuguide.quiet`), so the scripting
# phases ask for torch's warnings too (``torch_internal=True``).
caught = {}
with recording(caught, "torch.jit.script(module)", torch_internal=True):
    scripted = torch.jit.script(NestedSin(depth))
w = caught["torch.jit.script(module)"][0]
print(f"torch.jit.script: {w.category.__name__}: {str(w.message).splitlines()[0]}")
print("The replacement for speed is torch.compile (torch.export for deployment).")

# %%
# When does TorchScript fuse?
# ---------------------------
# TorchScript records the shapes it sees in its first call(s) before it optimises,
# so fusion, if any, can only start from the second or third call. On a GPU expect
# the count to drop to one fused kernel; on a CPU its fuser is off by default.
# ``passes`` lists what one call ran, from the profiler, as on the previous page.
with recording(caught, "TorchScript: first 3 calls"):
    per_call = [len(passes(scripted, x, device=device)) for _ in range(3)]
print(f"TorchScript, calls 1, 2, 3: {per_call} kernels/operators per call")
fused_from = next((i + 1 for i, c in enumerate(per_call) if c < depth), None)
print(f"fused from call {fused_from} on" if fused_from else "no call was fused here")

# %%
# Three ways, one chain
# ---------------------
# Each way gets a fresh module; only how it runs changes. Its first three calls are
# timed apart: their total minus three steady-state calls is the one-off cost. Then
# the three ways run in five alternating rounds, so that a drift of the machine falls
# on all of them. (The first compile in a process imports the compiler; whether
# that warns depends on the torch release: about torch's own code, and ignored.)


with recording(caught, "torch.jit.script(module)", torch_internal=True):
    modules = {"eager": NestedSin(depth), "TorchScript": torch.jit.script(NestedSin(depth))}  # fmt: skip
torch._dynamo.reset()
modules["torch.compile"] = torch.compile(NestedSin(depth), fullgraph=True)
firsts, one_off, names = {}, {}, {}
for way, fn in modules.items():
    with recording(caught, f"{way}: first 3 calls"):
        firsts[way] = first_calls_s(fn, x, device=device)
with recording(caught, "all ways: later calls"):
    times = gpuguide.interleave(
        {way: lambda fn=fn: fn(x) for way, fn in modules.items()}, device=device
    )
    for way, fn in modules.items():
        names[way] = passes(fn, x, device=device)
        one_off[way] = max(firsts[way] - 3 * times[way].median_s, 0.0)

# %%
# Passes, time and bandwidth
# --------------------------
# "useful" bandwidth counts only the bytes the chain must move (read ``x``, write
# the result); "moved" counts a read and a write per kernel or operator counted.
# Percentages are of the device's peak memory bandwidth (on a CPU, its measured copy
# ceiling); a rate above it came from a cache and is marked so, not given a percentage.


def rate_text(rate):
    p = gpuguide.percent_of_peak(rate, peaks.memory_bandwidth_bytes_per_s)
    # Above the memory peak, the data came from a cache: not a % of that peak.
    share = "n/a" if p is None else f"{p:.0f}%" if p <= 100 else "> peak: cached"
    return f"{gpuguide.format_rate(rate, 'B/s')} ({share})"


rows = []
for way, m in times.items():
    k = len(names[way])
    useful = gpuguide.bytes_per_s(min_bytes, m.median_s)
    spread = (min_bytes / m.q75_s, min_bytes / m.q25_s)  # for the last cell
    gpuguide.record("useful bandwidth", useful, unit="B/s", spread=spread,
                    peak="memory", size=x_size, mode=way, depth=depth)  # fmt: skip
    kinds = ", ".join(f"{names[way].count(s)} x {s}" for s in dict.fromkeys(names[way]))
    rows.append(
        {
            "way": way,
            "median ± IQR/2": m,
            "one-off": f"{one_off[way]:.2f} s",
            "passes": k,
            "useful (% of peak)": rate_text(useful),
            "moved (% of peak)": rate_text(k * useful),
            "what ran": kinds,
        }
    )
print(gpuguide.table(rows))
if names["TorchScript"] == names["eager"]:
    print("TorchScript ran the same operators as eager here: it fused nothing.")

# %%
# Steady state, side by side
# --------------------------
# Bars are medians with their interquartile range, labelled relative to eager (below
# 1.00x is faster). On a GPU expect both fused ways to run several times faster than
# eager at this depth and to be close to each other; on a CPU expect the scripted
# module to match eager and only the compiled one to gain.
gains = {way: gpuguide.compare(times[way], times["eager"]) for way in times}
for way in ("TorchScript", "torch.compile"):
    print(gains[way])
print(gpuguide.compare(times["torch.compile"], times["TorchScript"]))
speeds = ", ".join(
    f"{way} {gpuguide.format_ratio(gains[way].speedup)}"
    for way in ("TorchScript", "torch.compile")
)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    times,
    ylabel="time per call (ms)",
    title=f"Depth {depth}: {speeds} eager speed",
    baseline="eager",
)
plt.show()

# %%
# Which calls warned
# ------------------
# The record of every phase: expect scripting to warn once per module and calls of
# a scripted module not at all, so the deprecation is easy to miss in a long run.
for phase, got in caught.items():
    kinds = sorted({f"{w.category.__name__}: {w.message}".splitlines()[0] for w in got})
    print(f"{phase}: {len(got)} warning(s)" + "".join(f"\n    {k}" for k in kinds))

# %%
# Moving from TorchScript to torch.compile
# ----------------------------------------
# For fusing a function or module, replace ``torch.jit.script(fn)`` with
# ``torch.compile(fn)``: it takes ordinary Python (no ``Final`` or type annotations
# needed), fuses on CPUs as well as GPUs, and the profiler confirms the fusion as
# above. Expect its first call to cost seconds rather than milliseconds.
