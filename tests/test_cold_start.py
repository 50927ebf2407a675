"""The cold-start page's helpers: the child's JSON protocol, the cache counters,
dynamo's phases, fresh processes and what they leave behind."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

from gpuguide.chapters import coldstart, coldstart_child
from gpuguide.chapters.coldstart import ChildFailed, Starts, _run_fresh, run_starts
from gpuguide.chapters.coldstart_child import MARK as _MARK
from gpuguide.chapters.coldstart_child import _describe_caches
from gpuguide.chapters.coldstart_child import _measure as measure
from gpuguide.timing import Measurement
from gpuguide.verdicts import compare

REPORT = f"""
import json
def report(result):
    print({_MARK!r} + json.dumps(result))
"""
CHILD = f"""{REPORT}
import os, sys
print("noise on stdout")
print("a compiler's log line", file=sys.stderr)
print({_MARK!r} + '{{"stale": true}}')
report({{"argv": sys.argv[1:], "flag": os.environ.get("GPUGUIDE_TEST_FLAG")}})
"""


# ---- cache counters and phases, with fakes ----------------------------------


def test_describe_caches_reads_hits_misses_and_bypasses_of_both_caches():
    counters = {
        "inductor": {
            "fxgraph_cache_hit": 2,
            "fxgraph_cache_miss": 1,
            "pattern_matcher_count": 24,
            "fxgraph_lookup_write_file": 1,
        },
        "aot_autograd": {
            "total": 1,
            "autograd_cache_bypass": 1,
            "ok": 1,
            "autograd_cache_saved": 1,
        },
        "stats": {"unique_graphs": 3},
    }
    text = _describe_caches(counters)
    assert text == "FX graph 2 hit, 1 miss; AOTAutograd 1 bypass"


def test_describe_caches_follows_renamed_keys_and_skips_zeros():
    # A later torch spelling the keys differently still counts; zeros are no news.
    counters = {"inductor": {"fx_graph_cache_hit": 1, "fxgraph_cache_miss": 0}}
    assert _describe_caches(counters) == "FX graph 1 hit"
    assert _describe_caches({"inductor": {"fxgraph_cache_miss": 0}}) == "none used"
    assert _describe_caches({}) == "none used"


def test_measure_sums_dynamos_known_phases_and_leaves_out_the_rest(monkeypatch, capsys):
    from torch._dynamo import utils

    metrics = {"bytecode_tracing": [0.25, 0.5], "OutputGraph.call_user_compiler": [2.0],
               "something_else": [9.0]}  # fmt: skip
    monkeypatch.setattr(utils, "compilation_time_metrics", metrics, raising=False)
    model = torch.nn.Linear(4, 4)
    result = _measured(capsys, model, model, torch.ones(1, 4), device="cpu")
    assert result["phases"] == {
        "Dynamo's tracing": 0.75,
        "AOTAutograd and inductor": 2.0,
    }


def test_first_call_parts_add_up_to_the_first_call():
    result = {"first_s": 3.0, "load_s": 0.5,
              "phases": {"Dynamo's tracing": 0.5, "AOTAutograd and inductor": 1.25}}  # fmt: skip
    split = Starts({"cold": {4: [result]}}, "cpu").first_call_parts("cold", 4)
    assert split["first call (s)"] == 3.0
    assert split["rest (s)"] == pytest.approx(0.75)
    assert sum(v for k, v in split.items() if k != "first call (s)") == pytest.approx(
        3.0
    )


def test_first_calls_and_steady_make_measurements_across_processes():
    results = [{"first_s": 2.0, "steady": {"eager": [1.0, 2.0], "compiled": [0.5]}},
               {"first_s": 4.0, "steady": {"eager": [3.0], "compiled": [0.25]}}]  # fmt: skip
    starts = Starts({"cold": {1: results}}, "cpu")
    first = starts.first("cold", 1)
    assert isinstance(first, Measurement)
    assert first.times_s == (2.0, 4.0)
    assert first.label == "cold"
    eager = starts.steady(["cold"], 1, "eager")
    assert (eager.times_s, eager.label) == ((1.0, 2.0, 3.0), "eager")
    assert starts.steady(["cold"], 1, "compiled", "cold").times_s == (0.5, 0.25)


def test_steady_relative_divides_by_each_processes_eager_median():
    # The second process ran everything twice as slowly: relative, it matches.
    # One value per process: a burst of load in one round moves no median.
    results = [{"steady": {"eager": [1.0, 1.0, 9.0], "compiled": [0.5, 0.5, 7.0]}},
               {"steady": {"eager": [2.0, 2.0, 2.0], "compiled": [1.0, 1.0, 1.0]}}]  # fmt: skip
    starts = Starts({"cold": {1: results}}, "cpu")
    relative = starts.steady(["cold"], 1, "compiled", "full", relative=True)
    assert relative.times_s == (0.5, 0.5)
    assert "relative" in relative.method
    pooled = starts.steady(["cold"], 1, "compiled", "full")
    assert pooled.times_s == (0.5, 0.5, 7.0, 1.0, 1.0, 1.0)
    assert pooled.median_s == 1.0


def test_steady_paired_keeps_each_rounds_median_relative_to_eager():
    # The second process ran twice as slowly; round by round, regional is faster.
    results = [{"steady": {"eager": [1.0, 1.0, 9.0]},
                "rounds": {"full": [1.0, 1.2], "regional": [0.8, 1.0]}},
               {"steady": {"eager": [2.0, 2.0, 2.0]},
                "rounds": {"full": [2.0, 2.2], "regional": [1.6, 2.0]}}]  # fmt: skip
    starts = Starts({"warm": {1: results}}, "cpu")
    full = starts.steady(["warm"], 1, "full", paired=True)
    regional = starts.steady(["warm"], 1, "regional", paired=True)
    assert full.times_s == full.rounds == pytest.approx((1.0, 1.2, 1.0, 1.1))
    assert regional.rounds == pytest.approx((0.8, 1.0, 0.8, 1.0))
    assert "paired" in full.method
    vs = compare(regional, full)
    assert (vs.wins, vs.losses) == (4, 0)


def _with_first_calls(steady_runs, first_s, device):
    """Starts whose cold processes took ``first_s`` and whose warm ones, at 1
    block, timed ``steady_runs``."""
    cold = [{"first_s": t} for t in first_s]
    return Starts({"cold": {1: cold}, "warm": {1: steady_runs}}, device)


def test_payback_counts_steps_relative_to_each_processes_eager_steps():
    fast, slowed = (
        {"steady": {"eager": [e] * 4, "compiled": [e / 2] * 4}} for e in (1e-3, 4e-3)
    )  # the second process ran on a loaded machine: 4x slower, same 2x speed-up
    starts = _with_first_calls([fast, slowed], (1.5, 2.5, 3.5), "cpu")
    first_call = starts.first("cold", 1)
    (median, low, high), speedup = starts.payback("cold", 1, ["warm"])
    assert speedup.verdict == "faster"
    assert speedup.speedup == pytest.approx(2.0)
    # an eager step is 2.5 ms pooled; 2.5 s is 1000 of them, less the compiled
    # step itself (0.5), paid back at 0.5 step a step
    assert median == 1999
    assert low < median < high
    assert (low, high) == (
        math.ceil((first_call.q25_s / 2.5e-3 - 0.5) / 0.5),
        math.ceil((first_call.q75_s / 2.5e-3 - 0.5) / 0.5),
    )


def test_payback_from_one_process_takes_its_steps_as_timed():
    # One process (a GPU page runs one warm process): relative to its own eager
    # median, each side would be one number, with no spread and no verdict; its
    # steps, timed in the same rounds, carry their own spread.
    one = {"steady": {"eager": [1e-3, 1.1e-3, 0.9e-3, 1e-3],
                      "compiled": [0.5e-3, 0.55e-3, 0.45e-3, 0.5e-3]}}  # fmt: skip
    starts = _with_first_calls([one], (2.0,), "cuda")
    (median, low, high), speedup = starts.payback("cold", 1, ["warm"])
    assert speedup.verdict == "faster"
    assert speedup.speedup == pytest.approx(2.0)
    # 2 s less the compiled step, paid back at 0.5 ms a step
    assert median == low == high == math.ceil((2.0 - 0.5e-3) / 0.5e-3)


def test_payback_names_the_compiled_variant_it_compared():
    same = {"steady": {"eager": [1e-3] * 3, "regional": [1e-3] * 3}}
    starts = _with_first_calls([same, same], (1.0, 2.0), "cpu")
    _, speedup = starts.payback("cold", 1, ["warm"], "regional")
    assert "regional" in str(speedup)


def test_payback_gives_no_steps_where_compiled_is_not_faster():
    same = {
        "steady": {"eager": [1e-3, 1.1e-3, 0.9e-3], "compiled": [1e-3, 0.9e-3, 1.1e-3]}
    }
    starts = _with_first_calls([same], (1.0, 2.0), "cpu")
    steps, speedup = starts.payback("cold", 1, ["warm"])
    assert steps == (None, None, None)
    assert not speedup.measurable


def test_payback_needs_a_first_call():
    starts = Starts({"cold": {1: []}, "warm": {1: []}}, "cpu")
    with pytest.raises(ValueError, match="no cold process ran at 1 blocks"):
        starts.payback("cold", 1, ["warm"])


# ---- growth per block -------------------------------------------------------


def _growth(label, depths, *times_per_depth):
    """The growth of first calls of ``times_per_depth`` at ``depths``."""
    pairs = zip(depths, times_per_depth, strict=True)
    runs = {n: [{"first_s": t} for t in times] for n, times in pairs}
    return Starts({"cold": runs}, "cpu").growth("cold", label)


def test_growth_is_the_slope_through_the_medians_with_its_quartile_range():
    times = (1.0, 1.2, 1.4), (5.0, 5.4, 5.8)  # quartiles 1.1-1.3, 5.2-5.6
    g = _growth("full compilation", [1, 11], *times)
    assert g.per_block_s == pytest.approx((5.4 - 1.2) / 10)
    # the shallowest: deep low, shallow high quartiles
    assert g.spread == pytest.approx(((5.2 - 1.3) / 10, (5.6 - 1.1) / 10))
    assert g.short == "420 ms (390 ms to 450 ms)"


def test_growth_fits_a_least_squares_line_over_more_depths():
    depths = [1, 2, 4, 8]
    medians = [0.5 + 0.25 * n + e for n, e in zip(depths, (0.02, -0.03, 0.03, -0.01),
                                                    strict=True)]  # fmt: skip
    g = _growth("full", depths, *((m,) for m in medians))
    mean = sum(depths) / 4
    slope = sum((n - mean) * m for n, m in zip(depths, medians, strict=True)) / sum(
        (n - mean) ** 2 for n in depths
    )
    assert g.per_block_s == pytest.approx(slope)
    assert g.spread is None  # one process per depth


def test_a_growth_from_single_runs_has_no_spread():
    g = _growth("regional", [4, 16], (3.0,), (3.6,))
    assert g.spread is None
    assert g.per_block_s == pytest.approx(0.05)
    assert g.short == "50.0 ms"


@pytest.mark.parametrize("runs", [{4: [1.0]}, {4: [1.0], 16: []}])
def test_growth_needs_first_calls_at_two_depths(runs):
    results = {n: [{"first_s": t} for t in times] for n, times in runs.items()}
    with pytest.raises(ValueError, match="two depths"):
        Starts({"cold": results}, "cpu").growth("cold", "full")


def test_compare_growth_calls_a_steeper_slope_only_outside_both_spreads():
    full = _growth("full compilation", [1, 8], (2.0, 2.2), (6.0, 6.4))
    flat = _growth("regional", [1, 8], (2.0, 2.2), (2.0, 2.3))
    text = full.compare(flat)
    assert text.startswith("full compilation adds ")
    assert "per block more than regional (" in text
    assert "less than" in flat.compare(full)
    close = _growth("full", [1, 8], (2.0, 2.2), (2.1, 2.4))
    assert close.compare(flat).startswith(
        "no measurable difference in growth per block between full and regional"
    )


def test_compare_growth_gives_no_verdict_for_single_runs():
    full = _growth("full", [4, 16], (4.0,), (10.0,))
    flat = _growth("regional", [4, 16], (3.0, 3.2), (3.0, 3.2))
    text = full.compare(flat)
    assert text == (
        "full adds 500 ms per block more than regional: one process per depth, "
        "so no spread and no verdict"
    )
    assert flat.compare(full).startswith(
        "regional adds 500 ms per block less than full: "
    )


# ---- in the child -----------------------------------------------------------


def _measured(capsys, *args, **options):
    """The result :func:`measure` printed for the parent: one marked JSON line."""
    measure(*args, **options)
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert out.startswith(_MARK)
    return json.loads(out.removeprefix(_MARK))


def test_measure_times_the_load_and_first_call_then_both_in_rounds(capsys):
    model = torch.nn.Linear(8, 8)
    calls = []
    x = torch.ones(2, 8)

    def before():
        calls.append("load")

    result = _measured(capsys, model, model, x, device="cpu", before=before)
    assert calls == ["load"]
    assert result["first_s"] >= result["load_s"] >= 0
    assert set(result["steady"]) == set(result["rounds"]) == {"eager", "compiled"}
    assert all(result["steady"][name] for name in ("eager", "compiled"))


def test_measure_compiles_the_other_variants_outside_every_figure(capsys):
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.nn.Linear(4, 4)
    calls = []

    def compiled(x):
        calls.append("compiled")
        return model(x)

    def other(x):
        calls.append("other")
        counters["inductor"]["fxgraph_cache_miss"] += 5  # as a compile would
        return model(x)

    also = {"regional": other}
    result = _measured(
        capsys, model, compiled, torch.ones(1, 4), device="cpu", also=also
    )
    assert calls[:2] == ["compiled", "other"]  # first calls, then the rounds
    assert result["caches"] == "none used"  # read before the other variant's first call
    assert set(result["steady"]) == {"eager", "compiled", "regional"}
    assert all(result["steady"][name] for name in result["steady"])
    counters.clear()


def test_measure_stops_the_compile_workers_before_the_steady_steps(monkeypatch):
    from torch._inductor import async_compile

    events = []
    monkeypatch.setattr(
        async_compile, "shutdown_compile_workers", lambda: events.append("stop")
    )
    model = torch.nn.Linear(4, 4)

    def compiled(x):
        events.append("call")
        return model(x)

    measure(model, compiled, torch.ones(1, 4), device="cpu")
    assert events[:2] == ["call", "stop"]  # after the first call, before the rest
    assert events.count("stop") == 1
    assert events.count("call") > 2


def test_measure_leaves_the_cpu_probe_out_of_the_first_call(monkeypatch, capsys):
    monkeypatch.setattr(coldstart_child, "_probe_cpu", lambda: time.sleep(0.2))
    model = torch.nn.Linear(4, 4)
    result = _measured(capsys, model, model, torch.ones(1, 4), device="cpu")
    assert result["probe_s"] >= 0.2 > result["first_s"]


# ---- fresh processes --------------------------------------------------------


@pytest.fixture
def child_module(tmp_path, monkeypatch):
    """Writes ``code`` as a module the fresh process can import, and makes it the
    child that _run_fresh runs."""
    monkeypatch.syspath_prepend(str(tmp_path))
    made = []

    def write(code):
        name = f"gpuguide_test_child_{len(made)}"
        (tmp_path / f"{name}.py").write_text(code)
        made.append(name)
        monkeypatch.setattr(coldstart, "_CHILD", name)

    return write


def test_run_fresh_returns_the_result_and_keeps_the_output_off(child_module, capfd):
    env = {"GPUGUIDE_TEST_FLAG": "set"}
    child_module(CHILD)  # prints a stale marked line first: the last one counts
    result = _run_fresh(["cold", 4], env=env)
    assert result == {"argv": ["cold", "4"], "flag": "set"}
    out, err = capfd.readouterr()
    assert "noise" not in out
    assert "compiler's log" not in err
    assert "GPUGUIDE_TEST_FLAG" not in os.environ  # set in the child only


@pytest.mark.parametrize(
    ("end", "code"),
    [
        ("raise ValueError('the cause')", 1),
        ("report({'n': 1})\nraise ValueError('the cause')", 1),  # a result, then 1
        ("print('the cause', file=sys.stderr)", 0),  # exit code 0, no result
    ],
)
def test_run_fresh_raises_with_the_end_of_the_childs_stderr(child_module, end, code):
    child_module(
        f"import sys\n{REPORT}\n"
        "for i in range(20):\n    print(f'line {i}', file=sys.stderr)\n" + end
    )
    with pytest.raises(ChildFailed, match="the cause") as caught:
        _run_fresh(env={})
    assert f"(exit code {code}) without a result" in str(caught.value)
    assert "line 0\n" not in str(caught.value)  # only the end of stderr


def test_run_fresh_without_stderr_says_so_briefly(child_module):
    child_module("import os\nos._exit(3)")
    with pytest.raises(ChildFailed, match=r"exit code 3\) without a result$"):
        _run_fresh(env={})


def test_a_child_runs_as_main_with_its_own_module(child_module):
    # Dynamo's guards look globals up in sys.modules["__main__"]: it must be the
    # child's module, as python -m makes it.
    code = (
        f"import sys\nvalue = 3\n{REPORT}\n"
        "report({'same': sys.modules['__main__'].value == value, 'name': __name__})"
    )
    child_module(code)
    assert _run_fresh(env={}) == {"same": True, "name": "__main__"}


def test_a_child_imports_the_parents_gpuguide_from_another_folder(
    child_module, monkeypatch, tmp_path
):
    code = f"{REPORT}\nimport gpuguide.chapters.coldstart as c\nreport({{'file': c.__file__}})"
    child_module(code)
    monkeypatch.chdir(tmp_path / "..")  # as sphinx-gallery does
    monkeypatch.setenv("PYTHONPATH", "src")  # relative: another folder here
    assert _run_fresh(env={}) == {"file": coldstart.__file__}
    assert os.environ["PYTHONPATH"] == "src"  # unchanged in this process


def test_the_real_child_reports_a_cold_start(tmp_path):
    # The page's own child, on the smallest stack: a first call, both variants'
    # steady steps, and the cache counters of a compile into an empty directory.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    args = ["cold", 1, 16, "cpu", tmp_path / "1.bin", False]
    result = _run_fresh(args, env=env)
    assert result["first_s"] > 0
    assert result["probe_s"] > 0  # timed apart, on a CPU
    assert set(result["steady"]) == {"eager", "compiled"}
    assert result["caches"].startswith("FX graph 1 miss")
    assert (tmp_path / "1.bin").stat().st_size > 0  # the Mega-Cache artifacts


@pytest.mark.gpu
def test_the_real_child_compiles_for_a_gpu(tmp_path):
    # A fresh process creates its own CUDA context and compiles with Triton; it
    # needs no CPU probe.
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache")}
    args = ["regional", 2, 64, "cuda", tmp_path / "2.bin", False]
    result = _run_fresh(args, env=env)
    assert result["first_s"] > 0
    assert result["probe_s"] == 0
    assert set(result["steady"]) == {"eager", "compiled"}


@pytest.mark.parametrize(
    "error",
    [
        ChildFailed("the end of its stderr: CUDA error"),
        subprocess.TimeoutExpired(["python", "-m", "child"], 600),
    ],
)
def test_a_failed_start_names_its_case_and_depth(monkeypatch, error):
    def fail(args, *, env):
        raise error

    monkeypatch.setattr(coldstart, "_run_fresh", fail)
    with pytest.raises(
        ChildFailed, match=r"the cold start at 2 blocks on cuda: .*(CUDA|600 seconds)"
    ):
        run_starts(["cold"], [2], lambda case, n: 1, dim=8, device="cuda")


# ---- run_starts and Starts: the page's fresh processes, by case and depth ----


def test_run_starts_runs_the_cases_in_turn_and_warm_reuses_colds_cache(monkeypatch):
    calls = []

    def fake_run_fresh(args, *, env):
        calls.append(("the child", list(args), dict(env), args[3]))
        first_s = float(len(calls))
        return {"first_s": first_s, "caches": f"FX graph {args[1]} miss"}

    monkeypatch.setattr(coldstart, "_run_fresh", fake_run_fresh)
    cases = ["cold", "warm", "Mega-Cache", "regional"]

    def plan(case, n):
        if case == "Mega-Cache":
            return int(n == 4)
        return 2 if case == "warm" and n == 4 else 1

    starts = run_starts(cases, [2, 4], plan, dim=64, device="cpu")
    ran = [(args[0], args[1]) for _, args, _, _ in calls]
    assert ran == [
        ("cold", 2),
        ("warm", 2),
        ("regional", 2),
        ("cold", 4),
        ("warm", 4),
        ("warm", 4),
        ("Mega-Cache", 4),
        ("regional", 4),
    ]
    assert all(code == "the child" and device == "cpu" for code, _, _, device in calls)
    caches = {
        (args[0], args[1]): env["TORCHINDUCTOR_CACHE_DIR"] for _, args, env, _ in calls
    }
    assert caches["warm", 4] == caches["cold", 4]
    assert len({caches["cold", 4], caches["Mega-Cache", 4], caches["regional", 4]}) == 3
    assert caches["cold", 2] != caches["cold", 4]
    for _, args, env, _ in calls:
        assert env["TRITON_CACHE_DIR"] == str(
            Path(env["TORCHINDUCTOR_CACHE_DIR"], "triton")
        )
        assert args[2:4] == [64, "cpu"]
        assert args[5] == (args[1] == 4)  # the last depth
        assert Path(args[4]).name == f"{args[1]}.bin"  # one artifacts file per depth
        assert not Path(args[4]).parent.exists()  # the temporary directory is gone
    assert isinstance(starts, Starts)
    assert [r["first_s"] for r in starts["warm"][4]] == [5.0, 6.0]
    assert starts["Mega-Cache"][2] == []


def test_starts_gives_runs_first_calls_and_table_rows():
    def result(first_s):
        return {"first_s": first_s, "caches": "FX graph 1 hit"}

    results = {
        "cold": {1: [result(3.0)], 8: [result(9.0)]},
        "warm": {1: [result(1.0)], 8: [result(2.0), result(4.0)]},
        "Mega-Cache": {1: [], 8: [result(5.0)]},
    }
    starts = Starts(results, "cpu")
    assert starts["warm"] is results["warm"]
    assert [r["first_s"] for r in starts.runs(["cold", "warm"], 8)] == [9.0, 2.0, 4.0]
    warm = starts.first("warm", 8)
    assert isinstance(warm, Measurement)
    assert (warm.label, warm.times_s, warm.device) == ("warm", (2.0, 4.0), "cpu")
    assert starts.first("Mega-Cache", 1) is None
    rows = starts.rows()
    assert [(r["blocks"], r["case"], r["processes"]) for r in rows] == [
        (1, "cold", 1),
        (1, "warm", 1),
        (8, "cold", 1),
        (8, "warm", 2),
        (8, "Mega-Cache", 1),
    ]
    assert rows[3]["first call"].times_s == (2.0, 4.0)
    assert {r["caches"] for r in rows} == {"FX graph 1 hit"}
