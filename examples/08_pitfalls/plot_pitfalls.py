"""
Two common training-loop bugs
=============================

Some training-loop mistakes crash at once, others quietly keep a model from
learning. This page makes two happen and fixes each: operands on different devices
or of different dtypes (an error), and gradients never zeroed (no convergence). A
third, keeping losses with their autograd graphs (memory that grows every step),
is the subject of the next page, :doc:`plot_kept_losses`.
"""

# %%
# Setup
# -----
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

import gpuguide
from gpuguide import plot_sweep, table

page = gpuguide.setup()
device = page.device

# %%
# Pitfall 1: operands on different devices
# ----------------------------------------
# ``.to(device)`` moves a module's parameters, but a tensor created later lands on
# the CPU unless given ``device=``, and the first operation that mixes devices
# raises a ``RuntimeError``: PyTorch never copies between them silently.
model = nn.Linear(64, 8).to(device)
x = torch.randn(16, 64)  # no device=: this is a CPU tensor
if device.type == "cpu" and not page.needs_cuda("A real CPU/GPU mismatch"):
    print("Here a 'meta' tensor (shape and dtype, no data) plays the other device.")
    x = torch.randn(16, 64, device="meta")
raised = {}
try:
    model(x)
except RuntimeError as err:
    print(f"RuntimeError: {err}")
    raised["devices"] = True
gpuguide.claim(
    "an operation that mixes devices raises a RuntimeError",
    holds=raised.get("devices", False),
    measured="raised" if raised else "no error",
)

# A close relative on every device: NumPy arrays are float64 by default and
# ``torch.from_numpy`` keeps their dtype, while the model's weights are float32.
x_np = torch.from_numpy(np.random.default_rng(0).standard_normal((16, 64)))
try:
    model(x_np.to(device))
except RuntimeError as err:
    print(f"RuntimeError: {err}")
    raised["dtypes"] = True
gpuguide.claim(
    "a float64 NumPy input to float32 weights raises a RuntimeError",
    holds=raised.get("dtypes", False),
    measured=f"input {x_np.dtype}: " + ("raised" if "dtypes" in raised else "no error"),
)

# %%
# The fix: take device and dtype from the model, once
# ---------------------------------------------------
# Create inputs on the right device from the start, and convert anything that comes
# from outside (NumPy, a data loader) with a single ``.to(device=..., dtype=...)``.
weight = next(model.parameters())
fixed = model(x_np.to(device=weight.device, dtype=weight.dtype))
print(
    f"fixed: input moved to {weight.device} as {weight.dtype}, "
    f"output of shape {tuple(fixed.shape)}"
)

# %%
# Pitfall 2: gradients that are never zeroed
# ------------------------------------------
# ``backward()`` *adds* to ``.grad``: called ``k`` times on the same batch without
# zeroing, the gradient is ``k`` times that of one batch. (Gradient accumulation
# uses exactly this, on purpose, and zeroes after the optimizer step.)
true_w = torch.randn(16, 1, device=device)
model = nn.Linear(16, 1).to(device)
x = torch.randn(64, 16, device=device)
norms = []
for _ in range(4):
    nn.functional.mse_loss(model(x), x @ true_w).backward()
    norms.append(model.weight.grad.norm().item())
for k, norm in enumerate(norms, start=1):
    print(f"after {k} backward calls: |grad| = {norm:.4g} ({norm / norms[0]:.2f}x)")
ratios = [norm / norms[0] for norm in norms]
gpuguide.claim(
    "k backward calls without zeroing give k times one call's gradient",
    holds=all(abs(r - k) <= 1e-3 * k for k, r in enumerate(ratios, start=1)),
    measured=", ".join(f"{r:.3f}x" for r in ratios),
)

# %%
# The cost: a run that does not converge
# --------------------------------------
# Two runs of plain SGD on a linear regression, from the same weights on the same
# batches, differ only by ``optimizer.zero_grad(set_to_none=True)`` at each step.
# Without it every update uses the sum of all gradients so far, which overshoots.
start_weights = nn.Linear(16, 1).to(device).state_dict()
curves, rows = {}, []
for label, zero in [("zero_grad each step", True), ("never zeroed", False)]:
    model = nn.Linear(16, 1).to(device)
    model.load_state_dict(start_weights)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator(device).manual_seed(1)
    losses, norms = torch.zeros(40, device=device), torch.zeros(40, device=device)
    for i in range(40):
        x = torch.randn(64, 16, device=device, generator=generator)
        if zero:
            optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), x @ true_w)
        loss.backward()
        norms[i] = torch.cat([p.grad.flatten() for p in model.parameters()]).norm()
        optimizer.step()
        losses[i] = loss.detach()
    curves[label] = losses.tolist()
    picks = ", ".join(f"{n:.3g}" for n in norms.tolist()[::8])
    rows.append({"run": label, "grad norm every 8 steps": picks})
print(table(rows))
zeroed, never = curves["zero_grad each step"], curves["never zeroed"]
gpuguide.claim(
    "with zero_grad the loss falls at least 1000x in 40 steps; never zeroed, it "
    "ends at least 1000x higher",
    holds=zeroed[-1] * 1000 <= zeroed[0] and never[-1] >= 1000 * zeroed[-1],
    measured=f"zeroed {zeroed[0]:.3g} -> {zeroed[-1]:.3g}, never zeroed "
    f"{never[0]:.3g} -> {never[-1]:.3g}",
)

fig, ax = plt.subplots()
plot_sweep(
    ax,
    list(range(1, 41)),
    curves,
    xlabel="step (count)",
    ylabel="training loss (squared units)",
    logx=False,
    title=f"Loss after 40 steps: {zeroed[-1]:.2g} with zero_grad, "
    f"{never[-1]:.2g} without",
)
plt.show()

# %%
# What to take away
# -----------------
# Put inputs on the model's device and dtype with one ``.to(...)``, and zero the
# gradients once per optimizer step.
gpuguide.takeaway()
