"""
Which attention kernel ran, and FlexAttention for the masks SDPA cannot express
===============================================================================

``scaled_dot_product_attention`` picks its kernel at run time, from the inputs,
the device and the libraries present, and says nothing about its choice. A
reader who assumes it chose a fused kernel can be running the math fallback,
whose memory grows with the square of the sequence length.

This page asks the profiler which kernel ran and why, shows two inputs that change
it and what that costs in memory, then runs FlexAttention (compiled, with a block
mask) against SDPA on a causal and on a sliding window mask, and times a forward and
backward pass.
"""

# %%
# Setup
# -----
# One causal attention at the FlashAttention papers' shapes (on a GPU: bf16, 16
# heads of 128, ``S = 8192``, two sequences; on a CPU: float32, shorter, one thread).
from functools import partial

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
from torch.profiler import ProfilerActivity, profile

import gpuguide
from gpuguide.chapters import attention, compiling

if not torch.cuda.is_available():  # two would stall when other work runs
    torch.set_num_threads(1)
page = gpuguide.setup()
device, sync = page.device, getattr(torch, page.device.type).synchronize
dtype = torch.bfloat16 if page.cuda else torch.float32
seq, heads, head_dim = (8192, 16, 128) if page.cuda else (1024, 2, 128)
seq, heads = (256, 2) if page.small else (seq, heads)
batch = max(16384 // seq, 1) if page.cuda else 2
q, k, v = (
    torch.randn(batch, heads, seq, head_dim, device=device, dtype=dtype)
    for _ in range(3)
)
size = f"{batch * seq} tokens, {heads} heads of {head_dim}"  # with S, what is timed
sdpa = partial(F.scaled_dot_product_attention, is_causal=True)


# %%
# Which kernel ran
# ----------------
# The profiler records the ATen operator that SDPA dispatched to (one per
# backend: ``_scaled_dot_product_cudnn_attention``, ``..._flash_attention``,
# ``..._efficient_attention``, ``..._attention_math``) and, on a GPU, the kernels
# it launched. SDPA tries the backends in a priority order and takes the first whose
# checks (data type, head dimension, mask, memory layout, GPU generation) pass.
# Since torch 2.11, on Hopper and Blackwell GPUs with a recent cuDNN (above 9.15),
# cuDNN comes first; ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1`` puts FlashAttention-2
# back in front. A CPU has one fused kernel, a FlashAttention written for CPUs.
# Tracing the GPU's kernels takes longer, so it is done for the first call only.
def which(fn, gpu=False):  # (backend, kernels) of one call of fn
    on_gpu = [ProfilerActivity.CUDA] if page.cuda and gpu else []
    with profile(activities=[ProfilerActivity.CPU, *on_gpu]) as prof:
        fn()
        sync()
    kernels = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    return attention.backend_of(e.name for e in prof.events()), kernels


backend, kernels = which(lambda: sdpa(q, k, v), gpu=True)
print(f"SDPA's default here: {backend}; kernels: {', '.join(kernels) or 'none (CPU)'}")
if page.cuda:
    order = " > ".join(attention.priority_order())
    print(f"cuDNN {torch.backends.cudnn.version()}; SDPA tries: {order}")

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
    "float mask": lambda: F.scaled_dot_product_attention(
        *args, attn_mask=torch.zeros(short, short, device=device, dtype=dtype)
    ),
    "head dim not innermost": lambda: sdpa(transposed, *args[1:]),
    "...then .contiguous()": lambda: sdpa(transposed.contiguous(), *args[1:]),
}
budget = gpuguide.size_budget(device, memory_fraction=0.5).memory_bytes
need = attention.naive_bytes(batch, short, heads, head_dim, 4)  # the math path's
rows = attention.case_rows(cases, lambda fn: which(fn)[0], need, budget, device=device)
print(gpuguide.table(rows, title=f"S = {short}, causal (where no mask is given)"))
ran = {row["case"]: row["backend"] for row in rows}
gpuguide.claim(
    "a q whose head dimension is not innermost sends SDPA to the math path",
    holds=ran["head dim not innermost"] == "math",
    measured=f"{ran['head dim not innermost']} ran",
)
gpuguide.claim(
    ".contiguous() restores the default's fused kernel",
    holds=ran["...then .contiguous()"] == ran["default"] != "math",
    measured=f"{ran['...then .contiguous()']} ran, {ran['default']} by default",
)
gpuguide.claim(
    "on a GPU, an explicit float mask rules out FlashAttention-2",
    holds=ran["float mask"] != "flash",
    measured=f"{ran['float mask']} ran",
    on="cuda",
)
peaks = {row["case"]: row["peak memory (MiB)"] for row in rows}
fallback, fused = peaks["head dim not innermost"], peaks["default"]
gpuguide.claim(
    "the math fallback's peak memory is at least 4x the fused kernel's",
    holds=bool(fallback and fused and fallback >= 4 * fused),
    measured=f"{fallback} MiB against {fused} MiB",
    unless="small sizes: too little memory to measure" if page.small else None,
)


# %%
# FlexAttention: the same causal attention, compiled
# --------------------------------------------------
# FlexAttention takes the mask as a function of the positions (``mask_mod``);
# ``create_block_mask`` evaluates it once per 128 x 128 block, so that the kernel skips
# the blocks that are fully masked. Three costs differ, and are timed apart: building
# the block mask (once per mask and shape), compiling (once per mask function; the
# first call here also starts the compiler), and the steady-state call, in rounds
# against SDPA. The mask below is causal within a window of the last ``window``
# tokens; with the window in a tensor, one compiled kernel serves every window size,
# and a window as long as the sequence is plain causal attention.
flex = torch.compile(flex_attention)
bars = {}  # every variant's times, for the figure


def causal_window(window):
    window = torch.tensor(window, device=device)

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < window)

    return mask_mod


def build(mask_mod):  # a block mask, and the seconds it took
    return attention.timed_once(
        lambda: create_block_mask(mask_mod, None, None, seq, seq, device=device),
        device=device,
    )


def flex_against(block_mask, flex_name, name, baseline, flop=None, **config):
    """The compile and first call, timed; then Flex and the baseline in rounds."""
    call = partial(flex, q, k, v, block_mask=block_mask)
    with compiling.capture_compiler():
        first_s = compiling.first_calls_s(call, device=device, calls=1)
    timed = gpuguide.interleave(
        {flex_name: call, name: baseline}, rep_ms=500, device=device
    )
    print(attention.per_call(timed, flop))
    gain = gpuguide.compare(*timed.values())
    gpuguide.report(f"{flex_name} against {name}", gain, size=size, S=seq, **config)
    bars.update(timed)
    return first_s, gain


causal, build_s = build(causal_window(seq))
flop = attention.attention_flop(batch, seq, heads, head_dim, causal=True)
first_s, _ = flex_against(
    causal, "Flex, causal", "SDPA default", lambda: sdpa(q, k, v), flop, causal=True
)
print(
    f"block mask: built in {build_s * 1e3:.0f} ms, {causal.sparsity():.0f}% of blocks "
    f"skipped; compile and first call: {first_s:.1f} s"
)

# %%
# A mask SDPA cannot express: a sliding window
# --------------------------------------------
# SDPA takes a sliding window only as a dense ``S x S`` boolean matrix: on a GPU that
# rules out FlashAttention-2 (a CPU's flash kernel takes a mask), it costs the matrix's
# memory, and every block is still computed. FlexAttention skips the blocks outside
# the window (the share printed below) and reuses the kernel compiled above (its first
# call is quick). Whether skipping beats SDPA's kernel depends on how many blocks are
# skipped: with a window of an eighth of the sequence, most are.
window = seq // 8
sliding, build_s = build(causal_window(window))
positions = torch.arange(seq, device=device)
dense = causal_window(window)(None, None, positions[:, None], positions[None, :])
sdpa_dense = partial(F.scaled_dot_product_attention, q, k, v, attn_mask=dense)
first_s, skipping = flex_against(
    sliding, f"Flex, window {window}", "SDPA, dense mask", sdpa_dense, window=window
)
print(
    f"window {window}: block mask {build_s * 1e3:.0f} ms, {sliding.sparsity():.0f}% "
    f"skipped; first call {first_s:.2f} s; SDPA ran {which(sdpa_dense)[0]} with a "
    f"{dense.nbytes / 2**20:.1f} MiB mask"
)
gpuguide.claim(
    f"with a window of {window}, Flex skipping blocks is at least 2x faster than "
    "SDPA's dense mask",
    skipping,
    at_least=2.0,
)
fig, ax = plt.subplots()
title = f"Causal attention at S={seq}: FlexAttention and SDPA"
gpuguide.plot_bars(
    ax, bars, ylabel="time per call (ms)", baseline="SDPA default", title=title
)
plt.show()


# %%
# Forward and backward
# --------------------
# Training runs the backward pass too, which the papers count as 2.5 times the
# forward's FLOP. On a GPU, the FlashAttention-2 paper's forward and backward rate on
# an H100 is printed beside the measurement: a published result of one kernel, not a
# ceiling (cuDNN's kernel, SDPA's first choice on Hopper GPUs, can go past it).
def train_step():
    return torch.autograd.grad(F.scaled_dot_product_attention(q, k, v), (q, k, v), grad)


for t in (q, k, v):
    t.requires_grad_(True)
grad = torch.randn_like(q)
m = gpuguide.benchmark(train_step, label="SDPA forward + backward", device=device)
rate = m.rate(attention.attention_flop(batch, seq, heads, head_dim, backward=True))
backend = which(train_step)[0] or "?"
config = {"size": size, "S": seq, "causal": False, "backend": backend}
gpuguide.report("SDPA forward + backward", rate, **config)
if page.cuda:
    fa2 = gpuguide.format_rate(attention.FA2_FWD_BWD_FLOPS, "FLOP/s")
    print(
        f"the FlashAttention-2 paper reported up to {fa2} forward and backward on an "
        f"H100 (a published result, not a peak); this run measured {rate} ({backend})"
    )

# %%
# What to take away
# -----------------
# Check which kernel ran with the profiler rather than assume it: an explicit
# mask or an unusual memory layout silently changes the kernel, and the math
# fallback's memory grows with ``S**2``. FlexAttention compiles a fused kernel for
# a mask written as a Python function; its block mask and its compilation are
# one-off costs to keep out of the steady-state comparison.
gpuguide.takeaway()
