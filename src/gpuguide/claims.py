"""Claims a page states, checked against the measured value and its spread.

Each :func:`claim` prints one line in place (held, did not hold, or not checked
here and why) and is recorded for the site's claims page. With
``GPUGUIDE_STRICT_CLAIMS=1`` a claim that did not hold fails the page.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from gpuguide.device import pick_device
from gpuguide.env import small_mode
from gpuguide.page import current
from gpuguide.results import Claim, figure, record_claim, recorded
from gpuguide.timing import Measurement, Rate
from gpuguide.units import format_value, significant
from gpuguide.verdicts import NO_DIFFERENCE, Comparison

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["claim", "takeaway"]

#: Set to 1 to make a claim that does not hold raise an ``AssertionError``.
STRICT_ENV = "GPUGUIDE_STRICT_CLAIMS"
#: The verdicts a claim about a comparison may state.
VERDICTS = ("faster", "slower", NO_DIFFERENCE, "not slower", "not faster")
#: Why a timed claim is not checked at small sizes.
SMALL = "small mode: the sizes are too small to show it"


def _interval(
    value: object, spread: Sequence[float] | None
) -> tuple[float, float, str]:
    if isinstance(value, (Comparison, Rate, Measurement)):  # a Comparison's speed-up
        number, unit, ends = figure(value)
        low, high = ends or (number, number)
        return low, high, format_value(number, unit, (low, high))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg = (
            "value must be a Comparison, Rate, Measurement or number, "
            f"got {type(value).__name__}"
        )
        raise TypeError(msg)
    number = float(value)
    low, high = (number, number) if spread is None else map(float, spread)
    if not all(map(math.isfinite, (low, number, high))) or not low <= number <= high:
        msg = f"spread must be finite (low, high) around the value {value}: {spread}"
        raise ValueError(msg)
    if spread is None:
        return number, number, significant(number)
    return low, high, format_value(number, "", (low, high))


def _verdict_holds(value: object, verdict: str) -> bool:
    if verdict not in VERDICTS:
        msg = (
            f"verdict must be one of {', '.join(map(repr, VERDICTS))}, got {verdict!r}"
        )
        raise ValueError(msg)
    if not isinstance(value, Comparison):
        msg = f"a verdict claim needs a Comparison, got {type(value).__name__}"
        raise TypeError(msg)
    if verdict.startswith("not "):
        return value.verdict != verdict.removeprefix("not ")
    return value.verdict == verdict


def claim(
    text: str,
    value: Comparison | Rate | Measurement | float | None = None,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    verdict: str | None = None,
    holds: bool | None = None,
    measured: str | None = None,
    spread: Sequence[float] | None = None,
    on: str | None = None,
    unless: str | None = None,
    timed: bool = False,
) -> None:
    """Check one claim the page states, print its outcome in place, record it.

    The claim holds only when the whole interval of ``value`` (a measured
    object's spread, or ``spread=(low, high)`` of a number) meets its one
    condition: ``at_least``/``at_most``, a Comparison's ``verdict``
    (:data:`VERDICTS`), or ``holds`` for a fact, with ``measured`` saying what was
    found. ``on="cuda"``: on another device it does not apply (``value`` may be
    omitted); ``unless``: why this run cannot check it; ``timed``: a plain number
    from timings, not checked at small sizes (a measured object always is).
    Raises AssertionError in strict mode when the claim did not hold.
    """
    if not isinstance(text, str) or not text.strip():
        msg = f"text must be a non-empty string, got {text!r}"
        raise ValueError(msg)
    bound = at_least is not None or at_most is not None
    conditions = (verdict is not None) + (holds is not None) + bound
    page = current()  # the set-up page's device, else the one a page would pick
    here = None if on is None else (page.device if page else pick_device()).type
    applies = (on is None or here == on) and not unless
    if conditions > 1 or (applies and conditions != 1):
        msg = (
            f"claim {text!r} needs one condition: at_least/at_most, verdict= "
            "or holds= (a claim that does not apply here may omit it)"
        )
        raise ValueError(msg)
    if holds is not None and (not isinstance(holds, bool) or not measured):
        msg = f"claim {text!r}: holds= must be a bool, with measured= what was found"
        raise ValueError(msg)
    if at_least is not None and at_most is not None and at_most < at_least:
        msg = f"at_most must be >= at_least, got {at_least!r} and {at_most!r}"
        raise ValueError(msg)
    if on is not None and here != on:
        outcome, what = "n/a", f"needs {on.upper()}; this run is on {str(here).upper()}"
    elif unless:
        outcome, what = "n/a", unless
    elif small_mode() and (timed or isinstance(value, (Comparison, Rate, Measurement))):
        outcome, what = "n/a", SMALL
    else:
        if holds is not None:
            ok, what = holds, str(measured)
        elif value is None:
            msg = f"claim {text!r} needs the measured value"
            raise ValueError(msg)
        elif verdict is not None:
            ok, what = _verdict_holds(value, verdict), measured or str(value)
        else:
            low, high, what = _interval(value, spread)
            ok = (at_least is None or low >= at_least) and (
                at_most is None or high <= at_most
            )
            what = measured or what
        outcome = "held" if ok else "failed"
    result = Claim(text.strip(), outcome, str(what))
    record_claim(result)
    print(_line(result))
    if outcome == "failed" and os.environ.get(STRICT_ENV, "").strip() not in ("", "0"):
        msg = f"{_line(result)} (strict mode: {STRICT_ENV}=1)"
        raise AssertionError(msg)


def _line(claim: Claim) -> str:
    text, measured = claim.text, claim.measured
    return {
        "held": f"Claim held: {text} (measured {measured})",
        "failed": f"Claim did not hold here: {text}; measured {measured}",
        "n/a": f"Claim not checked here: {text} ({measured})",
    }[claim.outcome]


def takeaway() -> None:
    """Print the claims this run checked, with their outcomes."""
    claims = [c for c in recorded() if isinstance(c, Claim)]
    counts = {o: sum(c.outcome == o for c in claims) for o in ("held", "failed", "n/a")}
    print(
        f"This page's claims in this run: {counts['held']} held, "
        f"{counts['failed']} did not hold, {counts['n/a']} not checked here"
    )
    for checked in claims:
        print(f"  {_line(checked)}")
