"""
CUDA graphs: launch many small kernels for the price of one
===========================================================

Every eager PyTorch operation costs host time before the GPU sees a kernel: Python,
the dispatcher, the caching allocator and the CUDA launch, typically 5-20 us in all.
When the kernels are tiny the GPU finishes each one before the host has launched the
next, so the run time grows with the number of operations, not with the data. A CUDA
graph records the kernels once and then replays the whole sequence with one launch.

This page times a chain of tiny elementwise operations at several lengths, eagerly and
replayed from a graph, fits ``time = fixed + per-op cost x ops`` to each, and prints
the per-op cost and the speed-up. A small MLP with a batch of a few rows shows the
same on a model, with the host's launch time next to the GPU's work, and the
one-time cost of capturing is reported on its own.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# The tensors have 1024 elements, so each operation's arithmetic takes almost no
# time and what is left is overhead. Since overhead is the point, every time on
# this page is the time per step of a loop that runs step after step
# (``measure="call"``, the default of :func:`gpuguide.benchmark`): what a training or
# serving loop pays, launches included. Eager and graph steps run in alternating
# rounds, so that a drift of the machine falls on both.
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import torch

import gpuguide
from gpuguide.chapters.compiling import host_and_gpu_times
from gpuguide.tables import format_cell

device = gpuguide.pick_device()
print(gpuguide.provenance(device))
small = gpuguide.small_mode()
on_cuda = device.type == "cuda"
op_counts = [8, 16, 32, 64] if small else [8, 16, 32, 64, 128, 256]
if not on_cuda:
    print(
        "CUDA graphs record and replay GPU kernel launches, so they need a CUDA GPU; "
        "this run measures the eager per-op overhead that they remove."
    )

# %%
# A launch-bound step
# -------------------
# A step copies new data into an input tensor and runs a chain of ``n_ops`` sines,
# one small kernel each. The input stays the same tensor from step to step, which
# is what a graph needs: it replays on the memory it was captured with.
static_in = torch.randn(1024, device=device)
new_data = torch.randn(1024, device=device)


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


def graph_step(graph):
    static_in.copy_(new_data)
    graph.replay()


# %%
# Eager against replayed, for chains of 8 to 256 operations
# ---------------------------------------------------------
# Both versions run the same ``copy_`` and the same kernels; only the launching
# differs. Replaying the graph must give exactly the eager result. "speed-up" is
# eager's median over the graph's, with the range it spans over both
# interquartile ranges.
eager, replayed, rows = [], [], []
for n_ops in op_counts:
    steps = {"eager": partial(eager_step, n_ops)}
    if on_cuda:
        graph, static_out = capture(chain, static_in, n_ops)
        steps["graph"] = partial(graph_step, graph)
    timed = gpuguide.interleave(steps, device=device, measure="call")
    eager.append(timed["eager"])
    rows.append({"ops": n_ops, "eager": eager[-1]})
    if on_cuda:
        replayed.append(timed["graph"])
        c = gpuguide.compare(replayed[-1], eager[-1])
        rows[-1]["graph"] = replayed[-1]
        rows[-1]["speed-up"] = f"{c.low:.2f}-{gpuguide.format_ratio(c.high)}"
        rows[-1]["same result"] = torch.equal(static_out, chain(new_data, n_ops))
print(gpuguide.table(rows))

# %%
# The cost of one operation
# -------------------------
# A straight line through time against the number of operations: its slope is the
# cost of one more operation, its intercept the fixed cost of a step. Eagerly the
# slope is the host's cost per launch; replayed it is roughly the GPU's time per
# tiny kernel, typically a few times lower. The fit goes through the medians; a fit
# to noisy times is marked so. The same fits through the first and the third
# quartiles give the slope's spread, for the recorded figures (last cell).


def fit(measurements, at="median_s"):
    slope, intercept = np.polyfit(op_counts, [getattr(m, at) for m in measurements], 1)
    return slope, intercept


per_op = {"eager": fit(eager)}
if on_cuda:
    per_op["CUDA graph"] = fit(replayed)
for name, (slope, intercept) in per_op.items():
    runs = eager if name == "eager" else replayed
    noisy = any(m.is_noisy for m in runs)
    print(
        f"{name}: {gpuguide.format_time(slope)} per op, "
        f"{gpuguide.format_time(max(intercept, 0.0))} fixed per step"
        + (" (fit to NOISY times)" if noisy else "")
    )
    ends = [slope] + [fit(runs, at)[0] for at in ("q25_s", "q75_s")]
    if slope > 0:  # a slope of 0 or below is noise, not a cost
        gpuguide.record("per-op cost", slope, unit="s", spread=(min(ends), max(ends)),
                        size=f"{op_counts[0]}-{op_counts[-1]} ops",
                        mode="eager" if name == "eager" else "graph")  # fmt: skip
if on_cuda:
    eager_slope, graph_slope = per_op["eager"][0], per_op["CUDA graph"][0]
    if eager_slope > 0 and graph_slope > 0:
        share = gpuguide.format_ratio(graph_slope / eager_slope)
        print(f"per-op cost with a graph: {share} the eager one")
    else:
        print("per-op cost: the fit found none for one of the two (noise)")
    print(f"at {op_counts[-1]} ops: {gpuguide.compare(replayed[-1], eager[-1])}")

# %%
# Capturing is a one-time cost
# ----------------------------
# Capture runs the warm-up calls and records every kernel; it is paid once per
# graph, like a compilation, so it is timed apart from the steady state above.
if on_cuda:
    n_ops = op_counts[-1]
    capturing = gpuguide.benchmark(
        capture,
        args=(chain, static_in, n_ops),
        device=device,
        warmup_ms=1.0,
        rep_ms=1.0,
        min_reps=3,
        max_reps=5,
    )
    print(f"capturing {n_ops} ops: {format_cell(capturing)}")
    replays = gpuguide.break_even(capturing, eager[-1], replayed[-1])
    if replays is not None:
        print(f"repaid after {replays:,} replays")
    else:
        print("never repaid: a replay is not measurably faster than eager")

# %%
# A small MLP with a tiny batch
# -----------------------------
# Eight rows through four 256-wide layers: a dozen kernels that each finish in a few
# microseconds, the regime of a small model serving one request at a time. A module
# is captured like any function; ``torch.no_grad()`` keeps autograd out of the graph.
# Such a step's time swings with the host's speed from run to run, so the two
# versions run in ten alternating rounds, and the verdict counts only a difference
# larger than the spread. On a GPU the host's launch time of each version is then
# measured next to the GPU's work for it (with the GPU held busy while the host
# launches): eagerly the GPU waits for the host, replayed it does not.
layers = []
for _ in range(4):
    layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
mlp = torch.nn.Sequential(*layers).to(device).eval()
static_x = torch.randn(8, 256, device=device)
new_x = torch.randn(8, 256, device=device)


@torch.no_grad()
def mlp_eager():
    static_x.copy_(new_x)
    return mlp(static_x)


mlp_steps = {"eager": mlp_eager}
if on_cuda:
    with torch.no_grad():
        mlp_graph, mlp_out = capture(mlp, static_x)

    def mlp_replay():
        static_x.copy_(new_x)
        mlp_graph.replay()

    mlp_steps["CUDA graph"] = mlp_replay
    mlp_replay()
    print(f"MLP output matches eager: {torch.allclose(mlp_out, mlp_eager())}")
mlp_times = gpuguide.interleave(mlp_steps, rounds=10, device=device, measure="call")
for name, fn in mlp_steps.items():
    split = host_and_gpu_times(fn, device=device)
    print(f"MLP, {name}: {format_cell(mlp_times[name])} per step; {split}")
if on_cuda:
    print(f"MLP: {gpuguide.compare(mlp_times['CUDA graph'], mlp_times['eager'])}")

# %%
# Time against the number of operations
# -------------------------------------
# Both axes are logarithmic: a line of slope one means a constant cost per
# operation. ``torch.compile(mode="reduce-overhead")`` captures CUDA graphs like
# these for you, after fusing what it can (chapter 9); capturing by hand is for code
# you cannot or do not want to compile. Either way the shapes must stay the same
# from step to step, or each new shape needs a graph of its own.
eager_per_op = gpuguide.format_time(per_op["eager"][0])
series = {f"eager ({eager_per_op} per op)": eager}
title = f"Eager: {eager_per_op} per tiny op, time grows with the op count"
if on_cuda:
    graph_per_op = gpuguide.format_time(per_op["CUDA graph"][0])
    series[f"CUDA graph ({graph_per_op} per op)"] = replayed
    c = gpuguide.compare(replayed[-1], eager[-1])
    title = f"{op_counts[-1]} ops: no measurable difference between graph and eager"
    if c.verdict != "no measurable difference":
        ratio = gpuguide.format_ratio(
            c.speedup if c.verdict == "faster" else 1 / c.speedup
        )
        title = f"A graph replays {op_counts[-1]} ops {ratio} {c.verdict}"
fig, ax = plt.subplots()
gpuguide.plot_sweep(
    ax,
    op_counts,
    series,
    xlabel="operations per step (count)",
    ylabel="time per step (ms)",
    title=title,
    record="step time",
)
plt.show()
