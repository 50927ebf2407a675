"""The site's tables of recorded results (docs/_ext/recorded.py): each page's
section, and the results page."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from conftest import CPU_RECORD, H100_RECORD

from gpuguide.results import Result
from gpuguide_tools.pages import PageCode
from gpuguide_tools.results_files import (
    PageRecord,
    PageRun,
    ResultsFile,
    file_name,
    load_dir,
    save,
)
from recorded import (
    EARLIER,
    code_status,
    device_label,
    devices_table,
    no_longer_recorded,
    page_table,
    recorded_table,
)

H100 = replace(H100_RECORD, peaks={"bf16": 9.89e14, "memory": 3.35e12})
CPU = replace(CPU_RECORD, small=True)
#: The same CPU model and threads, recorded with its vector ISA: another identity.
CPU_AVX2 = replace(
    CPU, short_name="CPU: Intel Xeon, 2 threads, AVX2", isa="AVX2", gpuguide="0.1.0"
)
PAGE = "plot_demo"


def _r(name="copy", value=1.0, unit="s", *, page=PAGE, spread=None, size=None,
       x=None, peak=None, **config):  # fmt: skip
    """A result of ``PAGE``; keywords other than Result's fields are its config."""
    return Result(
        page=page, name=name, value=value, unit=unit, spread=spread, config=config,
        size=size, x=x, peak=peak,
    )  # fmt: skip


def _save(folder, device, *found):
    return save(ResultsFile(device=device, results=found), folder / file_name(device))


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


# -- a page's section --------------------------------------------------------------------


def test_recorded_table_is_none_when_no_device_recorded_the_page():
    live = ResultsFile(CPU, (_r("a", 1.0),))
    assert recorded_table(PAGE, live, ()) is None
    # A recording without figures of this page, or only its sweep points.
    other = ResultsFile(H100, (_r(page="plot_other"), _r("sweep", x=1.0)))
    assert recorded_table(PAGE, live, (other,)) is None
    assert recorded_table(PAGE, None, (other,)) is None


def test_recorded_table_beside_another_device():
    live = ResultsFile(
        CPU,
        (
            _r("tiny call", 2e-6, size=128),
            _r("bandwidth", 5e10, "B/s", mode="eager"),
            _r("sweep", 1e-3, x=1024.0),  # a sweep point: not a row
            _r("elsewhere", 1.0, page="plot_other"),
        ),
    )
    h100 = ResultsFile(
        H100,
        (
            _r("bandwidth", 3e12, "B/s", mode="eager", size=2**30),
            _r("recorded only", 4e-6),
            _r("sweep", 1e-5, x=1024.0),
        ),
    )
    empty = ResultsFile(replace(H100, short_name="H200"), ())
    table = recorded_table(PAGE, live, (h100, empty))
    assert table.header == ("figure", "this build", "H100 SXM5 [rec]")
    # A CPU run does not tell which figures a page records on a GPU: every
    # recorded row is shown.
    assert table.rows == (
        ("tiny call", "2.00 us (128)", "-"),
        ("bandwidth, mode eager", "50.0 GB/s", "3.00 TB/s (2^30)"),
        ("recorded only", "-", "4.00 us"),
    )
    assert no_longer_recorded(PAGE, live, (h100, empty)) == {}
    # A run on a GPU does: a figure the page no longer records is not shown as
    # a current one; figures an earlier version of the page recorded are marked.
    on_gpu = ResultsFile(replace(H100, short_name="H200"), live.results)
    table = recorded_table(PAGE, on_gpu, (h100,), earlier=["H100 SXM5"])
    assert table.rows == (
        ("tiny call", "2.00 us (128)", "-"),
        ("bandwidth, mode eager", "50.0 GB/s", "3.00 TB/s (2^30)" + EARLIER),
    )
    assert no_longer_recorded(PAGE, on_gpu, (h100, empty)) == {"H100 SXM5": 1}
    # A build that did not run the page: the recorded devices only, every row.
    table = recorded_table(PAGE, None, (h100,))
    assert table.header == ("figure", "H100 SXM5 [rec]")
    assert table.rows[0] == ("bandwidth, mode eager", "3.00 TB/s (2^30)")
    assert table.rows[1] == ("recorded only", "4.00 us")
    assert no_longer_recorded(PAGE, None, (h100,)) == {}


def test_a_figure_of_a_gpu_machines_host_cpu_is_labelled_with_that_cpu():
    host = "Intel(R) Xeon(R) Processor, 16 threads"
    gpu = replace(H100, host=host)
    on_host = replace(_r("matmul", 1.2e12, "FLOP/s", peak="bf16", size=4096), on="host")
    h100 = ResultsFile(gpu, (on_host,))
    (row,) = recorded_table(PAGE, None, (h100,)).rows
    assert row == ("matmul", f"1.20 TFLOP/s (2^12), on the host CPU: {host}")
    # ... and never set against the GPU's peak.
    (row,) = page_table(PAGE, [h100]).rows
    assert row == ("matmul", f"1.20 TFLOP/s (2^12), on the host CPU: {host}")
    assert devices_table({Path(file_name(gpu)): h100}).rows[0][5] == host


def _run(source, helpers, date="2026-11-25T00:00:00+00:00", commit="2417e61"):
    return PageRun(
        date=date, torch="2.11.0", source=source, helpers=helpers, commit=commit
    )


def test_code_status_says_whether_figures_come_from_the_pages_current_code():
    code = PageCode("1 file(s), sha256 aaa", "20 file(s), sha256 bbb")
    figures = (_r("a"),)

    def status(*records):
        runs = {PAGE: PageRecord(*records)} if records else {}
        return code_status(ResultsFile(H100, figures, runs), PAGE, code)

    assert status(_run(code.source, code.helpers)) == (
        "figures from this page's current code (2026-11-25, 2417e61)"
    )
    assert status(_run("1 file(s), sha256 ccc", code.helpers)) == (
        "recorded at 2417e61 (2026-11-25); this page changed since"
    )
    assert status(_run(code.source, "none")) == (
        "recorded at 2417e61 (2026-11-25); the helpers it uses changed since"
    )
    failed = _run(
        code.source, code.helpers, date="2026-11-28T00:00:00+00:00", commit="abcdef1"
    )
    assert status(_run(code.source, code.helpers), failed).endswith(
        "; its latest run failed (2026-11-28, abcdef1)"
    )
    # A file of schema version 1: no page records.
    versioned = ResultsFile(replace(H100, gpuguide="0.1.0", commit="2417e61"), figures)
    assert code_status(versioned, PAGE, code) == (
        "recorded at 2417e61, before pages named the code that measured them"
    )


def test_recorded_table_compares_with_this_devices_recording():
    live = ResultsFile(
        CPU,
        (_r("a", 1.0, spread=(0.9, 1.1)), _r("b", 2.0, spread=(1.9, 2.1)), _r("new")),
    )
    mine = ResultsFile(
        replace(CPU, date="2024-01-01T00:00:00+00:00"),  # same device, older
        (_r("a", 1.05, spread=(1.0, 1.2)), _r("b", 1.0, spread=(0.95, 1.05))),
    )
    other = ResultsFile(H100, (_r("a", 1e-3),))
    table = recorded_table(PAGE, live, (other, mine))
    assert table.header == (
        "figure",
        "this build",
        "H100 SXM5 [rec]",
        "CPU: Intel Xeon, 2 threads [rec]",
        "this build against its recording",
    )
    assert [row[-1] for row in table.rows] == ["within its spread", "2.00x slower", "-"]


def test_recorded_table_never_compares_two_identities_of_one_cpu_model():
    # The old file names the model and threads only; this build's CPU names its
    # ISA too: 140x apart is another CPU, not a regression of this one.
    live = ResultsFile(CPU_AVX2, (_r("a", 1.0, spread=(0.9, 1.1)),))
    old = ResultsFile(CPU, (_r("a", 140.0, spread=(139.0, 141.0)),))
    table = recorded_table(PAGE, live, (old,))
    assert table.header == ("figure", "this build", "CPU: Intel Xeon, 2 threads [rec]")
    same = ResultsFile(CPU_AVX2, (_r("a", 140.0, spread=(139, 141)),))
    table = recorded_table(PAGE, live, (old, same))
    assert table.header[-1] == "this build against its recording"
    assert table.rows[0][-1] == "140x faster"
    # Even under one short name, another ISA is another device.
    hidden = ResultsFile(replace(CPU_AVX2, isa=None), same.results)
    table = recorded_table(PAGE, live, (hidden,))
    assert "this build against its recording" not in table.header


# -- the results page ----------------------------------------------------------------------


def test_devices_table_has_a_row_per_file(tmp_path):
    _save(tmp_path, H100, _r("a"), _r("b"), _r("c", x=1.0))
    _save(tmp_path, CPU, _r("a"))
    _save(tmp_path, CPU_AVX2, _r("a"))
    table = devices_table(load_dir(tmp_path))
    assert table.header[0] == "device"
    assert table.header[5:7] == ("host CPU", "gpuguide")
    assert table.header[-1] == "file"
    assert table.rows == (
        (
            "CPU: Intel Xeon, 2 threads, AVX2",
            "cpu",
            "2.13.0+cpu",
            "-",
            "-",
            "-",
            "0.1.0 (commit unknown)",
            "2025-06-02",
            "small",
            "1",
            "cpu-intel-xeon-2-threads-avx2.json",
        ),
        (
            "CPU: Intel Xeon, 2 threads",
            "cpu",
            "2.13.0+cpu",
            "-",
            "-",
            "-",
            "-",
            "2025-06-02",
            "small",
            "1",
            "cpu-intel-xeon-2-threads.json",
        ),
        (
            "H100 SXM5",
            "cuda",
            "2.11.0",
            "12.8",
            "570.86",
            "-",
            "-",
            "2025-06-01",
            "full",
            "2",
            "cuda-h100-sxm5.json",
        ),
    )  # fmt: skip  (figures: the headline ones, not sweep points)
    stamped = replace(H100, gpuguide="0.1.0", commit="f4b16f4")
    _save(tmp_path, stamped, _r("a"))
    row = next(r for r in devices_table(load_dir(tmp_path)).rows if r[0] == "H100 SXM5")
    assert row[6] == "0.1.0 (f4b16f4)"
    assert devices_table({}).rows == ()


def test_page_table_puts_devices_side_by_side_with_percent_of_peak():
    h100 = ResultsFile(
        H100,
        (
            _r("matmul", 4.945e14, "FLOP/s", peak="bf16", size=8192, dtype="bf16"),
            _r("call", 5e-6),
            _r("sweep", 1.0, x=1.0),
        ),
    )
    cpu = ResultsFile(
        CPU, (_r("matmul", 1e11, "FLOP/s", peak="bf16", size=1024, dtype="bf16"),)
    )
    sweep_only = ResultsFile(
        replace(H100, short_name="H200"), (_r("sweep", 2.0, x=1.0),)
    )
    table = page_table(PAGE, [h100, cpu, sweep_only])
    assert table.header == ("figure", "H100 SXM5", "CPU: Intel Xeon, 2 threads")
    assert table.rows == (
        ("matmul, dtype bf16", "494 TFLOP/s (2^13), 50% of peak", "100 GFLOP/s (2^10)"),
        ("call", "5.00 us", "-"),
    )
    marked = page_table(PAGE, [h100, cpu], earlier=["H100 SXM5"])
    assert marked.rows[1] == ("call", "5.00 us" + EARLIER, "-")
    assert page_table("plot_other", [h100, cpu]) is None
    assert page_table(PAGE, [sweep_only]) is None


# -- the take-away box (docs/_ext/claims_page.py) ----------------------------------------


def _takeaway(claims, live=True):
    from claims_page import takeaway_box

    from gpuguide.results import Claim

    checked = tuple(Claim(*c) for c in claims)
    run = ResultsFile(CPU, claims={PAGE: checked} if checked else {}) if live else None
    return takeaway_box(PAGE, run)


def test_the_take_away_lists_what_this_run_checked_with_its_outcome():
    box = _takeaway(
        [
            ("x is 4", "held", "4"),
            ("y is 5", "failed", "4"),
            ("graphs help", "n/a", "needs CUDA; this run is on CPU"),
            ("streams overlap", "n/a", "needs CUDA; this run is on CPU"),
            ("compiled is faster", "n/a", "small mode: too small"),
        ]
    )
    assert "gpuguide-takeaway" in box["classes"]
    title, items, rest = box.children
    assert title.astext() == f"Take-away, measured in this build on {CPU.short_name}"
    assert [i.astext() for i in items.children] == [
        "held: x is 4 (measured 4)",
        "did not hold: y is 5 (measured 4)",
    ]
    assert [i["classes"] for i in items.children] == [
        ["gpuguide-held"],
        ["gpuguide-failed"],
    ]
    assert rest.astext() == (
        "Not checked here: 3 claims: 2 (needs CUDA; this run is on CPU), 1 (small "
        "mode: too small); see Recorded results."
    )
    (link,) = [n for n in rest.children if n.tagname == "reference"]
    assert link["refuri"] == "#recorded-results"


def test_a_take_away_with_nothing_checked_says_why_in_one_line():
    box = _takeaway([("graphs help", "n/a", "needs CUDA; this run is on CPU")])
    _, rest = box.children
    assert rest.astext() == (
        "Not checked here: 1 claim (needs CUDA; this run is on CPU); see Recorded "
        "results."
    )


def test_a_page_this_build_did_not_run_says_so_and_one_without_claims_has_no_box():
    box = _takeaway([], live=False)
    assert box.children[0].astext() == "Take-away"
    assert "This build did not run this page" in box.astext()
    assert _takeaway([]) is None
