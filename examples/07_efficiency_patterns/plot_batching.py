"""
Batching small operations into one call
=======================================

Every PyTorch call pays a fixed cost before its arithmetic starts: Python,
PyTorch's dispatcher and, on a GPU, a kernel launch. A loop of small operations
pays it once per operation; one batched call pays it once. This page measures a
loop of small matrix multiplications against one ``torch.bmm`` over a range of
batch sizes, so you can see what batching buys on your device.

See also the concept pages :doc:`how a GPU runs PyTorch </concepts/gpu>` and
:doc:`the roofline and its three regimes </concepts/roofline>`.
"""

import matplotlib.pyplot as plt
import torch

import gpuguide
from gpuguide import Sweep, compare

page = gpuguide.setup()
device = page.device


# %%
# A loop of calls and one batched call
# ------------------------------------
# ``B`` pairs of small ``n x n`` matrices are stacked into ``(B, n, n)`` tensors once,
# outside the timed region. The loop multiplies them one pair at a time; the batched
# version makes one ``torch.bmm`` call. Both write into the same preallocated
# ``out``, so the only difference is the number of calls.
def loop_mm(a, b, out):
    for i in range(a.shape[0]):
        torch.mm(a[i], b[i], out=out[i])
    return out


def batched_mm(a, b, out):
    return torch.bmm(a, b, out=out)


n = 32 if page.small else 64


def stacked(B, device):
    return [torch.randn(B, n, n, device=device) for _ in range(3)]


a, b, out = stacked(4, device)
assert torch.allclose(loop_mm(a, b, out.clone()), batched_mm(a, b, out), atol=1e-4)

# %%
# Timing both as the batch grows
# ------------------------------
# The fixed cost of a call is the point here, so each time is per call as a loop of
# calls runs it, launches included, and the two versions take turns for five rounds
# at each ``B`` (``paired=True``), so that a drift of the machine's speed falls on
# both. On a CPU a timed sample is a block of calls of at least 10 ms
# (``sample_ms``): a call on two threads can lose a whole scheduler tick, which a
# block averages. Expect the loop to be slower already at ``B = 1``, where it also
# pays for indexing ``a[i]``, ``b[i]`` and ``out[i]``. As ``B`` grows, the loop's
# time grows with ``B`` while a small ``bmm`` costs about one launch: on a GPU,
# whose launch dwarfs the arithmetic of a 64 x 64 product, expect the speed-up to
# grow to a large fraction of ``B``; on a CPU, where a product's arithmetic costs
# about as much as a call, expect far less. The claims below the table check both.
batching = Sweep(
    f"{n}x{n} matmuls (results allclose)",
    stacked,
    sizes=[1, 4, 16, 64] if page.small else [1, 4, 16, 64, 256],
    size_label="batch size B (matrices)",
).run({"loop": loop_mm, "bmm": batched_mm}, paired=True, sample_ms=10)
print(batching)
B = batching.largest("loop", "bmm")
first, last = batching.compare("bmm", "loop", 1), batching.compare("bmm", "loop")
gpuguide.report("bmm speed-up over a loop", last, size=f"B={B}, {n}x{n}")
gpuguide.claim(
    "at B=1 the loop is already slower: one bmm at least 1.1x faster",
    first,
    at_least=1.1,
)
gpuguide.claim(
    f"the loop's time grows about in proportion to B: at B={B} at least "
    f"{B // 2}x its time at B=1",
    compare(batching.at("loop", 1), batching.at("loop")),
    at_least=B // 2,
)
# At B=16, not the largest B: a busy CPU disturbs the largest calls most.
mid = batching.compare("bmm", "loop", 16)
gpuguide.claim(
    "bmm's speed-up over the loop grows with B: at B=16 at least 1.2x the "
    "speed-up at B=1",
    mid.speedup / first.speedup,
    at_least=1.2,
    timed=True,
    spread=(mid.low / first.high, mid.high / first.low),
)
gpuguide.claim(
    f"on a GPU, one bmm of B={B} products is at least {B // 4}x faster "
    "than the loop (a launch dwarfs a small product)",
    last,
    at_least=B // 4,
    on="cuda",
)
gpuguide.claim(
    f"on a CPU, far less: one bmm of B={B} is at most 10x faster than "
    "the loop (a product's arithmetic costs about as much as a call)",
    last,
    at_most=10,
    on="cpu",
)
if device.type == "cuda":  # how much of bmm's time per call is the GPU's work?
    a, b, out = stacked(B, device)
    work = gpuguide.benchmark(batched_mm, args=(a, b, out), measure="kernel")
    print(
        f"the GPU's own work in one bmm of {B} products: {work} "
        f'(measure="kernel"), of {batching.at("bmm")} per call'
    )

# %%
# Plot: time per call against the batch size
# -------------------------------------------
# The loop's time grows in proportion to ``B``; the batched call's grows only by the
# arithmetic it adds. So the lines part by as much as a call's fixed cost outweighs
# one product's arithmetic: widely on a GPU, less on a CPU. The title gives the
# speed-up at the largest batch, with its spread.
ratio = last.short.split(" (")[0]
batching.plot(
    title=f"One bmm call against {B} mm calls: {last.short}",
    labels={"loop": "loop of torch.mm", "bmm": f"torch.bmm ({ratio} at B={B})"},
    record="loop against bmm",
)
plt.show()

# %%
# What to take away
# -----------------
# Batch small operations into one call whenever the data allows it (``torch.bmm``
# for matrix products, a batch dimension for a model's inputs): the fewer the
# calls, the less the fixed cost of each matters. How much batching buys depends on
# the device: it is the ratio of a call's fixed cost to one product's arithmetic,
# which the claims below state for a GPU and for a CPU.
gpuguide.takeaway()
