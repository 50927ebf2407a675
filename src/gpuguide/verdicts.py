"""Verdicts that hold: comparisons computed with the spread, variants in rounds.

A difference counts only when it is larger than the calls' own spread (their
interquartile ranges) and at least :data:`MIN_EFFECT`, so a verdict holds when
the build runs again. :func:`interleave` times variants in rotating rounds, so
that a drift of the machine falls on every variant alike.

Examples
--------
>>> from gpuguide.timing import Measurement
>>> a = Measurement("fused", (1.0, 1.1, 1.2), "cpu", "wall-clock")
>>> b = Measurement("eager", (2.0, 2.1, 2.2), "cpu", "wall-clock")
>>> str(compare(a, b))
'fused is 1.91x faster than eager (1.78-2.05x)'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuguide import checks
from gpuguide.timing import REP_MS, Measurement, benchmark
from gpuguide.units import format_ratio

__all__ = ["Comparison", "break_even", "compare", "interleave"]

#: The verdict when the two intervals overlap, or the medians are within MIN_EFFECT.
NO_DIFFERENCE = "no measurable difference"
#: The smallest ratio of medians a verdict calls faster or slower (and its inverse).
MIN_EFFECT = 1.05


@dataclass(frozen=True)
class Comparison:
    """How much faster ``subject`` ran than ``baseline`` (``speedup`` above 1:
    faster), with ``low`` and ``high`` the speed-up over the quartiles."""

    subject: Measurement
    baseline: Measurement
    speedup: float
    low: float
    high: float

    @property
    def verdict(self) -> str:
        """``"faster"``, ``"slower"`` or :data:`NO_DIFFERENCE` (always for a single
        run on either side: without a spread there is no verdict)."""
        if self.single_run:
            return NO_DIFFERENCE
        if self.low > 1.0 and self.speedup >= MIN_EFFECT:
            return "faster"
        if self.high < 1.0 and self.speedup <= 1 / MIN_EFFECT:
            return "slower"
        return NO_DIFFERENCE

    @property
    def within_min_effect(self) -> bool:
        """Intervals apart, but the medians closer than :data:`MIN_EFFECT`."""
        return not self.measurable and (self.low > 1.0 or self.high < 1.0)

    @property
    def measurable(self) -> bool:
        """Whether the intervals are apart (the verdict is not "no difference")."""
        return self.verdict != NO_DIFFERENCE

    @property
    def single_run(self) -> bool:
        """Whether a side has one time only: the ratio then has no spread."""
        return min(len(self.subject.times_s), len(self.baseline.times_s)) == 1

    @property
    def short(self) -> str:
        """For a table cell or a title: ``"2.30x (2.10-2.50x)"``."""
        if self.single_run:
            return f"{format_ratio(self.speedup)} ({SINGLE_RUN})"
        spread = _span(self.low, self.high)
        if self.within_min_effect:
            return f"{NO_DIFFERENCE}, less than {_min_effect()} ({spread})"
        if not self.measurable:
            return f"{NO_DIFFERENCE} ({spread})"
        return f"{format_ratio(self.speedup)} ({spread})"

    def against(self, low: float, high: float) -> str:
        """``"above"``, ``"within"`` or ``"below"`` a quoted range of speed-ups."""
        low = checks.positive("low", low)
        high = checks.positive("high", high)
        if high < low:
            msg = f"high must be >= low, got low={low!r}, high={high!r}"
            raise ValueError(msg)
        if self.low > high:
            return "above"
        if self.high < low:
            return "below"
        return "within"

    def __str__(self) -> str:
        a, b = self.subject.label, self.baseline.label
        if self.single_run:
            return f"{a} ran at {format_ratio(self.speedup)} the speed of {b} ({SINGLE_RUN})"
        spread = _span(self.low, self.high)
        if self.verdict == "faster":
            return f"{a} is {format_ratio(self.speedup)} faster than {b} ({spread})"
        if self.verdict == "slower":
            slow = _span(1 / self.high, 1 / self.low)
            return f"{a} is {format_ratio(1 / self.speedup)} slower than {b} ({slow})"
        if self.within_min_effect:
            return (
                f"{NO_DIFFERENCE} between {a} and {b}: they differ by less than "
                f"{_min_effect()}, as two builds can (speed-up {spread})"
            )
        return f"{NO_DIFFERENCE} between {a} and {b} (speed-up {spread})"


#: What a comparison with one time on a side says instead of a verdict.
SINGLE_RUN = "a single run: no spread, so no verdict"


def _min_effect() -> str:
    return f"{100 * (MIN_EFFECT - 1):.0f}%"


def _span(low: float, high: float) -> str:
    """``"1.78-2.05x"``."""
    return f"{format_ratio(low).removesuffix('x')}-{format_ratio(high)}"


def compare(subject: Measurement, baseline: Measurement) -> Comparison:
    """Compare ``subject``'s median with ``baseline``'s, with their spread.

    ``str()`` of the result is a sentence for the page: ``"compiled is 2.3x
    faster than eager (2.1-2.5x)"``. Raises ``ValueError`` for a time of 0.
    """
    for name, value in (("subject", subject), ("baseline", baseline)):
        if not isinstance(value, Measurement):
            msg = f"{name} must be a Measurement, got {type(value).__name__}"
            raise TypeError(msg)
    if min(subject.q25_s, baseline.q25_s) <= 0:
        msg = (
            f"cannot compare {subject.label!r} with {baseline.label!r}: "
            "a time of 0 s (below the clock's resolution)"
        )
        raise ValueError(msg)
    return Comparison(
        subject=subject, baseline=baseline, speedup=baseline.median_s / subject.median_s,
        low=baseline.q25_s / subject.q75_s, high=baseline.q75_s / subject.q25_s,
    )  # fmt: skip


def break_even(
    cost_s: float | Measurement, without: Measurement, with_: Measurement
) -> int | None:
    """After how many uses a one-off ``cost_s`` pays for itself when each use
    takes ``with_`` instead of ``without``; None unless ``with_`` is faster."""
    cost = cost_s.median_s if isinstance(cost_s, Measurement) else cost_s
    cost = checks.non_negative("cost_s", cost)
    if compare(with_, without).verdict != "faster":
        return None
    saving = without.median_s - with_.median_s
    return max(1, math.ceil(cost / saving - 1e-12))


def interleave(
    variants: Mapping[str, Callable[[], Any]], *, rounds: int = 5,
    rep_ms: float | None = None, **options: Any,
) -> dict[str, Measurement]:  # fmt: skip
    """Time zero-argument callables in ``rounds`` rounds, each running every variant
    once in a rotating order; ``rep_ms`` per variant is split across the rounds,
    ``options`` go to :func:`~gpuguide.timing.benchmark` (warm-up in round one).
    Returns a Measurement per name, in the order given."""
    rounds = checks.integer("rounds", rounds, minimum=1)
    if not variants:
        msg = "variants must name at least one callable, got none"
        raise ValueError(msg)
    for name, fn in variants.items():
        if not callable(fn):
            msg = f"variants[{name!r}] must be callable, got {fn!r}"
            raise TypeError(msg)
    for reserved in ("fn", "args", "kwargs", "label", "rep_ms"):
        if reserved in options:
            msg = f"interleave() sets {reserved} itself; got {reserved}={options[reserved]!r}"
            raise TypeError(msg)
    per_round = (
        REP_MS if rep_ms is None else checks.positive("rep_ms", rep_ms)
    ) / rounds
    min_reps = max(1, options.pop("min_reps", 5) // rounds)
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, Measurement] = {}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            extra = {} if r == 0 else {"warmup_ms": 0.001}
            m = benchmark(variants[name], label=name, rep_ms=per_round,
                          min_reps=min_reps, **{**options, **extra})  # fmt: skip
            first.setdefault(name, m)
            times[name].extend(m.times_s)
    return {
        name: Measurement(
            label=name, times_s=tuple(times[name]), device=first[name].device,
            method=first[name].method, warmup_calls=first[name].warmup_calls,
        )
        for name in names
    }  # fmt: skip
