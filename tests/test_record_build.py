"""``nox -s docs -- --record``: one execution of the pages gives the site and the
device's results file (docs/_ext/record_build.py)."""

from __future__ import annotations

from pathlib import Path

import record_build
from conftest import build_mini_site

from gpuguide import results

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
    recording = results.load(path)
    assert path.name == recording.device.file_name
    assert recording.pages == ("plot_only",)
    (figure,) = recording.results
    assert (figure.name, figure.value, figure.spread) == ("answer", 42.0, (41.0, 43.0))
    assert recording.device.peaks  # a CPU's, measured once after the pages
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    assert "recorded" in page.read_text()
    # The page's section compares with the recordings the build started with:
    # none of this page's, so far.
    assert "No device has recorded figures of this page yet." in page.read_text()


def test_a_failing_page_leaves_the_file_as_it_was_and_is_named(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    first = build_mini_site(
        tmp_path / "one", RECORDS, "-D", "gpuguide_record=replace",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    path = _only_file(folder)
    before = path.read_bytes()
    second = build_mini_site(
        tmp_path / "two", FAILS_AFTER_RECORDING, "-D", "gpuguide_record=replace",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert second.returncode != 0
    assert "recording not written: 1 page(s) failed: plot_only" in second.stderr
    assert path.read_bytes() == before


def test_merge_combines_with_the_earlier_recording(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    for name, mode in (("one", "replace"), ("two", "merge")):
        built = build_mini_site(
            tmp_path / name, RECORDS, "-D", f"gpuguide_record={mode}",
            GPUGUIDE_RESULTS_DIR=str(folder),
        )  # fmt: skip
        assert built.returncode == 0, built.stderr
    (figure,) = results.load(_only_file(folder)).results
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
