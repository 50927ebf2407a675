"""
torch.jit.script is deprecated: fuse with torch.compile
=======================================================

An older blog post fused a chain of sines with ``torch.jit.script`` and did not say
that TorchScript was on its way out. In current PyTorch, scripting emits a
deprecation warning that names ``torch.compile`` as the replacement. This page
catches that warning on purpose, shows when it is emitted, and checks the post's
claim that the scripted chain runs as one fused kernel from its second call on.
Then the same chain runs three ways (eager, scripted, compiled): for each, the
kernels (on a CPU, operators) of one call, the cost of the first calls, the
steady-state time and the bandwidth.

See also the concept page
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# One depth, and a tensor as large as the device's time budget allows for it. One
# pass over ``x`` reads every value and writes one result: its bytes size ``x`` and
# give the rates below.
import warnings
from typing import Final

import matplotlib.pyplot as plt
import torch
from torch import nn

import gpuguide
from gpuguide.chapters.compiling import first_calls_s, pass_rows, passes

page = gpuguide.setup()
device = page.device
depth = 4 if page.small else 8


def pass_bytes(n):  # read n float32 values, write n
    return 2 * 4 * n


n = gpuguide.largest_size(2**12, 2**28, memory_at=lambda n: 3 * 4 * n,
                          traffic_at=lambda n: depth * pass_bytes(n))  # fmt: skip
x = torch.randn(n, device=device)
x_size = gpuguide.format_bytes(4 * n)
print(f"x: {n:,} float32 ({x_size}); depth {depth}")
if not page.cuda:
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
# The build turns warnings into errors, so every ``torch.jit.script`` call runs
# inside ``warnings.catch_warnings(record=True)``, which keeps what it raised.
def script(module, raised):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scripted = torch.jit.script(module)
    raised.append(caught)
    return scripted


scripting = []  # the warnings of each torch.jit.script call
scripted = script(NestedSin(depth), scripting)
for w in scripting[0]:
    print(f"torch.jit.script: {w.category.__name__}: {str(w.message).splitlines()[0]}")
print("The replacement for speed is torch.compile (torch.export for deployment).")

# %%
# When does TorchScript fuse?
# ---------------------------
# TorchScript records the shapes it sees in its first call(s) before it optimises,
# so fusion, if any, can only start from the second or third call. On a GPU expect
# the count to drop to one fused kernel; on a CPU its fuser is off by default.
# ``passes`` lists what one call ran, from the profiler, as on the previous page.
# These calls run under ``catch_warnings`` too, and the page counts the
# deprecation warnings among what they raised (the profiler may warn about its own
# code).
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    per_call = [len(passes(scripted, x, device=device)) for _ in range(3)]
called = [w for w in caught if "`torch.jit" in str(w.message)]
print(f"TorchScript, calls 1, 2, 3: {per_call} kernels/operators per call")
fused_from = next((i + 1 for i, c in enumerate(per_call) if c < depth), None)
print(f"fused from call {fused_from} on" if fused_from else "no call was fused here")
gpuguide.claim(
    "on a GPU, TorchScript fuses the chain from its second or third call",
    holds=fused_from in (2, 3),
    measured=f"{per_call} per call",
    on="cuda",
)

# %%
# Three ways, one chain
# ---------------------
# Each way gets a fresh module; only how it runs changes. Its first three calls are
# timed apart: their time beyond three steady-state calls is what starting cost.
# For torch.compile that is its compilation, for TorchScript the profiling runs
# and optimisation of its first calls. Eager mode compiles nothing: whatever it
# shows is what every way pays on its first calls (the allocator's first blocks,
# fresh memory pages, cold caches). Then the three ways run in five alternating
# rounds, so that a drift of the machine falls on all of them.
modules = {"eager": NestedSin(depth), "TorchScript": script(NestedSin(depth), scripting)}  # fmt: skip
torch._dynamo.reset()
modules["torch.compile"] = torch.compile(NestedSin(depth), fullgraph=True)
firsts = {way: first_calls_s(fn, x, device=device) for way, fn in modules.items()}
times = gpuguide.interleave(
    {way: lambda fn=fn: fn(x) for way, fn in modules.items()},
    device=device,
    rep_ms=None if page.cuda else 400,  # a CPU's calls of ~20 ms need more of them
)
names = {way: passes(fn, x, device=device) for way, fn in modules.items()}

# %%
# Passes, time and bandwidth
# --------------------------
# "moved" counts a read and a write of ``x`` per kernel or operator counted, as a
# share of the device's peak memory bandwidth (on a CPU, the best rate measured of a
# copy, an add or a sum past the caches: the line below names which); a rate above
# it came from a cache. Below the table, each way's "useful" bandwidth: the bytes
# the chain must move (read ``x``, write the result) by the time.
_, measured, memory = page.peaks.detail.partition("; memory ")
print(f"memory peak: {memory if measured else page.peaks.source}")
peak = page.peaks.memory_bandwidth_bytes_per_s
rows = pass_rows(times, firsts, names, pass_bytes=pass_bytes(n), peak_bytes_per_s=peak)
print(gpuguide.table(rows))
if names["TorchScript"] == names["eager"]:
    print("TorchScript ran the same operators as eager here: it fused nothing.")
gpuguide.claim(
    "on a CPU, TorchScript's fuser is off: the scripted module runs eager's operators",
    holds=names["TorchScript"] == names["eager"],
    measured=f"{len(names['TorchScript'])} against eager's {len(names['eager'])}",
    on="cpu",
)
for way, m in times.items():
    gpuguide.report("useful bandwidth", m.rate(pass_bytes(n), "B/s"), peak="memory",
                    size=x_size, mode=way, depth=depth)  # fmt: skip

# %%
# Steady state, side by side
# --------------------------
# Bars are medians with their interquartile range, labelled relative to eager (below
# 1.00x is faster). On a GPU expect both fused ways to run at least twice as fast as
# eager at this depth and to be close to each other. On a CPU, TorchScript's fuser
# is off, so the scripted module runs eager's operators, and what the compiled one
# gains depends on how its generated loop compares with ATen's ``sin``.
gains = {way: gpuguide.compare(times[way], times["eager"]) for way in times}
for way in ("TorchScript", "torch.compile"):
    print(gains[way])
between = gpuguide.compare(times["torch.compile"], times["TorchScript"])
if page.cuda:  # on a CPU, TorchScript runs eager's operators: eager is the baseline
    print(between)
for way in ("TorchScript", "torch.compile"):
    gpuguide.claim(
        f"on a GPU, {way} runs at least 2x faster than eager",
        gains[way],
        at_least=2,
        on="cuda",
    )
gpuguide.claim(
    "on a GPU, the two fused ways are close: torch.compile within "
    "0.8-1.25x of TorchScript",
    between,
    at_least=0.8,
    at_most=1.25,
    on="cuda",
)
gpuguide.claim(
    "on a CPU, TorchScript is not faster than eager",
    gains["TorchScript"],
    verdict="not faster",
    on="cpu",
)
gpuguide.claim(
    "on a CPU, torch.compile's generated loop is at least 1.5x faster than eager",
    gains["torch.compile"],
    at_least=1.5,
    on="cpu",
)
speeds = ", ".join(f"{way} {gpuguide.format_ratio(gains[way].speedup)}"
                   for way in ("TorchScript", "torch.compile"))  # fmt: skip
fig, ax = plt.subplots()
gpuguide.plot_bars(ax, times, ylabel="time per call (ms)",
                   title=f"Depth {depth}: {speeds} eager speed", baseline="eager")  # fmt: skip
plt.show()

# %%
# Which calls warned
# ------------------
# Expect one warning per ``torch.jit.script`` call and none from calls of a
# scripted module. Outside a build, Python's default filters show a warning once
# per line of code that raises it, and hide a ``DeprecationWarning`` raised in
# torch's own modules altogether (the category printed above; torch 2.15 raises a
# ``FutureWarning``, which shows), so in a long run the deprecation is easy to miss.
raised = [len(caught) for caught in scripting]
print(f"{len(raised)} torch.jit.script calls raised {sum(raised)} warning(s) "
      f"({' and '.join(map(str, raised))}); 3 calls of a scripted module raised "
      f"{len(called)} deprecation warning(s)")  # fmt: skip
deprecations = [sum("deprecated" in str(w.message) for w in c) for c in scripting]
gpuguide.claim(
    "every torch.jit.script call warns that it is deprecated, and calls "
    "of a scripted module do not",
    measured=f"{deprecations} and {len(called)}",
    holds=min(deprecations) >= 1 and not called,
)

# %%
# Moving from TorchScript to torch.compile
# ----------------------------------------
# For fusing a function or module, replace ``torch.jit.script(fn)`` with
# ``torch.compile(fn)``: it takes ordinary Python (no ``Final`` or type annotations
# needed), fuses on CPUs as well as GPUs, and the profiler confirms the fusion as
# above. Its first call compiles: the table's first-calls column shows what that
# cost here (less when inductor's disk cache already holds the code).
# What this run found:
gpuguide.takeaway()
