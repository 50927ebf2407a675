"""Human-readable formatting of times, sizes, rates and ratios.

One unit per quantity across the package (seconds, bytes, FLOP/s, bytes/s),
printed with three significant digits (at most three for ratios). A foundation
module: it imports nothing else from gpuguide.

Examples
--------
>>> format_time(0.00123)
'1.23 ms'
>>> format_bytes(3 * 2**20)
'3.00 MiB'
>>> format_rate(1.2e12, "FLOP/s")
'1.20 TFLOP/s'
>>> format_ratio(3.2)
'3.2x'
"""

from __future__ import annotations

import math

__all__ = [
    "format_bytes",
    "format_rate",
    "format_ratio",
    "format_spread",
    "format_time",
    "format_value",
]

#: Time units from the largest down, as (seconds per unit, name). ASCII "us".
_TIME_UNITS: tuple[tuple[float, str], ...] = (
    (1.0, "s"),
    (1e-3, "ms"),
    (1e-6, "us"),
    (1e-9, "ns"),
)

_BYTE_UNITS: tuple[str, ...] = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

_SI_PREFIXES: tuple[str, ...] = ("", "k", "M", "G", "T", "P", "E")


def _round_sig(value: float, digits: int) -> tuple[float, int]:
    """``value`` rounded to ``digits`` significant digits, and the decimals that show
    them (0 when it has more integer digits)."""
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
    """The largest power of ``base`` (and its name) at which ``magnitude`` still
    shows at least ``1.00`` (1023.9 KiB reads 1.00 MiB)."""
    scale, index = 1.0, 0
    while index < len(names) - 1 and _round_sig(magnitude / scale / base, 3)[0] >= 1:
        scale *= base
        index += 1
    return scale, names[index]


def significant(value: float, digits: int = 3) -> str:
    """``value`` in fixed point with ``digits`` significant digits (integer digits
    are kept: ``"98765"``).

    >>> significant(0.012345), significant(2.5), significant(0.5, 2)
    ('0.0123', '2.50', '0.50')
    """
    rounded, decimals = _round_sig(value, digits)
    return f"{rounded:.{decimals}f}"


def time_unit(seconds: float) -> tuple[float, str]:
    """The unit :func:`format_time` uses for ``seconds``: ``(1e-3, "ms")``."""
    magnitude = abs(seconds)
    if not math.isfinite(magnitude) or magnitude == 0:
        return 1.0, "s"
    for scale, name in _TIME_UNITS:
        # Compare the *rounded* value so 0.9996 ms reads "1.00 ms", not "1000 us".
        if abs(_round_sig(magnitude / scale, 3)[0]) >= 1:
            return scale, name
    return _TIME_UNITS[-1]


def format_time(seconds: float) -> str:
    """A duration in seconds as ``"812 ns"``, ``"12.3 us"``, ``"1.23 ms"`` or ``"2.50 s"``
    (three significant digits; ``"0 s"``; below a ns in ns; ``"inf s"``)."""
    seconds = float(seconds)
    if math.isnan(seconds) or math.isinf(seconds):
        return f"{seconds} s"
    if seconds == 0:
        return "0 s"
    scale, name = time_unit(seconds)
    return f"{significant(seconds / scale)} {name}"


def format_bytes(n: float) -> str:
    """A size in bytes with binary units: ``"512 B"``, ``"1.50 KiB"``, ``"79.1 GiB"``
    (three significant digits above 1 KiB; a decrease keeps its sign)."""
    n = float(n)
    if math.isnan(n) or math.isinf(n):
        return f"{n} B"
    sign = "-" if n < 0 else ""
    magnitude = abs(n)
    if round(magnitude) < 1024:
        return f"{sign}{magnitude:.0f} B"
    scale, name = _prefix(magnitude, 1024, _BYTE_UNITS)
    return f"{sign}{significant(magnitude / scale)} {name}"


def format_rate(value: float | None, unit: str) -> str:
    """A rate with an SI prefix and three significant digits: ``"1.20 TFLOP/s"`` for
    ``(1.2e12, "FLOP/s")``, ``"50.0 GB/s"`` for ``(5e10, "B/s")``; None reads ``"n/a"``."""
    if value is None:
        return "n/a"
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        return f"{value} {unit}"
    sign = "-" if value < 0 else ""
    scale, prefix = _prefix(abs(value), 1000, _SI_PREFIXES)
    return f"{sign}{significant(abs(value) / scale)} {prefix}{unit}"


def format_ratio(x: float | None) -> str:
    """A speed-up or ratio as ``"3.2x"``: at most three significant digits without
    trailing zeros (``"0.031x"``), but ``"1.00x"`` for a whole number, ``"1234x"``
    from 1000 on; None reads ``"n/a"``."""
    if x is None:
        return "n/a"
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return f"{x}x"
    rounded, decimals = _round_sig(x, 3)
    text = f"{rounded:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    if rounded == int(rounded) and abs(rounded) < 1000:
        # A whole number: keep its three significant digits ("1.00x").
        text = f"{rounded:.{decimals}f}"
    return f"{text}x"


def format_value(value: float, unit: str) -> str:
    """A figure in its unit: ``"612 TFLOP/s"``, ``"1.20 ms"``, ``"16.0 MiB"``,
    ``"2.50x"``; any other unit follows three significant digits."""
    if unit == "s":
        return format_time(value)
    if unit == "B":
        return format_bytes(value)
    if unit.endswith("/s"):
        return format_rate(value, unit)
    return (
        f"{significant(value)}x"
        if unit == "x"
        else f"{significant(value)} {unit}".rstrip()
    )


def format_spread(value: float, low: float, high: float, unit: str) -> str:
    """A median with its spread, the one way the guide writes a measurement:
    ``"1.23 ms (1.20-1.31)"``, ``"41.2 TFLOP/s (40.8-41.5)"``, ``"2.50x
    (2.41-2.62)"``: the ends in the median's unit and prefix."""
    magnitude = abs(float(value))
    scale = 1.0
    if unit == "s":
        scale = time_unit(magnitude)[0]
    elif unit == "B" and round(magnitude) >= 1024:
        scale = _prefix(magnitude, 1024, _BYTE_UNITS)[0]
    elif unit.endswith("/s"):
        scale = _prefix(magnitude, 1000, _SI_PREFIXES)[0]
    sep = " to " if low < 0 else "-"
    ends = sep.join(significant(end / scale) for end in (low, high))
    return f"{format_value(value, unit)} ({ends})"
