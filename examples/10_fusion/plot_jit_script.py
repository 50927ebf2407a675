"""
torch.jit.script is deprecated: fuse with torch.compile
=======================================================

An older blog post fused a chain of sines with ``torch.jit.script``. In current
PyTorch, scripting emits a deprecation warning that names ``torch.compile`` as the
replacement. This page catches that warning, checks the post's claim that the
scripted chain runs as one fused kernel from its second call on, then runs the
chain three ways (eager, scripted, compiled): the kernels (on a CPU, operators) of
one call, the cost of the first calls, the steady-state time and the bandwidth.

See also the concept page
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# One depth, and a tensor as large as the device's time budget allows for it. One
# pass over ``x`` reads every value and writes one result.
import warnings
from typing import Final

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import gpuguide
from gpuguide.timing import first_calls_s

page = gpuguide.setup()
device = page.device
depth = 4 if page.small else 8
fits = {"memory_at": lambda n: 3 * 4 * n, "traffic_at": lambda n: depth * 8 * n}
n = gpuguide.largest_size(2**12, 2**28, **fits)
x, pass_bytes = torch.randn(n, device=device), 2 * 4 * n  # read n float32, write n
x_size = gpuguide.format_bytes(4 * n)
print(f"x: {n:,} float32 ({x_size}); depth {depth}")

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

# %%
# When does TorchScript fuse?
# ---------------------------
# TorchScript records the shapes of its first call(s) before it optimises, so fusion
# can start from the second or third call. ``torch.profiler`` lists what one call ran:
# every kernel on a GPU; every ``sin`` and compiled graph on a CPU (no fuser there).
kinds = [ProfilerActivity.CPU, ProfilerActivity.CUDA][: 1 + page.cuda]


def what_ran(fn):
    with profile(activities=kinds) as prof:
        fn(x)
    if page.cuda:  # kernels, but the profiler's own annotations
        gpu = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
        return [e.name[:48] for e in gpu if not e.is_user_annotation]
    sines = [e.name for e in prof.events() if e.name == "aten::sin"]
    return sines + [e.name[:32] for e in prof.events() if "FxGraph" in e.name]


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    per_call = [len(what_ran(scripted)) for _ in range(3)]
called = [w for w in caught if "`torch.jit" in str(w.message)]
fused_from = next((i + 1 for i, c in enumerate(per_call) if c < depth), None)
said = f"fused from call {fused_from}" if fused_from else "not fused in 3 calls"
print(f"TorchScript, calls 1, 2, 3: {per_call} passes per call; {said}")
fuses = "on a GPU, TorchScript fuses the chain from its second or third call"
gpuguide.claim(fuses, holds=fused_from in (2, 3), measured=f"{per_call}", on="cuda")

# %%
# Three ways, one chain
# ---------------------
# Each way gets a fresh module. Its first three calls, timed apart, hold
# torch.compile's compilation, TorchScript's profiling runs, and what every way
# pays first (fresh memory, cold caches). Then the ways run in alternating rounds.
fresh = script(NestedSin(depth), scripting)
modules = {"eager": NestedSin(depth), "TorchScript": fresh}
torch._dynamo.reset()
modules["torch.compile"] = torch.compile(NestedSin(depth), fullgraph=True)
firsts = {way: first_calls_s(fn, x, device=device) for way, fn in modules.items()}
calls = {way: lambda fn=fn: fn(x) for way, fn in modules.items()}
times = gpuguide.interleave(calls, device=device, rep_ms=None if page.cuda else 400)
names = {way: what_ran(fn) for way, fn in modules.items()}

# %%
# Passes, time and bandwidth
# --------------------------
# "moved" counts a read and a write of ``x`` per kernel or operator, as a share of
# the peak memory bandwidth; "useful" (recorded) counts the bytes the chain needs.
peak, at = page.peaks.memory_bandwidth_bytes_per_s, {"size": x_size, "depth": depth}
rows = []
for way, m in times.items():
    moved = m.rate(len(names[way]) * pass_bytes, "B/s")
    beyond = f"{max(firsts[way] - 3 * m.median_s, 0):.2f} s"
    rows.append({"way": way, "time": m, "passes": len(names[way]), "moved": moved})
    rows[-1]["% of peak"] = page.peaks.percent_of(moved.value, "memory")
    rows[-1]["first 3 calls, beyond steady"] = beyond
    rows[-1]["what ran"] = ", ".join(dict.fromkeys(names[way]))
    useful = m.rate(pass_bytes, "B/s")
    gpuguide.report("useful bandwidth", useful, peak="memory", mode=way, **at)
print(gpuguide.table(rows))
same = names["TorchScript"] == names["eager"]
off = "on a CPU, TorchScript's fuser is off: the scripted module runs eager's operators"
gpuguide.claim(off, holds=same, measured=f"{len(names['TorchScript'])} ops", on="cpu")

# %%
# Steady state, side by side
# --------------------------
# Medians with their interquartile range, relative to eager. On a GPU both fused
# ways should run at least twice as fast as eager; on a CPU the scripted module
# runs eager's operators, and the compiled one's loop competes with ATen's ``sin``.
gains = {way: gpuguide.compare(times[way], times["eager"]) for way in times}
between = gpuguide.compare(times["torch.compile"], times["TorchScript"])
for way in ("TorchScript", "torch.compile"):
    print(gains[way])
    fast = f"on a GPU, {way} runs at least 2x faster than eager"
    gpuguide.claim(fast, gains[way], at_least=2, on="cuda")
close = "on a GPU, torch.compile runs within 0.8-1.25x of TorchScript's speed"
gpuguide.claim(close, between, at_least=0.8, at_most=1.25, on="cuda")
slow = "on a CPU, TorchScript is not faster than eager"
gpuguide.claim(slow, gains["TorchScript"], verdict="not faster", on="cpu")
loop = "on a CPU, torch.compile's generated loop is at least 1.5x faster than eager"
gpuguide.claim(loop, gains["torch.compile"], at_least=1.5, on="cpu")
fig, ax = plt.subplots()
ts, tc = gains["TorchScript"].short, gains["torch.compile"].short
bars = {"ylabel": "time per call (ms)", "baseline": "eager"}
gpuguide.plot_bars(ax, times, **bars, title=f"TorchScript {ts}, torch.compile {tc}")
plt.show()

# %%
# Which calls warned
# ------------------
# One warning per ``torch.jit.script`` call, none from calls of a scripted module.
# Outside a build, Python shows a warning once per line of code and hides a
# ``DeprecationWarning`` raised in torch's own modules (torch 2.15 raises a
# ``FutureWarning``, which shows): the deprecation is easy to miss.
deprecations = [sum("deprecated" in str(w.message) for w in c) for c in scripting]
print(f"deprecations: {deprecations} per script call, {len(called)} from 3 calls")
warned = min(deprecations) >= 1 and not called
every = "every torch.jit.script call warns, and calls of a scripted module do not"
gpuguide.claim(every, holds=warned, measured=f"{deprecations} and {len(called)}")

# %%
# Moving from TorchScript to torch.compile
# ----------------------------------------
# Replace ``torch.jit.script(fn)`` with ``torch.compile(fn)``: it takes ordinary
# Python (no ``Final`` or type annotations), fuses on CPUs as well as GPUs, and the
# profiler confirms the fusion. Its first call compiles: the table's first-calls
# column shows what that cost here.
gpuguide.takeaway()
