"""Torch's warnings about its own code: never a reader's error, never on a page.

A foundation module: it imports nothing else from gpuguide (and not torch).

Some torch releases warn from inside torch about torch's own code: torch 2.11
imports ``torch.utils.mkldnn`` when inductor loads, and that module uses the
deprecated ``torch.jit.script_method``. Under ``python -W error`` (how the
tests run every page, and how a careful reader may run one) such a warning
would end the run, although nothing in the reader's code caused it.

Python's warnings attribute a warning to the module whose frame
``stacklevel`` points at. A warning *meant for the caller* points at the
caller's code; one attributed to a module of torch itself is about torch's
own code. :func:`ignore_torch_internal_warnings` ignores exactly those, and
:func:`warning_text` turns a warning that a page shows on purpose into one
clean line (without torch's ``(Triggered internally at ...)`` source path).
"""

from __future__ import annotations

import re
import warnings

__all__ = [
    "TORCH_MODULES",
    "ignore_torch_internal_warnings",
    "is_torch_internal",
    "warning_text",
]

#: The modules whose warnings are about torch's own code: ``torch`` and every
#: submodule (not ``torchvision`` or other packages that start with "torch").
TORCH_MODULES = r"torch(\.|$)"

_TRIGGERED = re.compile(r"\s*\(Triggered internally at [^)]*\)\s*")


def ignore_torch_internal_warnings() -> None:
    """Ignore warnings that torch attributes to its own modules.

    Adds one filter at the front of the warning filters, so it wins over
    ``-W error`` and ``warnings.simplefilter("error")`` set before it, while
    a ``warnings.catch_warnings()`` block that sets its own filters still sees
    them. Calling it again does not add a second filter.
    """
    warnings.filterwarnings("ignore", module=TORCH_MODULES)


def is_torch_internal(module: str) -> bool:
    """Whether a warning attributed to ``module`` is about torch's own code."""
    return re.match(TORCH_MODULES, module) is not None


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
