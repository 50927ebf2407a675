"""
Which attention kernel ran, and FlexAttention for the masks SDPA cannot express
===============================================================================

``scaled_dot_product_attention`` picks its kernel at run time, from the inputs,
the device and the libraries present, and says nothing about its choice. A
reader who assumes it chose a fused kernel can be running the math fallback,
whose memory grows with the square of the sequence length.

This page asks the profiler which kernel ran, shows two inputs that change it and
what that costs in memory, then runs FlexAttention (compiled, with a block mask)
against SDPA on a causal and on a sliding window mask, and times a forward and
backward pass.
"""

# %%
# Setup
# -----
# One attention at the FlashAttention papers' shapes (on a GPU: bf16, 16 heads of
# 128, ``S = 8192``, two sequences; on a CPU: float32, shorter, one thread).
from functools import partial

import matplotlib.pyplot as plt
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.nn.functional import scaled_dot_product_attention as attend

import gpuguide
from gpuguide.chapters import attention
from gpuguide.chapters.compiling import capture_compiler
from gpuguide.timing import first_calls_s

if not torch.cuda.is_available():  # two would stall when other work runs
    torch.set_num_threads(1)
page = gpuguide.setup()
device, dtype = page.device, torch.bfloat16 if page.cuda else torch.float32
seq, heads = (256, 2) if page.small else (8192, 16) if page.cuda else (1024, 2)
batch, head_dim = max(16384 // seq, 1) if page.cuda else 2, 128
q, k, v = torch.randn(3, batch, heads, seq, head_dim, device=device, dtype=dtype)
size = f"{batch * seq} tokens, {heads} heads of {head_dim}"  # with S, what is timed
sdpa = partial(attend, is_causal=True)


# %%
# Which kernel ran
# ----------------
# The profiler records the ATen operator that SDPA dispatched to, one per backend:
# ``_scaled_dot_product_cudnn_attention``, ``..._flash_attention``,
# ``..._efficient_attention``, ``..._attention_math``. SDPA tries the backends in a
# priority order and takes the first whose checks (data type, head dimension, mask,
# memory layout, GPU generation) pass. Since torch 2.11, on Hopper and Blackwell GPUs
# with a recent cuDNN (above 9.15), cuDNN comes first;
# ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1`` puts FlashAttention-2 back in front. A CPU
# has one fused kernel, a FlashAttention written for CPUs. ``which`` reads the
# operator from a profile of one call; the next cell's table uses it.
def which(fn):  # the SDPA backend that one call of fn ran
    with torch.profiler.profile() as prof:
        fn()
    return attention.backend_of(e.name for e in prof.events())


# %%
# Two inputs that change the choice
# ---------------------------------
# An explicit float mask rules out FlashAttention-2 (it takes no mask) and costs
# an ``S x S`` matrix of its own; the memory-efficient and cuDNN kernels accept
# one. A ``q`` whose head dimension is not the innermost one in memory (what a
# transpose of a channels-first tensor gives) rules out every fused kernel: they
# need it contiguous. The math path then builds the full score matrix (in float32
# on a GPU). ``.contiguous()`` costs one copy and restores the fused kernel.
# Shorter sequences here on a GPU keep the math path within the memory budget.
short = seq // 4 if page.cuda else seq
args = [t[..., :short, :].contiguous() for t in (q, k, v)]
transposed = args[0].transpose(-2, -1).contiguous().transpose(-2, -1)
cases = {
    "default": lambda: sdpa(*args),
    "float mask": lambda: attend(*args, attn_mask=args[0].new_zeros(short, short)),
    "head dim not innermost": lambda: sdpa(transposed, *args[1:]),
    "...then .contiguous()": lambda: sdpa(transposed.contiguous(), *args[1:]),
}
budget = gpuguide.size_budget(device, memory_fraction=0.5).memory_bytes
need = attention.naive_bytes(batch, short, heads, head_dim, 4)  # the math path's
rows = attention.case_rows(cases, which, need, budget, device=device)
print(gpuguide.table(rows, title=f"S = {short}, causal (where no mask is given)"))
default, masked, strided, copied = (row["backend"] for row in rows)
gpuguide.claim(
    "a q whose head dimension is not innermost sends SDPA to the math path, and "
    ".contiguous() restores the default's fused kernel",
    holds=strided == "math" and copied == default != "math",
    measured=f"{strided}, then {copied} ran ({default} by default)",
)
gpuguide.claim(
    "on a GPU, an explicit float mask rules out FlashAttention-2",
    holds=masked != "flash",
    measured=f"{masked} ran",
    on="cuda",
)
fused, _, fallback, _ = (row["peak memory (MiB)"] for row in rows)
gpuguide.claim(
    "the math fallback's peak memory is at least 4x the fused kernel's",
    holds=bool(fallback and fused and fallback >= 4 * fused),
    measured=f"{fallback} MiB against {fused} MiB",
    unless="small sizes: too little memory to measure" if page.small else None,
)


# %%
# FlexAttention: a causal and a sliding-window mask
# -------------------------------------------------
# FlexAttention takes the mask as a function of the positions (``mask_mod``);
# ``create_block_mask`` evaluates it once per 128 x 128 block, so that the kernel
# skips the blocks that are fully masked. Three costs differ, and are timed apart:
# building the block mask (once per mask and shape), compiling (once per mask
# function; the first call here also starts the compiler), and the steady-state
# call, in rounds against SDPA. The mask is causal within a window of the last
# ``window`` tokens; with the window in a tensor, one compiled kernel serves every
# window, and a window as long as the sequence is plain causal attention.
#
# SDPA takes a sliding window only as a dense ``S x S`` boolean matrix: it costs the
# matrix's memory, and every block is still computed, where FlexAttention skips the
# blocks outside the window. With a window of an eighth of the sequence, most are.
def causal_window(window):  # a mask_mod: causal, within the last `window` tokens
    window = torch.tensor(window, device=device)
    return lambda b, h, q_idx, kv_idx: (q_idx >= kv_idx) & (q_idx - kv_idx < window)


flex = torch.compile(flex_attention)
window, at = seq // 8, torch.arange(seq, device=device)
dense = causal_window(window)(None, None, at[:, None], at[None, :])  # S x S, bool
sdpa_dense = partial(attend, q, k, v, attn_mask=dense)
against = {  # Flex's window: its name, SDPA's name and call
    seq: ("Flex, causal", "SDPA default", partial(sdpa, q, k, v)),
    window: (f"Flex, window {window}", "SDPA, dense mask", sdpa_dense),
}
bars = {}  # every variant's times, for the figure
for w, (name, base, ref) in against.items():
    make = partial(create_block_mask, causal_window(w), None, None, seq, seq)
    blocks, build_s = attention.timed_once(partial(make, device=device), device=device)
    call = partial(flex, q, k, v, block_mask=blocks)
    with capture_compiler():
        first_s = first_calls_s(call, device=device, calls=1)
    bars |= gpuguide.interleave({name: call, base: ref}, rep_ms=500, device=device)
    gain = gpuguide.compare(bars[name], bars[base])
    config = {"causal": True} if w == seq else {"window": w}
    gpuguide.report(f"{name} against {base}", gain, size=size, S=seq, **config)
    print(
        f"{name}: block mask built in {build_s * 1e3:.0f} ms, {blocks.sparsity():.0f}%"
        f" of blocks skipped; compile and first call {first_s:.2f} s"
    )
gpuguide.claim(
    f"with a window of {window}, Flex is at least 2x faster than SDPA's dense mask",
    gain,  # the last one: the window's
    at_least=2.0,
)
fig, ax = plt.subplots()
title = f"Causal attention at S={seq}: FlexAttention and SDPA"
ylabel = "time per call (ms)"
gpuguide.plot_bars(ax, bars, ylabel=ylabel, baseline="SDPA default", title=title)
plt.show()


# %%
# Forward and backward
# --------------------
# Training runs the backward pass too, which the papers count as 2.5 times the
# forward's FLOP. The FlashAttention-2 paper reports up to 335 TFLOP/s forward and
# backward on an H100: a published result of one kernel, not a ceiling (cuDNN's
# kernel, SDPA's first choice on Hopper GPUs, can go past it).
def train_step():
    return torch.autograd.grad(attend(q, k, v), (q, k, v), grad)


q, k, v = (t.requires_grad_() for t in (q, k, v))
grad = torch.randn_like(q)
m = gpuguide.benchmark(train_step, label="SDPA forward + backward", device=device)
rate = m.rate(attention.attention_flop(batch, seq, heads, head_dim, backward=True))
config = {"size": size, "S": seq, "causal": False, "backend": which(train_step) or "?"}
gpuguide.report("SDPA forward + backward", rate, **config)

# %%
# What to take away
# -----------------
# Check which kernel ran with the profiler rather than assume it: an explicit
# mask or an unusual memory layout silently changes the kernel, and the math
# fallback's memory grows with ``S**2``. FlexAttention compiles a fused kernel for
# a mask written as a Python function; its block mask and its compilation are
# one-off costs to keep out of the steady-state comparison.
gpuguide.takeaway()
