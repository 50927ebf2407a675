"""
Memory you can't see: fragmentation and the loss layer
======================================================

An out-of-memory error often reports gigabytes "reserved by PyTorch but
unallocated": memory the caching allocator holds in blocks no tensor fits, because
tensors of changing sizes split its blocks into slivers. Expandable segments
(``expandable_segments:True``) let the allocator grow one mapping instead of
asking the driver for new blocks. The loss layer hides the other large cost: with
a 128k vocabulary, the logits and their gradient can outweigh the rest of a step.

This page trains on batches of varying length in fresh processes, each reading
back its allocator setting: peak memory, fragmentation, retries, step time. Then
it sets a cross-entropy loss computed in chunks against the full logits.
"""

# %%
# Setup
# -----
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

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
# (torch 2.9.1 ignored it for expandable segments: pytorch#183387), so each run
# reads back what it got (on a GPU, a snapshot's ``allocator_settings``).
conf = "expandable_segments:True"
read = allocator.read_back(conf)  # a fresh process per name
honoured = [n for n, settings in read.items() if allocator.expandable(settings)]
print(f"{conf} read back under {' and '.join(honoured) or 'neither name'}")

# %%
# Fragmentation: three allocator settings, one loop
# -------------------------------------------------
# Each fresh process trains a bf16 MLP on batches of random lengths, then one of
# the longest, within ``GPUGUIDE_GPU_MEMORY``:
#
# .. literalinclude:: /../src/gpuguide/chapters/allocator.py
#    :pyobject: varying_length_steps
#
# Fragmentation is reserved minus allocated, as a share of reserved, at the peak.
# The third setting is the trap: ``max_split_size_mb`` stops the allocator from
# splitting cached blocks larger than it, so such a free block serves only
# requests within 20 MiB of its size: a large tensor of a new size needs a new
# block, and at the cap each retry frees the cache (``num_alloc_retries``).
name = honoured[0] if honoured else allocator.NAMES[0]
confs = {"default": {}} | {c: {name: c} for c in (conf, "max_split_size_mb:32")}
runs, peak = {}, {conf: (1, 1), "default": (1, 1)}
if page.needs_cuda("Fragmentation of the CUDA caching allocator"):
    steps, tokens = (8, 2048) if page.small else (40, 8192)
    runs = {k: allocator.run_fresh(env, steps, tokens) for k, env in confs.items()}
    rows = [{"allocator": k} | allocator.summary(run) for k, run in runs.items()]
    print(table(rows, title=f"{steps} steps of up to {tokens} tokens, then {tokens}"))
    for label, run in runs.items():
        peak[label] = max(run["allocated"]), max(run["reserved"])
        report("peak reserved", peak[label][1], unit="B", allocator=label)
ratio = peak[conf][1] / peak["default"][1]
same = abs(peak[conf][0] / peak["default"][0] - 1) <= 0.01
gpuguide.claim(
    "peak reserved memory is lower with expandable segments, at equal allocated (1%)",
    holds=same and ratio < 1,
    measured=f"reserved {ratio:.2f}x the default's, allocated equal: {same}",
    on="cuda",
)

# %%
# Reserved against allocated, and the segment map
# -----------------------------------------------
# Each step's peaks; then, after the last forward pass, the reserved segments'
# blocks (``torch.cuda.memory._snapshot()``): blue holds tensors, grey is free.
if runs:
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.5))
    for i, label in enumerate([conf, "default"]):
        for kind, style in {"reserved": "-", "allocated": ":"}.items():
            mib = [b / 2**20 for b in runs[label][kind]]
            axes[0].plot(mib, f"C{i}{style}", label=f"{label}: {kind}")
    title = f"peak reserved {ratio:.2f}x the default's"
    axes[0].set(xlabel="training step", ylabel="peak memory (MiB)", title=title)
    axes[0].legend()
    allocator.draw_segments(axes[1:], runs)  # the first two runs' segment maps
    gpuguide.label_device(fig, device)
    plt.show()

# %%
# The loss layer, in chunks
# -------------------------
# The full loss keeps the ``tokens x vocabulary`` logits' log-softmax, and backward
# makes two gradients of that size. The chunked loss (Liger-Kernel's design) goes
# over chunks of tokens, computing from each chunk's logits the loss and at once
# its gradients: one chunk's logits exist at a time, backward only scales the
# gradients, and the matrix products are the full loss's three. A GPU takes Llama
# 3's vocabulary of 128,256 (under 2**31 logits, where CUDA's loss has failed:
# pytorch#85786) in bf16, and 16k tokens if the full loss fits the memory budget.


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of ``hidden @ weight.T``, chunk by chunk; no ignore_index."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunks=4):
        n, loss = len(targets), torch.zeros((), device=hidden.device)
        grad_hidden, grad_weight = [], torch.zeros_like(weight)
        for h, t in zip(hidden.chunk(chunks), targets.chunk(chunks), strict=True):
            logp = (h @ weight.T).log_softmax(-1)  # this chunk's log-probabilities
            loss -= logp.gather(-1, t[:, None]).float().sum()
            probs = logp.exp_()  # the softmax, in place
            probs[torch.arange(len(t), device=t.device), t] -= 1  # d loss / d logits
            grad_hidden.append(probs @ weight / n)
            grad_weight.addmm_(probs.T, h, alpha=1 / n)  # += probs.T @ h / n
            del logp, probs  # the same tensor: freed before the next chunk's logits
        ctx.grads = torch.cat(grad_hidden), grad_weight
        return loss / n

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight = ctx.grads
        return grad_hidden * grad_output, grad_weight * grad_output, None, None


def full_loss(hidden, weight, targets):
    return F.cross_entropy(hidden @ weight.T, targets)


vocab, width, tokens = (128256, 1024, 16384) if page.cuda else (32768, 256, 512)
if page.small:
    vocab, width, tokens = 8192, 64, 256
dtype = torch.bfloat16 if page.cuda else torch.float32
while 3 * tokens * vocab * dtype.itemsize + 2**30 > free_memory_bytes(device):
    tokens //= 2  # 1 GiB left for the weight, the hidden states and their gradients
size = gpuguide.format_bytes(tokens * vocab * dtype.itemsize)
print(f"{tokens} tokens x vocabulary {vocab} (width {width}): {dtype} logits of {size}")
hidden = torch.randn(tokens, width, device=device, dtype=dtype, requires_grad=True)
weight = torch.nn.Linear(width, vocab, bias=False, device=device, dtype=dtype).weight
targets = torch.randint(vocab, (tokens,), device=device)


def step(loss_fn, hidden=hidden, weight=weight, targets=targets):
    loss = loss_fn(hidden, weight, targets)
    return loss.detach(), *torch.autograd.grad(loss, (hidden, weight))


losses = {"chunked": ChunkedCrossEntropy.apply, "full logits": full_loss}
calls = {label: partial(step, loss_fn) for label, loss_fn in losses.items()}

# %%
# Same loss, less memory
# ----------------------
# The loss layer's peak is the rise of tensor memory in forward and backward (on a
# CPU, from the allocations torch's profiler records); both are timed in rounds,
# then compared in float32 (bf16 keeps 3 digits) on up to 1024 tokens: the loss's
# and each gradient's largest difference, relative to its largest value.
mem = {k: allocator.tensor_peak_bytes(call, device) for k, call in calls.items()}
for label, value in mem.items():
    report("loss layer peak memory", value, unit="B", loss=label, size=tokens)
gpuguide.claim(
    "the chunked loss layer's peak memory is at most half the full one's",
    mem["chunked"] / mem["full logits"],
    at_most=0.5,
)
report("chunked loss against the full logits", compare(*interleave(calls).values()))
exact = [x.detach().float().requires_grad_() for x in (hidden[:1024], weight)]
out = [step(loss_fn, *exact, targets[:1024]) for loss_fn in losses.values()]
diff = max(float(abs(a - b).max() / abs(b).max()) for a, b in zip(*out, strict=True))
gpuguide.claim(
    "the chunked loss equals the full one, and so do its gradients (within 1e-3)",
    diff,
    at_most=1e-3,
)

# %%
# What to take away
# -----------------
# Read back the settings a process got before comparing allocator settings. For a
# large vocabulary, compute the loss in chunks: its logits never exist whole.
gpuguide.takeaway()
