"""
torch.compile's cold start: caches, Mega-Cache and regional compilation
=======================================================================

A compiled model's first call does the compiling: Dynamo traces the Python code,
AOTAutograd prepares the graph, inductor generates kernels and compiles them (C++
on a CPU, Triton on a GPU). A new process starts all of it again, unless inductor
finds the work in its caches on disk. This page starts a fresh process for every
measurement of a stack of N identical transformer blocks, and compares four
starts: **cold** (an empty cache directory), **warm** (the same directory again),
**Mega-Cache** (the caches of an earlier process, saved as one blob and loaded
into an empty directory) and **regional** compilation (the repeated block
compiled once, reused N times).

It measures each first call, what a full and a regional compilation add per
block, the steady state against eager mode, and when compiling pays for itself.
"""

# %%
# The child: one fresh process, one start
# ---------------------------------------
# Each case runs in a new Python process (``python -m``), so that nothing compiled
# stays in memory. This is the whole recipe.
# ``TORCHINDUCTOR_CACHE_DIR`` (set by the parent, with ``TRITON_CACHE_DIR`` inside
# it) says where inductor keeps its FX graph and AOTAutograd caches and the
# compiled kernels. A cold child saves what it compiled with
# ``torch.compiler.save_cache_artifacts()``; a Mega-Cache child loads those bytes
# with ``load_cache_artifacts`` before its first call (the load counts in its
# start). Regional compilation compiles each block (``block.compile()``): the
# blocks share their code, so Dynamo traces one, inductor compiles it, and the
# other N-1 reuse it after a guard check (``torch.compiler.nested_compile_region``
# marks such a region in a whole-model compile instead).
#
# .. literalinclude:: /../src/gpuguide/chapters/coldstart_child.py
#    :start-at: class Block
#
# The child's ``_measure`` imports inductor and, on a CPU, runs its probe of the
# CPU's vector instructions (a C++ build every new process pays) before it times
# anything; then it times the first call, then eager and compiled steps in
# alternating rounds, and reads the cache counters. An empty cache directory costs
# seconds of kernel compilation, so the page runs two depths and, mostly, one
# process per case and depth: those figures have no spread.
import matplotlib.pyplot as plt

import gpuguide
from gpuguide.chapters import coldstart

page = gpuguide.setup()
device = str(page.device)
CASES = ["cold", "warm", "Mega-Cache", "regional"]
if page.cuda:  # each process also creates a CUDA context and compiles with Triton
    blocks, dim, warm = ([2, 4] if page.small else [4, 16]), 256, 1
else:
    blocks, dim, warm = ([2] if page.small else [1, 8]), 64, 2
largest = blocks[-1]
print(f"stacks of {blocks} blocks of width {dim}, inference only (no backward)")


def plan(case, n):  # how many fresh processes of a case at n blocks
    if case == "Mega-Cache":
        return int(n == largest)
    return warm if case == "warm" and n == largest else 1


# %%
# Cold, warm, Mega-Cache, regional
# --------------------------------
# Per stack: a cold child in an empty directory, warm children in the same
# directory, a Mega-Cache child in a second empty directory with the cold child's
# artifacts, a regional child in a third. A warm child of the deepest stack also
# compiles a copy by blocks, so that the two compiled forms run side by side.
starts = coldstart.run_starts(CASES, blocks, plan, dim=dim, device=device)
if not page.cuda:
    probe_s = starts["cold"][largest][0]["probe_s"]
    print(f"CPU probe (in each process, not in first calls): {probe_s:.1f} s")
print(gpuguide.table(starts.rows()))

# %%
# What each block adds to the first call
# --------------------------------------
# A full compilation traces and lowers every block; a regional one compiles the
# block once and checks guards for the others. ``starts.growth`` fits the
# seconds each block adds over the depths measured, with the range the first
# calls' quartiles allow (none from one process per depth).
series = {case: [starts.first(case, n) for n in blocks] for case in CASES}
title = f"First calls up to {largest} blocks"
if len(blocks) > 1:  # a slope needs two depths (small mode on a CPU runs one)
    full = starts.growth("cold", "full compilation")
    regional = starts.growth("regional", "regional compilation")
    for g in (full, regional):
        name = f"first call per block, {g.label}"
        gpuguide.report(name, g.per_block_s, unit="s", spread=g.spread)
    print(full.compare(regional))
    title = f"Per block: full {full.short}, regional {regional.short}"
# A verdict needs both slopes' spreads: one process per depth gives none.
spreads = len(blocks) > 1 and full.spread and regional.spread
gpuguide.claim(
    "regional compilation adds less to the first call per block than full compilation",
    holds=bool(spreads) and regional.spread[1] < full.spread[0],
    measured=f"{regional.short} against {full.short}" if len(blocks) > 1 else "-",
    timed=True,
    unless=(len(blocks) < 2 and "one depth only: no slope")
    or (not spreads and "one process per depth: no spread, so no verdict"),
)
fig, ax = plt.subplots()
labels = {"xlabel": "blocks in the stack (N)", "ylabel": "first call (s)"}
gpuguide.plot_sweep(
    ax, blocks, series, **labels, value=float, device=device, title=title
)
plt.show()

# %%
# What a warm start still pays
# ----------------------------
# Dynamo's own timers in each child, at the largest stack: tracing, guards, and
# the backend (AOTAutograd and inductor: cache lookups and loading when warm, all
# of code generation when cold). The rest runs the graph and loads kernels. On a
# CPU, a Mega-Cache start can compile the C++ kernels again although the FX
# graph cache hits (compare inductor's time for warm and Mega-Cache).
split = [{"case": case} | starts.first_call_parts(case, largest) for case in CASES]
print(gpuguide.table(split, title=f"{largest} blocks, the first process of each case"))

# %%
# When does compiling pay?
# ------------------------
# A start pays once the steps it saves over eager mode add up to its first call
# beyond one compiled step. Cold, warm and Mega-Cache starts end with the same
# compiled model: their steps are pooled, each process's divided by its eager
# median. The range comes from the first call's quartiles. A step is one
# sequence of 64 tokens, mostly framework overhead: where compiling pays most,
# and where a graph per block (no fusion across blocks) costs most.
for case in CASES:  # regional: timed beside eager in the warm processes
    among, name = (["warm"], case) if case == "regional" else (CASES[:3], "compiled")
    (even, low, high), vs = starts.payback(case, largest, among, name)
    spread = f" ({low:,}-{high:,})" if even and low != high else ""
    print(f"{case}: pays after {even:,} steps{spread}" if even else f"{case}: {vs}")

# %%
# Headline figures
# ----------------
# Published, each for one model at one depth: a warm start's first iteration
# took 40% of a cold one's (A100), a Mega-Cache load 1.03 s against 3.36 s cold
# (H100), regional compilation of Flux's DiT 9.6 s against 67.4 s (H100).
cold = starts.first("cold", largest)
for case, least in (("warm", 2), ("Mega-Cache", 1.2)):
    vs = gpuguide.compare(starts.first(case, largest), cold)
    gpuguide.report(f"first call, {case} against cold", vs, blocks=largest)
    gpuguide.claim(
        f"a {case} start's first call is at least {least}x as fast as a cold one's",
        vs.speedup,
        at_least=least,
        measured=f"{vs.speedup:.2f}x, one process each",
        timed=True,
    )
vs = gpuguide.compare(
    starts.steady(CASES[:3], largest, "compiled", "full compilation", relative=True),
    starts.steady(CASES[:3], largest, "eager", relative=True),
)
gpuguide.report("steady state, full compilation against eager", vs, blocks=largest)
gpuguide.claim("a compiled step is at least 1.05x as fast as eager", vs, at_least=1.05)
vs = gpuguide.compare(  # round by round, in the same rounds of the warm processes
    starts.steady(["warm"], largest, "regional", paired=True),
    starts.steady(["warm"], largest, "compiled", "full compilation", paired=True),
)
gpuguide.report("steady state, regional against full", vs, blocks=largest)

# %%
# What to take away
# -----------------
# Keep inductor's cache directory between runs (``TORCHINDUCTOR_CACHE_DIR`` on a
# persistent disk): a warm start skips code generation but still traces. Where
# the directory cannot travel (a new container, another machine), save the
# artifacts after a run and load them before the first call. For a model built
# from a repeated block, weigh what each block adds to a full compilation (the
# figures per block above) against the steady state that compiling by blocks
# gives up (fusion across blocks, a call per block: the last figure).
gpuguide.takeaway()
