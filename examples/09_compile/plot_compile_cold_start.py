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

For each it measures the first call (with its spread where a case runs in more
than one process), what the caches did, the steady state against eager mode and
between the two ways of compiling, and after how many steps the compilation pays
for itself.
"""

# %%
# Setup
# -----
# Each case runs in a child process, so that nothing compiled stays in memory.
# ``coldstart.run_fresh`` forks it from a server that has imported torch once
# (where the system has none: ``python -c``), so that no child pays seconds of
# imports, and keeps its output, compiler logs included, off the page. The server
# also runs, once, inductor's probe of the CPU's vector instructions (a small C++
# build that every new process pays before compiling for a CPU, whatever the
# model), so the children's first calls time the model's compilation alone; the
# page prints what the probe cost. Every empty cache directory still costs
# seconds of kernel compilation (C++ on a CPU, Triton on a GPU), so the page
# measures two depths, repeats only the cheap warm start, and says so.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt

import gpuguide
from gpuguide.chapters import coldstart

page = gpuguide.setup()
device, small = page.device, page.small
CASES = ["cold", "warm", "Mega-Cache", "regional"]
if page.cuda:
    blocks, dim = ([2, 4] if small else [4, 32]), 256
else:
    blocks, dim = ([2] if small else [1, 8]), 64
largest = blocks[-1]
print(f"stacks of {blocks} blocks of width {dim}, inference only (a training step "
      "would add a backward graph to compile)")  # fmt: skip
print(f"left out, for time: Mega-Cache below {largest} blocks, and a second cold, "
      "Mega-Cache and regional process (so those have no spread)")  # fmt: skip


def plan(case, n):  # how many fresh processes of a case at n blocks
    if case == "Mega-Cache":
        return int(n == largest)
    return 2 if case == "warm" and n == largest else 1


# %%
# One fresh process per case
# --------------------------
# The child below is the whole recipe. ``TORCHINDUCTOR_CACHE_DIR`` (set by the
# parent, with ``TRITON_CACHE_DIR`` inside it) says where inductor keeps its FX
# graph and AOTAutograd caches and the compiled kernels. A cold child saves what
# it compiled with ``torch.compiler.save_cache_artifacts()``; a Mega-Cache child
# loads those bytes with ``load_cache_artifacts`` before its first call (the load
# counts in its start). Regional compilation compiles each block
# (``block.compile()``) instead of the stack: the blocks share their code, so
# Dynamo traces one, inductor compiles it, and the other N-1 reuse it after a
# guard check (``torch.compiler.nested_compile_region`` marks such a region in a
# whole-model compile instead). A warm child of a stack also compiles a copy by
# blocks, so that the two compiled forms run side by side in one process.
# ``measure`` times the first call, then eager and compiled steps in alternating
# rounds, and reads the cache counters; ``report`` prints one line of JSON.
CHILD = """
import copy, sys
from pathlib import Path
import torch
import torch.nn.functional as F
from torch import nn
from gpuguide.chapters.coldstart import measure, report

case, blocks, dim, device, artifacts = sys.argv[1:]
class Block(nn.Module):
    def __init__(self, dim, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
    def forward(self, x):
        b, s, d = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))

torch.set_float32_matmul_precision("high")  # TF32 on a GPU
model = nn.Sequential(*[Block(int(dim)) for _ in range(int(blocks))]).to(device).eval()
x, eager = torch.randn(1, 64, int(dim), device=device), copy.deepcopy(model)
if case == "regional":  # compile the block: one compilation serves all N
    for block in model:
        block.compile()
compiled = model if case == "regional" else torch.compile(model)
load = None
if case == "Mega-Cache":
    load = lambda: torch.compiler.load_cache_artifacts(Path(artifacts).read_bytes())
also = {}
if case == "warm" and int(blocks) > 1:  # compiled by blocks too, to run side by side
    also["regional"] = copy.deepcopy(eager)
    for block in also["regional"]:
        block.compile()
result = measure(eager, compiled, x, device=device, before=load, also=also)
if case == "cold" and (saved := torch.compiler.save_cache_artifacts()):
    Path(artifacts).write_bytes(saved[0])
report(result)
"""

# %%
# Cold, warm, Mega-Cache, regional
# --------------------------------
# Per stack: a cold child in an empty directory, warm children in the same
# directory, a Mega-Cache child in a second empty directory with the cold child's
# artifacts, a regional child in a third. All of it lives in one temporary
# directory, removed at the end.
results = {case: {n: [] for n in blocks} for case in CASES}
with tempfile.TemporaryDirectory(prefix="gpuguide-cold-start-") as root:
    for n in blocks:
        artifacts = Path(root, f"{n}.bin")
        for case, folder in zip(CASES, "aabc", strict=True):
            cache = Path(root, f"{n}-{folder}")
            env = {"TORCHINDUCTOR_CACHE_DIR": str(cache),
                   "TRITON_CACHE_DIR": str(cache / "triton")}  # fmt: skip
            saved = case != "Mega-Cache" or artifacts.exists()  # from the cold one
            for _ in range(plan(case, n) * saved):
                args = [case, n, dim, device, artifacts]
                results[case][n].append(coldstart.run_fresh(CHILD, args, env=env))
if not page.cuda:
    probe = results["cold"][largest][0]
    print(f"inductor's CPU probe ({probe['probed']}): {probe['probe_s']:.1f} s, paid by "
          "every new process in an empty cache directory, left out of the first calls")  # fmt: skip


def runs(cases, n):  # the processes of some cases at n blocks
    return [r for case in cases for r in results[case][n]]


def first(case, n):  # the first calls of a case's processes, as one Measurement
    done = runs([case], n)
    return coldstart.first_calls(done, case, str(device)) if done else None


def steps(n, name, label, cases=CASES[:3]):  # pooled: cold, warm, Mega-Cache by default
    return coldstart.steady(runs(cases, n), name, label, str(device), relative=True)


rows = [{"blocks": n, "case": case, "processes": len(results[case][n]),
         "first call": first(case, n),
         "caches": coldstart.describe_caches(results[case][n][0]["caches"])}
        for n in blocks for case in CASES if results[case][n]]  # fmt: skip
print(gpuguide.table(rows))

# %%
# First call against the stack's depth
# ------------------------------------
# A full compilation traces and lowers every block, so its cost grows with N;
# a warm start still traces and checks guards but loads the compiled graph; a
# regional one traces the block once. On a CPU, compiling the C++ kernels is a
# large part of every start in an empty directory, whatever the depth, and it
# can remain after a Mega-Cache load: the FX graph cache hits, but the kernels
# are compiled again (compare inductor's time for warm and Mega-Cache below).
fig, ax = plt.subplots()
series = {case: [first(case, n) for n in blocks] for case in CASES}
cold, warm = first("cold", largest), first("warm", largest)
gpuguide.plot_sweep(
    ax, blocks, series, xlabel="blocks in the stack (N)", ylabel="first call (s)",
    value=lambda s: s, device=device,
    title=f"At {largest} blocks: cold {cold.median_s:.1f} s, warm {warm.median_s:.1f} s")  # fmt: skip
plt.show()

# %%
# What a warm start still pays
# ----------------------------
# Dynamo's own timers in each child, at the largest stack: tracing the Python
# code, building the guards, and the backend (AOTAutograd and inductor: cache
# lookups and loading when warm, all of code generation when cold). What is
# left runs the graph and loads kernels.
split = [{"case": case} | coldstart.split_first_call(results[case][largest][0])
         for case in CASES]  # fmt: skip
print(gpuguide.table(split, title=f"{largest} blocks, the first process of each case"))

# %%
# When does compiling pay?
# ------------------------
# A start's cost is its first call beyond one compiled step; it pays once the
# steps saved over eager mode add up to it. Cold, warm and Mega-Cache starts
# end with the same compiled model, so their steps are pooled; regional
# compilation has its own. ``coldstart.payback`` counts in eager steps (each
# process's steps divided by its own eager median, so that a process slowed by
# its neighbours does not pass for slower code); the range comes from the first
# call's quartiles over processes; no step count is printed where the compiled
# step is not measurably faster than eager. The stack runs one sequence of 64
# tokens, so a step is mostly framework overhead: the regime where compiling
# pays most, and where regional compilation costs most in the steady state
# (each block is its own compiled graph, called and guarded on its own, with no
# fusion across blocks). Larger blocks and batches draw the two together.
for case in CASES:  # regional: timed side by side with eager in the warm processes
    cases, name = (
        (["warm"], "regional") if case == "regional" else (CASES[:3], "compiled")
    )
    (even, low, high), speedup = coldstart.payback(
        runs(cases, largest), first(case, largest), str(device), name)  # fmt: skip
    spread = f" ({low:,}-{high:,})" if even and low != high else ""
    print(f"{case}: pays after {even:,} steps{spread}" if even
          else f"{case}: never here, {speedup}")  # fmt: skip

# %%
# Headline figures
# ----------------
# Published: a warm start's first iteration took 40% of a cold one's (A100), a
# Mega-Cache load 1.03 s against 3.36 s cold (H100), and regional compilation of
# Flux's DiT took 9.6 s against 67.4 s (H100), keeping its speed-up.
for case in ("warm", "Mega-Cache", "regional"):
    gpuguide.report(f"first call, {case} against cold",
                    gpuguide.compare(first(case, largest), cold), blocks=largest)  # fmt: skip
full = steps(largest, "compiled", "full compilation")
gpuguide.report("steady state, full compilation against eager",
                gpuguide.compare(full, steps(largest, "eager", "eager")), blocks=largest)  # fmt: skip
gpuguide.report("steady state, regional against full",
                gpuguide.compare(steps(largest, "regional", "regional", ["warm"]),
                                 steps(largest, "compiled", "full compilation", ["warm"])),
                blocks=largest)  # fmt: skip

# %%
# What to take away
# -----------------
# Keep inductor's cache directory between runs (``TORCHINDUCTOR_CACHE_DIR`` on a
# persistent disk): a warm start skips code generation but still traces. Where the
# directory cannot travel (a new container, another machine), save the artifacts
# after a run and load them before the first call. For models built from a
# repeated block, compile the block once: the start stops growing with depth, at
# the price of the fusion across blocks and a call per block, which shows where a
# step is short (the steady state above).
