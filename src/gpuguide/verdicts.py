"""Verdicts that hold: comparisons computed with the spread, variants in rounds.

The rule (``docs/measuring.md`` states it for readers): ``subject`` is called
faster (or slower) than ``baseline`` only when

* neither measurement is NOISY (its IQR more than 10% of its median): a noisy
  one gets no verdict;
* the intervals are apart: the speed-up over the quartiles stays above 1 (or
  below 1) at both ends;
* the medians differ by at least :data:`MIN_EFFECT` (5%);
* where both were timed in the same interleaved rounds (:func:`interleave`),
  the rounds agree: a two-sided sign test over the paired rounds rejects "no
  difference" at :data:`SIGN_LEVEL` (with 5 rounds: all 5 in one direction).

Otherwise the verdict is "no measurable difference". :func:`interleave` times
variants in rotating rounds, so that a drift or a burst of load on the machine
falls on every variant alike, or on one round only, which the sign test then
does not count as evidence.

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
from gpuguide.timing import NOISY_RELATIVE_IQR, REP_MS, Measurement, benchmark
from gpuguide.units import format_ratio

__all__ = ["Comparison", "break_even", "compare", "interleave"]

#: The verdict when the evidence does not hold (see the module's rule).
NO_DIFFERENCE = "no measurable difference"
#: The smallest ratio of medians a verdict calls faster or slower (and its inverse).
MIN_EFFECT = 1.05
#: The two-sided level of the sign test over paired rounds.
SIGN_LEVEL = 0.1
#: Where a result lies against a quoted range when its interval is wider.
TOO_WIDE = "too wide to place"


def _sign_test(wins: int, losses: int) -> float:
    """Two-sided p-value of ``wins`` against ``losses`` (ties left out) when either
    is equally likely in each round: 1.0 for no rounds.

    >>> _sign_test(5, 0)
    0.0625
    """
    n, k = wins + losses, max(wins, losses)
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(k, n + 1)) / float(2**n)
    return min(1.0, 2.0 * tail)


@dataclass(frozen=True)
class Comparison:
    """How much faster ``subject`` ran than ``baseline`` (``speedup`` above 1:
    faster), with ``low`` and ``high`` the speed-up over the quartiles, and
    ``wins`` and ``losses``: the paired rounds in which ``subject`` was faster
    and slower (both 0 when the two were not timed in the same rounds)."""

    subject: Measurement
    baseline: Measurement
    speedup: float
    low: float
    high: float
    wins: int = 0
    losses: int = 0

    @property
    def paired(self) -> bool:
        """Whether the two were timed in the same interleaved rounds."""
        return self.wins + self.losses > 0

    @property
    def noisy(self) -> tuple[Measurement, ...]:
        """The measurements that are NOISY (no verdict is drawn from them)."""
        return tuple(m for m in (self.subject, self.baseline) if m.is_noisy)

    @property
    def rounds_agree(self) -> bool:
        """Whether the sign test over the paired rounds rejects "no difference"
        at :data:`SIGN_LEVEL` (True when not paired)."""
        return not self.paired or _sign_test(self.wins, self.losses) <= SIGN_LEVEL

    @property
    def verdict(self) -> str:
        """``"faster"``, ``"slower"`` or :data:`NO_DIFFERENCE` (always for a single
        run on either side, or a NOISY one)."""
        if self.single_run or self.noisy or not self.rounds_agree:
            return NO_DIFFERENCE
        if self.low > 1.0 and self.speedup >= MIN_EFFECT and self.wins >= self.losses:
            return "faster"
        if (
            self.high < 1.0
            and self.speedup <= 1 / MIN_EFFECT
            and self.losses >= self.wins
        ):
            return "slower"
        return NO_DIFFERENCE

    @property
    def within_min_effect(self) -> bool:
        """Intervals apart, but the medians closer than :data:`MIN_EFFECT`."""
        return (
            not self.measurable and not self.noisy and self.rounds_agree
            and (self.low > 1.0 or self.high < 1.0)
        )  # fmt: skip

    @property
    def measurable(self) -> bool:
        """Whether the verdict is faster or slower (not "no difference")."""
        return self.verdict != NO_DIFFERENCE

    @property
    def single_run(self) -> bool:
        """Whether a side has one time only: the ratio then has no spread."""
        return min(len(self.subject.times_s), len(self.baseline.times_s)) == 1

    def _why_not(self) -> str:
        """Why there is no verdict, for the text (empty: the intervals overlap)."""
        if self.noisy:
            names = " and ".join(m.label for m in self.noisy)
            verb = "is" if len(self.noisy) == 1 else "are"
            limit = f"{100 * NOISY_RELATIVE_IQR:.0f}%"
            return f"{names} {verb} NOISY (IQR > {limit} of the median), so no verdict"
        if not self.rounds_agree:
            return f"faster in {self.wins} of {self.wins + self.losses} rounds"
        if self.within_min_effect:
            return f"they differ by less than {_min_effect()}, as two builds can"
        return ""

    @property
    def short(self) -> str:
        """For a table cell or a title: ``"2.30x (2.10-2.50x)"``."""
        if self.single_run:
            return f"{format_ratio(self.speedup)} ({SINGLE_RUN})"
        spread = _span(self.low, self.high)
        if not self.measurable:
            why = self._why_not()
            return f"{NO_DIFFERENCE} ({why + ', ' if why else ''}{spread})"
        return f"{format_ratio(self.speedup)} ({spread})"

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
        why = self._why_not()
        why = f": {why}" if why else ""
        return f"{NO_DIFFERENCE} between {a} and {b}{why} (speed-up {spread})"


def place(interval: tuple[float, float], quoted: tuple[float, float]) -> str:
    """Where ``interval`` lies against ``quoted`` (both ``(low, high)``, > 0):
    ``"above"``, ``"below"`` or ``"within"`` when it lies there whole, else
    :data:`TOO_WIDE`.

    >>> place((1.2, 1.8), (1.5, 3.0))
    'too wide to place'
    """
    q_low, q_high = (checks.positive("quoted", q) for q in quoted)
    if q_high < q_low:
        msg = f"quoted must be (low, high) with low <= high, got {quoted!r}"
        raise ValueError(msg)
    low, high = interval
    if low > q_high:
        return "above"
    if high < q_low:
        return "below"
    if q_low <= low and high <= q_high:
        return "within"
    return TOO_WIDE


#: What a comparison with one time on a side says instead of a verdict.
SINGLE_RUN = "a single run: no spread, so no verdict"


def _min_effect() -> str:
    return f"{100 * (MIN_EFFECT - 1):.0f}%"


def _span(low: float, high: float) -> str:
    """``"1.78-2.05x"``."""
    return f"{format_ratio(low).removesuffix('x')}-{format_ratio(high)}"


def compare(subject: Measurement, baseline: Measurement) -> Comparison:
    """Compare ``subject``'s median with ``baseline``'s, with their spread and, when
    both were timed in the same interleaved rounds, round by round.

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
    wins = losses = 0
    if len(subject.rounds) == len(baseline.rounds) >= 2:
        pairs = list(zip(subject.rounds, baseline.rounds, strict=True))
        wins = sum(s < b for s, b in pairs)
        losses = sum(s > b for s, b in pairs)
    return Comparison(
        subject=subject, baseline=baseline, speedup=baseline.median_s / subject.median_s,
        low=baseline.q25_s / subject.q75_s, high=baseline.q75_s / subject.q25_s,
        wins=wins, losses=losses,
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
    once in a rotating order (each Measurement keeps its rounds' medians, which
    :func:`compare` pairs); ``rep_ms`` per variant is split across the rounds,
    ``options`` go to :func:`~gpuguide.timing.benchmark` (warm-up in round one).
    Returns a Measurement per name, in the order given."""
    rounds = checks.integer("rounds", rounds, minimum=1)
    per_round = (
        REP_MS if rep_ms is None else checks.positive("rep_ms", rep_ms)
    ) / rounds
    min_reps = max(1, options.pop("min_reps", 5) // rounds)
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    medians: dict[str, list[float]] = {name: [] for name in names}
    first: dict[str, Measurement] = {}
    for r in range(rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            extra = {} if r == 0 else {"warmup_ms": 0.001}
            m = benchmark(variants[name], label=name, rep_ms=per_round,
                          min_reps=min_reps, **{**options, **extra})  # fmt: skip
            first.setdefault(name, m)
            times[name].extend(m.times_s)
            medians[name].append(m.median_s)
    return {
        name: Measurement(
            label=name, times_s=tuple(times[name]), device=first[name].device,
            method=first[name].method, warmup_calls=first[name].warmup_calls,
            rounds=tuple(medians[name]),
        )
        for name in names
    }  # fmt: skip
