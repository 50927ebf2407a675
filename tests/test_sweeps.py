"""The sweep that measures, prints and plots itself, on the CPU and on fakes."""

from __future__ import annotations

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

from gpuguide import results
from gpuguide.sizes import size_budget
from gpuguide.sweeps import Sweep, SweepResult, Variant, _size_text
from gpuguide.timing import Measurement


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("GPUGUIDE_RECORD", raising=False)
    monkeypatch.setattr(results, "_default_page", lambda: "plot_sweep_test")
    results.recorded(clear=True)
    yield
    results.recorded(clear=True)


def vectors(n, device):
    return [torch.ones(n, device=device), torch.ones(n, device=device)]


def small_sweep(**overrides):
    options = {
        "name": "add",
        "inputs": vectors,
        "lo": 1024,
        "hi": 8192,
        "traffic": lambda n: 12 * n,
        "rate": "B/s",
        "peak": "memory",
    }
    return Sweep(**{**options, **overrides})


def m(label, seconds, spread=0.01):
    """Nine times spread evenly over seconds +- spread (a share of it)."""
    step = 2 * spread * seconds / 8
    times = tuple(seconds * (1 - spread) + i * step for i in range(9))
    return Measurement(label, times, "cpu", "wall-clock")


def fake(times, sizes=(1, 2, 4, 8), rate=None):
    sweep = Sweep(
        "op", vectors, lo=1, hi=8, memory=lambda n: n, flop=lambda n: 1e6 * n, rate=rate
    )
    return SweepResult(sweep, list(sizes), times, dict.fromkeys(times, "cpu"))


def test_a_run_times_every_variant_at_each_size_and_prints_a_table():
    calls = []

    def add(x, y):
        calls.append(x.numel())
        return x + y

    result = small_sweep().run({"add": add, "torch.add": torch.add}, rep_ms=1)
    assert result.sizes == [1024, 2048, 4096, 8192]
    assert set(calls) == set(result.sizes)
    assert all(isinstance(t, Measurement) for ts in result.times.values() for t in ts)
    text = str(result)
    assert text.splitlines()[0] == "add: median B/s (share of the memory peak)"
    assert text.splitlines()[1].split() == ["size", "n", "add", "torch.add"]
    assert len(text.splitlines()) >= 2 + len(result.sizes)
    assert repr(result) == text
    assert "%)" in text  # the share of the measured CPU ceiling


def test_within_limits_a_variant_to_the_sizes_another_ran():
    result = small_sweep().run(
        {
            "short": Variant(torch.add, call_s=1.0),
            "inside": Variant(torch.add, within="short", peak=False),
        },
        rep_ms=1,
    )
    assert result.ran("inside") == [
        n for n in result.ran("short") if n in result.ran("inside")
    ]
    assert result._peak("short") == "memory"
    assert result._peak("inside") is None


def test_paired_variants_share_rounds():
    result = small_sweep(hi=1024).run(
        {"a": torch.add, "b": torch.sub}, paired=True, rep_ms=5
    )
    assert len(result.at("a").rounds) == 5
    assert len(result.at("b").rounds) == 5
    unpaired = small_sweep(hi=1024).run({"a": torch.add}, rep_ms=5)
    assert unpaired.at("a").rounds == ()


def test_the_crossover_is_the_start_of_the_winning_run_that_ends_the_sweep():
    slow = [m("cpu", t) for t in (1.0, 1.0, 1.0, 1.0)]
    gpu = [m("gpu", t) for t in (2.0, 0.5, 1.0, 0.5)]  # wins, ties, wins
    result = fake({"cpu": slow, "gpu": gpu})
    verdicts = [v.verdict for _, v in result.verdicts("gpu", "cpu")]
    assert verdicts == ["slower", "faster", "no measurable difference", "faster"]
    assert result.crossover("gpu", "cpu") == 8
    assert fake({"cpu": slow, "gpu": [m("g", 0.5)] * 4}).crossover("gpu", "cpu") == 1
    assert fake({"cpu": slow, "gpu": slow}).crossover("gpu", "cpu") is None


def test_comparisons_and_rates_default_to_the_largest_size_both_ran():
    result = fake({"a": [m("a", 1.0)] * 4, "b": [m("b", 2.0), None, m("b", 4.0), None]})
    assert result.ran("a", "b") == [1, 4]
    assert result.largest("a", "b") == 4
    assert result.compare("a", "b").speedup == pytest.approx(4.0)
    assert result.rate("a").value == pytest.approx(8e6)  # 8e6 FLOP in 1 s
    assert result.rate("b", 1).value == pytest.approx(0.5e6)
    assert "-" in str(result).splitlines()[3].split()  # b did not run at n=2


def test_report_prints_each_variant_and_against_prints_the_crossover(capsys):
    gpu = [m("g", 2.0)] + [m("g", 0.25)] * 3
    result = fake({"cpu": [m("c", 1.0)] * 4, "gpu": gpu}, rate="FLOP/s")
    result.report()
    result.against("cpu")
    out = capsys.readouterr().out
    assert "op, cpu: 8.00 MFLOP/s" in out
    assert "op, gpu: 32.0 MFLOP/s" in out
    assert "op, gpu: faster than cpu from n=2 on" in out
    assert "op speed-up, gpu: g is 4.00x faster than c" in out
    names = [(r.name, r.value) for r in results.recorded()]
    assert ("op, gpu", pytest.approx(32e6)) in names
    assert ("op speed-up, gpu", pytest.approx(4.0)) in names


def test_a_time_sweep_reports_times():
    result = fake({"a": [m("a", 1e-3)] * 4})
    assert str(result).startswith("op: median time per call (quartiles)")
    assert "1.00 ms" in str(result)


def test_the_plot_draws_one_line_and_band_per_variant_on_log_axes():
    b = [m("b", 2.0), None, m("b", 4.0), None]
    result = fake({"a": [m("a", 1.0)] * 4, "b": b}, rate="FLOP/s")
    _, ax = plt.subplots()
    result.plot(ax, title="rates", labels={"b": "B"})
    assert [line.get_label() for line in ax.lines] == ["a", "B"]
    assert ax.get_xscale() == "log"
    assert ax.get_ylabel() == "FLOP rate (MFLOP/s)"
    assert list(ax.lines[1].get_ydata()) == pytest.approx([0.5, 1.0])
    assert ax.get_title() == "rates"
    plt.close("all")


def test_bad_declarations_and_lookups_fail_clearly():
    with pytest.raises(ValueError, match="rate must be one of"):
        small_sweep(rate="TB")
    with pytest.raises(ValueError, match=r"needs flop\(n\)"):
        small_sweep(rate="FLOP/s")
    with pytest.raises(ValueError, match="give memory"):
        Sweep("x", vectors, lo=1, hi=2)
    with pytest.raises(ValueError, match="within='nope' names no variant"):
        small_sweep().run({"a": Variant(torch.add, within="nope")})
    with pytest.raises(ValueError, match="at least one"):
        small_sweep().run({})
    result = fake(
        {"a": [m("a", 1.0), None, None, None], "b": [None, m("b", 1.0)] + [None] * 2}
    )
    with pytest.raises(KeyError, match="no variant 'c'"):
        result.at("c")
    with pytest.raises(ValueError, match="never ran at the same size"):
        result.compare("a", "b")
    with pytest.raises(ValueError, match="did not run at n=2"):
        result.at("a", 2)


def test_size_text_names_large_powers_of_two():
    assert _size_text(2**20) == "2^20"
    assert _size_text(8192) == "8192"
    assert _size_text(3 * 2**20) == str(3 * 2**20)


def test_a_variant_may_bring_its_own_inputs_size_peak_and_planning_rate():
    seen = []

    def halves(n, device):
        seen.append(n)
        return [torch.ones(n, device=device, dtype=torch.float16)] * 2

    result = small_sweep(hi=2048, flop=lambda n: n).run(
        {
            "fp32": torch.add,
            "fp16": Variant(torch.add, inputs=halves, peak="fp16"),
            "n+1": Variant(torch.add, size=lambda n: n + 1, peak=False),
            "slow": Variant(torch.add, flop_per_s=1.0),
        },
        rep_ms=1,
    )
    assert seen == [1024, 2048]
    assert result._size_of("n+1", 1024) == 1025
    assert result.rate("n+1", 1024).value == pytest.approx(
        12 * 1025 / result.at("n+1", 1024).median_s
    )
    assert result.ran("slow") == [1024]  # 1 FLOP/s: only the smallest size
    assert result._peak("fp16") == "fp16"
    assert result._peak("n+1") is None
    assert result._peak("fp32") == "memory"
    assert "(share of each one's peak)" in str(result).splitlines()[0]


def test_the_plot_records_its_points_when_asked():
    result = fake({"a": [m("a", 1e-3)] * 4})
    _, ax = plt.subplots()
    result.plot(ax, record="op time")
    plt.close("all")
    assert [r.x for r in results.recorded() if r.name == "op time"] == [1, 2, 4, 8]


def test_a_variant_that_needs_more_memory_runs_at_fewer_sizes():
    budget = size_budget("cpu").memory_bytes
    result = small_sweep(hi=4096).run(
        {
            "lean": torch.add,
            "greedy": Variant(torch.add, memory=lambda n: budget * n / 2048),
        },
        rep_ms=1,
    )
    assert result.ran("lean") == [1024, 2048, 4096]
    assert result.ran("greedy") == [1024, 2048]


def test_a_variant_out_of_memory_skips_its_larger_sizes_and_says_so(capsys):
    def big_inputs(n, device):
        if n >= 4096:
            raise torch.OutOfMemoryError("inputs")
        return vectors(n, device)

    def add_until(x, y):
        if x.numel() >= 2048:
            raise torch.OutOfMemoryError("call")
        return x + y

    result = small_sweep().run(
        {
            "fits": torch.add,
            "call fails": add_until,
            "inputs fail": Variant(torch.add, inputs=big_inputs),
        },
        rep_ms=1,
    )
    assert result.ran("fits") == [1024, 2048, 4096, 8192]
    assert result.ran("call fails") == [1024]
    assert result.ran("inputs fail") == [1024, 2048]
    out = capsys.readouterr().out
    assert "add, call fails: out of memory at n=2048; larger sizes skipped" in out
    assert "add, inputs fail: out of memory at n=4096; larger sizes skipped" in out


def test_per_work_pools_variants_of_different_sizes_round_by_round():
    sweep = Sweep(
        "op",
        vectors,
        lo=1,
        hi=8,
        memory=lambda n: n,
        flop=lambda n: 10 * n,
        rate="FLOP/s",
    )
    rounds = (1.0, 2.0, 3.0)
    a = Measurement("a", rounds, "cpu", "wall-clock", rounds=rounds)
    variants = {
        "n": Variant(torch.add),
        "n+1": Variant(torch.add, size=lambda n: n + 1),
    }
    times = {"n": [a], "n+1": [a]}
    result = SweepResult(sweep, [4], times, dict.fromkeys(times, "cpu"), variants)
    pooled = result.per_work(["n", "n+1"])
    assert pooled.rounds == pytest.approx([(r / 40 + r / 50) / 2 for r in rounds])
    assert pooled.label == "n, n+1 at n=4, per FLOP"
    alone = result.per_work(["n+1"], 4)
    assert alone.median_s == pytest.approx(2.0 / 50)
    unpaired = fake({"a": [m("a", 1.0)] * 4}, rate="FLOP/s").per_work(["a"], 2)
    assert unpaired.median_s == pytest.approx(1.0 / 2e6)


def test_a_flop_rate_sweep_plans_its_sizes_at_the_peak_it_is_held_against(monkeypatch):
    from types import SimpleNamespace

    from gpuguide import sweeps

    monkeypatch.setattr(
        sweeps, "device_peaks", lambda device: SimpleNamespace(flops={"fp16": 1e3})
    )
    sweep = small_sweep(hi=2048, flop=lambda n: n, rate="FLOP/s", peak="fp32")
    dev = torch.device("cpu")
    assert sweep._peak_rate(dev, Variant(torch.add)) is None  # fp32 unknown here
    assert sweep._peak_rate(dev, Variant(torch.add, peak="fp16")) == 1e3
    assert sweep._peak_rate(dev, Variant(torch.add, peak=False)) is None
    result = sweep.run({"fp16": Variant(torch.add, peak="fp16")}, rep_ms=1)
    assert result.ran("fp16") == [1024]  # 1 kFLOP/s: only the smallest size fits


def test_listed_sizes_run_as_listed():
    result = Sweep("chain", vectors, sizes=[16, 1, 4]).run({"add": torch.add}, rep_ms=1)
    assert result.sizes == [1, 4, 16]
    with pytest.raises(ValueError, match="at least one size"):
        Sweep("chain", vectors, sizes=[])
