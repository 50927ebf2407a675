"""Claims: checked with the measured spread, printed in place, recorded, strict mode."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
import torch

from gpuguide import claims, results
from gpuguide import page as page_module
from gpuguide.claims import claim, takeaway
from gpuguide.env import SMALL_ENV
from gpuguide.page import Page
from gpuguide.timing import Measurement
from gpuguide.verdicts import compare
from gpuguide_tools import results_files

PAGE = "plot_claims_test"


def m(label, *times, rounds=()):
    return Measurement(label, times, "cpu", "wall-clock", rounds=rounds)


def around(label, median, spread, n=9):
    step = 2 * spread / (n - 1)
    return m(label, *(median - spread + i * step for i in range(n)))


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("GPUGUIDE_RECORD", raising=False)
    monkeypatch.delenv(claims.STRICT_ENV, raising=False)
    monkeypatch.delenv(SMALL_ENV, raising=False)
    monkeypatch.setattr(results, "_default_page", lambda: PAGE)
    results.recorded(clear=True)
    page_module._current[:] = [Page(torch.device("cpu"))]
    yield
    results.recorded(clear=True)
    page_module._current.clear()


def _claims():
    return [c for c in results.recorded() if isinstance(c, results.Claim)]


def check(*args, **kwargs):
    """The claim's outcome, as recorded, and the line it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert claim(*args, **kwargs) is None  # a cell's last call shows no repr
    return _claims()[-1], out.getvalue()


def test_a_bound_holds_only_when_the_whole_interval_meets_it():
    one, many = around("batch 1", 1.0, 0.01), around("batch 32", 1.12, 0.01)
    ratio = compare(one, many)  # batch 32's time over batch 1's: about 1.12x
    held, text = check("batch 32 costs at most 1.3x batch 1", ratio, at_most=1.3)
    assert held.outcome == "held"
    assert text.startswith(
        "Claim held: batch 32 costs at most 1.3x batch 1 (measured 1.12x"
    )
    # The median is under the bound, but the interval reaches over it: not held.
    wide = compare(one, around("batch 32", 1.25, 0.2))
    assert wide.speedup < 1.3 < wide.high
    failed, text = check("batch 32 costs at most 1.3x batch 1", wide, at_most=1.3)
    assert failed.outcome == "failed"
    assert text.startswith(
        "Claim did not hold here: batch 32 costs at most 1.3x batch 1; measured "
    )
    at_least, _ = check("batch 32 costs at least 1.05x batch 1", ratio, at_least=1.05)
    assert at_least.outcome == "held"


def test_a_verdict_claim_follows_the_comparisons_rule():
    fast, slow = around("fused", 1.0, 0.01), around("eager", 2.0, 0.02)
    assert (
        check("fused is faster", compare(fast, slow), verdict="faster")[0].outcome
        == "held"
    )
    assert (
        check("fused is not slower", compare(fast, slow), verdict="not slower")[
            0
        ].outcome
        == "held"
    )
    noisy = m("eager", 1.5, 1.6, 2.0, 2.4, 3.0, 3.5, 4.0)
    outcome, text = check(
        "fused is faster than noisy eager", compare(fast, noisy), verdict="faster"
    )
    assert outcome.outcome == "failed"
    assert "NOISY" in text
    assert "so no verdict" in text
    with pytest.raises(ValueError, match="verdict must be one of"):
        check("x", compare(fast, slow), verdict="quicker")
    with pytest.raises(TypeError, match="a verdict claim needs a Comparison"):
        check("x", 1.0, verdict="faster")


def test_facts_numbers_and_spreads():
    fact, text = check("LayerNorm runs in float32", holds=True, measured="float32")
    assert fact.outcome == "held"
    assert text == "Claim held: LayerNorm runs in float32 (measured float32)\n"
    share, _ = check(
        "the copy reaches at least 50% of peak", 0.62, spread=(0.55, 0.7), at_least=0.5
    )
    assert share.outcome == "held"
    assert (
        check("at most 0.6", 0.62, spread=(0.55, 0.7), at_most=0.6)[0].outcome
        == "failed"
    )
    with pytest.raises(ValueError, match="needs one condition"):
        check("no condition", 1.0)
    with pytest.raises(ValueError, match="needs one condition"):
        check(
            "two conditions",
            compare(around("a", 1, 0.01), around("b", 2, 0.01)),
            verdict="faster",
            at_least=1.0,
        )
    with pytest.raises(ValueError, match="holds= must be a bool"):
        check("fact without what was found", holds=True)
    with pytest.raises(ValueError, match="at_most must be >= at_least"):
        check("empty range", 1.0, at_least=2.0, at_most=1.0)
    with pytest.raises(ValueError, match="spread must be finite"):
        check("value outside its spread", 2.0, spread=(0.0, 1.0), at_most=3.0)
    with pytest.raises(ValueError, match="non-empty string"):
        check(" ", 1.0, at_most=2.0)


def test_claims_that_do_not_apply_here():
    cuda, text = check("graphs cut the step time", None, verdict="faster", on="cuda")
    assert cuda.outcome == "n/a"
    assert (
        text
        == "Claim not checked here: graphs cut the step time (needs CUDA; this run is on CPU)\n"
    )
    other, _ = check(
        "two processes train faster",
        1.0,
        at_least=1.2,
        unless="2 cores: no room for 2 processes",
    )
    assert (other.outcome, other.measured) == (
        "n/a",
        "2 cores: no room for 2 processes",
    )


def test_timed_claims_are_not_checked_at_small_sizes(monkeypatch):
    monkeypatch.setenv(SMALL_ENV, "1")
    slow = compare(around("a", 2.0, 0.01), around("b", 1.0, 0.01))
    timed, _ = check("a is faster", slow, verdict="faster")
    assert (timed.outcome, timed.measured) == ("n/a", claims.SMALL)
    assert (
        check("a share from timings", 0.1, at_least=0.5, timed=True)[0].outcome == "n/a"
    )
    # ... but a fact is checked at any size.
    assert check("a fact", holds=False, measured="float16")[0].outcome == "failed"


def test_strict_mode_fails_on_a_claim_that_did_not_hold(monkeypatch):
    monkeypatch.setenv(claims.STRICT_ENV, "1")
    slow = compare(around("a", 2.0, 0.01), around("b", 1.0, 0.01))
    with pytest.raises(
        AssertionError,
        match=r"Claim did not hold here: a is faster; measured a is 2\.00x slower",
    ):
        check("a is faster", slow, verdict="faster")
    assert _claims()[0].outcome == "failed"  # recorded all the same
    assert check("a is slower", slow, verdict="slower")[0].outcome == "held"


def test_claims_are_recorded_with_the_page_and_the_takeaway_lists_them(
    tmp_path, monkeypatch, capsys
):
    target = tmp_path / "cpu.json"
    monkeypatch.setenv("GPUGUIDE_RECORD", str(target))
    check("a fact", holds=True, measured="yes")
    check("a cuda claim", None, at_least=1.0, on="cuda")
    check("a fact", holds=False, measured="no")  # stated again: replaces the first
    saved = results_files.load(target)
    assert [(c.text, c.outcome) for c in saved.claims_of(PAGE)] == [
        ("a cuda claim", "n/a"),
        ("a fact", "failed"),
    ]
    capsys.readouterr()
    assert takeaway() is None  # a cell ending with it shows only its lines
    text = capsys.readouterr().out
    assert (
        text.splitlines()[0]
        == "This page's claims in this run: 0 held, 1 did not hold, 1 not checked here"
    )
    assert "  Claim did not hold here: a fact; measured no" in text
    assert json.loads(target.read_text())["schema"] == results.SCHEMA_VERSION


def test_a_results_file_refuses_a_claim_stated_twice_or_a_bad_outcome():
    device = results.current_device()
    twice = (results.Claim("x", "held", "1"), results.Claim("x", "failed", "2"))
    with pytest.raises(ValueError, match="claims each stated once"):
        results_files.ResultsFile(device, claims={PAGE: twice})
    with pytest.raises(ValueError, match="/outcome: 'maybe' is not one of"):
        results.Claim("x", "maybe", "1")


def test_a_bound_on_a_noisy_comparison_prints_the_bare_speed_up():
    fast = m("fused", 1.0, 1.0, 1.3, 1.6, 1.6)  # NOISY: no verdict, but an interval
    slow = around("eager", 30.0, 0.1)
    c = compare(fast, slow)
    assert c.noisy
    held, text = check("fused is at least 10x faster", c, at_least=10.0)
    assert held.outcome == "held"
    assert "no measurable difference" not in text
    assert text.startswith("Claim held: fused is at least 10x faster (measured 23.1x (")


def test_a_claim_that_does_not_apply_here_may_omit_its_value_and_condition():
    cuda, text = check("replaying a graph gives exactly the eager result", on="cuda")
    assert cuda.outcome == "n/a"
    assert text.startswith("Claim not checked here: replaying a graph")
    # ... but where it applies, it needs one.
    page_module._current[:] = [Page(torch.device("cpu"))]
    with pytest.raises(ValueError, match="needs one condition"):
        check("a CPU claim without a condition")
    with pytest.raises(ValueError, match="needs one condition"):
        check(
            "two conditions, even here",
            on="cuda",
            holds=True,
            measured="x",
            at_least=1.0,
        )
