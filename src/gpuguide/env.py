"""The environment variables that steer every page: small mode, device, GPU memory."""

from __future__ import annotations

import math
import os
import re

__all__ = ["small_mode"]

#: ``1``/``true``/``yes``/``on``: tiny sizes and budgets (tests, quick builds).
SMALL_ENV = "GPUGUIDE_SMALL"
#: The device to run on (``cpu``, ``cuda:1``, ``mps``) instead of the best one.
DEVICE_ENV = "GPUGUIDE_DEVICE"
#: The GPU memory pages may plan with and allocate (``16GiB``), to prove on a large
#: GPU that every page fits a smaller one (CUDA only).
GPU_MEMORY_ENV = "GPUGUIDE_GPU_MEMORY"
#: The GPU memory cap in small mode when ``GPUGUIDE_GPU_MEMORY`` is unset (at most
#: the GPU's memory), so that tests running four at a time share one GPU.
SMALL_GPU_MEMORY = 8 * 2**30
#: The directory files for download are written to (set by the docs build), and
#: the link prefix of those files, as seen from an example page.
ARTIFACT_DIR_ENV = "GPUGUIDE_ARTIFACT_DIR"
ARTIFACT_URL_ENV = "GPUGUIDE_ARTIFACT_URL"

# A number, then a unit: binary with an "i" (IEC), decimal without one (SI), so
# "16GB" is 16e9 bytes and "16GiB" is 16 * 2**30, as in Kubernetes' quantities.
_SIZE = re.compile(r"\s*([0-9]+\.?[0-9]*|\.[0-9]+)\s*(?:([kmgtp])(i?))?b?\s*", re.I)


def _on(name: str) -> bool:
    """Whether the variable ``name`` is ``1``, ``true``, ``yes`` or ``on``."""
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def small_mode() -> bool:
    """Whether ``GPUGUIDE_SMALL`` asks for small sizes and short time budgets."""
    return _on(SMALL_ENV)


def strict_peaks() -> bool:
    """Whether a rate above a datasheet peak must raise (``GPUGUIDE_STRICT_PEAKS``,
    set by the guide's tests; a reader's GPU may run above its row)."""
    return _on("GPUGUIDE_STRICT_PEAKS")


def device_override() -> str | None:
    """The device named by ``GPUGUIDE_DEVICE``, or None when it is unset or empty."""
    return os.environ.get(DEVICE_ENV, "").strip() or None


def gpu_memory_cap() -> int | None:
    """The GPU memory cap ``GPUGUIDE_GPU_MEMORY`` asks for in whole bytes (a number
    of bytes, or ``16GiB``: powers of 1024, ``16GB``: of 1000), None when unset."""
    text = os.environ.get(GPU_MEMORY_ENV, "")
    if not text.strip():
        return None
    match = _SIZE.fullmatch(text)
    size = 0
    if match is not None:
        number, prefix, binary = match.groups()
        power = " kmgtp".index((prefix or " ").lower())
        size = math.floor(float(number) * (1024 if binary else 1000) ** power)
    if size < 1:
        msg = (
            f"{GPU_MEMORY_ENV} must be a size of at least one byte, such as 16GiB "
            f"(powers of 1024) or 16GB (powers of 1000), got {text!r}"
        )
        raise ValueError(msg)
    return size
