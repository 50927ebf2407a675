"""Human-readable formatting of times, sizes, rates and ratios.

One unit per quantity across the package (seconds, bytes, FLOP/s, bytes/s),
printed with three significant digits (at most three for ratios). A foundation
module: it imports nothing else from gpuguide.
"""

from __future__ import annotations

import math

__all__ = ["format_bytes", "format_ratio", "format_time", "format_value"]

_TIME_UNITS = ("ns", "us", "ms", "s")
_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")
_SI_PREFIXES = ("", "k", "M", "G", "T", "P", "E")


def _round_sig(value: float, digits: int) -> tuple[float, int]:
    """``value`` to ``digits`` significant digits, and the decimals that show them."""
    if value == 0:
        return 0.0, max(digits - 1, 0)
    exponent = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - exponent, 0)
    rounded = round(value, decimals)
    # Rounding can carry into the next decade (9.996 -> 10.00): one digit fewer.
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exponent:
        decimals = max(decimals - 1, 0)
        rounded = round(value, decimals)
    return rounded, decimals


def _prefix(magnitude: float, base: float, names: tuple[str, ...]) -> tuple[float, str]:
    """The largest power of ``base`` (and its name) that shows ``magnitude`` >= 1.00."""
    scale, index = 1.0, 0
    while index < len(names) - 1 and _round_sig(magnitude / scale / base, 3)[0] >= 1:
        scale *= base
        index += 1
    return scale, names[index]


def significant(value: float, digits: int = 3) -> str:
    """``value`` in fixed point with ``digits`` significant digits (integer digits
    are kept: ``"98765"``)."""
    rounded, decimals = _round_sig(value, digits)
    return f"{rounded:.{decimals}f}"


def unit_scale(value: float, unit: str) -> tuple[float, str]:
    """The scale and prefixed unit :func:`format_value` writes ``value`` in:
    ``(1e-3, "ms")`` for ``(0.00123, "s")``, ``(1e12, "TFLOP/s")`` for ``(1.2e12,
    "FLOP/s")``."""
    magnitude = abs(value)
    if not math.isfinite(magnitude) or (unit == "B" and round(magnitude) < 1024):
        return 1.0, unit
    if unit == "s":
        if magnitude == 0:
            return 1.0, "s"
        scale, name = _prefix(magnitude * 1e9, 1000, _TIME_UNITS)
        return scale / 1e9, name
    if unit == "B":
        return _prefix(magnitude, 1024, _BYTE_UNITS)
    if unit.endswith("/s"):
        scale, prefix = _prefix(magnitude, 1000, _SI_PREFIXES)
        return scale, prefix + unit
    return 1.0, unit


def format_value(
    value: float | None, unit: str, spread: tuple[float, float] | None = None
) -> str:
    """A figure in its unit, three significant digits: ``"1.20 ms"``, ``"16.0 MiB"``,
    ``"612 TFLOP/s"``, ``"2.50x"`` (unit ``"x"``); None reads ``"n/a"``. A
    ``spread`` ``(low, high)`` follows in the figure's prefix: ``"1.23 ms
    (1.20-1.31)"``, the one way the guide writes a measurement."""
    if value is None:
        return "n/a"
    value = float(value)
    if spread is not None:
        scale = unit_scale(value, unit)[0]
        ends = (" to " if spread[0] < 0 else "-").join(
            significant(end / scale) for end in spread
        )
        return f"{format_value(value, unit)} ({ends})"
    if not math.isfinite(value):
        return f"{value} {unit}"
    if unit == "x":
        return f"{significant(value)}x"
    if (unit == "s" and value == 0) or (unit == "B" and round(abs(value)) < 1024):
        return f"{value:.0f} {unit}"
    scale, name = unit_scale(value, unit)
    return f"{significant(value / scale)} {name}".rstrip()


def format_time(seconds: float) -> str:
    """A duration in seconds: ``"812 ns"``, ``"1.23 ms"``, ``"2.50 s"``."""
    return format_value(seconds, "s")


def format_bytes(n: float) -> str:
    """A size in bytes, binary units: ``"512 B"``, ``"1.50 KiB"``, ``"79.1 GiB"``."""
    return format_value(n, "B")


def format_ratio(x: float | None) -> str:
    """A speed-up or ratio as ``"3.2x"``: at most three significant digits without
    trailing zeros (``"0.031x"``), but ``"1.00x"`` for a whole number, ``"1234x"``
    from 1000 on; None reads ``"n/a"``."""
    if x is None:
        return "n/a"
    x = float(x)
    if not math.isfinite(x):
        return f"{x}x"
    rounded, decimals = _round_sig(x, 3)
    text = f"{rounded:.{decimals}f}"
    if rounded != int(rounded):  # a whole number keeps its digits: "1.00x"
        text = text.rstrip("0")
    return f"{text}x"
