"""``python -m gpuguide_tools.recorder``: every page run with recording on, one file per
device; runs merged into medians; a CPU's ceilings.

The pages here are tiny scripts in a temporary examples folder; each runs in
its own process with the real interpreter, as the recorder runs the guide's.
"""

from __future__ import annotations

import textwrap
from dataclasses import replace

import pytest
from conftest import CPU_RECORD, H100_RECORD

from gpuguide import results
from gpuguide.results import DeviceRecord, Result
from gpuguide_tools import recorder, results_files
from gpuguide_tools.pages import page_code
from gpuguide_tools.results_files import ResultsFile, ResultsFileError

H100, CPU = H100_RECORD, CPU_RECORD

# A page as a reader's: its record() writes the file GPUGUIDE_RECORD names.
PAGE = """
import gpuguide
gpuguide.record("{name}", {value}, unit="s", spread=({value}, {value}))
"""
# Records a figure, then fails: nothing of it may reach the results folder.
FAILING = PAGE + "raise SystemExit(1)\n"


REAL_BUSY_WARNING = recorder.busy_warning
REAL_COMMIT_WARNING = recorder.commit_warning


@pytest.fixture(autouse=True)
def _fresh(monkeypatch, fresh_results):
    # The machine's load is not what these tests check (the site's build runs
    # beside them), nor whether this copy knows its commit (an installed copy,
    # as in nox -s compat, does not).
    monkeypatch.setattr(recorder, "busy_warning", lambda: "")
    monkeypatch.setattr(recorder, "commit_warning", lambda device: "")


def _page(examples, chapter, page, body="", **values):
    script = examples / chapter / f"{page}.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(textwrap.dedent(body.format(**values)).lstrip())
    return script


@pytest.fixture
def examples(tmp_path):
    """Two chapters of pages, plus a helper module that is not a page."""
    folder = tmp_path / "examples"
    _page(folder, "02_b", "plot_two", PAGE, name="b", value=2.0)
    _page(folder, "01_a", "plot_one", PAGE, name="a", value=1.0)
    _page(folder, "01_a", "helper", "raise SystemExit('not a page')")
    return folder


@pytest.fixture
def device():
    """This machine's device, as the pages' processes record it."""
    return results.current_device()


def _existing(folder, device, *found):
    """A recording of this device already in the results folder."""
    path = folder / results_files.file_name(device)
    old = replace(device, date="2024-01-01T00:00:00+00:00")
    results_files.save(ResultsFile(device=old, results=found), path)
    return path


def _figures(path):
    return {(r.page, r.name): r for r in results_files.load(path).results}


# -- which pages ---------------------------------------------------------------------


def test_pages_are_every_plot_script_in_chapter_order(examples):
    assert [p.name for p in recorder.pages(examples)] == ["plot_one.py", "plot_two.py"]
    chosen = recorder.pages(examples, ["plot_two.py", "examples/01_a/plot_one"])
    assert [p.stem for p in chosen] == ["plot_two", "plot_one"]
    with pytest.raises(ValueError, match="no example named 'plot_nope'"):
        recorder.pages(examples, ["plot_one", "plot_nope"])
    assert recorder.pages(examples / "missing") == []


# -- recording -------------------------------------------------------------------------


def test_record_pages_replaces_the_devices_file(examples, tmp_path, device):
    _page(examples, "03_c", "plot_three", PAGE, name="c", value=3.0)
    folder = tmp_path / "results"
    folder.mkdir()
    other_device = replace(device, short_name="some other device")
    other = folder / results_files.file_name(other_device)
    results_files.save(
        ResultsFile(device=other_device, results=(Result("p", "n", 1.0, "s"),)), other
    )
    before = other.read_bytes()
    path = _existing(folder, device, Result("plot_gone", "old", 9.0, "s"))
    said = []
    written = recorder.record_pages(recorder.pages(examples), folder, log=said.append)
    assert written == path
    figures = _figures(path)
    assert sorted(figures) == [
        ("plot_one", "a"),
        ("plot_three", "c"),
        ("plot_two", "b"),
    ]
    assert [figures[k].value for k in sorted(figures)] == [1.0, 3.0, 2.0]
    assert all(r.runs == 1 for r in figures.values())
    recorded = results_files.load(path).device
    assert results_files.device_key(recorded) == results_files.device_key(device)
    assert recorded.date != "2024-01-01T00:00:00+00:00"
    assert recorded.peaks  # a CPU's, measured by the recorder after the pages
    assert other.read_bytes() == before  # another device's file is left alone
    assert [line.split()[:2] for line in said[:3]] == [
        ["ok", "plot_one"],
        ["ok", "plot_two"],
        ["ok", "plot_three"],
    ]
    assert said[-2] == "dropped 1 page(s) that no longer exist: plot_gone"
    assert said[-1] == f"wrote 3 page(s) to {path} (3 figures in all)"
    # Each page names the code that measured it.
    runs = results_files.load(path).pages_run
    assert sorted(runs) == ["plot_one", "plot_three", "plot_two"]
    one = runs["plot_one"].recorded
    script = examples / "01_a" / "plot_one.py"
    assert (one.source, one.helpers) == (
        page_code(script).source,
        page_code(script).helpers,
    )
    assert one.commit == device.commit
    assert one.torch == device.torch
    assert all(r.failed is None for r in runs.values())


def test_some_pages_keep_the_other_pages_figures(examples, tmp_path, device, capsys):
    folder = tmp_path / "results"
    folder.mkdir()
    path = _existing(
        folder,
        device,
        Result("plot_one", "a", 5.0, "s"),
        Result("plot_two", "b", 7.0, "s"),
        Result("plot_two", "gone", 7.0, "s"),
    )
    argv = [
        "--examples",
        str(examples),
        "--results",
        str(folder),
        "--example",
        "plot_two",
    ]
    assert recorder.main(argv) == 0
    assert "ok   plot_two" in capsys.readouterr().out
    figures = _figures(path)
    # plot_two's figures replaced (one figure no longer recorded is gone),
    # plot_one's kept as they were.
    assert sorted(figures) == [("plot_one", "a"), ("plot_two", "b")]
    assert (figures["plot_one", "a"].value, figures["plot_two", "b"].value) == (
        5.0,
        2.0,
    )


def test_merge_combines_runs_into_medians(examples, tmp_path, device):
    folder = tmp_path / "results"
    path = _existing(
        folder, device, Result("plot_one", "a", 3.0, "s", spread=(2.5, 3.5))
    )
    argv = ["--examples", str(examples), "--results", str(folder)]
    assert recorder.main([*argv, "--example", "plot_one", "--merge"]) == 0
    merged = _figures(path)["plot_one", "a"]
    assert (merged.value, merged.spread, merged.runs) == (2.0, (1.0, 3.5), 2)


def test_a_failing_page_keeps_its_figures_and_the_others_are_recorded(
    examples, tmp_path, device
):
    _page(examples, "01_a", "plot_bad", FAILING, name="a", value=100.0)
    folder = tmp_path / "results"
    path = _existing(
        folder,
        device,
        Result("plot_bad", "a", 5.0, "s"),
        Result("plot_one", "a", 9.0, "s"),
    )
    said = []
    with pytest.raises(
        RuntimeError,
        match=rf"1 page\(s\) failed: plot_bad; {path} keeps their earlier figures",
    ):
        recorder.record_pages(recorder.pages(examples), folder, log=said.append)
    assert [line.split()[:2] for line in said if line[:4] in ("ok  ", "FAIL")] == [
        ["FAIL", "plot_bad"],
        ["ok", "plot_one"],
        ["ok", "plot_two"],
    ]
    figures = _figures(path)
    # The failed page's earlier figure is kept (not the one it recorded before
    # failing); the pages after it ran and were recorded.
    assert figures["plot_bad", "a"].value == 5.0
    assert (figures["plot_one", "a"].value, figures["plot_two", "b"].value) == (
        1.0,
        2.0,
    )
    runs = results_files.load(path).pages_run
    assert runs["plot_bad"].failed is not None
    assert runs["plot_bad"].recorded is None
    assert runs["plot_one"].failed is None
    assert runs["plot_one"].recorded is not None


def test_a_page_that_records_nothing_or_hangs_records_no_figure(tmp_path, device):
    examples, folder = tmp_path / "examples", tmp_path / "results"
    quiet = _page(examples, "01_a", "plot_quiet", "print('nothing recorded')")
    with pytest.raises(RuntimeError, match="no page recorded a figure"):
        recorder.record_pages([quiet], folder, log=lambda line: None)
    slow = _page(examples, "01_a", "plot_slow", "import time\ntime.sleep(30)")
    said = []
    with pytest.raises(RuntimeError, match="failed: plot_slow"):
        recorder.record_pages([slow], folder, timeout=1.0, log=said.append)
    assert said[1] == "timed out after 1 s"
    recording = results_files.load(folder / results_files.file_name(device))
    assert recording.results == ()
    assert recording.pages_run["plot_quiet"].recorded is not None  # ran, recorded none
    assert recording.pages_run["plot_slow"].failed is not None


def test_a_broken_results_file_stops_before_any_page_runs(tmp_path, capsys):
    examples, folder = tmp_path / "examples", tmp_path / "results"
    marker = tmp_path / "ran"
    _page(examples, "01_a", "plot_one", f"open({str(marker)!r}, 'w').close()")
    folder.mkdir()
    broken = folder / "broken.json"
    broken.write_text('{"schema": 1, "device": {')
    with pytest.raises(ResultsFileError, match=r"broken\.json: is not valid JSON"):
        recorder.record_pages(recorder.pages(examples), folder)
    argv = ["--examples", str(examples), "--results", str(folder)]
    assert recorder.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: results file ")
    assert str(broken) in err
    assert not marker.exists()


def test_command_line_errors(examples, tmp_path, capsys):
    folder = tmp_path / "results"
    argv = ["--examples", str(examples), "--results", str(folder)]
    assert recorder.main([*argv, "--example", "plot_nope"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: no example named 'plot_nope' in {examples}\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert recorder.main(["--examples", str(empty), "--results", str(folder)]) == 2
    assert capsys.readouterr().err == f"error: no example scripts in {empty}\n"
    assert not folder.exists()
    with pytest.raises(SystemExit) as exit_:
        recorder.main(["--bogus"])
    assert exit_.value.code == 2
    assert "error: unrecognized arguments: --bogus" in capsys.readouterr().err


def test_a_busy_machine_is_warned_about(monkeypatch, tmp_path, examples):
    busy_warning = REAL_BUSY_WARNING  # not the fixture's stand-in
    assert busy_warning(load=0.4, cpus=2) == ""
    text = busy_warning(load=3.6, cpus=2)
    assert "load average is 3.6 on 2 CPU(s)" in text
    assert "record on an idle machine" in text

    monkeypatch.setattr(recorder, "busy_warning", lambda: "warning: busy")
    said = []
    recorder.record_pages(
        recorder.pages(examples, ["plot_one"]), tmp_path / "r", log=said.append
    )
    assert said[0] == "warning: busy"  # said before any page runs
    assert said[1].startswith("ok   plot_one")


def test_a_recording_that_would_not_name_its_commit_is_warned_about(
    monkeypatch, tmp_path, examples, device
):
    assert (
        REAL_COMMIT_WARNING(replace(device, gpuguide="0.1.0", commit="abc1234")) == ""
    )
    unknown = replace(device, gpuguide="0.1.0", commit=None, dirty=False)
    text = REAL_COMMIT_WARNING(unknown)
    assert "GPUGUIDE_COMMIT is not set" in text
    assert "GPUGUIDE_COMMIT=$(git rev-parse --short HEAD)" in text
    monkeypatch.setattr(recorder, "commit_warning", REAL_COMMIT_WARNING)
    monkeypatch.setattr(recorder, "current_device", lambda: unknown)
    said = []
    recorder.record_pages(
        recorder.pages(examples, ["plot_one"]), tmp_path / "r", log=said.append
    )
    assert said[0] == f"warning: {text}"  # said before any page runs
    assert said[1].startswith("ok   plot_one")


# -- merging runs --------------------------------------------------------------------


def _run(device, *figures):
    return ResultsFile(
        device=device,
        results=tuple(
            Result(page="p", name=name, value=value, unit="s", spread=spread)
            for name, value, spread in figures
        ),
    )


def test_merge_takes_medians_and_the_range_of_the_spreads():
    later = DeviceRecord(**{**H100.to_json(), "date": "2025-07-01T00:00:00+00:00"})
    merged = recorder.merge(
        [
            _run(H100, ("a", 1.0, (0.9, 1.1)), ("only-first", 5.0, None)),
            _run(later, ("a", 6.0, (5.5, 6.5))),
            _run(H100, ("a", 2.0, None)),
        ]
    )
    assert merged.device == later  # the most recent run's provenance
    a, only_first = merged.results
    assert (a.value, a.spread, a.runs) == (2.0, (0.9, 6.5), 3)  # mean would be 3
    assert only_first == _run(H100, ("only-first", 5.0, None)).results[0]


def test_merge_keeps_different_configurations_apart():
    def one(size, value):
        return ResultsFile(
            H100, (Result("p", "copy", value, "B/s", None, {"size": size}),)
        )

    merged = recorder.merge([one(1, 1.0), one(2, 10.0), one(1, 3.0)])
    assert [(r.config["size"], r.value, r.runs) for r in merged.results] == [
        (1, 2.0, 2),
        (2, 10.0, 1),
    ]


def test_merge_refuses_two_devices_and_two_units():
    with pytest.raises(ValueError, match=r"one device, got H100 SXM5 \(cuda\) and CPU"):
        recorder.merge([_run(H100), _run(CPU)])
    with pytest.raises(ValueError, match="at least one"):
        recorder.merge([])
    other_unit = ResultsFile(H100, (Result("p", "a", 1.0, "ms"),))
    with pytest.raises(ValueError, match="one unit in every run, got ms, s"):
        recorder.merge([_run(H100, ("a", 1.0, None)), other_unit])


def test_a_cpu_s_ceilings_rise_to_the_best_recorded_rate():
    cpu = DeviceRecord(
        "AMD EPYC", "CPU: AMD EPYC, 2 threads", "cpu", "2.13.0", None, None,
        "2026-11-23T00:00:00+00:00", peaks={"fp32": 100.0, "memory": 50.0},
    )  # fmt: skip
    figures = (
        Result("p", "matmul", 120.0, "FLOP/s", peak="fp32"),
        Result("p", "add", 40.0, "B/s", peak="memory"),  # below: no change
        Result("p", "half", 9.0, "FLOP/s", peak="fp16"),  # no fp16 ceiling: none made
        Result("p", "time", 500.0, "s", peak="fp32"),  # not a rate: ignored
    )
    raised = recorder.with_measured_ceilings(results_files.ResultsFile(cpu, figures))
    assert dict(raised.device.peaks) == {"fp32": 120.0, "memory": 50.0}
    assert raised.results == figures
    # A GPU's datasheet peaks stay as they are.
    gpu = results_files.ResultsFile(replace(H100, peaks={"fp32": 100.0}), figures)
    assert recorder.with_measured_ceilings(gpu) is gpu


def test_a_long_run_says_which_page_runs_and_how_long_it_has_been(
    examples, tmp_path, capsys
):
    _page(examples, "02_b", "plot_bad", FAILING, name="x", value=1.0)
    ticks = iter(range(0, 10_000, 37))  # each reading of the clock: 37 s later
    shown, said = [], []
    with pytest.raises(RuntimeError, match="plot_bad"):
        recorder.record_pages(
            recorder.pages(examples), tmp_path / "r", log=said.append,
            progress=shown.append, clock=lambda: float(next(ticks)),
        )  # fmt: skip
    # began at 0; page 1 starts at 37, ends at 74 (ran 37 s), logged at 111 ...
    assert shown == [
        "[1/3] plot_one: running (0:37 in)",
        "[2/3] plot_bad: running (2:28 in)",
        "[3/3] plot_two: running (4:19 in)",
    ]
    assert said[0] == "ok   plot_one (37 s; 1/3 pages, 1:51 in)"
    assert said[1].startswith("FAIL plot_bad (37 s; 2/3 pages, 3:42 in)")
    assert said[3].startswith("ok   plot_two (37 s; 3/3 pages, 5:33 in)")
    assert recorder._clock(3725) == "1:02:05"
    # by default, the progress goes to stderr, one flushed line per page
    recorder.record_pages(recorder.pages(examples, ["plot_one"]), tmp_path / "s")
    assert capsys.readouterr().err == "[1/1] plot_one: running (0:00 in)\n"


# -- claims ----------------------------------------------------------------------------

CLAIMING = PAGE + (
    'gpuguide.claim("{name} is positive", holds={value} > 0, measured="{value}")\n'
)


def test_claims_are_recorded_with_their_page_and_kept_when_it_fails(
    tmp_path, device, monkeypatch
):
    monkeypatch.setenv("GPUGUIDE_STRICT_CLAIMS", "0")  # a claim may fail: said, kept
    examples, folder = tmp_path / "examples", tmp_path / "results"
    _page(examples, "01_a", "plot_one", CLAIMING, name="a", value=1.0)
    _page(examples, "01_a", "plot_two", CLAIMING, name="b", value=-2.0)
    said = []
    recorder.record_pages(recorder.pages(examples), folder, log=said.append)
    path = folder / results_files.file_name(device)
    saved = results_files.load(path)
    assert [(c.text, c.outcome) for c in saved.claims_of("plot_one")] == [
        ("a is positive", "held")
    ]
    assert [(c.text, c.outcome) for c in saved.claims_of("plot_two")] == [
        ("b is positive", "failed")
    ]
    assert "claims of those pages: 1 held, 1 did not hold, 0 not checked here" in said
    assert "    did not hold: plot_two: b is positive; measured -2.0" in said
    # The page fails in its next run: its claims stay those of the run recorded.
    _page(examples, "01_a", "plot_one", FAILING, name="a", value=3.0)
    with pytest.raises(RuntimeError, match="plot_one"):
        recorder.record_pages(recorder.pages(examples), folder, log=said.append)
    assert [c.outcome for c in results_files.load(path).claims_of("plot_one")] == [
        "held"
    ]
    # Strict, a claim that does not hold fails its page.
    monkeypatch.setenv("GPUGUIDE_STRICT_CLAIMS", "1")
    with pytest.raises(RuntimeError, match="1 page\\(s\\) failed: plot_two"):
        recorder.record_pages([examples / "01_a" / "plot_two.py"], folder, partial=True)


def test_merge_and_the_ceilings_keep_the_claims(device):
    claim = results.Claim("a is positive", "held", "1.0")
    first = ResultsFile(device, (Result("p", "a", 1.0, "s"),), claims={"p": (claim,)})
    later = replace(first, device=replace(device, date="2099-01-01T00:00:00+00:00"))
    assert recorder.merge([first, later]).claims_of("p") == (claim,)
    assert recorder.with_measured_ceilings(first).claims == first.claims
