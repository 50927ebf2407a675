"""The page API: setup(), Page.needs_cuda(), Measurement.rate() and report()."""

from __future__ import annotations

import pytest
import torch

from gpuguide import page as report_module
from gpuguide import results
from gpuguide.page import Page, report, setup
from gpuguide.timing import Measurement, Rate
from gpuguide.verdicts import compare

PAGE = "plot_report_test"


def _m(label, *times):
    return Measurement(label, times, "cpu", "wall-clock")


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("GPUGUIDE_RECORD", raising=False)
    monkeypatch.setattr(results, "_default_page", lambda: PAGE)
    results.recorded(clear=True)
    yield
    results.recorded(clear=True)
    report_module._current.clear()


def test_rate_keeps_the_quartiles_as_its_spread():
    m = _m("mm", 1e-3, 1e-3, 2e-3, 4e-3, 4e-3)  # q25 1 ms, median 2 ms, q75 4 ms
    r = m.rate(8e9, "FLOP/s")
    assert (r.value, r.low, r.high) == (4e12, 2e12, 8e12)
    assert str(r) == "4.00 TFLOP/s (2.00-8.00)"
    assert (r.label, r.device, r.unit) == ("mm", "cpu", "FLOP/s")


def test_rate_prints_its_spread_in_the_prefix_of_its_value():
    r = _m("copy", 0.0099, 0.01, 0.0102).rate(1e9, "B/s")
    assert str(r) == "100 GB/s (99.0-101)"
    assert f"{r:>30}".strip() == str(r)
    assert str(Rate(5.0, "tok/s", 4.0, 6.0)) == "5.00 tok/s (4.00-6.00)"


def test_a_rate_over_another_spans_the_extreme_ratios_of_their_intervals():
    fast, slow = Rate(8.0, "B/s", 6.0, 10.0), Rate(2.0, "B/s", 1.0, 4.0)
    assert fast.over(slow) == {"value": 4.0, "spread": (1.5, 10.0)}
    with pytest.raises(ValueError, match="another rate in B/s"):
        fast.over(Rate(2.0, "FLOP/s", 1.0, 4.0))


def test_rate_refuses_a_zero_quartile_and_an_inverted_interval():
    with pytest.raises(ValueError, match="quartile of 0"):
        _m("z", 0.0, 0.0, 1.0).rate(1.0)
    with pytest.raises(ValueError, match="low <= value <= high"):
        Rate(5.0, "B/s", 6.0, 7.0)


def test_report_prints_one_line_with_spread_and_share_and_records_it(
    monkeypatch, capsys
):
    from gpuguide.peaks import Peaks

    page = Page(torch.device("cpu"))
    monkeypatch.setitem(page.__dict__, "peaks", Peaks("CPU: test", {"fp32": 8e12}))
    report_module._current[:] = [page]
    rate = _m("mm", 1e-3, 1e-3, 2e-3, 4e-3, 4e-3).rate(8e9)
    assert report("matmul", rate, peak="fp32", size=64, dtype="fp32") is None
    (result,) = results.recorded()
    assert capsys.readouterr().out == (
        "matmul (dtype=fp32): 4.00 TFLOP/s (2.00-8.00) NOISY (spread > 10% of the "
        "median), 50% of the fp32 peak\n"
    )
    assert result.value == 4e12
    assert result.spread == (2e12, 8e12)
    assert (result.unit, result.size, dict(result.config)) == (
        "FLOP/s",
        64,
        {"dtype": "fp32"},
    )


@pytest.mark.parametrize(
    ("quoted", "place"),
    [
        ((1e12, 1.5e12), "above"),
        ((1e12, 1e13), "within"),
        ((3e12, 5e12), "too wide to place against"),
        ((9e12, 1e13), "below"),
    ],
)
def test_report_places_the_spread_against_a_quoted_range(quoted, place, capsys):
    rate = _m("mm", 1e-3, 1e-3, 2e-3, 4e-3, 4e-3).rate(8e9)
    report("matmul", rate, quoted=quoted)
    assert f", {place} the quoted " in capsys.readouterr().out


@pytest.mark.parametrize(
    ("interval", "expected"),
    [
        ((3.1, 4.0), "above"),
        ((1.6, 2.9), "within"),
        ((2.5, 3.2), "too wide to place against"),  # straddles the top
        ((1.4, 3.1), "too wide to place against"),  # wider on both sides
        ((0.5, 1.4), "below"),
    ],
)
def test_place_against_a_quoted_range(interval, expected):
    assert report_module._place(interval, (1.5, 3.0)) == expected


def test_place_checks_the_quoted_range():
    with pytest.raises(ValueError, match="with low <= high"):
        report_module._place((1.0, 2.0), (3.0, 1.5))
    with pytest.raises(ValueError, match="quoted must be a finite number > 0"):
        report_module._place((1.0, 2.0), (0.0, 1.5))


def test_report_of_a_comparison_prints_the_verdict_and_records_the_speedup(capsys):
    fast, slow = _m("fused", 1.0, 1.1, 1.2), _m("eager", 2.0, 2.1, 2.2)
    report("fusion", compare(fast, slow), quoted=(1.5, 3.0))
    (result,) = results.recorded()
    line = capsys.readouterr().out
    assert line.startswith("fusion: fused is 1.91x faster than eager (1.78-2.05x)")
    assert line.rstrip().endswith("within the quoted 1.5-3x")
    assert result.unit == "x"
    assert result.spread == pytest.approx((2.05 / 1.15, 2.15 / 1.05))


def test_report_of_a_measurement_records_seconds_with_quartiles(capsys):
    report("step", _m("step", 0.001, 0.002, 0.003))
    (result,) = results.recorded()
    assert capsys.readouterr().out == (
        "step: 2.00 ms (1.50-2.50) NOISY (spread > 10% of the median)\n"
    )
    assert (result.unit, result.spread) == ("s", (0.0015, 0.0025))


def test_report_of_a_number_needs_a_unit_and_a_finite_value():
    with pytest.raises(ValueError, match="unit must be given"):
        report("x", 3.0)
    with pytest.raises(ValueError, match="/value"):
        report("x", float("nan"), unit="B")
    with pytest.raises(ValueError, match="low <= high"):
        report("x", 3.0, unit="B", quoted=(2.0, 1.0))


def test_report_reads_a_named_peak_from_the_pages_device(monkeypatch, capsys):
    from gpuguide.peaks import Peaks

    peaks = Peaks("CPU: test", {"fp32": 1e12}, memory_bandwidth_bytes_per_s=1e11)
    page = Page(torch.device("cpu"))
    monkeypatch.setitem(page.__dict__, "peaks", peaks)
    report_module._current[:] = [page]
    rate = _m("copy", 0.01, 0.01, 0.01).rate(2e8, "B/s")
    report("copy", rate, peak="memory")
    assert (
        capsys.readouterr().out
        == "copy: 20.0 GB/s (20.0-20.0), 20% of the memory peak\n"
    )
    assert results.recorded()[0].peak == "memory"


def test_setup_prints_the_provenance_and_seeds(monkeypatch, capsys):
    monkeypatch.setenv("GPUGUIDE_DEVICE", "cpu")
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    page = setup()
    first = torch.rand(1)
    setup()
    assert torch.equal(first, torch.rand(1))
    assert page.device == torch.device("cpu")
    assert page.small
    assert not page.cuda
    assert capsys.readouterr().out.startswith("Measured on CPU")


def test_needs_cuda_says_so_in_one_line_on_a_cpu(capsys):
    page = Page(torch.device("cpu"))
    assert page.needs_cuda("CUDA graphs") is False
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("CUDA graphs: needs a CUDA GPU")
    with pytest.raises(ValueError, match="lesson must be"):
        page.needs_cuda(" ")


def test_needs_cuda_is_silent_on_a_gpu(capsys):
    assert Page(torch.device("cuda")).needs_cuda("streams") is True
    assert capsys.readouterr().out == ""


def test_report_flags_no_noise_within_a_tenth_of_the_median(capsys):
    report("step", _m("step", 0.0100, 0.0101, 0.0102))
    assert "NOISY" not in capsys.readouterr().out


def test_report_prints_bytes_in_binary_units_and_records_bytes(capsys):
    report("kept for backward", 18 * 2**20, unit="B", size="4x64")
    report("returned", 512, unit="B")
    kept = results.recorded()[0]
    assert capsys.readouterr().out == "kept for backward: 18.0 MiB\nreturned: 512 B\n"
    assert (kept.value, kept.unit, kept.size) == (18 * 2**20, "B", "4x64")


def test_a_plain_number_prints_and_records_its_spread(capsys):
    report("shorter stage hidden", 93.7, unit="%", spread=(91.0, 96.0))
    assert capsys.readouterr().out == "shorter stage hidden: 93.7 % (91.0-96.0)\n"
    (result,) = results.recorded()
    assert (result.spread, result.unit) == ((91.0, 96.0), "%")


def test_a_negative_spread_reads_with_to(capsys):
    report("hidden", -19.3, unit="%", spread=(-25.0, -14.0))
    assert capsys.readouterr().out == "hidden: -19.3 % (-25.0 to -14.0)\n"


def test_plain_seconds_print_as_times(capsys):
    report("per-op cost", 8.75e-6, unit="s", spread=(8.1e-6, 9.3e-6))
    assert capsys.readouterr().out == "per-op cost: 8.75 us (8.10-9.30)\n"


def test_a_spread_must_be_a_range_and_only_for_a_plain_number(capsys):
    with pytest.raises(ValueError, match="q25 <= q75"):
        report("x", 1.0, unit="%", spread=(2.0, 1.0))
    m = Measurement("step", (1e-3, 2e-3, 3e-3), "cpu", "wall-clock")
    with pytest.raises(ValueError, match="has its own"):
        report("step", m, spread=(1e-3, 3e-3))


def test_a_plain_ratio_prints_like_the_verdicts_ratios(capsys):
    report("memory, naive / fused", 26.2, unit="x", S=2048)
    assert capsys.readouterr().out.strip() == "memory, naive / fused (S=2048): 26.2x"


def test_a_count_prints_as_a_whole_number(capsys):
    report("steps that compiled", 2, unit="steps", cache="growing")
    assert capsys.readouterr().out == "steps that compiled (cache=growing): 2 steps\n"
    report("kept", 4096, unit="B")  # bytes keep their prefix
    assert capsys.readouterr().out == "kept: 4.00 KiB\n"
