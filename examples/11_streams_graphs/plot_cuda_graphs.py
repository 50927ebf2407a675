"""
CUDA graphs: launch many small kernels for the price of one
===========================================================

Every eager PyTorch operation costs host time before the GPU sees a kernel: Python,
the dispatcher, the caching allocator and the CUDA launch: microseconds (this page
measures it). When the kernels are tiny the GPU finishes each one before the host
has launched the next, so the run time grows with the number of operations, not with
the data. A CUDA graph records the kernels once and then replays the whole sequence
with one launch.

This page times chains of tiny operations, eagerly and replayed from a graph, fits
``time = fixed + per-op cost x ops`` to each, and prints the per-op cost and the
speed-up; then the one-time cost of capturing, and the same on a small MLP.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# Every time on this page is the time per step of a loop that runs step after step
# (``measure="call"``): what a training or serving loop pays, launches included.
# Without a CUDA GPU the page measures the eager per-op cost that a graph removes.
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import torch

import gpuguide
from gpuguide import (
    benchmark,
    break_even,
    compare,
    format_time,
    interleave,
    plot_sweep,
    report,
    table,
)
from gpuguide.chapters.compiling import host_and_gpu_times

if not torch.cuda.is_available():  # tiny ops run on one thread; no pool to wake
    torch.set_num_threads(1)
page = gpuguide.setup()
device = page.device
graphs = page.needs_cuda("Capturing and replaying CUDA graphs")
op_counts = [8, 16, 32, 64] if page.small else [8, 16, 32, 64, 128, 256]

# %%
# A launch-bound step
# -------------------
# A step copies new data into an input tensor and runs a chain of ``n_ops`` sines
# on its 1024 elements: one kernel each, whose arithmetic takes almost no time. The
# input stays the same tensor from step to step, which is what a graph needs: it
# replays on the memory it was captured with.
static_in, new_data = (torch.randn(1024, device=device) for _ in range(2))


def chain(x, n_ops):
    for _ in range(n_ops):
        x = torch.sin(x)
    return x


def eager_step(n_ops):
    static_in.copy_(new_data)
    return chain(static_in, n_ops)


# %%
# Capture once, replay many times
# -------------------------------
# The recipe from the CUDA semantics notes: run the function a few times on a side
# stream first (so lazy initialization, allocator growth and library workspaces do not
# end up in the graph), then capture one call inside ``torch.cuda.graph(g)``. The
# outputs of that call are the graph's static outputs: every ``g.replay()`` rewrites
# them in place. Capture records GPU work only; Python control flow runs once, at
# capture, and a synchronization or ``.item()`` inside is an error.


def capture(fn, *args):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = fn(*args)
    return graph, static_out


def replay(graph, static, new):
    static.copy_(new)
    graph.replay()


# %%
# Eager against replayed, for chains of 8 to 256 operations
# ---------------------------------------------------------
# Both versions run the same ``copy_`` and the same kernels; only the launching
# differs. They run in alternating rounds, so that a drift of the machine falls on
# both, for 0.4 s each (a burst of load then spoils few of the calls), and
# replaying the graph must give exactly the eager result.
rows = []
for n_ops in op_counts:
    steps = {"eager": partial(eager_step, n_ops)}
    if graphs:
        graph, static_out = capture(chain, static_in, n_ops)
        steps["graph"] = partial(replay, graph, static_in, new_data)
    timed = interleave(steps, rep_ms=40 if page.small else 400, device=device)
    rows.append({"ops": n_ops, **timed})
    if graphs:
        rows[-1]["speed-up"] = compare(rows[-1]["graph"], rows[-1]["eager"]).short
        rows[-1]["same result"] = torch.equal(static_out, chain(new_data, n_ops))
print(table(rows))
times = {mode: [row[mode] for row in rows] for mode in steps}
same = sum(row.get("same result", False) for row in rows)
gpuguide.claim(
    "replaying a graph gives exactly the eager result",
    holds=same == len(rows),
    measured=f"equal at {same} of {len(rows)} op counts",
    on="cuda",
)
more = op_counts[-1] // op_counts[0]
growth = compare(times["eager"][0], times["eager"][-1])
gpuguide.claim(
    f"eagerly, a step of {op_counts[-1]} ops costs at least {more // 2}x a step of "
    f"{op_counts[0]} ({more}x the ops): time grows with the op count",
    growth,
    at_least=more // 2,
)

# %%
# The cost of one operation
# -------------------------
# A line through time against the number of operations: its slope is the cost of
# one more operation (eagerly the host's cost per launch; replayed roughly the GPU's
# time per tiny kernel, which a claim below puts at most at half the eager one), its
# intercept the fixed cost of a step. Fits through the first and the third quartiles
# give the slope's range.
slopes, series, ranges = {}, {}, {}
for mode, runs in times.items():
    fits = [
        np.polyfit(op_counts, [getattr(m, q) for m in runs], 1)
        for q in ("median_s", "q25_s", "q75_s")
    ]
    (slope, fixed), ends = fits[0], [fit[0] for fit in fits]
    noisy = " (fit to NOISY times)" if any(m.is_noisy for m in runs) else ""
    lost = "" if slope > 0 else "; no per-op cost: the slope is lost in the noise"
    print(f"{mode}: {format_time(max(fixed, 0.0))} fixed per step{noisy}{lost}")
    series[f"{mode} ({format_time(slope)} per op)" if slope > 0 else mode] = runs
    if slope > 0:
        slopes[mode], ranges[mode] = slope, (min(ends), max(ends))
        report(
            "per-op cost",
            slope,
            unit="s",
            spread=(min(ends), max(ends)),
            size=f"{op_counts[0]}-{op_counts[-1]} ops",
            mode=mode,
        )
title = f"Eager, {op_counts[-1]} ops against {op_counts[0]}: {growth.short} the time"
if graphs:
    both = len(slopes) == 2 and min(ranges["eager"]) > 0
    (g_low, g_high), (e_low, e_high) = (
        ranges.get(m, (0, 0)) for m in ("graph", "eager")
    )
    ratio = slopes["graph"] / slopes["eager"] if both else 1.0
    gpuguide.claim(
        "a graph's per-op cost is at most half the eager one",
        ratio,
        at_most=0.5,
        spread=(min(ratio, g_low / e_high), max(ratio, g_high / e_low))
        if both
        else None,
        timed=True,
        unless=None if both else "a slope is lost in the noise",
    )
    at_most = compare(times["graph"][-1], times["eager"][-1])
    gpuguide.claim(
        f"at {op_counts[-1]} ops, replaying the graph is faster than eager",
        at_most,
        verdict="faster",
    )
    title = f"A graph against eager at {op_counts[-1]} ops: {at_most.short}"
else:  # the same claims, not checked on this device
    gpuguide.claim("a graph's per-op cost is at most half the eager one", on="cuda")
    gpuguide.claim("at 256 ops, replaying the graph is faster than eager", on="cuda")

# Both axes of the plot are logarithmic: a line of slope one is a constant cost per
# operation. ``torch.compile(mode="reduce-overhead")`` captures such graphs for you
# after fusing what it can (chapter 9); either way the shapes must stay the same
# from step to step, or each new shape needs a graph of its own.
fig, ax = plt.subplots()
plot_sweep(
    ax,
    op_counts,
    series,
    xlabel="operations per step (count)",
    ylabel="time per step (ms)",
    title=title,
)
plt.show()

# %%
# Capturing is a one-time cost
# ----------------------------
# Capture (warm-up calls included) is paid once per graph, like a compilation.
if graphs:
    capturing = benchmark(
        capture,
        args=(chain, static_in, op_counts[-1]),
        device=device,
        warmup_ms=1.0,
        rep_ms=1.0,
        min_reps=3,
        max_reps=5,
    )
    print(f"capturing {op_counts[-1]} ops: {format_time(capturing.median_s)}")
    replays = break_even(capturing, times["eager"][-1], times["graph"][-1])
    print(
        f"repaid after {replays:,} replays"
        if replays
        else "never repaid: a replay is not measurably faster than eager"
    )

# %%
# A small MLP with a tiny batch
# -----------------------------
# Eight rows through four 256-wide layers, a dozen kernels of a few microseconds: a
# small model serving one request at a time, captured like any function
# (``torch.no_grad()`` keeps autograd out of the graph). On a GPU each version's
# host time to launch is measured next to the GPU's work for it (the GPU held busy
# meanwhile): eagerly the GPU waits for the host, replayed it does not. On a CPU
# there is nothing to replay, so the MLP is timed on a GPU only.
layers = [m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]
mlp = torch.nn.Sequential(*layers).to(device).eval()
static_x, new_x = (torch.randn(8, 256, device=device) for _ in range(2))


@torch.no_grad()
def mlp_eager():
    static_x.copy_(new_x)
    return mlp(static_x)


mlp_steps = {"eager": mlp_eager}
if graphs:
    with torch.no_grad():
        mlp_graph, mlp_out = capture(mlp, static_x)
    mlp_steps["graph"] = partial(replay, mlp_graph, static_x, new_x)
    mlp_steps["graph"]()
    gpuguide.claim(
        "the MLP's replayed output matches eager's (allclose)",
        holds=torch.allclose(mlp_out, mlp_eager()),
        measured="torch.allclose",
    )
    mlp_times = interleave(mlp_steps, rounds=10, device=device, measure="call")
    for name, fn in mlp_steps.items():
        print(
            f"MLP, {name}: {format_time(mlp_times[name].median_s)} per step; "
            f"{host_and_gpu_times(fn, device=device)}"
        )
    gpuguide.claim(
        "the small MLP's step is faster replayed than eager",
        compare(mlp_times["graph"], mlp_times["eager"]),
        verdict="faster",
    )
else:
    print("MLP: no graph to set eager against on a CPU; its eager cost per op is above")
    gpuguide.claim("the MLP's replayed output matches eager's (allclose)", on="cuda")
    gpuguide.claim("the small MLP's step is faster replayed than eager", on="cuda")
