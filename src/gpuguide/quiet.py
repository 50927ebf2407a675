"""Torch's warnings about its own code: never a reader's error, never on a page.

Some torch releases warn about torch's own code (torch 2.11's inductor uses the
deprecated ``torch.jit.script_method``), which would end a ``python -W error``
run the reader's code did not cause. :func:`warning_text` turns a warning a page
shows on purpose into one clean line.
"""

from __future__ import annotations

import re
import warnings

__all__ = ["ignore_torch_internal_warnings", "warning_text"]

#: ``torch`` and its submodules (not ``torchvision``).
_TORCH_MODULES = r"torch(\.|$)"

_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*")


def ignore_torch_internal_warnings() -> None:
    """Ignore warnings that torch attributes to its own modules (one filter at
    the front, so it wins over ``-W error``; ``catch_warnings()`` still sees them)."""
    warnings.filterwarnings("ignore", module=_TORCH_MODULES)


def warning_text(warning: warnings.WarningMessage | Warning | str) -> str:
    """A warning's message on one line, without torch's C++ source location
    (``"(Triggered internally at /pytorch/c10/cuda/X.cpp:162.)"``)."""
    if isinstance(warning, warnings.WarningMessage):
        warning = warning.message
    text = _TRIGGERED.sub(" ", str(warning))
    return " ".join(text.split())
