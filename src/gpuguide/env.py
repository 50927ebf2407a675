"""The environment variables that steer every page: small mode, device, GPU memory.

A foundation module: it imports nothing else from gpuguide, so every other
module may read these switches.
"""

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
#: ``1``/``true``/``yes``/``on``: a rate above a datasheet peak is an error
#: (the guide's own tests); unset, a page flags it and goes on (a reader's GPU).
STRICT_PEAKS_ENV = "GPUGUIDE_STRICT_PEAKS"
#: The directory files for download are written to (set by the docs build).
ARTIFACT_DIR_ENV = "GPUGUIDE_ARTIFACT_DIR"
#: The link prefix of those files, as seen from an example page.
ARTIFACT_URL_ENV = "GPUGUIDE_ARTIFACT_URL"

_TRUE = frozenset({"1", "true", "yes", "on"})

# A number, then a unit: binary with an "i" (IEC), decimal without one (SI), so
# "16GB" is 16e9 bytes and "16GiB" is 16 * 2**30, as in Kubernetes' quantities.
_SIZE = re.compile(r"\s*([0-9]+\.?[0-9]*|\.[0-9]+)\s*(?:([kmgtp])(i?))?b?\s*", re.I)


def small_mode() -> bool:
    """Whether ``GPUGUIDE_SMALL`` (``1``, ``true``, ``yes``, ``on``) asks for small
    sizes and short time budgets."""
    return os.environ.get(SMALL_ENV, "").strip().lower() in _TRUE


def strict_peaks() -> bool:
    """Whether a rate above a datasheet peak must raise (``GPUGUIDE_STRICT_PEAKS``,
    set by the guide's tests; a reader's GPU may run above its row)."""
    return os.environ.get(STRICT_PEAKS_ENV, "").strip().lower() in _TRUE


def device_override() -> str | None:
    """The device named by ``GPUGUIDE_DEVICE``, or None when it is unset or empty."""
    return os.environ.get(DEVICE_ENV, "").strip() or None


def _parse_bytes(text: str) -> int:
    """A memory size written by a person, in whole bytes (rounded down): a number
    of bytes, or a number and a unit, ``16GiB`` (powers of 1024) or ``16GB``.

    >>> _parse_bytes("16GiB") == 16 * 2**30, _parse_bytes("16 GB")
    (True, 16000000000)
    """
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


def gpu_memory_cap() -> int | None:
    """The GPU memory cap ``GPUGUIDE_GPU_MEMORY`` asks for in bytes
    (:func:`_parse_bytes`), or None when unset."""
    text = os.environ.get(GPU_MEMORY_ENV, "")
    if not text.strip():
        return None
    return _parse_bytes(text)
