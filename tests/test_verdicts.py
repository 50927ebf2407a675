"""Verdicts computed with the spread, tested on synthetic measurements."""

from __future__ import annotations

import itertools

import pytest

from gpuguide import verdicts
from gpuguide.timing import Measurement
from gpuguide.verdicts import NO_DIFFERENCE, break_even, compare, interleave


def m(label, *times):
    return Measurement(label, times, "cpu", "wall-clock")


def around(label, median, spread, n=9):
    """n times evenly spread over median +- spread."""
    step = 2 * spread / (n - 1)
    return m(label, *(median - spread + i * step for i in range(n)))


# ---------------------------------------------------------------- compare


def test_clearly_apart_is_faster_and_slower_both_ways():
    fast, slow = around("new", 1.0, 0.05), around("old", 2.0, 0.1)
    c = compare(fast, slow)
    assert c.verdict == "faster"
    assert c.measurable
    assert c.speedup == pytest.approx(2.0)
    assert c.low < 2.0 < c.high
    assert str(c).startswith("new is 2.00x faster than old (")
    back = compare(slow, fast)
    assert back.verdict == "slower"
    assert str(back).startswith("old is 2.00x slower than new (")


def test_a_difference_under_the_minimum_effect_is_no_verdict_either_way():
    # Tight, non-overlapping intervals 3% apart: what two builds of the same page
    # on the same GPU can differ by, so no verdict that a rebuild could reverse.
    new, old = around("new", 1.00, 0.002), around("old", 1.03, 0.002)
    c = compare(new, old)
    assert c.low > 1.0  # the intervals are apart ...
    assert c.verdict == NO_DIFFERENCE  # ... but the effect is under 5%
    assert str(c).startswith("no measurable difference between new and old: they")
    assert "less than 5%, as two builds can" in str(c)
    assert c.short.startswith("no measurable difference (they differ by less than 5%")
    assert compare(old, new).verdict == NO_DIFFERENCE
    assert break_even(1.0, old, new) is None
    # From 5% on, apart intervals give a verdict both ways.
    far = around("far", 1.06, 0.002)
    assert compare(new, far).verdict == "faster"
    assert compare(far, new).verdict == "slower"
    assert pytest.approx(1.05) == verdicts.MIN_EFFECT


def test_overlapping_intervals_are_no_measurable_difference():
    a, b = around("a", 1.00, 0.08), around("b", 1.02, 0.08)
    assert not (a.is_noisy)
    assert not (b.is_noisy)
    c = compare(a, b)
    assert c.verdict == NO_DIFFERENCE
    assert not c.measurable
    assert str(c).startswith("no measurable difference between a and b (speed-up ")


def test_a_noisy_measurement_hides_a_median_difference():
    # Medians 30% apart, but one of them spreads over +-50%.
    steady, noisy = around("steady", 1.0, 0.01), around("noisy", 1.3, 0.65)
    assert compare(steady, noisy).verdict == NO_DIFFERENCE
    # The same medians with a tight spread are apart.
    assert compare(steady, around("tight", 1.3, 0.01)).verdict == "faster"


def test_interval_edges_are_the_quartiles():
    a = m("a", 1.0, 2.0, 3.0, 4.0, 5.0)  # q25 2, q75 4
    b = m("b", 10.0, 20.0, 30.0, 40.0, 50.0)  # q25 20, q75 40
    c = compare(a, b)
    assert (c.low, c.high) == pytest.approx((20 / 4, 40 / 2))


def test_compare_rejects_non_measurements_and_zero_times():
    with pytest.raises(TypeError, match="baseline must be a Measurement, got float"):
        compare(m("a", 1.0), 1.0)
    with pytest.raises(ValueError, match="a time of 0 s"):
        compare(m("a", 0.0, 0.0, 0.0), m("b", 1.0))


# ---------------------------------------------------- paired rounds, noise


def rounds(label, medians, spread=0.01):
    """A measurement of 3 calls per round around each round's median."""
    times = [t * (1 + d) for t in medians for d in (-spread, 0.0, spread)]
    return Measurement(label, tuple(times), "cpu", "wall-clock", rounds=tuple(medians))


def test_the_sign_test_counts_rounds_in_each_direction():
    assert verdicts._sign_test(5, 0) == pytest.approx(1 / 16)
    assert verdicts._sign_test(0, 5) == pytest.approx(1 / 16)
    assert verdicts._sign_test(4, 1) == pytest.approx(12 / 32)
    assert verdicts._sign_test(0, 0) == 1.0
    assert verdicts._sign_test(7, 1) < verdicts.SIGN_LEVEL < verdicts._sign_test(6, 1)


def test_paired_rounds_that_all_agree_give_a_verdict():
    fast = rounds("fused", [1.0, 1.01, 0.99, 1.0, 1.02])
    slow = rounds("eager", [1.3, 1.31, 1.29, 1.3, 1.32])
    c = compare(fast, slow)
    assert (c.wins, c.losses) == (5, 0)
    assert c.verdict == "faster"
    assert compare(slow, fast).verdict == "slower"


def test_a_load_burst_on_one_variant_gives_no_verdict():
    # "a" and "b" run alike, but a burst of load slows "b" alone in four of five
    # rounds: pooled over the calls, b looks 1.5x slower with its intervals apart,
    # yet in round 5 b was as fast as a, so the rounds do not agree and the verdict
    # must say neither "faster" nor the opposite.
    a = rounds("a", [1.0, 1.0, 1.0, 1.0, 1.0])
    b = rounds("b", [1.5, 1.5, 1.5, 1.5, 0.99])
    unpaired = Measurement("b", b.times_s, "cpu", "wall-clock")
    assert compare(a, unpaired).verdict == "faster"  # the pooled rule alone
    c = compare(a, b)
    assert (c.wins, c.losses) == (4, 1)
    assert c.verdict == NO_DIFFERENCE
    assert "faster in 4 of 5 rounds" in str(c)
    assert compare(b, a).verdict == NO_DIFFERENCE


def test_a_noisy_measurement_gets_no_verdict_and_says_why():
    steady = around("steady", 1.0, 0.01)
    noisy = m("noisy", 2.0, 2.0, 2.1, 2.5, 3.0, 3.5, 4.0, 4.0, 4.1)
    assert noisy.is_noisy
    c = compare(steady, noisy)
    assert c.low > 1.0
    assert c.speedup > 1.05
    assert c.verdict == NO_DIFFERENCE  # ... but a NOISY side gives no verdict
    assert c.noisy == (noisy,)
    assert "noisy is NOISY (IQR > 10% of the median), so no verdict" in str(c)
    assert "NOISY" in c.short


def test_paired_rounds_of_different_lengths_are_not_paired():
    a = rounds("a", [1.0, 1.0, 1.0])
    b = rounds("b", [2.0, 2.0, 2.0, 2.0, 2.0])
    c = compare(a, b)
    assert (c.wins, c.losses) == (0, 0)
    assert c.verdict == "faster"  # by the intervals, as for any unpaired pair


def test_interleave_keeps_each_rounds_median():
    ticks = itertools.count()
    clock = lambda: next(ticks) * 1e-3  # noqa: E731 - every call takes 1 ms
    out = interleave({"a": lambda: None, "b": lambda: None}, rounds=5, clock=clock)
    assert len(out["a"].rounds) == len(out["b"].rounds) == 5
    assert all(t > 0 for t in out["a"].rounds)


# ---------------------------------------------------------------- break_even


def test_break_even_counts_uses_when_the_saving_is_measurable():
    without, with_ = around("view", 3.0, 0.05), around("copy", 1.0, 0.05)
    # 10 s once, 2 s saved per use: pays after 5 uses.
    assert break_even(10.0, without, with_) == 5
    assert break_even(0.0, without, with_) == 1
    assert break_even(m("cost", 9.0, 10.0, 11.0), without, with_) == 5


def test_break_even_is_none_when_the_saving_is_within_the_spread():
    without, with_ = around("view", 1.02, 0.1), around("copy", 1.0, 0.1)
    assert break_even(0.5, without, with_) is None
    # ... and when the "saving" is a loss.
    assert break_even(0.5, around("a", 1.0, 0.01), around("b", 2.0, 0.01)) is None


def test_break_even_rejects_a_negative_cost():
    with pytest.raises(ValueError, match="cost_s must be"):
        break_even(-1.0, around("a", 2.0, 0.01), around("b", 1.0, 0.01))


# ---------------------------------------------------------------- interleave


def test_interleave_rotates_the_order_and_merges_the_rounds(monkeypatch):
    order = []
    clock = itertools.count()

    def fake_benchmark(fn, *, label, rep_ms, min_reps, **options):
        fn()
        order.append((label, options.get("warmup_ms")))
        t = float(next(clock) + 1)
        return Measurement(label, (t, t), options.get("device", "cpu"), "wall-clock", 3)

    monkeypatch.setattr(verdicts, "benchmark", fake_benchmark)
    ran = []
    out = interleave(
        {
            "a": lambda: ran.append("a"),
            "b": lambda: ran.append("b"),
            "c": lambda: ran.append("c"),
        },
        rounds=3,
        rep_ms=30,
        device="cpu",
    )
    assert list(out) == ["a", "b", "c"]
    assert ran == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]
    # Warm-up in the first round only.
    assert [w for _, w in order[:3]] == [None] * 3
    assert all(w is not None and w < 0.01 for _, w in order[3:])
    assert out["a"].times_s == (1.0, 1.0, 6.0, 6.0, 8.0, 8.0)
    assert out["a"].n == 6
    assert out["a"].warmup_calls == 3


def test_interleave_runs_for_real_on_the_cpu():
    out = interleave(
        {"x": lambda: sum(range(100)), "y": lambda: None}, rounds=2, rep_ms=2
    )
    assert {name: o.label for name, o in out.items()} == {"x": "x", "y": "y"}
    assert all(o.n >= 2 and o.device == "cpu" for o in out.values())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"variants": {"a": print}, "rounds": 0}, ValueError, "rounds must be"),
        ({"variants": {"a": print}, "rep_ms": 0}, ValueError, "rep_ms must be"),
    ],
)
def test_interleave_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        interleave(**kwargs)


def test_short_gives_the_speedup_with_its_range_or_no_difference():
    apart = compare(around("new", 1.0, 0.05), around("old", 2.0, 0.1))
    assert apart.short.startswith("2.00x (")
    assert apart.short.endswith("x)")
    close = compare(around("a", 1.0, 0.2), around("b", 1.05, 0.2))
    assert close.short.startswith("no measurable difference (")


def test_a_single_run_on_either_side_gives_a_ratio_but_no_verdict():
    once = Measurement("cold", (12.3,), "cpu", "wall-clock")
    warm = Measurement("warm", (1.66, 1.68, 1.70), "cpu", "wall-clock")
    c = compare(warm, once)
    assert not c.measurable
    assert c.verdict == NO_DIFFERENCE
    assert str(c) == (
        "warm ran at 7.32x the speed of cold (a single run: no spread, so no verdict)"
    )
    assert c.short == "7.32x (a single run: no spread, so no verdict)"
    assert "faster" not in str(c)
    assert "slower" not in str(compare(once, warm))
    assert break_even(1.0, once, warm) is None  # no saving measured, none paid off
    assert compare(warm, warm).short.startswith("no measurable difference")


def test_per_round_gives_a_claims_value_spread_and_words_from_the_rounds():
    fast = Measurement("fast", (1.0,) * 4, "cpu", "wall-clock", rounds=(1, 2, 1, 3))
    slow = Measurement("slow", (2.0,) * 4, "cpu", "wall-clock", rounds=(2, 4, 3, 3))
    got = compare(fast, slow).per_round()
    assert got == {
        "value": 2.0,
        "spread": (1.0, 3.0),
        "measured": "2.00x, 1.00-3.00x over the rounds",
        "timed": True,
    }
    alone = Measurement("alone", (1.0,) * 4, "cpu", "wall-clock")
    with pytest.raises(ValueError, match="same rounds"):
        compare(fast, alone).per_round()
