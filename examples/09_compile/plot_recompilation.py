"""
Recompilation: when input shapes change
=======================================

A compiled function is guarded: dynamo records what it assumed about its inputs
(shapes, dtypes, devices, grad mode) and checks it on every call; when a guard fails,
it compiles again. Batches of varying sequence length are the usual trigger. This
page sends one sequence of lengths through a small transformer block, shows dynamo's
recompilation messages, and times every call; then it avoids the recompilations
three ways (``dynamic=True``, ``mark_dynamic``, padding to a few bucket sizes) and
compares their steady-state speed.
"""

# %%
# Setup
# -----
# As on the previous pages: TF32 on a GPU for eager and compiled alike, one thread
# on a CPU (steadier timings), and the compiler's one-off start-up paid, with
# :func:`~gpuguide.chapters.compiling.start_compiler`, before anything is timed.
import logging

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

import gpuguide
from gpuguide.chapters.compiling import PrintMessages, start_compiler, time_each_call

page = gpuguide.setup()
device, small = page.device, page.small
if page.cuda:
    torch.set_float32_matmul_precision("high")
else:
    torch.set_num_threads(1)
print(start_compiler(device))

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


dim, batch = (256, 16) if page.cuda else (64, 4)
steady_ms = 40 if page.cuda else None  # on a GPU, 40 ms per steady timing; else default
model = Block(dim, heads=4).to(device).eval()
lengths = [32, 33, 64] if small else [32, 33, 64, 33, 32, 64, 33, 32]
steady_at, buckets = 33, [32, 64]  # the length whose steady-state time is compared
inputs = [torch.randn(batch, n, dim, device=device) for n in lengths]
print(f"sequence lengths, in call order: {lengths}")

# %%
# Dynamo's recompilation log, on the page
# ---------------------------------------
# ``torch._logging.set_logs(recompiles=True)`` (or ``TORCH_LOGS=recompiles`` in the
# environment) makes dynamo log the guard that failed each time it recompiles.
# torch's handler writes to stderr, each message behind a prefix of level, time,
# process, file and line; here one handler on the ``torch._dynamo`` logger takes its
# place and prints the messages alone, with each file's folders cut off
# (:class:`~gpuguide.chapters.compiling.PrintMessages`).
torch._logging.set_logs(recompiles=True)
logging.getLogger("torch._dynamo").handlers = [PrintMessages()]


# %%
# Running the sequence
# --------------------
# Each call is timed on its own with a synchronized host clock, as each may
# compile; dynamo's count of graphs says which did, and inductor's counters which
# compilations found their code in its disk cache (the FX graph cache, kept across
# runs): :func:`~gpuguide.chapters.compiling.time_each_call`. ``prepare`` makes the
# block's arguments from a batch, as it is or padded to the next bucket size. Then
# one call at length 33 is timed under the ``"fail_on_recompile"`` stance, which
# raises should it recompile.
def as_is(x):
    return x, torch.zeros(x.shape[:2], dtype=torch.bool, device=x.device)


def padded(x):
    n = x.shape[1]
    size = next(b for b in buckets if b >= n)
    pad = (torch.arange(size, device=x.device) >= n).expand(x.shape[0], size)
    return F.pad(x, (0, 0, 0, size - n)), pad.contiguous()


def run(name, compiled, expect, prepare=as_is, mark=False, time_steady=True):
    torch._dynamo.reset()  # each approach starts with no compiled graphs
    args = [prepare(x.clone() if mark else x) for x in inputs]
    if mark:  # on copies, because a marked tensor stays marked
        for x, pad in args:
            torch._dynamo.mark_dynamic(x, 1)
            torch._dynamo.mark_dynamic(pad, 1)
    print(f"{name}:")
    with torch.no_grad():
        calls = time_each_call(compiled, args, device=device)
        out = compiled(*args[-1])[:, : lengths[-1]]  # without the padding
        with torch.compiler.set_stance("fail_on_recompile"):
            steady = time_steady and gpuguide.benchmark(
                compiled,
                args=prepare(inputs[lengths.index(steady_at)]),
                device=device,
                label=name,
                rep_ms=steady_ms,
                sample_ms=5,
            )
    print(f"    {calls}")
    count, how = expect  # the compilations the approach should make, and in words
    gpuguide.claim(
        f"{name}: dynamo compiles {how}",
        holds=sum(calls.compiles) == count,
        measured=f"{sum(calls.compiles)} for {len(set(lengths))} lengths",
    )
    if time_steady:
        gpuguide.report(
            "whole sequence",
            sum(calls.times_s),
            unit="s",
            size=f"{len(lengths)} calls",
            approach=name,
        )
        gpuguide.report(
            "steady call", steady, size=f"{batch}x{steady_at}x{dim}", approach=name
        )
    runs[name] = {"calls": calls, "last": out, "steady": steady}


runs = {}
per_length = (len(set(lengths)), "once per distinct length")
run("static (dynamic=False)", torch.compile(model, dynamic=False), per_length)

# %%
# The default: automatic dynamic shapes
# -------------------------------------
# With the default ``dynamic=None`` the first compilation assumes static shapes;
# when a size changes, dynamo recompiles with that dimension symbolic, and this
# graph serves every later length: two compilations, however many lengths follow.
run("default (dynamic=None)", torch.compile(model), (2, "twice for all lengths"))

# %%
# Fixes: dynamic from the start, or a few bucket sizes
# ----------------------------------------------------
# ``dynamic=True`` makes every dimension symbolic from the first compilation;
# ``torch._dynamo.mark_dynamic(x, 1)`` marks only the sequence dimension (of ``x``
# and of the mask), so that the compiler can still specialize on the other sizes.
# Rounding each length up to one of a few sizes keeps the kernels static, one
# compilation per bucket, at the price of computing on the padding (the mask keeps
# the results right).
once = (1, "once for all lengths")
run("dynamic=True", torch.compile(model, dynamic=True), once)
run("mark_dynamic(x, 1)", torch.compile(model), once, mark=True)
per_bucket = (
    len({next(b for b in buckets if b >= n) for n in lengths}),
    "once per bucket",
)
run(
    "padded to buckets", torch.compile(model, dynamic=False), per_bucket, prepare=padded
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
# The title gives the compiling calls' share of the sequences' time. What decides
# their time is their number and what each one costs: a compilation whose code
# inductor finds in its disk cache (from an earlier run of this script, or an
# earlier approach here) skips code generation, and a graph with symbolic sizes
# costs more to trace than a static one, so fewer compilations need not mean less
# time. Only the first call at each new shape (or bucket) should stand out.
total = {name: sum(r["calls"].times_s) for name, r in runs.items()}
share = sum(r["calls"].compiling_s for r in runs.values()) / sum(total.values())
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    list(range(1, len(lengths) + 1)),
    {
        f"{name} ({sum(r['calls'].compiles)} compiles, {total[name]:.1f} s)": [
            t * 1e3 for t in r["calls"].times_s
        ]
        for name, r in runs.items()
    },
    xlabel="call (index in the sequence)",
    ylabel="time of the call (ms)",
    title=f"Whole sequences of {min(total.values()):.1f} to "
    f"{max(total.values()):.1f} s, {share:.0%} of it in compiling calls",
    logx=False,
)
plt.show()

# %%
# Steady state: dynamic, static and padded kernels
# ------------------------------------------------
# What a steady call costs depends on what bounds it. Where the kernels' work does
# (a CPU here), kernels for symbolic sizes can be slower than kernels specialized
# for one size, and a padded batch computes on its padding (64 positions for 33).
# Where the host's time per call does (this small block on a GPU), the guards that
# check the symbolic sizes, and the launches, decide instead. The lines below say
# which differ measurably in this run; the Recorded results give other devices'.
# Each approach was timed after its own compilations, not in alternating rounds; a
# difference counts only where it is larger than the spread.
steady = {name: r["steady"] for name, r in runs.items()}
static = steady["static (dynamic=False)"]
verdicts = [gpuguide.compare(m, static) for m in steady.values() if m is not static]
print("\n".join(map(str, verdicts)))
differ = f"{sum(c.measurable for c in verdicts)} of {len(verdicts)}"
gpuguide.claim(
    "on a CPU, a call padded to 64 positions costs at least 1.2x a static call at 33",
    gpuguide.compare(static, steady["padded to buckets"]),  # padded time / static's
    at_least=1.2,
    unless=page.cuda and "on a GPU the host's time per call decides (see above)",
)
fig, ax = plt.subplots()
gpuguide.plot_bars(
    ax,
    steady,
    ylabel=f"time per call at length {steady_at} (ms)",
    title=f"At length {steady_at}: {differ} approaches measurably differ from static",
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
default = torch._dynamo.config.recompile_limit
with torch._dynamo.config.patch(recompile_limit=2):
    run(
        "static, recompile_limit=2",
        torch.compile(model, dynamic=False),
        (2, "twice, then runs the others uncompiled"),
        time_steady=False,
    )
limited = runs.pop("static, recompile_limit=2")["calls"]
print(
    f"with the limit at 2 (default {default}): {sum(limited.compiles)} "
    f"compilations for {len(set(lengths))} lengths; the others ran uncompiled"
)
torch._logging.set_logs()  # torch's default log settings and handlers again

# %%
# What to take away
# -----------------
# Turn on ``TORCH_LOGS=recompiles`` when a compiled model sees varying inputs: each
# message names the guard that failed. Declare a varying dimension dynamic up front
# or pad it to a few sizes, and compare steady-state times as well as compile times.
gpuguide.takeaway()
