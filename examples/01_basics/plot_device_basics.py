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
# :func:`gpuguide.pick_device` returns CUDA when there is a GPU, then MPS, then the
# CPU (set ``GPUGUIDE_DEVICE=cpu`` to override). Everything below takes ``device`` as
# a parameter, so nothing else in the script names a device.
import matplotlib.pyplot as plt
import torch

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
cpu = torch.device("cpu")

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
t = t.to(device)
print(f"after t = t.to(device), t is on {t.device}")

# Results go back to the host for NumPy or printing with .cpu().
print(f"y.cpu().numpy() has shape {y.detach().cpu().numpy().shape}")

# %%
# Every operand on the same device
# --------------------------------
# An operation whose tensor operands live on different devices raises a
# ``RuntimeError`` rather than copying data behind your back. The one exception is a
# 0-dimensional CPU tensor, which PyTorch treats like a Python number.
a = torch.ones(4, 4, device=device)
b_host = torch.ones(4, 4)
other = b_host
if device.type == "cpu":
    print(
        "Mixing CPU and GPU tensors needs a GPU; a 'meta' tensor (shape and dtype, "
        "no data) stands in for the second device here."
    )
    other = torch.ones(4, 4, device="meta")
try:
    a + other
except RuntimeError as err:
    print(f"RuntimeError: {err}")

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
probe = gpuguide.benchmark(torch.randn, args=(1024, 1024), device=cpu, label="probe")
samples_per_s = 1024 * 1024 / probe.median_s
n = gpuguide.largest_size(
    256,
    8192,
    memory_at=lambda n: 2 * 4 * n * n,
    flop_at=lambda n: n * n,  # one random number per element, at the measured rate
    flop_per_s=samples_per_s,
    efficiency=1.0,
    call_s=0.03,
    peaks=None,
    per_octave=2,
    multiple_of=256,
)
nbytes = 4 * n * n
print(
    f"CPU generator: {gpuguide.format_rate(samples_per_s, 'numbers/s')}; matrix: "
    f"{n} x {n} float32 = {gpuguide.format_bytes(nbytes)}"
)

# %%
# Time creation and transfer separately
# -------------------------------------
# Four measurements, each of a single step:
#
# (a) ``torch.randn(..., device=device)``: the device's own generator fills memory
# on the device.
# (b) ``torch.randn(...)`` on the CPU: the host's generator.
# (c) ``x_host.to(device)`` of a CPU tensor made beforehand: the copy alone.
# (d) ``torch.randn(...).to(device)``: "create on the CPU, then move" as one call.
#
# (d) should cost (b) + (c), a check that the parts add up. The copy's input
# ``x_host`` is made before the timing starts. The four take turns for five rounds
# (:func:`gpuguide.interleave`), each warmed up first, so that a host whose speed
# drifts during the run slows all four alike and the spread shows it. On a GPU (a)
# is short enough that launching it matters: it is timed per call as a loop creating
# a tensor per step runs it, launch included (``measure="call"``, the default).
x_host = torch.randn(n, n)
m_dev, m_host, m_copy, m_both = gpuguide.interleave(
    {
        f"(a) randn on {device.type}": lambda: torch.randn(n, n, device=device),
        "(b) randn on cpu": lambda: torch.randn(n, n),
        "(c) .to(device)": lambda: x_host.to(device),
        "(d) randn on cpu + .to": lambda: torch.randn(n, n).to(device),
    },
    device=device,  # CUDA events also time the host's work: the GPU waits for it
    rep_ms=300,
).values()
gpuguide.record("randn on the device", m_dev, size=f"{n}x{n}")
gpuguide.record("randn on the CPU", m_host, size=f"{n}x{n}")
gpuguide.record("randn on the CPU, then .to(device)", m_both, size=f"{n}x{n}")
for m in (m_dev, m_host, m_copy, m_both):
    print(m)

# %%
# What the numbers say
# --------------------
# On a GPU, expect (a) to be tens to thousands of times faster than (b): the GPU
# generates random numbers at a good fraction of its memory bandwidth. The copy (c)
# runs over the host link (PCIe or similar) from pageable memory, typically at a few
# to a few tens of GB/s. Which of (b) and (c) dominates depends on the CPU and the
# link, and that is exactly what the single-step comparison hid. On a CPU,
# ``.to(device)`` of a tensor already on that device returns the *same* tensor, so
# (c) costs almost nothing, and (a) and (b) are the same operation.
parts_s = m_host.median_s + m_copy.median_s
print(f"x_host.to(device) is x_host: {x_host.to(device) is x_host}")
if device.type != "cpu":
    rate = gpuguide.bytes_per_s(nbytes, m_copy.median_s)
    spread = (nbytes / m_copy.q75_s, nbytes / m_copy.q25_s)
    gpuguide.record(
        "H2D bandwidth", rate, unit="B/s", spread=spread, size=nbytes,
        peak="host_link", memory="pageable",
    )  # fmt: skip
    of_link = gpuguide.device_peaks(device).share(
        rate, "host_link", peak="the link's peak"
    )
    print(
        f"copy from pageable memory: {gpuguide.format_rate(rate, 'B/s')} ({of_link})"
        f"{' (NOISY)' if m_copy.is_noisy else ''}"
    )

# %%
# Do the parts add up?
# --------------------
# The sum's range runs from the sum of the parts' first quartiles to the sum of their
# third quartiles; the parts add up when (d)'s interquartile range overlaps it. If
# they do not, the page says so: the host's speed changed between the calls, or (d)
# does something (b) and (c) do not, e.g. it copies a tensor the CPU has just written,
# part of which is still in its cache.
low_s, high_s = m_host.q25_s + m_copy.q25_s, m_host.q75_s + m_copy.q75_s
noisy = " (NOISY)" if m_host.is_noisy or m_copy.is_noisy or m_both.is_noisy else ""
if m_both.q75_s < low_s or m_both.q25_s > high_s:
    side = "less" if m_both.q75_s < low_s else "more"
    check = f"they do NOT add up here: (d) took {side} than the parts"
else:
    check = "they add up within their spread"
print(
    f"(b) + (c) = {gpuguide.format_time(parts_s)} "
    f"({gpuguide.format_time(low_s)} to {gpuguide.format_time(high_s)}), measured as "
    f"one call (d): {gpuguide.format_time(m_both.median_s)} "
    f"({gpuguide.format_time(m_both.q25_s)} to {gpuguide.format_time(m_both.q75_s)})"
    f"{noisy}: {check}"
)
# Creating on the device against creating on the CPU and moving: a ratio with its
# spread (:func:`gpuguide.compare`), "no measurable difference" where the two
# interquartile ranges overlap or the medians are within 5%, as they should be on a
# CPU, where (a) and (d) both just run the CPU's generator.
print(f"{gpuguide.compare(m_dev, m_both)}{' (NOISY)' if m_dev.is_noisy else ''}")
print(
    f"of (b) + (c), the CPU generator is {m_host.median_s / parts_s:.0%}, the copy "
    f"{m_copy.median_s / parts_s:.0%}"
)

# %%
# Plot
# ----
# Each bar is a median with its IQR; the labels give the ratio to (a).
if device.type == "cpu":
    title = "On the CPU, .to(device) returns the same tensor: moving is free"
else:
    title = (
        f"Create-then-move: {m_host.median_s / parts_s:.0%} CPU random numbers, "
        f"{m_copy.median_s / parts_s:.0%} copy"
    )
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    {
        f"(a) randn\ndevice={device.type}": m_dev,
        "(b) randn\non the CPU": m_host,
        "(c) .to(device)": m_copy,
        "(b) + (c)": parts_s * 1e3,  # a float is plotted as given: ms
        "(d) one call:\nrandn + .to": m_both,
    },
    ylabel="time (ms)",
    title=title,
)
plt.show()
