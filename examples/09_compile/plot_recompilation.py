"""
Recompilation: when input shapes change
=======================================

A compiled function is guarded: dynamo records what it assumed about its inputs
(shapes, dtypes, devices, grad mode) and checks it on every call; when a guard fails,
it compiles again. Batches of varying sequence length are the usual trigger. This
page sends one sequence of lengths through a transformer block, shows dynamo's
recompilation messages and times every call; then it avoids the recompilations
three ways (``dynamic=True``, ``mark_dynamic``, padding to a few bucket sizes) and
compares their steady-state speed.
"""

# %%
# Setup
# -----
# TF32 on a GPU, one thread on a CPU, and the compiler's one-off start paid before
# anything is timed. The block is the cold-start page's; a batch of varying length
# comes with a mask of its padded positions, which it keeps out of attention:
#
# .. literalinclude:: /../src/gpuguide/chapters/coldstart_child.py
#    :pyobject: Block
import logging

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

import gpuguide
from gpuguide.chapters.coldstart_child import Block
from gpuguide.chapters.compiling import PrintMessages, start_compiler, time_each_call

page = gpuguide.setup()
device = page.device
if page.cuda:
    torch.set_float32_matmul_precision("high")
else:
    torch.set_num_threads(1)
print(start_compiler(device))
dim, batch = (256, 16) if page.cuda else (64, 4)
model = Block(dim).to(device).eval()
lengths = [32, 33, 64] if page.small else [32, 33, 64, 33, 32, 64, 33, 32]
steady_at, buckets = 33, [32, 64]  # the length whose steady-state time is compared
inputs = [torch.randn(batch, n, dim, device=device) for n in lengths]

# %%
# Dynamo's recompilation log, on the page
# ---------------------------------------
# ``torch._logging.set_logs(recompiles=True)`` (or ``TORCH_LOGS=recompiles``) makes
# dynamo log the guard that failed each time it recompiles. Here a handler prints
# the messages alone, without torch's prefix of level, time, process and file
# (:class:`~gpuguide.chapters.compiling.PrintMessages`).
torch._logging.set_logs(recompiles=True)
logging.getLogger("torch._dynamo").handlers = [PrintMessages()]


# %%
# Running the sequence
# --------------------
# :func:`~gpuguide.chapters.compiling.time_each_call` times each call on its own, as
# each may compile, and counts the graphs dynamo compiled and the compilations
# inductor found in its disk cache (kept across runs). Then a call at length 33 is
# timed under the ``"fail_on_recompile"`` stance, which raises should it recompile.
def padded(x):  # to the next bucket size, with the mask of the padding
    n = x.shape[1]
    size = next(b for b in buckets if b >= n)
    pad = (torch.arange(size, device=device) >= n).expand(x.shape[0], size)
    return F.pad(x, (0, 0, 0, size - n)), pad.contiguous()


def run(name, compiled, compiles, how, prepare=lambda x: (x,), mark=False):
    torch._dynamo.reset()  # each approach starts with no compiled graphs
    args = [prepare(x.clone() if mark else x) for x in inputs]  # a mark stays
    for x, *_ in args if mark else ():
        torch._dynamo.mark_dynamic(x, 1)
    print(f"{name}:")
    with torch.no_grad():
        calls = time_each_call(compiled, args, device=device)
        with torch.compiler.set_stance("fail_on_recompile"):
            at = prepare(inputs[lengths.index(steady_at)])
            steady = gpuguide.benchmark(compiled, args=at, label=name, sample_ms=5)
    print(f"    {calls}")
    gpuguide.claim(
        f"{name}: dynamo compiles {how}",
        holds=sum(calls.compiles) == compiles,
        measured=f"{sum(calls.compiles)} for {len(set(lengths))} lengths",
    )
    seconds = sum(calls.times_s)
    size = f"{len(lengths)} calls"
    gpuguide.report("whole sequence", seconds, unit="s", size=size, approach=name)
    gpuguide.report(
        "steady call", steady, size=f"{batch}x{steady_at}x{dim}", approach=name
    )
    runs[name] = calls, steady


runs = {}
static = torch.compile(model, dynamic=False)  # reused below, after a reset
run("static (dynamic=False)", static, len(set(lengths)), "once per distinct length")

# %%
# The default: automatic dynamic shapes
# -------------------------------------
# With the default ``dynamic=None`` the first compilation assumes static shapes;
# when a size changes, dynamo recompiles with that dimension symbolic, and this
# graph serves every later length: two compilations, however many lengths follow.
run("default (dynamic=None)", torch.compile(model), 2, "twice for all lengths")

# %%
# Fixes: dynamic from the start, or a few bucket sizes
# ----------------------------------------------------
# ``dynamic=True`` makes every dimension symbolic from the first compilation;
# ``torch._dynamo.mark_dynamic(x, 1)`` marks only the sequence dimension, so that
# the compiler can still specialize on the other sizes. Rounding each length up to
# one of a few sizes keeps the kernels static, one compilation per bucket, at the
# price of computing on the padding.
run("dynamic=True", torch.compile(model, dynamic=True), 1, "once for all lengths")
run("mark_dynamic(x, 1)", torch.compile(model), 1, "once for all lengths", mark=True)
run("padded to buckets", static, len(buckets), "once per bucket", prepare=padded)

# %%
# Compilations and time over the sequence
# ---------------------------------------
# A compilation whose code inductor finds in its disk cache skips code generation,
# and a graph with symbolic sizes costs more to trace than a static one, so fewer
# compilations need not mean less time. Only the first call at each new shape (or
# bucket) should stand out.
total = {name: sum(calls.times_s) for name, (calls, _) in runs.items()}
share = sum(calls.compiling_s for calls, _ in runs.values()) / sum(total.values())
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    list(range(1, len(lengths) + 1)),
    {
        f"{name} ({sum(calls.compiles)} compiles, {total[name]:.1f} s)": calls.times_s
        for name, (calls, _) in runs.items()
    },
    xlabel="call (index in the sequence)",
    ylabel="time of the call (s)",
    title=f"Whole sequences of {min(total.values()):.1f} to "
    f"{max(total.values()):.1f} s, {share:.0%} of it in compiling calls",
    logx=False,
)
plt.show()

# %%
# Steady state: dynamic, static and padded kernels
# ------------------------------------------------
# Where the kernels' work bounds a call (a CPU here), kernels for symbolic sizes can
# be slower than kernels specialized for one size, and a padded batch computes on
# its padding (64 positions for 33). Where the host's time per call does (this small
# block on a GPU), the guards and the launches decide instead. Each approach was
# timed after its own compilations, not in alternating rounds; a difference counts
# only where it is larger than the spread.
steady = {name: m for name, (_, m) in runs.items()}
base = steady["static (dynamic=False)"]
verdicts = [gpuguide.compare(m, base) for m in steady.values() if m is not base]
print("\n".join(map(str, verdicts)))
gpuguide.claim(
    "on a CPU, a call padded to 64 positions costs at least 1.2x a static call at 33",
    gpuguide.compare(base, steady["padded to buckets"]),  # padded time / static's
    at_least=1.2,
    unless=page.cuda and "on a GPU the host's time per call decides (see above)",
)
differ = f"{sum(c.measurable for c in verdicts)} of {len(verdicts)}"
fig, ax = plt.subplots()
title = f"At length {steady_at}: {differ} approaches measurably differ from static"
ylabel = f"time per call at length {steady_at} (ms)"
gpuguide.plot_bars(ax, steady, ylabel=ylabel, title=title)
plt.show()

# %%
# The recompile limit
# -------------------
# Dynamo stops recompiling a function after ``torch._dynamo.config.recompile_limit``
# versions (``cache_size_limit`` is the old name): it logs a warning and runs the
# function uncompiled for inputs no cached version accepts; with ``fullgraph=True``
# or ``config.fail_on_recompile_limit_hit = True`` it raises instead. Here the limit
# is lowered to 2, so that the third length hits it.
with torch._dynamo.config.patch(recompile_limit=2):
    run("static, recompile_limit=2", static, 2, "twice, then runs the rest uncompiled")
torch._logging.set_logs()  # torch's default log settings and handlers again

# %%
# What to take away
# -----------------
# Turn on ``TORCH_LOGS=recompiles`` when a compiled model sees varying inputs: each
# message names the guard that failed. Declare a varying dimension dynamic up front
# or pad it to a few sizes, and compare steady-state times as well as compile times.
gpuguide.takeaway()
