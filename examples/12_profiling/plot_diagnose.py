"""
Diagnose a training step
========================

Where does a slow training step lose its time: waiting for data, looping in Python,
holding memory it no longer needs? ``gpuguide.diagnose(step)`` (``python -m gpuguide
diagnose SCRIPT`` on the command line) profiles a few steps, splits the step's time
into a budget per category, and names each cause it recognises with its evidence,
the gain it predicts and the page of the guide that teaches the fix.

This page seeds defects into a small training step, diagnoses it, fixes the finding
with the largest predicted gain and diagnoses again, until nothing is left. It then
times every version of the step, sets each predicted gain against the measured one,
and reads the same breakdown by hand with :mod:`torch.profiler`.
"""

# %%
# A step with seeded defects
# --------------------------
# An MLP classifier trained on samples stored as bytes and decoded as the loader
# fetches them. ``make_step(fixes)`` builds the step with three defects, each fixed
# when ``fixes`` names its cause: the loader fetches one sample at a time and stacks
# them (``data_wait``); the step standardises one sample at a time in Python
# (``per_sample_loop``); it keeps the loss on a held-out batch for a plot, and with
# it that loss's autograd graph (``kept_losses``). All three show on a CPU and on a
# GPU. Torch runs one CPU thread, so the timings need one free core, not all of them.
import itertools

import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, TensorDataset

import gpuguide
from gpuguide import claim, compare, interleave, report, table

page = gpuguide.setup()
torch.set_num_threads(1)  # on a GPU's host, the thread only launches kernels
torch.set_float32_matmul_precision("high")  # TF32 on a GPU, as chapter 5 teaches
batch, features, hidden = 128, 256, 640  # small mode too: it times less
layers = [nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()]
model = nn.Sequential(*layers, nn.Linear(hidden, 16)).to(page.device)  # 16 classes
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


class Stored(TensorDataset):  # samples stored as bytes, decoded as they are fetched
    def __getitem__(self, index):  # an index, or a list of them: a whole batch
        x, y = super().__getitem__(torch.as_tensor(index))
        return x.float() / 255, y


stored = torch.randint(256, (32 * batch, features), dtype=torch.uint8)
data = Stored(stored, torch.randint(16, (32 * batch,)))
held_out = [t.to(page.device) for t in data[range(batch)]]
SEEDED = {"data_wait", "per_sample_loop", "kept_losses"}  # the defects to fix


def make_step(fixes):
    sampler = BatchSampler(RandomSampler(data), batch, drop_last=True)
    if "data_wait" in fixes:  # the dataset gets a batch of indices: one fetch
        loader = DataLoader(data, sampler=sampler, batch_size=None)
    else:  # one fetch per sample, then the loader stacks them
        loader = DataLoader(data, batch_sampler=sampler)
    batches = itertools.chain.from_iterable(iter(lambda: loader, None))  # endless
    kept = []

    def step():
        x, y = (t.to(page.device) for t in next(batches))
        if "per_sample_loop" in fixes:
            x = (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5)
        else:
            x = torch.stack([(row - row.mean()) / (row.std() + 1e-5) for row in x])
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # the step frees its own gradients
        held = nn.functional.cross_entropy(model(held_out[0]), held_out[1])
        kept.append(held.detach() if "kept_losses" in fixes else held)

    return step


# %%
# Diagnose, fix the top finding, diagnose again
# ---------------------------------------------
# ``diagnose`` runs warm-up steps, times steps and profiles as many more (its
# report's first line says how many). The report holds the step's time budget (the
# profiled step's time per category; ``idle``: no operator running, or on a GPU no
# kernel), torch's counters, the findings (the largest predicted gain first) and the
# tool's own overhead. A fix changes the rest of the budget, so after each fix the
# step is diagnosed again, until no finding is left that ``make_step`` has a fix for.
steps, fixed, diagnoses = {"as written": make_step(set())}, [], []
while len(diagnoses) <= len(SEEDED):
    diagnoses.append(gpuguide.diagnose(list(steps.values())[-1]))
    done = {f.cause for f in fixed}
    top = next((f for f in diagnoses[-1].findings if f.cause in SEEDED - done), None)
    if top is None:
        break
    fixed.append(top)
    steps[f"{len(fixed)} fixes"] = make_step({f.cause for f in fixed})
print(diagnoses[0])

# %%
# The fixed step, diagnosed
# -------------------------
# The last diagnosis is of the step with every fix applied.
print(diagnoses[-1])
found = [f.cause for f in diagnoses[-1].findings]
claim("the fixed step gets no findings", holds=not found, measured=f"found {found}")

# %%
# Predicted against measured
# --------------------------
# Every version of the step takes turns in five rounds. A fix's measured gain is the
# step time before it less the step time after it (medians); the memory a step
# keeps is the diagnosis's own count of growth per step. The predictions come from
# the profiled steps, which the profiler slows down (``profiled_step_s`` in the
# report's overhead line), small operators most, so a gain predicted for many small
# operators can run high. For the wait on data the tool predicts the whole wait,
# which workers would hide beside the step (its advice); the fix used here, one
# fetch per batch, needs no spare core but leaves the decoding in the wait.
times = interleave(steps, rounds=5, rep_ms=500, device=page.device)
growth = [d.counters["memory_growth_bytes_per_step"] for d in diagnoses]
quartiles, rows = [m.quartiles_s for m in times.values()], []
for k, finding in enumerate(fixed):
    rows.append(
        {
            "fix (page)": f"{finding.cause} ({finding.page})",
            "predicted_ms": finding.gain_s * 1e3 or None,  # None: memory only
            "measured_ms": (quartiles[k][1] - quartiles[k + 1][1]) * 1e3,  # medians
            "kept_KiB/step": f"{growth[k] / 2**10:.0f} -> {growth[k + 1] / 2**10:.0f}",
        }
    )
print(table(rows, title="gains per step, predicted by the diagnosis and measured"))
gain = compare(times[list(times)[-1]], times["as written"])
report("the fixed step's speed-up", gain, fixes=len(fixed))
claim("the fixed step is faster than the step as written", gain, verdict="faster")
# The loop's measured gain over its predicted one, with the range the quartiles of
# the steps before and after allow.
k = [f.cause for f in fixed].index("per_sample_loop")
(b25, b50, b75), (a25, a50, a75), p = *quartiles[k : k + 2], fixed[k].gain_s
loop = {"value": (b50 - a50) / p, "spread": ((b25 - a75) / p, (b75 - a25) / p)}
claim(  # on a GPU, what the profiler adds to small operators is not measured yet
    "on a CPU, batching the loop gains a quarter to all of the predicted gain",
    **loop,
    at_least=0.25,
    at_most=1.0,
    timed=True,
    on="cpu",
)

# %%
# The budget before and after
# ---------------------------
# The first and the last diagnosis's budgets, category by category.
fig, ax = plt.subplots()
ends = {"as written": diagnoses[0], f"{len(fixed)} fixes": diagnoses[-1]}
y = range(len(diagnoses[0].breakdown))
for i, (label, d) in enumerate(ends.items()):
    ms = [seconds * 1e3 for seconds in d.breakdown.values()]
    ax.barh([j + 0.4 * i for j in y], ms, 0.4, label=f"{label} ({sum(ms):.1f} ms)")
ax.set_yticks([j + 0.2 for j in y], list(diagnoses[0].breakdown))
title = f"The step before and after {len(fixed)} fixes: {gain.speedup:.2f}x as fast"
ax.set(xlabel="profiled time per step (ms)", title=title)
ax.legend()
gpuguide.label_device(fig, page.device)
plt.show()

# %%
# Reading the breakdown by hand
# -----------------------------
# The tool is a shortcut through :mod:`torch.profiler`. Profile a few steps and read
# ``key_averages()``: the loader's ``enumerate(DataLoader)#...__next__`` row is the
# wait for data; an operator called hundreds of times per step (``aten::mean``,
# ``aten::std``) with one shape is a loop to batch; ``profile_memory=True`` adds
# what each operator allocated (``CPU Mem``), which the tool sums over the step,
# frees included, to find memory that grows step after step.
with torch.profiler.profile(profile_memory=True) as prof:
    for _ in range(3):
        steps["as written"]()
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=10))

# %%
# What to take away
# -----------------
# Diagnose, fix the top finding, measure, and diagnose again: a fix is done when the
# step is measured faster and the finding is gone.
gpuguide.takeaway()
