"""Recorded results shown beside a run: the results folder, tables, faint curves."""

from __future__ import annotations

import io
import sys
from dataclasses import replace

import matplotlib.pyplot as plt
import pytest
from conftest import CPU_RECORD, H100_RECORD

from gpuguide import recordings, results
from gpuguide.plotting import plot_sweep
from gpuguide.recordings import (
    RESULTS_DIR_ENV,
    against_recording,
    axis_unit,
    device_label,
    devices_table,
    file_name,
    format_value,
    load_dir,
    page_table,
    percent_of_recorded_peak,
    plot_recorded,
    recorded_table,
    results_dir,
    series_key,
    show_recorded,
)
from gpuguide.results import (
    RECORD_ENV,
    Result,
    ResultsFile,
    ResultsFileError,
)
from gpuguide.timing import Measurement

H100 = replace(H100_RECORD, peaks={"bf16": 9.89e14, "memory": 3.35e12})
CPU = replace(CPU_RECORD, small=True)
#: The same CPU model and threads, recorded with its vector ISA: another identity.
CPU_AVX2 = replace(
    CPU, short_name="CPU: Intel Xeon, 2 threads, AVX2", isa="AVX2", gpuguide="0.1.0"
)
PAGE = "plot_demo"


pytestmark = pytest.mark.usefixtures("fresh_results")


def _r(
    name="copy",
    value=1.0,
    unit="s",
    *,
    page=PAGE,
    spread=None,
    size=None,
    x=None,
    peak=None,
    **config,
):
    """A result of ``PAGE``; keywords other than Result's fields are its config."""
    return Result(
        page=page, name=name, value=value, unit=unit, spread=spread, config=config,
        size=size, x=x, peak=peak,
    )  # fmt: skip


def _save(folder, device, *found, name=None):
    path = folder / (name or file_name(device))
    return results.save(ResultsFile(device=device, results=found), path)


# -- where the files are -------------------------------------------------------------


def test_results_dir_is_the_variable_or_none(monkeypatch, tmp_path):
    assert results_dir() is None
    monkeypatch.setenv(RESULTS_DIR_ENV, "  ")
    assert results_dir() is None
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    assert results_dir() == tmp_path


def test_file_name_is_kind_and_short_name():
    assert file_name(H100) == "cuda-h100-sxm5.json"
    assert file_name(CPU) == "cpu-intel-xeon-2-threads.json"
    # A CPU's file names what decides its speed: threads and vector ISA.
    assert file_name(CPU_AVX2) == "cpu-intel-xeon-2-threads-avx2.json"
    bf16 = replace(CPU_AVX2, short_name="CPU: AMD EPYC, 2 threads, AVX-512 BF16",
                   isa="AVX-512 BF16")  # fmt: skip
    assert file_name(bf16) == "cpu-amd-epyc-2-threads-avx-512-bf16.json"
    # Re-recording a device (another date, torch) lands in the same file.
    assert file_name(replace(H100, date="2026-01-01T00:00:00+00:00", torch="2.15")) == (
        file_name(H100)
    )


def test_load_dir_of_a_missing_folder_names_it(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(
        ResultsFileError, match=r"results folder .*nope: does not exist"
    ):
        load_dir(missing)
    (tmp_path / "file").write_text("{}")
    with pytest.raises(ResultsFileError, match="not a folder"):
        load_dir(tmp_path / "file")


def test_load_dir_of_an_empty_folder_is_empty(tmp_path):
    (tmp_path / "README.txt").write_text("not a results file")
    assert load_dir(tmp_path) == {}


def test_load_dir_reads_every_file_in_name_order(tmp_path):
    b = _save(tmp_path, H100, _r(value=2.0))
    a = _save(tmp_path, CPU, _r(value=3.0))
    loaded = load_dir(str(tmp_path))
    assert list(loaded) == [a, b]  # cpu-... before cuda-...
    assert [f.device for f in loaded.values()] == [CPU, H100]
    assert [f.results[0].value for f in loaded.values()] == [3.0, 2.0]


def test_load_dir_refuses_two_files_of_one_device(tmp_path):
    first = _save(tmp_path, H100, _r(), name="a.json")
    _save(
        tmp_path, replace(H100, date="2026-01-01T00:00:00+00:00"), _r(), name="b.json"
    )
    with pytest.raises(ResultsFileError, match=r"b\.json: holds H100 SXM5") as error:
        load_dir(tmp_path)
    assert str(first) in str(error.value)  # names the other file too


def test_load_dir_names_a_bad_file(tmp_path):
    _save(tmp_path, H100, _r())
    bad = tmp_path / "truncated.json"
    bad.write_text(results.dumps(ResultsFile(device=CPU, results=(_r(),)))[:60])
    with pytest.raises(ResultsFileError) as error:
        load_dir(tmp_path)
    assert str(error.value).startswith(f"results file {bad}: is not valid JSON")


def test_recordings_are_read_once_and_leave_out_the_file_being_recorded(
    tmp_path, monkeypatch
):
    assert recordings.recordings() == ()  # no folder named
    _save(tmp_path, H100, _r())
    target = _save(tmp_path, CPU, _r())
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    # The file this run records into is not a recording, even named relatively.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(RECORD_ENV, target.name)
    first = recordings.recordings()
    assert [f.device for f in first] == [H100]
    # Read once per process: a file written since is not seen...
    _save(tmp_path, replace(H100, short_name="H200"), _r())
    assert recordings.recordings() is first
    # ...until the folder is forgotten.
    recordings.forget_recordings()
    assert [f.device.short_name for f in recordings.recordings()] == [
        "H100 SXM5",
        "H200",
    ]
    monkeypatch.delenv(RECORD_ENV)
    assert len(recordings.recordings()) == 3


def test_recordings_stop_on_a_bad_file(tmp_path, monkeypatch):
    (tmp_path / "broken.json").write_text('{"schema": 99}')
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    with pytest.raises(ResultsFileError, match=r"broken\.json: is schema version 99"):
        recordings.recordings()


# -- formatting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (1.2e-3, "s", "1.20 ms"),
        (16 * 2**20, "B", "16.0 MiB"),
        (6.12e14, "FLOP/s", "612 TFLOP/s"),
        (5e10, "B/s", "50.0 GB/s"),
        (2.5, "x", "2.50x"),
        (12.345, "%", "12.3 %"),
    ],
)
def test_format_value(value, unit, text):
    assert format_value(value, unit) == text


def test_device_label_says_recorded_with_date_and_versions():
    assert (
        device_label(H100) == "H100 SXM5 (recorded 2025-06-01, torch 2.11.0, CUDA 12.8)"
    )
    versioned = replace(H100, gpuguide="0.1.0", commit="f4b16f4", dirty=True)
    assert device_label(versioned) == (
        "H100 SXM5 (recorded 2025-06-01, torch 2.11.0, CUDA 12.8, "
        "gpuguide 0.1.0 (f4b16f4+dirty))"
    )
    assert device_label(CPU) == (
        "CPU: Intel Xeon, 2 threads (recorded 2025-06-02, torch 2.13.0+cpu, "
        "vector ISA not recorded, small sizes)"
    )
    assert device_label(CPU_AVX2) == (
        "CPU: Intel Xeon, 2 threads, AVX2 (recorded 2025-06-02, torch 2.13.0+cpu, "
        "gpuguide 0.1.0 (commit unknown), small sizes)"
    )


# -- against the recording -------------------------------------------------------------


@pytest.mark.parametrize(
    ("live", "recording", "verdict"),
    [
        # Interquartile ranges that overlap: no measurable difference.
        (_r(value=1.1, spread=(1.0, 1.2)), _r(value=1.0, spread=(0.9, 1.05)), "within its spread"),
        (_r(value=1.0), _r(value=1.0), "within its spread"),
        # A time that grew is slower, one that shrank faster.
        (_r(value=1.2, spread=(1.15, 1.25)), _r(value=1.0, spread=(0.95, 1.05)), "20% slower"),
        (_r(value=0.75), _r(value=1.0), "25% faster"),
        # A rate the other way round.
        (_r(value=1.2e12, unit="B/s"), _r(value=1e12, unit="B/s"), "20% faster"),
        (_r(value=6e11, unit="FLOP/s"), _r(value=1e12, unit="FLOP/s"), "40% slower"),
        # A multiple reads as one.
        (_r(value=3.1e12, unit="B/s"), _r(value=1e12, unit="B/s"), "3.1x faster"),
        (_r(value=1.0), _r(value=4.0), "4.00x faster"),
        (_r(value=2.0), _r(value=1.0), "2.00x slower"),
        # Other units only go up or down.
        (_r(value=30.0, unit="%"), _r(value=20.0, unit="%"), "50% higher"),
        (_r(value=3.0, unit="B"), _r(value=4.0, unit="B"), "25% lower"),
        (_r(value=1.0, unit="%"), _r(value=0.0, unit="%"), "higher"),
        (_r(value=-1.0, unit="%"), _r(value=0.0, unit="%"), "lower"),
        # Another unit is never compared; a time or an amount at another size
        # neither; a rate at another size is, marked so.
        (_r(value=1.0), _r(value=1e9, unit="B/s"), "not comparable: s here, B/s recorded"),
        (_r(value=2.0, size=1024), _r(value=1.0, size=8192), "not comparable: other size"),
        (_r(value=2.0, unit="B", size=1), _r(value=1.0, unit="B"), "not comparable: other size"),
        (_r(value=2.0, unit="B/s", size=1024), _r(value=1.0, unit="B/s", size=8192), "2.00x faster (other size)"),
        (_r(value=1.0, unit="x", size=1), _r(value=1.0, unit="x", size=2), "within its spread (other size)"),
    ],
)  # fmt: skip
def test_against_recording(live, recording, verdict):
    assert against_recording(live, recording) == verdict


def test_against_recording_across_sizes_when_asked():
    live, recording = _r(value=1.5, size=1024), _r(value=1.0, size=8192)
    assert against_recording(live, recording, sizes=False) == "50% slower"
    # A unit that differs is never compared.
    other = _r(value=1.0, unit="B/s", size=1024)
    assert against_recording(other, recording, sizes=False).startswith("not comparable")


def test_against_a_recording_a_figure_of_zero_reads_without_infinity():
    # The check-up clamps a per-op cost that noise made negative to 0 s; a
    # comparison of it must not read "infx faster".
    live = _r("per-op cost", 0.0, spread=(0.0, 0.0))
    recording = _r("per-op cost", 2e-6, spread=(1e-6, 3e-6))
    verdict = against_recording(live, recording)
    assert "faster" in verdict
    assert "inf" not in verdict


# -- the page's table ----------------------------------------------------------------


def test_recorded_table_is_none_with_nothing_to_show():
    assert recorded_table(live=(), files=(), device=CPU) is None
    assert recorded_table(PAGE, live=(), files=(), device=CPU) is None
    # A recording without figures of this page, or only its sweep points.
    other = ResultsFile(
        device=H100, results=(_r(page="plot_other"), _r("sweep", x=1.0))
    )
    assert recorded_table(PAGE, live=(), files=(other,), device=CPU) is None
    assert (
        recorded_table(PAGE, live=(_r("sweep", x=2.0),), files=(), device=CPU) is None
    )


def test_recorded_table_beside_another_device():
    live = (
        _r("tiny call", 2e-6, size=128),
        _r("bandwidth", 5e10, "B/s", mode="eager"),
        _r("sweep", 1e-3, x=1024.0),  # a sweep point: drawn, not tabled
        _r("elsewhere", 1.0, page="plot_other"),
    )
    h100 = ResultsFile(
        device=H100,
        results=(
            _r("bandwidth", 3e12, "B/s", mode="eager", size=2**30),
            _r("recorded only", 4e-6),
            _r("sweep", 1e-5, x=1024.0),
        ),
    )
    empty = ResultsFile(device=replace(H100, short_name="H200"), results=())
    table = recorded_table(PAGE, live=live, files=(h100, empty), device=CPU)
    assert table.header == ("figure", "this run", "H100 SXM5 [rec]")
    assert table.rows == (
        ("tiny call", "2.00 us (128)", "-"),
        ("bandwidth, mode eager", "50.0 GB/s", "3.00 TB/s (2^30)"),
        ("recorded only", "-", "4.00 us"),
    )
    assert "[rec]" in table.title
    assert PAGE in table.title


def test_recorded_table_compares_with_this_devices_recording():
    live = (
        _r("a", 1.0, spread=(0.9, 1.1)),
        _r("b", 2.0, spread=(1.9, 2.1)),
        _r("new", 1.0),
    )
    mine = ResultsFile(
        device=replace(CPU, date="2024-01-01T00:00:00+00:00"),  # same device, older
        results=(_r("a", 1.05, spread=(1.0, 1.2)), _r("b", 1.0, spread=(0.95, 1.05))),
    )
    other = ResultsFile(device=H100, results=(_r("a", 1e-3),))
    table = recorded_table(live=live, files=(other, mine), device=CPU)  # page: the last
    assert table.header == (
        "figure",
        "this run",
        "H100 SXM5 [rec]",
        "CPU: Intel Xeon, 2 threads [rec]",
        "this run against its recording",
    )
    assert [row[-1] for row in table.rows] == ["within its spread", "2.00x slower", "-"]


def test_recorded_table_never_compares_two_identities_of_one_cpu_model():
    # The old file names the model and threads only; this run's CPU names its
    # ISA too: 140x apart is another CPU, not a regression of this one.
    live = (_r("a", 1.0, spread=(0.9, 1.1)),)
    old = ResultsFile(device=CPU, results=(_r("a", 140.0, spread=(139.0, 141.0)),))
    table = recorded_table(live=live, files=(old,), device=CPU_AVX2)
    assert table.header == ("figure", "this run", "CPU: Intel Xeon, 2 threads [rec]")
    same = ResultsFile(device=CPU_AVX2, results=(_r("a", 140.0, spread=(139, 141)),))
    table = recorded_table(live=live, files=(old, same), device=CPU_AVX2)
    assert table.header[-1] == "this run against its recording"
    assert table.rows[0][-1] == "140x faster"
    # Even under one short name, another ISA is another device.
    hidden = ResultsFile(device=replace(CPU_AVX2, isa=None), results=same.results)
    table = recorded_table(live=live, files=(hidden,), device=CPU_AVX2)
    assert "this run against its recording" not in table.header


def test_recorded_table_defaults_to_the_running_page(monkeypatch):
    monkeypatch.setattr(recordings, "current_device", lambda: CPU)
    results.record("a", 1.0, unit="s", page="plot_first", size=1000)
    results.record("b", 2.0, unit="s", page=PAGE)
    monkeypatch.setattr(sys, "argv", ["/x/examples/01_a/plot_first.py"])
    table = recorded_table()
    assert table.header == ("figure", "this run")
    assert table.rows == (("a", "1.00 s (1000)"),)
    # No running script (python -c): the page recorded last.
    monkeypatch.setattr(sys, "argv", ["-c"])
    monkeypatch.setattr(sys.modules["__main__"], "__file__", None, raising=False)
    assert recorded_table().rows == (("b", "2.00 s"),)
    results.clear()
    assert recorded_table() is None


def test_show_recorded_says_so_in_one_line_when_nothing(tmp_path, monkeypatch):
    out = io.StringIO()
    show_recorded(PAGE, file=out)
    assert (
        out.getvalue()
        == f"No figures of this page recorded ({RESULTS_DIR_ENV} is not set).\n"
    )
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    out = io.StringIO()
    show_recorded(PAGE, file=out)
    assert out.getvalue() == f"No figures of this page recorded in {tmp_path}.\n"


def test_show_recorded_prints_the_table_and_the_recorded_devices(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(recordings, "current_device", lambda: CPU)
    _save(tmp_path, H100, _r("a", 1e-3))
    _save(tmp_path, replace(H100, short_name="H200"), _r("a", 1.0, page="plot_other"))
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    results.record("a", 2.0, unit="s", page=PAGE)
    show_recorded(PAGE)
    out = capsys.readouterr().out
    assert str(recorded_table(PAGE)) in out
    assert "H100 SXM5 [rec]" in out
    assert f"[rec] {device_label(H100)}" in out
    assert "H200" not in out  # it has no figure of this page
    assert "No recorded devices" not in out


def test_show_recorded_without_a_folder_says_there_are_no_recorded_devices(
    monkeypatch, capsys
):
    monkeypatch.setattr(recordings, "current_device", lambda: CPU)
    monkeypatch.setattr(sys, "argv", [f"/x/examples/01_a/{PAGE}.py"])
    results.record("a", 2.0, unit="s", page=PAGE)
    show_recorded()
    out = capsys.readouterr().out.splitlines()
    assert "2.00 s" in "\n".join(out)
    assert out[-1].startswith("No recorded devices: ")
    assert RESULTS_DIR_ENV in out[-1]


# -- axis units and series -------------------------------------------------------------


@pytest.mark.parametrize(
    ("label", "unit", "scale"),
    [
        ("time (ms)", "s", 1e-3),
        ("time (s)", "s", 1.0),
        ("time per call (us)", "s", 1e-6),
        ("time (\N{MICRO SIGN}s)", "s", 1e-6),
        ("time (ns) ", "s", 1e-9),
        ("bandwidth (GB/s)", "B/s", 1e9),
        ("bandwidth (GiB/s)", "B/s", 2.0**30),
        ("throughput (TFLOP/s)", "FLOP/s", 1e12),
        ("work (GFLOP)", "FLOP", 1e9),
        ("memory (MiB)", "B", 2.0**20),
        ("memory (KiB)", "B", 2.0**10),
        ("speed-up (x)", "x", 1.0),
        ("share of peak (%)", "%", 1.0),
        # Binary prefixes are for bytes only; anything else is its own unit.
        ("time (Mis)", "Mis", 1.0),
        ("rate (GiFLOP/s)", "GiFLOP/s", 1.0),
        ("size (elements)", "elements", 1.0),
    ],
)
def test_axis_unit(label, unit, scale):
    found = axis_unit(label)
    assert found[0] == unit
    assert found[1] == pytest.approx(scale, rel=1e-12)


@pytest.mark.parametrize("label", ["time", "time ()", "time (ms) per call", ""])
def test_axis_unit_needs_a_unit_at_the_end(label):
    with pytest.raises(ValueError, match="must end with a unit in parentheses"):
        axis_unit(label)


@pytest.mark.parametrize(
    ("label", "key"),
    [("fp32 (TF32 off)", "fp32"), ("bf16", "bf16"), (" pinned (async) (x)", "pinned"), ("a(b)", "a(b)")],
)  # fmt: skip
def test_series_key(label, key):
    assert series_key(label) == key


# -- faint recorded curves -------------------------------------------------------------


def _sweep(name, series, points, *, unit="s", page=PAGE):
    return tuple(_r(name, y, unit, page=page, x=x, series=series) for x, y in points)


def test_plot_recorded_draws_each_series_faintly_in_this_runs_colour(ax):
    (fp32,) = ax.plot([1, 2], [1, 2], label="fp32 (2 threads)")
    (bf16,) = ax.plot([1, 2], [2, 3], label="bf16")
    h100 = ResultsFile(
        device=H100,
        results=(
            *_sweep("mm", "fp32", [(4.0, 4e-3), (1.0, 1e-3), (2.0, 2e-3)]),
            *_sweep("mm", "bf16", [(1.0, 5e-4), (2.0, 6e-4)]),
            *_sweep("mm", "fp64", [(1.0, 9e-3)]),  # no such series here: grey
            *_sweep("other sweep", "fp32", [(1.0, 1.0)]),  # another sweep
            *_sweep("mm", "fp32", [(1.0, 1.0)], page="plot_other"),  # another page
            *_sweep("mm", "bytes", [(8.0, 1.0)], unit="B"),  # another unit
            _r("mm", 1e-3, series="fp32"),  # a headline figure, not a point
        ),
    )
    cpu = ResultsFile(device=CPU, results=_sweep("mm", "fp32", [(1.0, 0.1)]))
    nothing = ResultsFile(device=replace(H100, short_name="H200"), results=(_r("a"),))
    drawn = plot_recorded(ax, "mm", "time (ms)", page=PAGE, files=[h100, nothing, cpu])
    assert drawn == 4
    lines = ax.get_lines()[2:]
    curves = [line for line in lines if len(line.get_xdata())]
    assert len(curves) == 4
    first = curves[0]  # H100's fp32, sorted by x, in ms
    assert list(first.get_xdata()) == [1.0, 2.0, 4.0]
    assert list(first.get_ydata()) == pytest.approx([1.0, 2.0, 4.0])
    assert first.get_color() == fp32.get_color()
    assert curves[1].get_color() == bf16.get_color()
    assert curves[2].get_color() == "grey"
    assert all(c.get_alpha() < 1 and c.get_label() == "_nolegend_" for c in curves)
    assert curves[3].get_linestyle() != first.get_linestyle()  # one style per device
    _, labels = ax.get_legend_handles_labels()
    assert labels == [
        "fp32 (2 threads)",
        "bf16",
        "H100 SXM5 (recorded 2025-06-01)",
        "CPU: Intel Xeon, 2 threads (recorded 2025-06-02)",
    ]


def test_plot_recorded_without_recordings_draws_nothing(ax, monkeypatch):
    monkeypatch.setattr(sys, "argv", [f"/x/examples/01_a/{PAGE}.py"])
    assert plot_recorded(ax, "mm", "time (ms)") == 0
    assert ax.get_lines() == []
    with pytest.raises(ValueError, match="unit in parentheses"):
        plot_recorded(ax, "mm", "time")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A results folder with an H100 sweep of ``PAGE``, the running script."""
    monkeypatch.setattr(sys, "argv", [f"/x/examples/01_a/{PAGE}.py"])
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    _save(
        tmp_path,
        H100,
        *_sweep("demo sweep", "fp32", [(256.0, 1e-5), (512.0, 2e-5)]),
        _r("headline", 1.0),
    )
    return tmp_path


def test_plot_sweep_records_every_point_in_the_base_unit(folder):
    fast = Measurement("m", (1e-3, 2e-3, 3e-3, 4e-3, 5e-3), "cpu", "wall-clock")
    _fig, ax = plt.subplots()
    plot_sweep(
        ax,
        [256, 512, 1024],
        {"fp32 (eager)": [fast, fast, fast], "bf16": [0.5, None, 2.0]},
        xlabel="size (elements)",
        ylabel="time (ms)",
        title="t",
        device="cpu",
        record="demo sweep",
    )
    got = {(r.config["series"], r.x): r for r in results.recorded()}
    assert sorted(got) == [
        ("bf16", 256.0),
        ("bf16", 1024.0),
        ("fp32", 256.0),
        ("fp32", 512.0),
        ("fp32", 1024.0),
    ]
    assert {(r.page, r.name, r.unit) for r in got.values()} == {
        (PAGE, "demo sweep", "s")
    }
    point = got["fp32", 512.0]
    assert point.value == pytest.approx(3e-3)
    assert point.spread == pytest.approx((2e-3, 4e-3))
    assert got["bf16", 1024.0].value == pytest.approx(2e-3)
    assert got["bf16", 1024.0].spread is None
    # The H100's curve of the same sweep, in this run's fp32 colour, in ms.
    live_fp32 = next(
        line for line in ax.get_lines() if line.get_label() == "fp32 (eager)"
    )
    recorded = [line for line in ax.get_lines() if line.get_label() == "_nolegend_"]
    assert len(recorded) == 1
    assert list(recorded[0].get_ydata()) == pytest.approx([1e-2, 2e-2])
    assert recorded[0].get_color() == live_fp32.get_color()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["fp32 (eager)", "bf16", "H100 SXM5 (recorded 2025-06-01)"]


def test_plot_sweep_records_rates_and_writes_them_when_recording(
    folder, tmp_path_factory, monkeypatch
):
    target = tmp_path_factory.mktemp("rec") / "this.json"
    monkeypatch.setenv(RECORD_ENV, str(target))
    monkeypatch.setattr(
        results, "current_device", lambda: replace(CPU, peaks={"fp32": 1e11})
    )
    _fig, ax = plt.subplots()
    plot_sweep(
        ax,
        [1.0, 2.0],
        {"copy (pinned)": [1.5, 3.0]},
        xlabel="size (MiB)",
        ylabel="bandwidth (GB/s)",
        title="t",
        device="cpu",
        record="copy sweep",
    )
    assert [(r.value, r.unit, r.x) for r in results.recorded()] == [
        (1.5e9, "B/s", 1.0),
        (3e9, "B/s", 2.0),
    ]
    written = results.load(target)
    assert written.results == results.recorded()
    # No H100 curve of this sweep: nothing faint, no legend entry for it.
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["copy (pinned)"]
    # Without record=, nothing is recorded.
    results.clear()
    plot_sweep(
        ax,
        [1.0],
        {"a": [1.0]},
        xlabel="n (x)",
        ylabel="t (ms)",
        title="t",
        device="cpu",
    )
    assert results.recorded() == ()


# -- every device side by side ---------------------------------------------------------


def test_percent_of_recorded_peak():
    assert percent_of_recorded_peak(
        _r(value=4.945e14, unit="FLOP/s", peak="bf16"), H100
    ) == (pytest.approx(50.0))
    assert percent_of_recorded_peak(_r(value=1.0, unit="FLOP/s"), H100) is None
    assert (
        percent_of_recorded_peak(_r(value=1.0, unit="FLOP/s", peak="fp32"), H100)
        is None
    )


def test_devices_table_has_a_row_per_file(tmp_path):
    _save(tmp_path, H100, _r("a"), _r("b"), _r("c", x=1.0))
    _save(tmp_path, CPU, _r("a"))
    _save(tmp_path, CPU_AVX2, _r("a"))
    table = devices_table(load_dir(tmp_path))
    assert table.header[0] == "device"
    assert table.header[5] == "gpuguide"
    assert table.header[-1] == "file"
    assert table.rows == (
        ("CPU: Intel Xeon, 2 threads, AVX2", "cpu", "2.13.0+cpu", "-", "-",
         "0.1.0 (commit unknown)", "2025-06-02", "small", "1",
         "cpu-intel-xeon-2-threads-avx2.json"),
        ("CPU: Intel Xeon, 2 threads", "cpu", "2.13.0+cpu", "-", "-", "-",
         "2025-06-02", "small", "1", "cpu-intel-xeon-2-threads.json"),
        ("H100 SXM5", "cuda", "2.11.0", "12.8", "570.86", "-", "2025-06-01", "full",
         "3", "cuda-h100-sxm5.json"),
    )  # fmt: skip
    stamped = replace(H100, gpuguide="0.1.0", commit="f4b16f4")
    _save(tmp_path, stamped, _r("a"))
    row = next(r for r in devices_table(load_dir(tmp_path)).rows if r[0] == "H100 SXM5")
    assert row[5] == "0.1.0 (f4b16f4)"
    assert devices_table({}).rows == ()


def test_page_table_puts_devices_side_by_side_with_percent_of_peak():
    h100 = ResultsFile(
        device=H100,
        results=(
            _r("matmul", 4.945e14, "FLOP/s", peak="bf16", size=8192, dtype="bf16"),
            _r("call", 5e-6),
            _r("sweep", 1.0, x=1.0),
        ),
    )
    cpu = ResultsFile(
        device=CPU,
        results=(_r("matmul", 1e11, "FLOP/s", peak="bf16", size=1024, dtype="bf16"),),
    )
    sweep_only = ResultsFile(
        device=replace(H100, short_name="H200"), results=(_r("sweep", 2.0, x=1.0),)
    )
    table = page_table(PAGE, [h100, cpu, sweep_only])
    assert table.header == ("figure", "H100 SXM5", "CPU: Intel Xeon, 2 threads")
    assert table.rows == (
        ("matmul, dtype bf16", "494 TFLOP/s (2^13), 50% of peak", "100 GFLOP/s (2^10)"),
        ("call", "5.00 us", "-"),
    )
    assert page_table("plot_other", [h100, cpu]) is None
    assert page_table(PAGE, [sweep_only]) is None
