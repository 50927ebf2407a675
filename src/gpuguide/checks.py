"""Argument checks with one style of message across gpuguide.

Each check returns the value converted (an ``int`` or a ``float``) or raises
``"<name> must be <rule>, got <value>"``: a ``TypeError`` for a value of the
wrong kind, a ``ValueError`` for one out of range.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import SupportsIndex, cast

# The checks of the package's own functions: pages do not need them.
__all__ = ()


def integer(name: str, value: object, *, minimum: int | None = None) -> int:
    """``value`` as an int (not a bool), at least ``minimum`` when one is given."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(cast("SupportsIndex", value))
    except TypeError:
        msg = f"{name} must be an integer, got {value!r}"
        raise TypeError(msg) from None
    if minimum is not None and number < minimum:
        msg = f"{name} must be >= {minimum}, got {number}"
        raise ValueError(msg)
    return number


def _number(name: str, value: object, ok: Callable[[float], bool], rule: str) -> float:
    """``value`` as a float (numpy and torch scalars too) for which ``ok(number)``
    holds, else the error that it must be ``rule``."""
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        msg = f"{name} must be a number, got {value!r}"
        raise TypeError(msg) from None
    if not ok(number):
        msg = f"{name} must be {rule}, got {value!r}"
        raise ValueError(msg)
    return number


def positive(name: str, value: object) -> float:
    """``value`` as a float that is finite and > 0."""
    return _number(
        name, value, lambda x: math.isfinite(x) and x > 0, "a finite number > 0"
    )


def non_negative(name: str, value: object) -> float:
    """``value`` as a float that is finite and >= 0."""
    return _number(
        name, value, lambda x: math.isfinite(x) and x >= 0, "a finite number >= 0"
    )


def fraction(name: str, value: object) -> float:
    """``value`` as a float in ``(0, 1]``."""
    return _number(name, value, lambda x: 0 < x <= 1, "in (0, 1]")
