"""
Attention written out, against SDPA's fused kernels
===================================================

Attention is ``softmax(q @ k.T / sqrt(d)) @ v`` for every head. Written out in
PyTorch, it builds the ``S x S`` matrix of scores for each head in memory, then
reads it back twice (softmax, then the product with ``v``): its memory grows with
the square of the sequence length ``S``, and it moves far more bytes than it reads
in inputs. ``torch.nn.functional.scaled_dot_product_attention`` (SDPA) runs instead
one of several fused kernels (FlashAttention, memory-efficient, cuDNN) that keep
each tile of scores on chip and never write the matrix out.

This page checks that every backend gives the same answer, then sweeps the
sequence length at the FlashAttention papers' shapes (on a GPU: bf16, head dim
128, hidden size 2048, so 16 heads, and ``16384 / S`` sequences) and measures time,
TFLOP/s and peak memory of each, until the written-out version no longer fits the
page's memory budget.

See also :doc:`/concepts/roofline` and the kernel-fusion chapter, of which fused
attention is the most valuable case.
"""

# %%
# Setup
# -----
# The papers count ``4 * B * S**2 * H * D`` FLOP for one forward pass (two
# matmuls of ``2 * S**2 * D`` per head; half as many with a causal mask), and
# :func:`~gpuguide.chapters.attention.attention_flop` does the same. A CPU runs the
# same code with fewer heads, fewer tokens, shorter sequences and float32.
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import gpuguide
from gpuguide.chapters import attention

page = gpuguide.setup()
device = page.device
dtype, peak = (torch.bfloat16, "bf16") if page.cuda else (torch.float32, "fp32")
head_dim, heads, tokens = 128, (16 if page.cuda else 2), (16384 if page.cuda else 4096)
lengths = [512, 1024, 2048, 4096, 8192, 16384] if page.cuda else [256, 512, 1024, 2048]
if page.small:
    lengths, tokens = [128, 256], 512
element = torch.finfo(dtype).bits // 8
size = f"{tokens} tokens, {heads} heads of {head_dim}"  # what every S shares


def make_qkv(seq):  # q, k, v of shape (batch, heads, seq, head_dim)
    shape = (tokens // seq, heads, seq, head_dim)
    return [torch.randn(shape, device=device, dtype=dtype) for _ in range(3)]


print(f"{heads} heads of {head_dim}, {tokens} tokens per call, {dtype}, S = {lengths}")

# %%
# The formula, written out
# ------------------------
# Scaling ``q`` before the product saves one pass over the scores. The causal mask
# (a token attends only to earlier ones) sets the upper triangle to ``-inf``
# before the softmax.


def naive(q, k, v, causal=False):
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if causal:
        s = q.shape[-2]
        above = torch.ones(s, s, dtype=torch.bool, device=q.device).triu_(1)
        scores.masked_fill_(above, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


# %%
# The backends, and whether they agree
# ------------------------------------
# ``torch.nn.attention.sdpa_kernel`` restricts SDPA to the backends given; one
# that cannot run these inputs on this device raises an error, so each is tried
# once. The reference is the written-out formula in float32 (float64 on a CPU);
# each output's largest error, relative to the reference's largest value, must be
# within a tolerance set by the data type's precision.
candidates = {"math": SDPBackend.MATH, "flash": SDPBackend.FLASH_ATTENTION,
              "memory-efficient": SDPBackend.EFFICIENT_ATTENTION}  # fmt: skip
if hasattr(SDPBackend, "CUDNN_ATTENTION"):  # where torch has it
    candidates["cuDNN"] = SDPBackend.CUDNN_ATTENTION
q, k, v = make_qkv(lengths[1])
backends = attention.usable_backends(lambda: F.scaled_dot_product_attention(q, k, v),
                                     candidates)  # fmt: skip
print(f"backends that run here: {', '.join(backends)}")

variants = {"naive": lambda q, k, v, causal=False: naive(q, k, v, causal),
            "SDPA default": lambda q, k, v, causal=False: F.scaled_dot_product_attention(
                q, k, v, is_causal=causal)}  # fmt: skip
for name, backend in backends.items():

    def forced(q, k, v, causal=False, backend=backend):
        with torch.nn.attention.sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    variants[f"SDPA {name}"] = forced

tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
agree = []
for causal in (False, True):
    high = torch.float32 if page.cuda else torch.float64
    reference = naive(q.to(high), k.to(high), v.to(high), causal)
    checks = [(name, *attention.agreement(fn(q, k, v, causal), reference, tolerance=tolerance))
              for name, fn in variants.items()]  # fmt: skip
    print(f"causal={causal}, tolerance {tolerance:g} of the largest value: " + "; ".join(
        f"{name} {err:.1e} {'ok' if ok else 'DIFFERS'}" for name, err, ok in checks))  # fmt: skip
    agree += [ok for _, _, ok in checks]
gpuguide.claim("every variant gives the reference's answer within the tolerance",
               holds=all(agree), measured=f"{sum(agree)} of {len(agree)} outputs within it")  # fmt: skip
del q, k, v, reference

# %%
# The sweep over sequence length
# ------------------------------
# Every variant runs at every length whose memory fits half the page's budget
# (which ``GPUGUIDE_GPU_MEMORY`` caps on a GPU): the written-out path and SDPA's
# math backend (float32 inside, on a GPU) need three ``S x S`` matrices per head,
# the fused kernels little beyond their inputs. A run that outgrows memory anyway
# is caught and left out. Peak memory is what one call adds to the inputs already
# allocated (on a CPU, the process's resident memory: a coarser measure).
budget = gpuguide.size_budget(device, memory_fraction=0.5).memory_bytes
times, memory = {n: [] for n in variants}, {n: [] for n in variants}
for seq in lengths:
    q, k, v = make_qkv(seq)
    for name, fn in variants.items():
        sizes = (tokens // seq, seq, heads, head_dim)
        quadratic = name in ("naive", "SDPA math")
        math_bytes = 4 if page.cuda and name == "SDPA math" else element
        need = attention.naive_bytes(*sizes, math_bytes) if quadratic else 8 * q.nbytes

        def run(fn=fn, name=name, args=(q, k, v)):
            with gpuguide.track_memory(device) as tracker:
                fn(*args)
            return gpuguide.benchmark(fn, args=args, label=name), tracker.report

        on_oom = torch.cuda.empty_cache if page.cuda else None
        got = attention.run_within_memory(run, need, budget, on_oom=on_oom)
        times[name].append(got and got[0].rate(attention.attention_flop(*sizes)))
        memory[name].append(got and max(got[1].peak_increase_bytes or 0, 0))
    del q, k, v

rows = [{"S": s, **{n: times[n][i] for n in variants}} for i, s in enumerate(lengths)]
print(gpuguide.table(rows, title="forward FLOP/s (spread); -: over the memory budget"))
at = 8192 if 8192 in lengths else lengths[-1]  # the papers' headline length
for name in ("SDPA default", "SDPA flash", "naive"):
    measured = [(s, r) for s, r in zip(lengths, times.get(name, []), strict=True)
                if r and s <= at]  # fmt: skip
    if measured:  # the naive path: its longest length within the budget
        s, rate = measured[-1]
        gpuguide.report(name, rate, peak=peak, size=size, S=s, causal=False)
both = [i for i, s in enumerate(lengths) if s <= at and times["naive"][i]]
if both:  # the longest length where both ran
    i = both[-1]
    fused, out = times["SDPA default"][i], times["naive"][i]
    gpuguide.claim(f"at S={lengths[i]}, SDPA default runs at least 1.2x the written-out FLOP/s",
                   fused.value / out.value, spread=(fused.low / out.high, fused.high / out.low),
                   at_least=1.2, timed=True)  # fmt: skip

# %%
# Memory: quadratic against linear
# --------------------------------
# The written-out path's scores grow with ``S**2`` per sequence, a fused kernel's
# working memory with ``S``: at a fixed number of tokens per call, the ratio of the
# two grows with ``S`` (a claim below checks it). The ratios below are for the
# one forward pass this page times. The FlashAttention README's figures, 10x less
# memory than standard attention at ``S = 2048`` and 20x at 4096, were measured for
# training (forward and backward): a different quantity, quoted beside them.
for seq in (2048, 4096):
    i = lengths.index(seq) if seq in lengths else None
    pair = None if i is None else (memory["naive"][i], memory["SDPA default"][i])
    if pair and all(pair):
        ratio, name = pair[0] / pair[1], "forward peak memory, naive / SDPA default"
        gpuguide.report(name, ratio, unit="x", size=size, S=seq)
print(
    "quoted for training (forward and backward), not measured here: the "
    "FlashAttention README's 10x less memory at S=2048, 20x at S=4096"
)
print(f"memory budget for one call: {budget / 2**30:.2f} GiB")
ratios = [(s, n / f) for s, n, f in zip(lengths, memory["naive"], memory["SDPA default"],
                                         strict=True) if n and f]  # fmt: skip
grew = len(ratios) >= 2 and ratios[-1][1] >= 2 * ratios[0][1]
gpuguide.claim("naive's memory over SDPA default's grows with S: at least doubles over the sweep",
               holds=grew, measured=", ".join(f"{r:.3g}x at S={s}" for s, r in ratios),
               unless="small sizes: too little memory to measure" if page.small else None)  # fmt: skip

fig, ax = plt.subplots()
gpuguide.plot_sweep(ax, lengths, {n: [b and b / 2**20 for b in memory[n]] for n in variants},
                    xlabel="sequence length S (tokens)", ylabel="peak memory per call (MiB)",
                    title="Peak memory per call: " + ", ".join(
                        f"naive {r:.3g}x SDPA at S={s}" for s, r in ratios[::2]))  # fmt: skip
ax.axhline(budget / 2**20, color="0.5", ls=":", label="budget")
ax.legend()
plt.show()

# %%
# TFLOP/s against the published kernels
# -------------------------------------
# Each line is one variant's forward rate; on a GPU, the markers at ``S = 8192``
# are the FlashAttention-3 paper's H100 SXM5 figures at the same shapes. The
# causal case, at ``S = 8192`` (on a CPU, the longest length), follows: a causal mask halves the work, but
# a kernel that skips the masked tiles has less to overlap, so its rate drops.
fig, ax = plt.subplots()
gpuguide.plot_sweep(ax, lengths, {n: [r and r.value / 1e12 for r in times[n]] for n in variants},
                    xlabel="sequence length S (tokens)", ylabel="forward rate (TFLOP/s)",
                    title="Forward rate against sequence length", logy=False)  # fmt: skip
if page.cuda:
    for label, flops in attention.PUBLISHED_FLOPS[False].items():
        ax.scatter([8192], [flops / 1e12], marker="x", label=f"{label} (H100, paper)")
    ax.legend(fontsize="small")
plt.show()

q, k, v = make_qkv(at)
causal_flop = attention.attention_flop(tokens // at, at, heads, head_dim, causal=True)
for name in ("SDPA default", "SDPA flash"):
    if name in variants:
        m = gpuguide.benchmark(variants[name], args=(q, k, v, True), label=name)
        rate = m.rate(causal_flop)
        gpuguide.report(name, rate, peak=peak, size=size, S=at, causal=True)
        full = times[name][lengths.index(at)]
        if name == "SDPA default" and full:
            gpuguide.claim(f"at S={at}, {name}'s causal rate is below its non-causal one",
                           rate.value / full.value, spread=(rate.low / full.high,
                           rate.high / full.low), at_most=1.0, timed=True)  # fmt: skip
if page.cuda:
    print("published, H100 SXM5, S=8192: " + "; ".join(
        f"{'causal' if c else 'non-causal'} " + ", ".join(f"{n} {f / 1e12:.0f}" for n, f in p.items())
        for c, p in attention.PUBLISHED_FLOPS.items()) + " TFLOP/s")  # fmt: skip

# %%
# What to take away
# -----------------
# Call ``scaled_dot_product_attention`` rather than writing the formula out: the
# answer is the same within the data type's precision, its memory does not hold the
# ``S x S`` matrices, and its rate is higher than the written-out version's, which
# is limited by moving them (the claims, in this run). The next page
# shows which kernel SDPA picked, when it falls back to the math path, and
# FlexAttention for masks SDPA cannot express.
gpuguide.takeaway()
