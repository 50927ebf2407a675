"""Helpers that serve one chapter each, on top of gpuguide's core.

- :mod:`~gpuguide.chapters.data`: a synthetic image dataset with a CPU-cost knob
  (data loading).
- :mod:`~gpuguide.chapters.roofline`: the roofline plot (efficiency patterns).
- :mod:`~gpuguide.chapters.compiling`: starting ``torch.compile``, keeping its
  autotune tables and logs off the page, its recompilation log, and a step's host
  time beside its GPU time (torch.compile, fusion, mixed precision, CUDA graphs).
- :mod:`~gpuguide.chapters.timeline`: a timeline of the work on each stream, drawn
  (streams).
- :mod:`~gpuguide.chapters.spawning` and :mod:`~gpuguide.chapters.distributed`:
  starting processes safely, and what a DDP rank runs: its entry point and a timed
  worker (data loading, multi-GPU).

They live in modules rather than in the pages for two reasons: their code is
plumbing, not the lesson, and spawned processes (DataLoader workers, DDP ranks)
can only run functions and classes they import by name, such as
``gpuguide.chapters.distributed.ddp_train_worker``. Nothing in gpuguide's core
imports them.
"""
