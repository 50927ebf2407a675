"""Argument checks with one style of message across gpuguide.

Each check returns the value converted (an ``int`` or a ``float``) or raises
with a message of the form ``"<name> must be <rule>, got <value>"``: a
``TypeError`` when the value is of the wrong kind, a ``ValueError`` when it is
out of range. A foundation module: it imports nothing else from gpuguide.

Examples
--------
>>> from gpuguide.checks import integer, positive
>>> integer("min_reps", 5, minimum=1)
5
>>> positive("rep_ms", 100)
100.0
"""

from __future__ import annotations

import math
import operator
from typing import SupportsIndex, cast

# The checks of the package's own functions: pages do not need them.
__all__ = ()


def integer(name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an int (not a bool), at least ``minimum`` when one is given."""
    if isinstance(value, bool):
        msg = f"{name} must be an integer, got {value!r}"
        raise TypeError(msg)
    try:
        number = operator.index(cast("SupportsIndex", value))
    except TypeError:
        msg = f"{name} must be an integer, got {value!r}"
        raise TypeError(msg) from None
    if minimum is not None and number < minimum:
        msg = f"{name} must be >= {minimum}, got {number}"
        raise ValueError(msg)
    return number


def _real(name: str, value: object) -> float:
    """``value`` as a float: a real number, including numpy and torch scalars."""
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        msg = f"{name} must be a number, got {value!r}"
        raise TypeError(msg) from None


def positive(name: str, value: object) -> float:
    """``value`` as a float that is finite and > 0."""
    number = _real(name, value)
    if not (math.isfinite(number) and number > 0):
        msg = f"{name} must be a finite number > 0, got {value!r}"
        raise ValueError(msg)
    return number


def non_negative(name: str, value: object) -> float:
    """``value`` as a float that is finite and >= 0."""
    number = _real(name, value)
    if not (math.isfinite(number) and number >= 0):
        msg = f"{name} must be a finite number >= 0, got {value!r}"
        raise ValueError(msg)
    return number


def fraction(name: str, value: object) -> float:
    """``value`` as a float in ``(0, 1]``."""
    number = _real(name, value)
    if not 0 < number <= 1:
        msg = f"{name} must be in (0, 1], got {value!r}"
        raise ValueError(msg)
    return number
