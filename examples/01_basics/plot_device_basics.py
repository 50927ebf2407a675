"""
Device basics
=============

PyTorch runs an operation on the device that holds its inputs. This page shows how to
write code that runs unchanged on a CPU or a GPU: choose the device once, create
tensors with ``device=``, move modules with ``.to(device)``, and keep every operand of
an operation on the same device.

It then times creating a tensor on the CPU and moving it against creating it on the
device, with the CPU's random number generator and the copy timed separately, so you
can see which of the two dominates.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Pick the device once
# --------------------
# In your own code, ``torch.device("cuda" if torch.cuda.is_available() else "cpu")``
# does it. Here :func:`gpuguide.setup` picks CUDA, then MPS, then the CPU (set
# ``GPUGUIDE_DEVICE=cpu`` to override) and prints what the page runs on.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, interleave, largest_size, plot_bars, report

page = gpuguide.setup()
device = page.device

# %%
# Write device-agnostic code
# --------------------------
# Factory functions (``torch.randn``, ``torch.zeros`` ...) take ``device=``;
# ``*_like`` functions inherit the device of their argument. A module moves its
# parameters *in place* with ``.to(device)``, but ``Tensor.to`` returns a new tensor
# and leaves the original where it was: forgetting to assign the result is a classic
# bug. Results go back to the host with ``.cpu()``.
model = torch.nn.Linear(256, 64).to(device)
x = torch.randn(32, 256, device=device)
y = model(x)
print(f"input on {x.device}, weights on {model.weight.device}, output on {y.device}")

t = torch.zeros(3)
t.to(device)  # result thrown away: t itself does not move
gpuguide.claim(
    "Tensor.to(device) leaves the tensor itself where it was",
    holds=t.device.type == "cpu",
    measured=f"t is on {t.device}",
)
t = t.to(device)
print(f"after t = t.to(device), t is on {t.device}; y.cpu() is on {y.cpu().device}")

# %%
# Every operand on the same device
# --------------------------------
# An operation whose tensor operands live on different devices raises a
# ``RuntimeError`` rather than copying data behind your back; a 0-dimensional CPU
# tensor counts as a Python number (``a * torch.tensor(2.0)`` works). Without a
# second device, a 'meta' tensor (shape and dtype, no data) stands in for one.
a = torch.ones(4, 4, device=device)
other = torch.ones(4, 4, device="meta" if device.type == "cpu" else "cpu")
try:
    a + other
    raised = False
except RuntimeError as err:
    raised = True
    print(f"RuntimeError: {err}")
gpuguide.claim(
    "an operation on tensors of two devices raises a RuntimeError",
    holds=raised,
    measured="it raised" if raised else "it did not raise",
)

# %%
# Time creation and transfer separately
# -------------------------------------
# The matrix is the largest square on a grid of sizes that the CPU's generator fills in
# at most 30 ms (its rate measured first), within the device's memory budget. Four
# variants take turns for five rounds (:func:`gpuguide.interleave`), each warmed up: the
# device's generator; the host's; the copy alone of a CPU tensor made beforehand; and
# "create on the CPU, then move" as one call. Each is timed per call, launch included.
probe = benchmark(torch.randn, args=(1024, 1024), device="cpu")
generator = probe.rate(1024 * 1024, "numbers/s")
n = largest_size(
    256,
    8192,
    memory_at=lambda n: 2 * 4 * n * n,
    flop_at=lambda n: n * n,  # one random number per element
    flop_per_s=generator.value,
    efficiency=1.0,
    call_s=0.03,
    per_octave=2,
    multiple_of=256,
)
print(f"CPU generator: {generator}; matrix {n} x {n} float32")

x_host = torch.randn(n, n)
times = interleave(
    {
        "randn on the device": lambda: torch.randn(n, n, device=device),
        "randn on the CPU": lambda: torch.randn(n, n),
        "copy .to(device)": lambda: x_host.to(device),
        "randn on the CPU, then .to(device)": lambda: torch.randn(n, n).to(device),
    },
    device=device,  # CUDA events also time the host's work: the GPU waits for it
    rep_ms=300,
)
for name, m in times.items():
    report(name, m, size=f"{n}x{n}")
on_device, on_host, copy, both = times.values()

# %%
# What the numbers say
# --------------------
# On a GPU the device's generator runs at a good fraction of memory bandwidth, and
# the copy runs over the host link from pageable memory. On a CPU, ``.to(device)`` of
# a tensor already there returns the *same* tensor, and the two ``randn`` are the
# same operation.
gpuguide.claim(
    ".to(device) of a tensor already on the device returns the same tensor",
    holds=a.to(device) is a,
    measured=f"a.to(device) is a: {a.to(device) is a}",
)
creating = compare(on_device, both)
report("creating on the device", creating)
gpuguide.claim(
    "on a GPU, creating on the device is at least 10x faster than creating on the "
    "CPU and moving",
    creating,
    at_least=10,
    on="cuda",
)
gpuguide.claim(
    "on a CPU, randn on the device and randn then .to(device) show no measurable "
    "difference",
    creating,
    verdict="no measurable difference",
    on="cpu",
)
if device.type != "cpu":
    rate = copy.rate(x_host.nbytes, "B/s")
    report("H2D bandwidth", rate, peak="host_link", size=n * n * 4, memory="pageable")
    gpuguide.claim(
        "a pageable copy to the GPU runs at a few to a few tens of GB/s",
        rate,
        at_least=2e9,
        at_most=60e9,
        on="cuda",
    )

# %%
# Plot
# ----
# Each bar is a median with its IQR. The sum of the parts is drawn beside the one
# call: where they differ, the host's speed changed between calls, or the one call
# copies a tensor the CPU has just written, part of it still in its cache.
parts_s = on_host.median_s + copy.median_s
title = (
    f"Create-then-move: {on_host.median_s / parts_s:.0%} CPU random numbers, "
    f"{copy.median_s / parts_s:.0%} copy"
)
fig, ax = plt.subplots()
bars = {**times, "sum: randn on the CPU + copy": parts_s * 1e3}  # a float is in ms
plot_bars(ax, bars, ylabel="time (ms)", title=title)
plt.show()
