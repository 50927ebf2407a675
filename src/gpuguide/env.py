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

# Size units, lower case: binary with an "i" (IEC), decimal without one (SI), so
# "16GB" is 16e9 bytes and "16GiB" is 16 * 2**30, as in Kubernetes' quantities.
_BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    **{
        f"{letter}{suffix}": base**power
        for power, letter in enumerate("kmgtp", start=1)
        for suffix, base in (("", 1000), ("b", 1000), ("i", 1024), ("ib", 1024))
    },
}
_SIZE = re.compile(r"\s*(?P<number>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*(?P<unit>[a-z]*)\s*")


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


def parse_bytes(text: str, *, name: str = GPU_MEMORY_ENV) -> int:
    """A memory size written by a person, in whole bytes (rounded down).

    A number of bytes, or a number and a case-insensitive unit: binary with an
    ``i`` (``KiB``...``TiB``, ``Ki``...``Ti``), decimal without (``kB``...``TB``,
    ``k``...``T``). A ``ValueError`` naming ``name`` refuses anything else and
    sizes under one byte.

    >>> parse_bytes("16GiB") == 16 * 2**30, parse_bytes("16 GB")
    (True, 16000000000)
    """
    match = _SIZE.fullmatch(text.lower())
    if match is None:
        why = (
            "a number of bytes, or a number and a unit such as 16GiB, 16384MiB or 16GB"
        )
        if text.strip().startswith("-"):
            why = "a positive size"
        msg = f"{name} must be {why}, got {text!r}"
        raise ValueError(msg)
    unit = match["unit"]
    if unit not in _BYTE_UNITS:
        written = text[match.start("unit") : match.end("unit")]
        msg = (
            f"{name} has an unknown unit {written!r} in {text!r}; use B, KiB, MiB, "
            "GiB, TiB (powers of 1024) or kB, MB, GB, TB (powers of 1000)"
        )
        raise ValueError(msg)
    number = match["number"]
    if unit in ("", "b") and "." in number:
        msg = f"{name} must be a whole number of bytes, got {text!r}"
        raise ValueError(msg)
    size = math.floor(float(number) * _BYTE_UNITS[unit])
    if size < 1:
        msg = f"{name} must be more than 0 bytes, got {text!r}"
        raise ValueError(msg)
    return size


def gpu_memory_cap() -> int | None:
    """The GPU memory cap ``GPUGUIDE_GPU_MEMORY`` asks for in bytes
    (:func:`parse_bytes`), or None when unset."""
    text = os.environ.get(GPU_MEMORY_ENV, "")
    if not text.strip():
        return None
    return parse_bytes(text, name=GPU_MEMORY_ENV)
