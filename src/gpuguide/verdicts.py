"""Verdicts that hold: comparisons computed with the spread, variants in rounds.

``subject`` is called faster (or slower) than ``baseline`` only when neither is
NOISY, the speed-up over the quartiles stays above 1 (or below 1) at both ends, the
medians differ by at least :data:`MIN_EFFECT`, and, where both were timed in the
same rounds (:func:`interleave`), a two-sided sign test over the paired rounds
rejects "no difference" at :data:`SIGN_LEVEL` (with 5 rounds: all 5 agree).
Otherwise the verdict is "no measurable difference" (``docs/measuring.md``).

>>> from gpuguide.timing import Measurement
>>> a = Measurement("fused", (1.0, 1.1, 1.2), "cpu", "wall-clock")
>>> b = Measurement("eager", (2.0, 2.1, 2.2), "cpu", "wall-clock")
>>> str(compare(a, b))
'fused is 1.91x faster than eager (1.78-2.05x)'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuguide import checks
from gpuguide.timing import NOISY_RELATIVE_IQR, REP_MS, Measurement, benchmark
from gpuguide.units import format_ratio

__all__ = ["Comparison", "break_even", "compare", "interleave"]

#: The verdict when the evidence does not hold (see the module's rule).
NO_DIFFERENCE = "no measurable difference"
#: The smallest ratio of medians a verdict calls faster or slower (and its inverse).
MIN_EFFECT = 1.05
#: The two-sided level of the sign test over paired rounds.
SIGN_LEVEL = 0.1
#: What a comparison with one time on a side says instead of a verdict.
_SINGLE_RUN = "a single run: no spread, so no verdict"


def _sign_test(wins: int, losses: int) -> float:
    """Two-sided p-value of ``wins`` against ``losses`` (1.0 for no rounds)."""
    n, k = wins + losses, max(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / float(2**n)
    return min(1.0, 2.0 * tail)


def _span(low: float, high: float) -> str:
    return f"{format_ratio(low).removesuffix('x')}-{format_ratio(high)}"


@dataclass(frozen=True)
class Comparison:
    """How much faster ``subject`` ran than ``baseline`` (``speedup`` > 1: faster),
    ``low`` to ``high`` over the quartiles; ``wins`` and ``losses`` count the paired
    rounds in which it was faster and slower (0 unless timed in the same rounds)."""

    subject: Measurement
    baseline: Measurement
    speedup: float
    low: float
    high: float
    wins: int = 0
    losses: int = 0

    @property
    def noisy(self) -> tuple[Measurement, ...]:
        """The NOISY measurements (no verdict is drawn from them)."""
        return tuple(m for m in (self.subject, self.baseline) if m.is_noisy)

    @property
    def verdict(self) -> str:
        """``"faster"``, ``"slower"`` or :data:`NO_DIFFERENCE`."""
        if self._why_not() is not None:
            return NO_DIFFERENCE
        return "faster" if self.speedup > 1 else "slower"

    @property
    def measurable(self) -> bool:
        """Whether the verdict is faster or slower (not "no difference")."""
        return self._why_not() is None

    def _why_not(self) -> str | None:
        """Why there is no verdict ("": the intervals overlap), None if there is."""
        if min(self.subject.n, self.baseline.n) == 1:
            return _SINGLE_RUN
        if self.noisy:
            names = " and ".join(m.label for m in self.noisy)
            verb = "is" if len(self.noisy) == 1 else "are"
            limit = f"{100 * NOISY_RELATIVE_IQR:.0f}%"
            return f"{names} {verb} NOISY (IQR > {limit} of the median), so no verdict"
        rounds = self.wins + self.losses
        if rounds and _sign_test(self.wins, self.losses) > SIGN_LEVEL:
            return f"faster in {self.wins} of {rounds} rounds"
        faster = self.low > 1.0 and self.wins >= self.losses
        if not (faster or (self.high < 1.0 and self.losses >= self.wins)):
            return ""
        if max(self.speedup, 1 / self.speedup) < MIN_EFFECT:
            effect = f"{100 * (MIN_EFFECT - 1):.0f}%"
            return f"they differ by less than {effect}, as two builds can"
        return None

    def per_round(self) -> dict[str, Any]:
        """A :func:`gpuguide.claim`'s keywords on the speed-up round by round: the
        median of the rounds' speed-ups, the lowest and highest as its spread."""
        subject, baseline = self.subject.rounds, self.baseline.rounds
        if len(subject) != len(baseline) or not subject:
            msg = (
                f"{self.subject.label!r} and {self.baseline.label!r} must be timed in "
                f"the same rounds, got {len(subject)} and {len(baseline)} rounds"
            )
            raise ValueError(msg)
        ratios = sorted(b / s for s, b in zip(subject, baseline, strict=True) if s > 0)
        speedup, low, high = statistics.median(ratios), ratios[0], ratios[-1]
        words = f"{speedup:.2f}x, {low:.2f}-{high:.2f}x over the rounds"
        return {
            "value": speedup,
            "spread": (low, high),
            "measured": words,
            "timed": True,
        }

    @property
    def short(self) -> str:
        """For a table cell or a title: ``"2.30x (2.10-2.50x)"``."""
        why, spread = self._why_not(), _span(self.low, self.high)
        if why == _SINGLE_RUN:
            return f"{format_ratio(self.speedup)} ({why})"
        if why is not None:
            return f"{NO_DIFFERENCE} ({why + ', ' if why else ''}{spread})"
        return f"{format_ratio(self.speedup)} ({spread})"

    def __str__(self) -> str:
        a, b = self.subject.label, self.baseline.label
        why, ratio = self._why_not(), format_ratio(self.speedup)
        if why == _SINGLE_RUN:
            return f"{a} ran at {ratio} the speed of {b} ({why})"
        if why is not None:
            why = f": {why}" if why else ""
            spread = _span(self.low, self.high)
            return f"{NO_DIFFERENCE} between {a} and {b}{why} (speed-up {spread})"
        if self.verdict == "faster":
            return f"{a} is {ratio} faster than {b} ({_span(self.low, self.high)})"
        slow = _span(1 / self.high, 1 / self.low)
        return f"{a} is {format_ratio(1 / self.speedup)} slower than {b} ({slow})"


def compare(subject: Measurement, baseline: Measurement) -> Comparison:
    """Compare ``subject`` with ``baseline``: medians, spread and paired rounds.

    ``str()`` of the result is a sentence: ``"compiled is 2.3x faster than eager
    (2.1-2.5x)"``. Raises ``ValueError`` for a time of 0.
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
    paired = len(subject.rounds) == len(baseline.rounds) >= 2
    pairs = list(zip(subject.rounds, baseline.rounds, strict=True)) if paired else []
    return Comparison(
        subject,
        baseline,
        baseline.median_s / subject.median_s,
        baseline.q25_s / subject.q75_s,
        baseline.q75_s / subject.q25_s,
        wins=sum(s < b for s, b in pairs),
        losses=sum(s > b for s, b in pairs),
    )


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
    variants: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 5,
    rep_ms: float | None = None,
    **options: Any,
) -> dict[str, Measurement]:
    """Time zero-argument callables in ``rounds`` rounds, each running every variant
    once in a rotating order: a Measurement per name that keeps its rounds'
    medians (which :func:`compare` pairs). ``rep_ms`` per variant is split across
    the rounds; ``options`` go to :func:`~gpuguide.timing.benchmark`.
    """
    rounds = checks.integer("rounds", rounds, minimum=1)
    rep_ms = REP_MS if rep_ms is None else checks.positive("rep_ms", rep_ms)
    min_reps = max(1, options.pop("min_reps", 5) // rounds)
    options |= {"rep_ms": rep_ms / rounds, "min_reps": min_reps}
    names = list(variants)
    runs: dict[str, list[Measurement]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(benchmark(variants[name], label=name, **options))
        options["warmup_ms"] = 0.001  # warmed up in round one
    return {
        name: Measurement(
            name,
            tuple(t for m in ms for t in m.times_s),
            ms[0].device,
            ms[0].method,
            ms[0].warmup_calls,
            rounds=tuple(m.median_s for m in ms),
        )
        for name, ms in runs.items()
    }
