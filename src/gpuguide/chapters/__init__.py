"""Helpers that serve one chapter each, on top of gpuguide's core.

:mod:`~gpuguide.chapters.data` (a synthetic dataset with a CPU-cost knob, and
starting its workers safely), :mod:`~gpuguide.chapters.roofline` (the roofline
plot), :mod:`~gpuguide.chapters.compiling` (starting ``torch.compile`` and reading
its logs), :mod:`~gpuguide.chapters.coldstart` (a compiled model's start in a fresh
process), :mod:`~gpuguide.chapters.timeline` (the work on each stream, drawn),
:mod:`~gpuguide.chapters.distributed` (what a DDP rank runs),
:mod:`~gpuguide.chapters.attention`
(the attention chapter's FLOP count, published figures and backend checks),
:mod:`~gpuguide.chapters.precision` (the memory, dtype and mixed-precision pages'
matmul timing, memory counts and transformer block),
:mod:`~gpuguide.chapters.allocator` (allocator settings read back in fresh
processes, fragmentation), :mod:`~gpuguide.chapters.training` (a GPT-style model
and its FLOP per step), :mod:`~gpuguide.chapters.utilization` (sampling NVML or a
core's busy time while a loop runs). They live in modules because
spawned processes (DataLoader workers, DDP ranks) can only run what they import by
name, and because drawing is not the lesson. Nothing in gpuguide's core imports
them.
"""
