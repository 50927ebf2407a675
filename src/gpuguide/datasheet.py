"""Datasheet figures of the GPUs gpuguide knows, and how to recognise each one.

:data:`FIGURES` has one row per GPU variant: dense peaks per precision (without
the 2:4 sparsity datasheets often quote), memory and host-link bandwidth, and a
key of :data:`SOURCES`. :func:`identify_gpu` reads :data:`NAMES`; an unknown GPU
gets no figures, never guessed ones.
"""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["FIGURES"]


class GPUFigures(NamedTuple):
    """Dense datasheet peaks of one GPU variant; None where unknown or unsupported."""

    variant: str
    fp64_tflops: float | None  # the matmul figure: FP64 tensor cores where any
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None  # tensor cores, FP32 accumulate where the sheet says
    bf16_tflops: float | None
    memory_gb_per_s: float
    host_link_gb_per_s: float  # per direction
    source: str  # a key of SOURCES


class GPUName(NamedTuple):
    """How one variant shows in ``torch.cuda.get_device_properties``."""

    variant: str
    names: tuple[str, ...]  # normalised names (see _normalise)
    sm_count: int
    memory_gib: tuple[float, float]  # the range total_memory falls in
    bare: bool = False  # a name shared by variants: SMs and memory must be reported


#: Where the figures of each row come from. Datasheets quote TF32, FP16 and BF16
#: tensor-core rates "with sparsity" (2:4 structured sparsity): the rows hold half.
SOURCES: dict[str, str] = {
    "H100": (
        "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), "
        "SXM, PCIe and NVL columns; dense (sparsity figures halved)"
    ),
    "H200": (
        "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200), "
        "SXM and NVL columns; dense (sparsity figures halved)"
    ),
    "A100": (
        "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), "
        "PCIe and SXM columns, 40 and 80 GB; dense (sparsity figures halved)"
    ),
    "A10": (
        "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/"
        "products/a10-gpu); dense (sparsity figures halved); no FP64 figure"
    ),
    "A10G": (
        "AWS A10G (no NVIDIA datasheet): 600 GB/s GDDR6; fp32 from "
        "80 SMs at 1.71 GHz boost; tensor-core peaks unknown"
    ),
    "L4": (
        "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4); "
        "dense (sparsity figures halved); no FP64 figure"
    ),
    "T4": (
        "NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4): "
        "no TF32 or BF16; FP64 is not on the sheet and is Turing's 1/32 of FP32"
    ),
    "RTX 4090": (
        "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090), "
        "dense, FP32 accumulate; no FP64 figure"
    ),
}

# PCIe x16 per direction, nominal: gen 3, 4 and 5 give 16, 32 and 64 GB/s (datasheets
# quote both directions together: 32, 64 and 128 GB/s).
# fp64: the FP64 tensor-core rate where the GPU has one (A100, H100, H200: cuBLAS uses
# it for fp64 matmuls), else the vector rate.
# A10G: fp32 is 80 SMs x 128 lanes x 2 FLOP x 1.71 GHz; its tensor rates differ from
# the A10's and are left unknown. T4 (Turing): no TF32 or BF16; fp64 is 1/32 of fp32.
# fmt: off
FIGURES: tuple[GPUFigures, ...] = tuple(GPUFigures(*row) for row in (
    # variant          fp64  fp32   tf32   fp16   bf16   GB/s  link  source
    ("H100 SXM5",      67,   67,    494.5, 989.5, 989.5, 3350, 64,   "H100"),
    ("H100 PCIe",      51,   51,    378,   756.5, 756.5, 2000, 64,   "H100"),
    ("H100 NVL",       60,   60,    417.5, 835.5, 835.5, 3900, 64,   "H100"),
    ("H200 SXM",       67,   67,    494.5, 989.5, 989.5, 4800, 64,   "H200"),
    ("H200 NVL",       60,   60,    417.5, 835.5, 835.5, 4800, 64,   "H200"),
    ("A100 SXM4 80GB", 19.5, 19.5,  156,   312,   312,   2039, 32,   "A100"),
    ("A100 SXM4 40GB", 19.5, 19.5,  156,   312,   312,   1555, 32,   "A100"),
    ("A100 PCIe 80GB", 19.5, 19.5,  156,   312,   312,   1935, 32,   "A100"),
    ("A100 PCIe 40GB", 19.5, 19.5,  156,   312,   312,   1555, 32,   "A100"),
    ("A10",            None, 31.2,  62.5,  125,   125,   600,  32,   "A10"),
    ("A10G",           None, 35.0,  None,  None,  None,  600,  32,   "A10G"),
    ("L4",             None, 30.3,  60,    121,   121,   300,  32,   "L4"),
    ("T4",             0.25, 8.1,   None,  65,    None,  320,  16,   "T4"),
    ("RTX 4090",       None, 82.6,  82.6,  165.2, 165.2, 1008, 32,   "RTX 4090"),
))

NAMES: tuple[GPUName, ...] = tuple(GPUName(*row) for row in (
    # variant          normalised names                          SMs  memory GiB
    ("H100 SXM5",      ("h100 80gb hbm3", "h100 sxm5 80gb"),     132, (70, 81)),
    ("H100 SXM5",      ("h100",),                                132, (70, 81), True),
    ("H100 PCIe",      ("h100 pcie",),                           114, (70, 81)),
    ("H100 NVL",       ("h100 nvl",),                            132, (85, 96)),
    ("H200 SXM",       ("h200",),                                132, (125, 145)),
    ("H200 NVL",       ("h200 nvl",),                            132, (125, 145)),
    ("A100 SXM4 80GB", ("a100 sxm4 80gb",),                      108, (70, 81)),
    ("A100 SXM4 40GB", ("a100 sxm4 40gb",),                      108, (35, 41)),
    ("A100 PCIe 80GB", ("a100 80gb pcie", "a100 pcie 80gb"),     108, (70, 81)),
    ("A100 PCIe 40GB", ("a100 pcie 40gb", "a100 40gb pcie"),     108, (35, 41)),
    ("A10",            ("a10",),                                 72,  (20, 24.5)),
    ("A10G",           ("a10g",),                                80,  (20, 24.5)),
    ("L4",             ("l4",),                                  58,  (20, 24.5)),
    ("T4",             ("t4",),                                  40,  (13, 16)),
    ("RTX 4090",       ("rtx 4090",),                            128, (20, 24.5)),
))
# fmt: on

_GIB = 2**30
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce"})


def _normalise(name: str) -> str:
    """Lower-case GPU name without vendor words: ``"a100 sxm4 80gb"``."""
    words = re.sub(r"[\s_\-]+", " ", name.lower()).split()
    while words and words[0] in _VENDOR_WORDS:
        words.pop(0)
    return " ".join(words)


def identify_gpu(
    name: str, sm_count: int | None, total_memory_bytes: int | None
) -> str | None:
    """The :data:`FIGURES` variant (``"H100 SXM5"``) a GPU is, from CUDA's name, SM
    count and memory (each must match where given); None for any other name, or
    when the SMs or memory contradict it (a MIG slice, a cut-down part)."""
    normalised = _normalise(name)
    for rule in NAMES:
        if normalised not in rule.names:
            continue
        if rule.bare and (sm_count is None or total_memory_bytes is None):
            continue
        if sm_count is not None and int(sm_count) != rule.sm_count:
            continue
        if total_memory_bytes is not None:
            low, high = rule.memory_gib
            if not low * _GIB <= total_memory_bytes <= high * _GIB:
                continue
        return rule.variant
    return None
