"""Torch's warnings about its own code: never a reader's error, never on a page.

Some torch releases warn about torch's own code (torch 2.11's inductor imports
``torch.utils.mkldnn``, which uses the deprecated ``torch.jit.script_method``);
under ``python -W error``, as the tests run every page, that would end a run
the reader's code did not cause. A warning meant for the caller is attributed to
the caller's module; :func:`ignore_torch_internal_warnings` ignores those
attributed to torch's own modules. :func:`warning_text` turns a warning a page
shows on purpose into one clean line. A foundation module: it imports nothing
else from gpuguide (and not torch).
"""

from __future__ import annotations

import re
import warnings

__all__ = ["ignore_torch_internal_warnings", "warning_text"]

#: The modules whose warnings are about torch's own code: ``torch`` and every
#: submodule (not ``torchvision`` or other packages that start with "torch").
_TORCH_MODULES = r"torch(\.|$)"

_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*")


def ignore_torch_internal_warnings() -> None:
    """Ignore warnings that torch attributes to its own modules.

    One filter at the front (again: still one), so it wins over ``-W error`` set
    before it, while a ``catch_warnings()`` block with its own filters sees them.
    """
    warnings.filterwarnings("ignore", module=_TORCH_MODULES)


def warning_text(warning: warnings.WarningMessage | Warning | str) -> str:
    """A warning's message on one line, without torch's C++ source location.

    Examples
    --------
    >>> warning_text("called a synchronizing CUDA operation "
    ...              "(Triggered internally at /pytorch/c10/cuda/X.cpp:162.)")
    'called a synchronizing CUDA operation'
    """
    if isinstance(warning, warnings.WarningMessage):
        warning = warning.message
    text = _TRIGGERED.sub(" ", str(warning))
    return " ".join(text.split())
