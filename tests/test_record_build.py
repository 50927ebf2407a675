"""``nox -s docs -- --record``: one execution of the pages gives the site and the
device's results file (docs/_ext/record_build.py)."""

from __future__ import annotations

from pathlib import Path

import record_build
from conftest import build_mini_site

from gpuguide_tools import results_files

RECORDS = """
\"\"\"
A page that records
===================
\"\"\"

import gpuguide
gpuguide.record("answer", 42.0, unit="s", spread=(41.0, 43.0))
print("recorded")
"""

FAILS_AFTER_RECORDING = RECORDS + "\nraise RuntimeError('this page breaks')\n"


def _only_file(folder: Path) -> Path:
    files = sorted(folder.glob("*.json"))
    assert len(files) == 1, files
    return files[0]


def test_a_recording_build_writes_the_devices_file(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    built = build_mini_site(
        tmp_path, RECORDS, "-D", "gpuguide_record=replace",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    path = _only_file(folder)
    recording = results_files.load(path)
    assert path.name == results_files.file_name(recording.device)
    assert recording.pages == ("plot_only",)
    (figure,) = recording.results
    assert (figure.name, figure.value, figure.spread) == ("answer", 42.0, (41.0, 43.0))
    assert recording.device.peaks  # a CPU's, measured once after the pages
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    assert "recorded" in page.read_text()
    # The page's section compares with the recordings the build started with:
    # none of this page's, so far.
    assert "No device has recorded figures of this page yet." in page.read_text()


def _pages(root: Path, **pages: str) -> None:
    """More pages in the mini site's chapter, beside ``plot_only`` (by name)."""
    chapter = root / "examples" / "01_only"
    chapter.mkdir(parents=True, exist_ok=True)
    for name, code in pages.items():
        (chapter / f"{name}.py").write_text(code)


def _page_records(name: str) -> str:
    return RECORDS.replace('"answer", 42.0', f'"{name}", 1.0')


def test_a_failing_page_keeps_its_figures_and_the_others_are_recorded(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    first = build_mini_site(
        tmp_path / "one", RECORDS, "-D", "gpuguide_record=replace",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    path = _only_file(folder)
    # plot_a runs before the failing page, plot_z after it.
    _pages(tmp_path / "two", plot_a=_page_records("a"), plot_z=_page_records("z"))
    second = build_mini_site(
        tmp_path / "two", FAILS_AFTER_RECORDING, "-D", "gpuguide_record=replace",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert second.returncode != 0
    assert "1 page(s) failed: plot_only" in second.stderr
    recording = results_files.load(path)
    by_page = {r.page: (r.name, r.value) for r in recording.results}
    assert by_page == {
        "plot_a": ("a", 1.0),
        "plot_only": ("answer", 42.0),  # from the first build: kept
        "plot_z": ("z", 1.0),
    }
    only = recording.pages_run["plot_only"]
    assert only.failed is not None
    assert only.recorded is not None
    assert only.failed.date >= only.recorded.date
    assert recording.pages_run["plot_z"].failed is None


KILLS_THE_BUILD = (
    RECORDS + "\nimport os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
)


def test_a_build_killed_after_some_pages_keeps_them_recorded(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    # Pages run in name order: plot_a, then plot_b, then the page that kills
    # the build (as the end of a GPU loan would), then plot_z, which never runs.
    _pages(tmp_path, plot_a=_page_records("a"), plot_b=_page_records("b"))
    _pages(tmp_path, plot_z=_page_records("z"))
    built = build_mini_site(
        tmp_path, KILLS_THE_BUILD, "-D", "gpuguide_record=replace",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert built.returncode == -9  # SIGKILL: no hook of the build ran after it
    recording = results_files.load(_only_file(folder))
    assert sorted({r.page for r in recording.results}) == ["plot_a", "plot_b"]
    assert sorted(recording.pages_run) == ["plot_a", "plot_b"]
    assert recording.pages_run["plot_a"].recorded.seconds is not None


def test_merge_combines_with_the_earlier_recording(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    for name, mode in (("one", "replace"), ("two", "merge")):
        built = build_mini_site(
            tmp_path / name, RECORDS, "-D", f"gpuguide_record={mode}",
            GPUGUIDE_RESULTS_DIR=str(folder),
        )  # fmt: skip
        assert built.returncode == 0, built.stderr
    (figure,) = results_files.load(_only_file(folder)).results
    assert figure.runs == 2


def test_an_unknown_mode_stops_the_build(tmp_path):
    built = build_mini_site(tmp_path, RECORDS, "-D", "gpuguide_record=sometimes")
    assert built.returncode != 0
    assert "gpuguide_record must be one of" in built.stderr


def test_times_summary_lists_pages_slowest_first():
    lines = record_build.times_summary({"plot_a": 1.0, "plot_b": 12.5}, 30.0)
    assert lines[0].startswith("gpuguide: page execution times")
    assert [line.split()[0] for line in lines[1:3]] == ["plot_b", "plot_a"]
    assert lines[-1].strip() == "2 page(s): 14 s of the build's 30 s"
    assert record_build.times_summary({}, 3.0) == []


def test_times_summary_sets_a_gpu_build_against_its_budgets():
    times = {"plot_a": 4.0, "plot_b": 30.0, "plot_c": 1.0}
    budgets = {"plot_a": 5.0, "plot_b": 20.0, "plot_c": None}
    lines = record_build.times_summary(times, 40.0, budgets)
    by_page = {line.split()[0]: line for line in lines[1:4]}
    assert by_page["plot_b"].endswith("of  20.0 s  OVER BUDGET")
    assert by_page["plot_a"].endswith("of   5.0 s")
    assert by_page["plot_c"].endswith("(no budget declared)")
    assert "the guide's GPU budget is 320 s" in lines[-2]
    assert lines[-1].strip() == "over budget: plot_b"
    # Without budgets (a CPU build), no page is flagged.
    assert not any("BUDGET" in line for line in record_build.times_summary(times, 40.0))
