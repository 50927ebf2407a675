"""The environment variables that steer every page: small mode, device, artifacts.

A foundation module: it imports nothing else from gpuguide, so every other
module may read these switches.
"""

from __future__ import annotations

import os

__all__ = [
    "ARTIFACT_DIR_ENV",
    "ARTIFACT_URL_ENV",
    "DEVICE_ENV",
    "SMALL_ENV",
    "device_override",
    "small_mode",
]

#: ``1``/``true``/``yes``/``on``: tiny sizes and budgets (tests, quick builds).
SMALL_ENV = "GPUGUIDE_SMALL"
#: The device to run on (``cpu``, ``cuda:1``, ``mps``) instead of the best one.
DEVICE_ENV = "GPUGUIDE_DEVICE"
#: The directory files for download are written to (set by the docs build).
ARTIFACT_DIR_ENV = "GPUGUIDE_ARTIFACT_DIR"
#: The link prefix of those files, as seen from an example page.
ARTIFACT_URL_ENV = "GPUGUIDE_ARTIFACT_URL"

_TRUE = frozenset({"1", "true", "yes", "on"})


def small_mode() -> bool:
    """Whether the environment asks for small sizes and short time budgets.

    Returns
    -------
    bool
        True when ``GPUGUIDE_SMALL`` is ``1``, ``true``, ``yes`` or ``on``
        (case-insensitive).
    """
    return os.environ.get(SMALL_ENV, "").strip().lower() in _TRUE


def device_override() -> str | None:
    """The device named by ``GPUGUIDE_DEVICE``, or None when it is unset or empty."""
    return os.environ.get(DEVICE_ENV, "").strip() or None
