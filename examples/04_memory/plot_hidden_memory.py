"""
Memory you can't see: fragmentation and the loss layer
======================================================

An out-of-memory error often reports gigabytes "reserved by PyTorch but
unallocated": memory the caching allocator holds in blocks no tensor fits, because
tensors of changing sizes split its blocks into slivers. Expandable segments
(``expandable_segments:True``) let the allocator grow one mapping instead of
asking the driver for new blocks. The loss layer hides the other large cost: with
a 128k vocabulary, the logits and their gradient can outweigh the rest of a step.

This page runs a training loop of varying batch lengths in fresh processes, each
allocator setting read back from torch: peak allocated and reserved memory,
fragmentation, retries, step time. Then a cross-entropy loss computed in chunks
against the full logits: the loss, its memory, its time.
"""

# %%
# Setup
# -----
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import gpuguide
from gpuguide import compare, interleave, report, table
from gpuguide.chapters import allocator
from gpuguide.sizes import free_memory_bytes

page = gpuguide.setup()
device = page.device

# %%
# Which variable does this torch read?
# ------------------------------------
# Allocator settings come from an environment variable read once, when the
# allocator starts: set it before the process touches the GPU, or in a fresh
# process. torch reads ``PYTORCH_CUDA_ALLOC_CONF`` and the newer ``PYTORCH_ALLOC_CONF``
# (which torch 2.9.1 silently ignored for expandable segments), so each run reads
# back what it got: on a GPU the memory snapshot's ``allocator_settings``,
# elsewhere the string torch parsed (``allocator_settings`` in
# :mod:`gpuguide.chapters.allocator`).
conf = "expandable_segments:True"
read = {n: allocator.run_fresh({n: conf})["settings"] for n in allocator.NAMES}
honoured = [n for n, settings in read.items() if allocator.expandable(settings)]
print(f"{conf} read back under {' and '.join(honoured) or 'neither name'}")

# %%
# Fragmentation: three allocator settings, one loop
# -------------------------------------------------
# Each fresh process trains a bf16 MLP on batches of random lengths, then one of
# the longest, with the cap ``GPUGUIDE_GPU_MEMORY`` applied:
#
# .. literalinclude:: /../src/gpuguide/chapters/allocator.py
#    :pyobject: varying_length_steps
#
# Fragmentation is reserved minus allocated, as a share of reserved, at the peak.
# The third setting is the trap: ``max_split_size_mb`` stops the allocator from
# splitting cached blocks larger than it, so a large free block serves only
# requests within 20 MiB of its size. It bounds slivers, but a large tensor of a
# new size then needs a new block, and once the cap is reached, each retry frees
# the cache and waits on the driver (``num_alloc_retries``).
name = honoured[0] if honoured else allocator.NAMES[0]
confs = {"default": {}} | {c: {name: c} for c in (conf, "max_split_size_mb:32")}
runs, peak = {}, {conf: (1, 1), "default": (1, 1)}
if page.needs_cuda("Fragmentation of the CUDA caching allocator"):
    steps, tokens = (8, 2048) if page.small else (40, 8192)
    train = ("train", str(steps), str(tokens))
    runs = {label: allocator.run_fresh(env, *train) for label, env in confs.items()}
    rows = [{"allocator": k} | allocator.summary(run) for k, run in runs.items()]
    print(table(rows, title=f"{steps} steps of up to {tokens} tokens, then {tokens}"))
    for label, run in runs.items():
        peak[label] = max(run["allocated"]), max(run["reserved"])
        report("peak reserved", peak[label][1], unit="B", allocator=label)
ratio = peak[conf][1] / peak["default"][1]
same = abs(peak[conf][0] / peak["default"][0] - 1) <= 0.01
gpuguide.claim(
    "on a GPU, peak reserved memory is lower with expandable segments, at equal "
    "peak allocated memory (within 1%)",
    holds=same and ratio < 1,
    measured=f"reserved {ratio:.2f}x the default's, allocated equal: {same}",
    on="cuda",
)

# %%
# Reserved against allocated, and the segment map
# -----------------------------------------------
# Each step's peaks, then ``torch.cuda.memory._snapshot()``'s segments (what the
# allocator reserved) and the blocks they are cut into, after the last step's
# forward pass: blue blocks hold tensors, grey ones are reserved but free.
if runs:
    fig, ax = plt.subplots()
    for i, label in enumerate([conf, "default"]):
        for kind, style in {"reserved": "-", "allocated": ":"}.items():
            mib = [b / 2**20 for b in runs[label][kind]]
            ax.plot(mib, f"C{i}{style}", label=f"{label}: {kind}")
    title = f"Expandable segments: peak reserved {ratio:.2f}x the default's"
    ax.set(xlabel="training step", ylabel="peak memory in the step (MiB)", title=title)
    ax.legend()
    gpuguide.label_device(fig, device)
    plt.show()
    fig, axes = plt.subplots(1, 2, sharex=True)
    for ax, label in zip(axes, confs, strict=False):
        allocator.draw_segments(ax, runs[label]["segments"])
        count = len(runs[label]["segments"])
        ax.set(title=f"{label}: {count} segments", xlabel="offset (MiB)")
    axes[0].set_ylabel("segment (by address)")
    gpuguide.label_device(fig, device)
    plt.show()

# %%
# The loss layer, in chunks
# -------------------------
# The full loss makes the ``tokens x vocabulary`` logits, and backward a gradient
# of the same size. Computing the loss over chunks of tokens, each in
# ``torch.utils.checkpoint``, keeps one chunk's logits at a time: backward
# recomputes them, chunk by chunk. On a GPU the vocabulary is 128k and the tokens
# as many of 16k as fit the memory budget.
vocab, width, tokens = (131072, 1024, 16384) if page.cuda else (32768, 256, 512)
if page.small:
    vocab, width, tokens = 8192, 64, 256
while 16 * tokens * vocab > free_memory_bytes(device):
    tokens //= 2
hidden = torch.randn(tokens, width, device=device, requires_grad=True)
weight = torch.randn(vocab, width, device=device).div(width**0.5).requires_grad_()
targets = torch.randint(vocab, (tokens,), device=device)


def full_loss():
    return F.cross_entropy(hidden @ weight.T, targets)


def chunk_loss(h, t):
    return F.cross_entropy(h @ weight.T, t, reduction="sum")


def chunked_loss(chunks=8):
    parts = zip(hidden.chunk(chunks), targets.chunk(chunks), strict=True)
    total = sum(checkpoint(chunk_loss, h, t, use_reentrant=False) for h, t in parts)
    return total / tokens


def step(loss_fn):
    hidden.grad = weight.grad = None
    loss = loss_fn()
    loss.backward()
    return loss.detach(), hidden.grad, weight.grad


losses = {"full logits": full_loss, "chunked": chunked_loss}
calls = {label: partial(step, loss_fn) for label, loss_fn in losses.items()}
out = {label: call() for label, call in calls.items()}
print(f"{tokens} tokens, vocabulary {vocab}, width {width}")

# %%
# Same loss, less memory
# ----------------------
# The loss layer's peak is the rise of tensor memory during forward and backward:
# the allocator's counters on a GPU, elsewhere the sum of the allocations and
# frees torch's profiler records (``profile_memory=True``), not the process's RSS.
# Both are timed in alternating rounds.
pairs = zip(out["chunked"], out["full logits"], strict=True)
diff = max(float((a - b).abs().max() / b.abs().max()) for a, b in pairs)
gpuguide.claim(
    "the chunked loss equals the full one, and so do its gradients (within 1e-3)",
    diff,
    at_most=1e-3,
)
mem = {k: allocator.tensor_peak_bytes(call, device) for k, call in calls.items()}
for label, value in mem.items():
    report("loss layer peak memory", value, unit="B", loss=label, size=tokens)
gpuguide.claim(
    "the chunked loss layer's peak memory is at most half the full one's",
    mem["chunked"] / mem["full logits"],
    at_most=0.5,
)
times = interleave(calls, rounds=3)
speed = compare(times["chunked"], times["full logits"])
report("chunked loss against the full logits", speed, size=tokens)

# %%
# What to take away
# -----------------
# Read back the allocator settings a process got before comparing settings; see
# the claims above for what expandable segments did to reserved memory here. For
# a large vocabulary, compute the loss in chunks: its logits never exist whole.
gpuguide.takeaway()
