"""
CUDA graphs: launch many small kernels for the price of one
===========================================================

Every eager PyTorch operation costs host time before the GPU sees a kernel: Python,
the dispatcher, the caching allocator and the CUDA launch. When the kernels are tiny
the GPU finishes each one before the host has launched the next, so a step's time
grows with the number of operations, not with the data. A CUDA graph records the
kernels once and then replays the whole sequence with one launch.

This page times chains of tiny operations, eagerly and replayed from a graph, fits
the cost of one more operation to each, then times capturing, and a small MLP.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

# %%
# Setup
# -----
# Every time here is per step of a loop that runs step after step: what a training
# or serving loop pays, launches included. Without a CUDA GPU the page measures the
# eager per-op cost that a graph removes.
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import torch

import gpuguide
from gpuguide import Sweep, Variant, claim, compare, format_time, report
from gpuguide.timing import first_calls_s, host_and_gpu_times

torch.set_num_threads(1)  # tiny ops: no CPU thread pool to wake
page = gpuguide.setup()
device = page.device
graphs = page.needs_cuda("Capturing and replaying CUDA graphs")
op_counts = [8, 16, 32, 64] if page.small else [8, 16, 32, 64, 128, 256]
last = op_counts[-1]

# %%
# A launch-bound step
# -------------------
# A step copies new data into an input tensor and runs a chain of ``n_ops`` sines
# on its 1024 elements: one kernel each, of almost no arithmetic. The input stays
# the same tensor from step to step, as a graph needs: it replays on the memory it
# was captured with.
static_in, new_data = (torch.randn(1024, device=device) for _ in range(2))


def chain(x, n_ops):
    for _ in range(n_ops):
        x = torch.sin(x)
    return x


# %%
# Capture once, replay many times
# -------------------------------
# The recipe from the CUDA semantics notes: run the function a few times on a side
# stream (so that lazy initialization and allocator growth stay out of the graph),
# then capture one call inside ``torch.cuda.graph(g)``. Its outputs are the graph's
# static outputs: every ``g.replay()`` rewrites them in place. Python runs once, at
# capture; a synchronization or ``.item()`` inside is an error.


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


def replay(graph, static_out, static, new):
    static.copy_(new)
    graph.replay()
    return static_out


# %%
# Eager against replayed, for chains of 8 to 256 operations
# ---------------------------------------------------------
# Both run the same ``copy_`` and kernels; only the launching differs. They run in
# alternating rounds, 0.4 s each, so that a drift or a burst of load falls on both,
# and the replayed graph must give exactly the eager result.
outputs = {}  # each graph's replay arguments, by op count


def captured(n_ops, device):
    outputs[n_ops] = (*capture(chain, static_in, n_ops), static_in, new_data)
    return outputs[n_ops]


variants = {"eager": lambda n_ops: chain(static_in.copy_(new_data), n_ops)}
if graphs:
    variants["graph"] = Variant(replay, inputs=captured)
chains = Sweep("sines", lambda n, _: (n,), sizes=op_counts, size_label="ops (count)")
result = chains.run(variants, paired=True, rep_ms=40 if page.small else 400)
print(result)
more = last // op_counts[0]
growth = compare(result.at("eager", op_counts[0]), result.at("eager"))
claim(f"eager: {more}x ops, at least {more // 2}x the time", growth, at_least=more // 2)

# %%
# The cost of one operation
# -------------------------
# A line through time against the number of operations: its slope is the cost of
# one more operation (eagerly the host's per launch, replayed about the GPU's per
# tiny kernel), its intercept the fixed cost of a step. Fits through the quartiles
# give the slope's range. Both axes of the plot are logarithmic: a line of slope one
# is a constant cost per operation.
slopes = {}
for mode, runs in result.times.items():
    quartiles = [(m.median_s, m.q25_s, m.q75_s) for m in runs]
    slopes[mode] = per_op = np.polyfit(op_counts, quartiles, 1)[0]
    if per_op[0] > 0:  # else lost in the noise: no cost of 0 or less
        report(
            "per-op cost",
            per_op[0],
            unit="s",
            spread=(min(per_op), max(per_op)),
            size=f"{op_counts[0]}-{last} ops",
            mode=mode,
        )
graph, eager = slopes.get("graph", np.zeros(3)), slopes["eager"]
claim(
    "a graph's per-op cost is at most half the eager one",
    graph[0] / eager[0],
    at_most=0.5,
    spread=(min(graph) / max(eager), max(graph) / min(eager)),
    timed=True,
    on="cuda",
)
replayed = result.compare("graph", "eager") if graphs else None
claim(f"at {last} ops, replaying is faster", replayed, verdict="faster", on="cuda")
title = f"Eagerly, {more}x the ops take {growth.short} the time"
if graphs:
    title = f"A graph against eager at {last} ops: {replayed.short}"
result.plot(title=title)
plt.show()

# %%
# Capturing is a one-time cost
# ----------------------------
# Capture (warm-up calls included) is paid once per graph, like a compilation.
# ``torch.compile(mode="reduce-overhead")`` captures such graphs for you after
# fusing what it can (chapter 9); either way the shapes must stay the same from
# step to step, or each new shape needs a graph of its own.
if graphs:
    capture_s = first_calls_s(capture, chain, static_in, last, device=device, calls=1)
    replays = gpuguide.break_even(capture_s, result.at("eager"), result.at("graph"))
    repaid = f"repaid after {replays:,} replays" if replays else "never repaid"
    print(f"capturing {last} ops: {format_time(capture_s)}, {repaid}")

# %%
# A small MLP with a tiny batch
# -----------------------------
# Eight rows through four 256-wide layers, a dozen kernels of a few microseconds: a
# small model serving one request at a time, captured like any function (without
# gradients, which keeps autograd out of the graph). Each version's host time to
# launch is measured next to the GPU's work for it: eagerly the GPU waits for the
# host, replayed it does not. On a CPU there is nothing to replay.
layers = [m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())]
mlp = torch.nn.Sequential(*layers).to(device).eval().requires_grad_(False)
static_x, new_x = (torch.randn(8, 256, device=device) for _ in range(2))
mlp_vs = None
if graphs:
    mlp_steps = {"eager": lambda: mlp(static_x.copy_(new_x))}
    mlp_steps["graph"] = partial(replay, *capture(mlp, static_x), static_x, new_x)
    close = torch.allclose(mlp_steps["graph"](), mlp(new_x))
    mlp_times = gpuguide.interleave(mlp_steps, rounds=10, device=device)
    mlp_vs = compare(mlp_times["graph"], mlp_times["eager"])
    for name, fn in mlp_steps.items():
        print(f"MLP, {name}: {host_and_gpu_times(fn, device=device)}")
equal = sum(torch.equal(replay(*a), chain(new_data, n)) for n, a in outputs.items())
claim(
    "replaying a graph gives the eager result (the chains exactly, the MLP allclose)",
    holds=graphs and equal == len(op_counts) and close,
    measured=f"{equal}/{len(op_counts)} chains equal; MLP allclose: {graphs and close}",
    on="cuda",
)
claim("the small MLP's step is faster replayed", mlp_vs, verdict="faster", on="cuda")
