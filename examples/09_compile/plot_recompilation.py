"""
Recompilation: when input shapes change
=======================================

A compiled function is guarded: dynamo records what it assumed about its inputs
(shapes, dtypes, devices, grad mode) and checks it on every call; when a guard fails,
it compiles again, at about the cost of the first compilation. Batches of varying
sequence length are the usual way to trigger that.

This page sends one sequence of lengths through a small transformer block, shows
dynamo's recompilation messages, counts compilations and times every call. Then it
avoids the recompilations three ways: ``dynamic=True``, ``mark_dynamic`` and padding
to a few bucket sizes, and compares their steady-state speed.
"""

# %%
# Setup
# -----
# As on the previous page: TF32 on a GPU for eager and compiled alike, and the
# compiler's one-off start-up paid, with
# :func:`~gpuguide.chapters.compiling.start_compiler`, before anything is timed.
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from torch._dynamo.utils import counters

import gpuguide
from gpuguide.chapters.compiling import print_recompiles, start_compiler

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
if device.type == "cuda":
    torch.set_float32_matmul_precision("high")
sync = getattr(torch, device.type).synchronize
print(start_compiler(device))  # with any warning caught while importing

# %%
# A block that takes a padding mask
# ---------------------------------
# Variable-length batches come with a mask of padded positions (``True`` =
# padding); the block keeps padded keys out of attention.


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)
        )

    def forward(self, x, pad):
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        keep = ~pad[:, None, None, :]
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


dim, batch = (256, 16) if device.type == "cuda" else (64, 4)
model = Block(dim, heads=4).to(device).eval()
lengths = [32, 33, 64] if small else [32, 33, 64, 33, 32, 64, 33, 32]
steady_at = 33  # the length whose steady-state time is compared
buckets = [32, 64]
inputs = [torch.randn(batch, n, dim, device=device) for n in lengths]
print(f"sequence lengths, in call order: {lengths}")


# %%
# Running the sequence, with the recompilation log on
# ---------------------------------------------------
# ``torch._logging.set_logs(recompiles=True)``, or ``TORCH_LOGS=recompiles`` in the
# environment, makes dynamo log why it recompiles. Its logs go to stderr, which this
# page does not show, so :func:`~gpuguide.chapters.compiling.print_recompiles` turns
# the log on and prints the messages. Each call is timed on its own with a
# synchronized host clock, as each may be a one-off compilation; ``prepare`` makes
# the block's arguments from a batch, as it is or padded to the next bucket size
# with the extra positions masked. Then one call at length 33 is timed with
# :func:`gpuguide.benchmark` under the ``"fail_on_recompile"`` stance, which raises
# should it recompile.
def graphs():
    return counters["stats"]["unique_graphs"]


def as_is(x):
    return x, torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)


def padded(x):
    n = x.shape[1]
    size = next(b for b in buckets if b >= n)
    pad = (torch.arange(size, device=x.device) >= n).expand(x.shape[0], size)
    return F.pad(x, (0, 0, 0, size - n)), pad.contiguous()


def run(name, compiled, prepare=as_is, mark=False, time_steady=True):
    torch._dynamo.reset()  # each approach starts with no compiled graphs
    args = [prepare(x.clone() if mark else x) for x in inputs]
    if mark:  # on copies, because a marked tensor stays marked
        for x, pad in args:
            torch._dynamo.mark_dynamic(x, 1)
            torch._dynamo.mark_dynamic(pad, 1)
    hits = counters["inductor"]["fxgraph_cache_hit"]
    times, compiles, steady = [], [], None
    print(f"{name}:")
    with print_recompiles(), torch.no_grad():
        for (x, pad), n in zip(args, lengths, strict=True):
            before = graphs()
            sync()
            t0 = time.perf_counter()
            out = compiled(x, pad)[:, :n]
            sync()
            times.append(time.perf_counter() - t0)
            compiles.append(graphs() - before)
        if time_steady:
            with torch.compiler.set_stance("fail_on_recompile"):
                steady = gpuguide.benchmark(
                    compiled,
                    args=prepare(inputs[lengths.index(steady_at)]),
                    device=device,
                    label=name,
                )
    hits = counters["inductor"]["fxgraph_cache_hit"] - hits
    print(
        f"    {sum(compiles)} compilation(s) ({hits} served from inductor's disk "
        f"cache), {sum(times):.2f} s for the sequence"
    )
    return {"times": times, "compiles": compiles, "last": out, "steady": steady}


runs = {
    "static (dynamic=False)": run(
        "static (dynamic=False)", torch.compile(model, dynamic=False)
    )
}

# %%
# The default: automatic dynamic shapes
# -------------------------------------
# With the default ``dynamic=None`` the first compilation assumes static shapes;
# when a size changes, dynamo recompiles with that dimension symbolic, and this
# graph serves every later length: two compilations, however many lengths follow.
runs["default (dynamic=None)"] = run("default (dynamic=None)", torch.compile(model))

# %%
# Fixes 1 and 2: dynamic from the start
# -------------------------------------
# ``dynamic=True`` makes every dimension symbolic from the first compilation;
# ``torch._dynamo.mark_dynamic(x, 1)`` marks only the sequence dimension (of ``x``
# and of the mask), so that the compiler can still specialize on the other sizes.
runs["dynamic=True"] = run("dynamic=True", torch.compile(model, dynamic=True))
runs["mark_dynamic(x, 1)"] = run("mark_dynamic(x, 1)", torch.compile(model), mark=True)

# %%
# Fix 3: pad to a few bucket sizes
# --------------------------------
# Rounding each length up to one of a few sizes keeps the kernels static, one
# compilation per bucket, at the price of computing on the padding (the mask keeps
# the results right). ``dynamic=False`` keeps the second bucket static too.
runs["padded to buckets"] = run(
    "padded to buckets", torch.compile(model, dynamic=False), prepare=padded
)
with torch.no_grad():
    reference = model(*as_is(inputs[-1]))
error = max((r["last"] - reference).abs().max().item() for r in runs.values())
print(
    f"largest difference from eager on the last batch, over all approaches: {error:.1e}"
)

# %%
# Compilations and time over the sequence
# ---------------------------------------
# The number of compilations decides the total; one served from inductor's disk
# cache (counted above) is cheaper than a fresh one. Only the first call at each
# new shape (or bucket) should stand out.
summary = [
    {
        "approach": name,
        "compilations": sum(r["compiles"]),
        "sequence": f"{sum(r['times']):.2f} s",
        f"steady at length {steady_at}": r["steady"],
    }
    for name, r in runs.items()
]
print(gpuguide.table(summary))
total = {name: sum(r["times"]) for name, r in runs.items()}
calls, shape = f"{len(lengths)} calls", f"{batch}x{steady_at}x{dim}"
for name, r in runs.items():
    gpuguide.record("whole sequence", total[name], unit="s", size=calls, approach=name)
    gpuguide.record("steady call", r["steady"], size=shape, approach=name)
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    list(range(1, len(lengths) + 1)),
    {
        f"{name} ({sum(r['compiles'])} compiles, {total[name]:.1f} s)": [
            t * 1e3 for t in r["times"]
        ]
        for name, r in runs.items()
    },
    xlabel="call (index in the sequence)",
    ylabel="time of the call (ms)",
    title=f"Whole sequence: {min(total.values()):.1f} to {max(total.values()):.1f} s, "
    "set by the compilations",
    logx=False,
    record="time of each call",
)
plt.show()

# %%
# Steady state: dynamic, static and padded kernels
# ------------------------------------------------
# Once compiled, kernels for symbolic sizes may be a little slower than kernels for
# one size, and a padded batch computes on its padding (64 positions for 33 here).
# On a GPU this block is small enough that a call's time is mostly the host's
# (guards, launches), which can hide both. Each approach was timed after its own
# compilations, so they could not run in alternating rounds; a difference from the
# static kernel counts only where it is larger than the spread. Bars are relative
# to the static kernel.
steady = {name: r["steady"] for name, r in runs.items()}
static = steady["static (dynamic=False)"]
differ = 0
for m in steady.values():
    if m is not static:
        c = gpuguide.compare(m, static)
        differ += c.measurable
        print(c)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    steady,
    ylabel=f"time per call at length {steady_at} (ms)",
    title=f"At length {steady_at}: {differ} of {len(steady) - 1} approaches "
    "measurably differ from static",
)
plt.show()

# %%
# The recompile limit
# -------------------
# Dynamo stops recompiling a function after ``torch._dynamo.config.recompile_limit``
# versions (``cache_size_limit`` is the old name, kept as an alias): it logs a
# warning and runs the function uncompiled for inputs no cached version accepts;
# with ``fullgraph=True`` or ``config.fail_on_recompile_limit_hit = True`` it raises
# instead. Here the limit is lowered to 2, so that the third length hits it.
print(f"torch._dynamo.config.recompile_limit = {torch._dynamo.config.recompile_limit}")
with torch._dynamo.config.patch(recompile_limit=2):
    limited = run(
        "static, recompile_limit=2",
        torch.compile(model, dynamic=False),
        time_steady=False,
    )
print(
    f"with the limit at 2: {sum(limited['compiles'])} compilations for "
    f"{len(set(lengths))} lengths; the other lengths ran uncompiled"
)

# %%
# What to take away
# -----------------
# Turn on ``TORCH_LOGS=recompiles`` when a compiled model sees varying inputs: each
# message names the guard that failed. Declare a varying dimension dynamic up front
# or pad it to a few sizes, and compare steady-state times as well as compile
# counts. With CUDA graphs (``"reduce-overhead"``) each new shape also records a
# new graph.
