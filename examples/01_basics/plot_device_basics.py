"""
Device basics
=============

PyTorch runs an operation on the device that holds its inputs. This page shows how to
write code that runs unchanged on a CPU or a GPU: choose the device once, create
tensors with ``device=``, move modules with ``.to(device)``, and keep every operand of
an operation on the same device.

It then measures what creating a tensor on the CPU and moving it costs compared with
creating it on the device directly. A popular notebook timed this as one step and
credited the whole difference to the transfer; here the CPU random number generator
and the copy are timed separately, so you can see which of the two dominates.

See also the concept page :doc:`how a GPU runs PyTorch </concepts/gpu>`.
"""

# %%
# Pick the device once
# --------------------
# In your own code, ``torch.device("cuda" if torch.cuda.is_available() else "cpu")``
# does it. Here :func:`gpuguide.setup` picks CUDA when there is a GPU, then MPS, then
# the CPU (set ``GPUGUIDE_DEVICE=cpu`` to override) and prints what the page runs on.
# Everything below takes ``device`` from it, so nothing else names a device.
import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import benchmark, compare, interleave, largest_size, plot_bars, report

page = gpuguide.setup()
device = page.device
fmt, fmt_s = gpuguide.format_bytes, gpuguide.format_time

# %%
# Write device-agnostic code
# --------------------------
# Factory functions (``torch.randn``, ``torch.zeros``, ``torch.arange`` ...) take
# ``device=`` and allocate the tensor there. ``*_like`` functions and ``Tensor.new_*``
# inherit the device of their argument. A module moves its parameters *in place* with
# ``.to(device)``, but ``Tensor.to`` returns a new tensor and leaves the original
# where it was: forgetting to assign the result is a classic bug.
model = torch.nn.Linear(256, 64).to(device)
x = torch.randn(32, 256, device=device)
y = model(x)
print(f"input on {x.device}, weights on {model.weight.device}, output on {y.device}")
print(f"zeros_like(y) is on {torch.zeros_like(y).device}")

t = torch.zeros(3)
t.to(device)  # result thrown away: t itself does not move
print(f"after t.to(device) without assignment, t is still on {t.device}")
gpuguide.claim(
    "Tensor.to(device) leaves the tensor itself where it was",
    holds=t.device.type == "cpu",
    measured=f"t is on {t.device}",
)
t = t.to(device)
print(f"after t = t.to(device), t is on {t.device}")

# Results go back to the host for NumPy or printing with .cpu().
print(f"y.cpu().numpy() has shape {y.detach().cpu().numpy().shape}")

# %%
# Every operand on the same device
# --------------------------------
# An operation whose tensor operands live on different devices raises a
# ``RuntimeError`` rather than copying data behind your back. The one exception is a
# 0-dimensional CPU tensor, which PyTorch treats like a Python number. Without a
# second device, a 'meta' tensor (shape and dtype, no data) stands in for one.
a = torch.ones(4, 4, device=device)
b_host = torch.ones(4, 4)
other = b_host
if device.type == "cpu":
    print("Mixing CPU and GPU tensors needs a GPU; a 'meta' tensor stands in here.")
    other = torch.ones(4, 4, device="meta")
raised = False
try:
    a + other
except RuntimeError as err:
    raised = True
    print(f"RuntimeError: {err}")
gpuguide.claim(
    "an operation on tensors of two devices raises a RuntimeError",
    holds=raised,
    measured="it raised" if raised else "it did not raise",
)

print(f"a + b_host.to(device) works: result on {(a + b_host.to(device)).device}")
print(f"a * torch.tensor(2.0) works too: result on {(a * torch.tensor(2.0)).device}")

# %%
# Choose a size
# -------------
# The size comes from the CPU's random number generator, the slow part of
# "create on the CPU, then move": its rate is measured first, on a 1024 x 1024
# matrix, and the matrix is then the largest square that it fills in about 30 ms
# (2 ms in small mode), within the device's memory budget. How fast that is depends
# on the CPU alone, whatever the GPU, so the times below scale with the host.
probe = benchmark(torch.randn, args=(1024, 1024), device="cpu")
generator = probe.rate(1024 * 1024, "numbers/s")
n = largest_size(
    256, 8192, memory_at=lambda n: 2 * 4 * n * n,
    flop_at=lambda n: n * n,  # one random number per element, at the measured rate
    flop_per_s=generator.value, efficiency=1.0, call_s=0.03, peaks=None,
    per_octave=2, multiple_of=256,
)  # fmt: skip
nbytes = 4 * n * n
print(f"CPU generator: {generator}; matrix {n} x {n} float32, {fmt(nbytes)}")

# %%
# Time creation and transfer separately
# -------------------------------------
# Four variants, each a single step: the device's own generator filling memory on the
# device; the host's generator; the copy alone, ``x_host.to(device)`` of a CPU tensor
# made beforehand; and "create on the CPU, then move" as one call, which should cost
# the host's generator plus the copy. The four take turns for five rounds
# (:func:`gpuguide.interleave`), each warmed up first, so that a host whose speed
# drifts during the run slows all four alike and the spread shows it. On a GPU the
# first is short enough that launching it matters: it is timed per call, as a loop
# creating a tensor per step runs it, launch included (the default,
# ``measure="call"``).
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
# On a GPU, expect creating on the device to be tens to thousands of times faster
# than on the CPU: the GPU generates random numbers at a good fraction of its memory
# bandwidth. The copy runs over the host link (PCIe or similar) from pageable memory,
# typically at a few to a few tens of GB/s. Which of the CPU's generator and the copy
# dominates depends on the CPU and the link, and that is exactly what the single-step
# comparison hid. On any device, ``.to(device)`` of a tensor already there returns
# the *same* tensor, so on a CPU the copy costs almost nothing, and the two ``randn``
# are the same operation: expect "no measurable difference" there.
print(f"x_host.to(device) is x_host: {x_host.to(device) is x_host}")
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
    rate = copy.rate(nbytes, "B/s")
    where = {
        "memory": "pageable",
        "copy": fmt(nbytes),
    }  # as the transfers page names it
    report("H2D bandwidth", rate, peak="host_link", size=nbytes, **where)
    gpuguide.claim(
        "a pageable copy to the GPU runs at a few to a few tens of GB/s",
        rate,
        at_least=2e9,
        at_most=60e9,
        on="cuda",
    )

# %%
# Do the parts add up?
# --------------------
# The sum's range runs from the sum of the parts' first quartiles to the sum of their
# third quartiles; the parts add up when the one call's interquartile range overlaps
# it. If they do not, the page says so: the host's speed changed between the calls,
# or the one call does something the parts do not, e.g. it copies a tensor the CPU
# has just written, part of which is still in its cache.
parts_s = on_host.median_s + copy.median_s
low_s, high_s = on_host.q25_s + copy.q25_s, on_host.q75_s + copy.q75_s
if both.q75_s < low_s or both.q25_s > high_s:
    side = "less" if both.q75_s < low_s else "more"
    check = f"they do NOT add up here: the one call took {side} than the parts"
else:
    check = "they add up within their spread"
print(
    f"generator + copy = {fmt_s(parts_s)} ({fmt_s(low_s)} to {fmt_s(high_s)}), as one "
    f"call: {fmt_s(both.median_s)} ({fmt_s(both.q25_s)} to {fmt_s(both.q75_s)}): "
    f"{check}; of the parts, the CPU generator is {on_host.median_s / parts_s:.0%}, "
    f"the copy {copy.median_s / parts_s:.0%}"
)

# %%
# Plot
# ----
# Each bar is a median with its IQR; the labels give the ratio to creating on the
# device.
if x_host.to(device) is x_host:
    title = f".to(device) returned the same tensor: {fmt_s(copy.median_s)} per call"
else:
    title = (
        f"Create-then-move: {on_host.median_s / parts_s:.0%} CPU random numbers, "
        f"{copy.median_s / parts_s:.0%} copy"
    )
fig, ax = plt.subplots()
plot_bars(
    ax,
    {
        f"randn\ndevice={device.type}": on_device,
        "randn\non the CPU": on_host,
        ".to(device)": copy,
        "generator\n+ copy": parts_s * 1e3,  # a float is plotted as given: ms
        "one call:\nrandn + .to": both,
    },
    ylabel="time (ms)",
    title=title,
)
plt.show()
