"""Claims a page states, checked by the run that measures them.

A sentence that states a direction or a size ("compiled is faster", "batch 32
costs at most 1.3x batch 1") is either printed from the measurement or declared
with :func:`claim` beside the code that measures it. The run checks it against
the measured value *and its spread* and prints one line in place:

* ``Claim held: <text> (measured ...)``;
* ``Claim did not hold here: <text>; measured ...``: the page says so where the
  claim is made, and the build's log lists it;
* ``Claim not checked here: <text> (why)``: it does not apply on this device
  (a CUDA-only claim on a CPU), or the run is at small sizes (the tests' build),
  too small to show a timed lesson.

With ``GPUGUIDE_STRICT_CLAIMS=1`` (``nox -s docs -- --strict-claims``, and the
tests' build) a claim that did not hold raises :class:`ClaimFailed`, which
fails the page. Every outcome is recorded with the page's figures
(:func:`gpuguide.results.record_claim`), so the site's claims page and each
page's "Recorded results" say where each claim held.

Examples
--------
>>> from gpuguide.timing import Measurement
>>> from gpuguide.verdicts import compare
>>> one = Measurement("batch 1", (1.0, 1.01, 1.02), "cpu", "wall-clock")
>>> many = Measurement("batch 32", (1.1, 1.12, 1.14), "cpu", "wall-clock")
>>> claim("batch 32 costs at most 1.3x batch 1", compare(one, many), at_most=1.3,
...       page="doctest")
Claim held: batch 32 costs at most 1.3x batch 1 (measured 1.11x (1.09-1.12))
"""

from __future__ import annotations

import math
import os
import sys
from typing import TYPE_CHECKING, TextIO

from gpuguide.device import pick_device
from gpuguide.env import small_mode
from gpuguide.page import current
from gpuguide.results import Claim, record_claim, recorded_claims
from gpuguide.timing import Measurement, Rate
from gpuguide.units import format_spread, significant
from gpuguide.verdicts import NO_DIFFERENCE, Comparison

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["ClaimFailed", "claim", "takeaway"]

#: Set to 1 to make a claim that does not hold raise :class:`ClaimFailed`.
STRICT_ENV = "GPUGUIDE_STRICT_CLAIMS"
#: The verdicts a claim about a comparison may state.
VERDICTS = ("faster", "slower", NO_DIFFERENCE, "not slower", "not faster")
#: What the line of each outcome starts with.
HEADS = {
    "held": "Claim held",
    "failed": "Claim did not hold here",
    "n/a": "Claim not checked here",
}
#: Why a timed claim is not checked at small sizes.
SMALL = "small mode: the sizes are too small to show it"


class ClaimFailed(AssertionError):
    """A claim that did not hold, raised in strict mode (``GPUGUIDE_STRICT_CLAIMS``)."""


def strict() -> bool:
    """Whether a claim that does not hold raises (``GPUGUIDE_STRICT_CLAIMS=1``)."""
    return os.environ.get(STRICT_ENV, "").strip() not in ("", "0")


def _interval(
    value: object, spread: Sequence[float] | None
) -> tuple[float, float, str]:
    """``(low, high, text)`` of a measured object or a number with its spread."""
    if isinstance(value, Comparison):  # the bare speed-up: the verdict is another claim
        ends = (value.speedup, value.low, value.high)
        return value.low, value.high, format_spread(*ends, "x")
    if isinstance(value, Rate):
        return value.low, value.high, str(value)
    if isinstance(value, Measurement):
        ends = (value.median_s, value.q25_s, value.q75_s)
        return value.q25_s, value.q75_s, format_spread(*ends, "s")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        msg = (
            "value must be a Comparison, Rate, Measurement or number, "
            f"got {type(value).__name__}"
        )
        raise TypeError(msg)
    number = float(value)
    if not math.isfinite(number):
        msg = f"value must be finite, got {value!r}"
        raise ValueError(msg)
    if spread is None:
        return number, number, significant(number)
    low, high = (float(end) for end in spread)
    if not (math.isfinite(low) and math.isfinite(high)) or not low <= number <= high:
        msg = f"spread must be finite (low, high) around the value, got {spread!r}"
        raise ValueError(msg)
    return low, high, format_spread(number, low, high, "")


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


def _device_type() -> str:
    """The set-up page's device type, else the device a page would pick."""
    page = current()
    return page.device.type if page is not None else pick_device().type


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
    page: str | None = None,
    file: TextIO | None = None,
) -> None:
    """Check one claim the page states, print its outcome in place, record it.

    Returns nothing, so that a cell ending with the call shows only the line;
    the outcome is recorded (:func:`gpuguide.results.recorded_claims`).

    Parameters
    ----------
    text : str
        The claim as the page states it: what it compares and the condition
        that makes it true ("a decode step at batch 32 costs at most 1.3x batch
        1's").
    value : Comparison, Rate, Measurement or number
        What was measured. A measured object brings its spread (a number may
        have one, ``spread=(low, high)``); the claim holds only when the whole
        interval satisfies it.
    at_least, at_most : float, optional
        Bounds on ``value`` (a Comparison's speed-up, a Rate's value, a
        Measurement's seconds, or the number).
    verdict : str, optional
        For a Comparison: ``"faster"``, ``"slower"``, ``"no measurable
        difference"``, ``"not slower"`` or ``"not faster"``, judged by the
        comparison's own rule (:mod:`gpuguide.verdicts`).
    holds : bool, optional
        For a fact that is not a timed figure (a dtype, a count): whether it
        holds; ``measured`` then says what was found.
    measured : str, optional
        What was measured, in words (default: the value with its spread).
    on : str, optional
        The device type the claim is about (``"cuda"``): on another it does
        not apply, and ``value`` and the condition may be omitted (a page
        declares its CUDA claims on every device, so that each lists them).
    unless : str, optional
        A reason the claim cannot be checked in this run (it then does not
        apply); None: it can.
    timed : bool
        Whether a plain number comes from timings (a measured object always
        does): a timed claim is not checked at small sizes.
    page : str, optional
        The page (default: the running script).
    file : file, optional
        Where the line goes (default: stdout).

    Raises
    ------
    ClaimFailed
        In strict mode (``GPUGUIDE_STRICT_CLAIMS=1``), when the claim did not hold.
    """
    if not isinstance(text, str) or not text.strip():
        msg = f"text must be a non-empty string, got {text!r}"
        raise ValueError(msg)
    conditions = [c is not None for c in (verdict, holds)] + [
        at_least is not None or at_most is not None
    ]
    here = None if on is None else _device_type()
    applies = (on is None or here == on) and not unless
    if sum(conditions) > 1 or (applies and sum(conditions) != 1):
        msg = (
            f"claim {text!r} needs one condition: at_least/at_most, verdict= "
            "or holds= (a claim that does not apply here may omit it)"
        )
        raise ValueError(msg)
    if holds is not None and (not isinstance(holds, bool) or not measured):
        msg = f"claim {text!r}: holds= must be a bool, with measured= saying what was found"
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
        else:
            if value is None:
                msg = f"claim {text!r} needs the measured value"
                raise ValueError(msg)
            low, high, what = _interval(value, spread)
            if verdict is not None:
                ok = _verdict_holds(value, verdict)
                what = measured or str(value)
            else:
                ok = (at_least is None or low >= at_least) and (
                    at_most is None or high <= at_most
                )
                what = measured or what
        outcome = "held" if ok else "failed"
    result = record_claim(Claim(text.strip(), outcome, str(what)), page=page)
    print(line(result), file=file or sys.stdout)
    if outcome == "failed" and strict():
        msg = f"{line(result)} (strict mode: {STRICT_ENV}=1)"
        raise ClaimFailed(msg)


def line(claim: Claim) -> str:
    """The line a page prints for a claim's outcome."""
    head = HEADS[claim.outcome]
    if claim.outcome == "failed":
        return f"{head}: {claim.text}; measured {claim.measured}"
    if claim.outcome == "n/a":
        return f"{head}: {claim.text} ({claim.measured})"
    return f"{head}: {claim.text} (measured {claim.measured})"


def takeaway(page: str | None = None, *, file: TextIO | None = None) -> None:
    """Print the claims the running page checked (``page``: those of that page)
    with their outcomes in this run, for its take-away section.

    Returns nothing, so that a cell ending with the call shows only the lines.
    """
    checked = recorded_claims()
    if page is not None:
        checked = {page: checked.get(page, ())}
    claims = [c for page_claims in checked.values() for c in page_claims]
    counts = {o: sum(c.outcome == o for c in claims) for o in HEADS}
    head = (
        f"This page's claims in this run: {counts['held']} held, "
        f"{counts['failed']} did not hold, {counts['n/a']} not checked here"
    )
    text = "\n".join([head, *(f"  {line(c)}" for c in claims)])
    print(text, file=file or sys.stdout)
