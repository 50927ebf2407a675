"""``python -m gpuguide``: the check-up, its JSON, its report and its errors.

One real check-up runs (``--json --levels 1`` on the CPU, about 10 s); the
report, the CUDA-only figures and the error paths use fakes.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import CPU_RECORD, H100_RECORD, ROOT

from gpuguide import results
from gpuguide.chapters import precision
from gpuguide.peaks import _GPU_PEAKS as GPU_PEAKS
from gpuguide.results import Result
from gpuguide.timing import Measurement
from gpuguide.units import format_bytes
from gpuguide_tools import checkup, results_files
from gpuguide_tools.checkup import against_recording
from gpuguide_tools.results_files import PEAK_NAMES, RESULTS_DIR_ENV, ResultsFile

H100 = replace(H100_RECORD, peaks={"fp32": 6.7e13, "memory": 3.35e12})
CPU = replace(CPU_RECORD, peaks={"fp32": 1e11, "memory": 1e10})
CPU_DTYPES = ("fp64", "fp32", "fp16", "bf16")
NO_CUDA = pytest.mark.skipif(
    torch.cuda.is_available(), reason="needs a machine without CUDA"
)


pytestmark = pytest.mark.usefixtures("fresh_results")


@pytest.fixture(scope="module")
def measured_json():
    """What ``python -m gpuguide --json --levels 1 --device cpu`` prints (one run)."""
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.delenv(RESULTS_DIR_ENV, raising=False)
        code = checkup.main(["--json", "--levels", "1", "--device", "cpu"])
    assert code == 0
    return out.getvalue()


def _matmul(dtype, value, spread=None, size="512x512x512"):
    return Result(
        "plot_dtype_throughput", "best matmul", value, "FLOP/s", spread=spread,
        config={"dtype": dtype}, size=size, peak=dtype,
    )  # fmt: skip


def _bandwidth(value, spread=None, size=2**24):
    return Result(
        "plot_roofline", "x + y bandwidth", value, "B/s", spread=spread, size=size,
        peak="memory",
    )  # fmt: skip


def _tiny(value, spread=None):
    return Result("plot_roofline", "tiny add call", value, "s", spread=spread, size=128)


def _line(text, start):
    return next(
        line for line in text.splitlines() if line.lstrip("| ").startswith(start)
    )


# -- the real check-up, as JSON --------------------------------------------------------


def test_json_is_a_results_file_with_the_pages_keys(measured_json, monkeypatch):
    measured = results_files.loads(measured_json, "check-up --json")
    assert measured_json.endswith("}\n")
    assert measured.device.kind == "cpu"
    assert results_files.device_key(measured.device) == results_files.device_key(
        results.current_device()
    )
    expected = {
        ("plot_dtype_throughput", "best matmul", (("dtype", name),), None): (
            "FLOP/s",
            name,
        )
        for name in CPU_DTYPES
    }
    expected[("plot_roofline", "x + y bandwidth", (), None)] = ("B/s", "memory")
    expected[("plot_roofline", "tiny add call", (), None)] = ("s", None)
    assert {r.key: (r.unit, r.peak) for r in measured.results} == expected
    for r in measured.results:
        assert r.value > 0
        assert r.spread[0] <= r.value <= r.spread[1], r
        assert r.size is not None
    # The pages' own record() calls give the same keys.
    monkeypatch.setattr(results, "_default_page", lambda: "plot_dtype_throughput")
    page = results.record(
        "best matmul", 1.0, unit="FLOP/s", size="1x1x1", peak="bf16", dtype="bf16"
    )
    assert page.key in expected
    # A CPU's peaks are measured ceilings, under the names results take.
    assert {"fp32", "memory"} <= set(measured.device.peaks) <= set(PEAK_NAMES)


def test_cpu_has_no_transfer_or_launch_figures():
    cpu = torch.device("cpu")
    assert checkup.transfer_figures(cpu) == []
    assert checkup.launch_figures(cpu) == []


# -- the report ----------------------------------------------------------------------


def test_report_compares_with_this_devices_recording():
    measured = ResultsFile(
        device=CPU,
        results=(
            _matmul("fp32", 5e10, (4.9e10, 5e10)),
            _bandwidth(5e9, (4.9e9, 5.1e9)),
            _tiny(2e-6, (1.9e-6, 2.1e-6)),
        ),
    )
    mine = ResultsFile(
        device=replace(CPU, date="2024-01-01T00:00:00+00:00"),
        results=(
            _matmul("fp32", 5e10, (4.8e10, 5.05e10), size="1024x1024x1024"),
            # Another size: the check-up's rates still compare.
            _bandwidth(4e9, (3.9e9, 4.1e9), size=2**20),
        ),
    )
    h100 = ResultsFile(device=H100, results=(_matmul("fp32", 5e13),))
    empty = ResultsFile(device=replace(H100, short_name="H200"))
    text = checkup.report(measured, [h100, mine, empty])
    assert text.splitlines()[0] == f"gpuguide check-up on {CPU.short_name}"
    header = _line(text, "figure")
    assert "H100 SXM5 [rec]" in header
    assert f"{CPU.short_name} [rec]" in header
    assert "H200" not in text  # nothing recorded: no column
    assert header.rstrip(" |").endswith("against its recording")
    matmul = _line(text, "best matmul fp32")
    for cell in (
        "50.0 GFLOP/s",
        "512x512x512",
        "50%",
        "50.0 TFLOP/s",
        "within its spread",
    ):
        assert cell in matmul
    bandwidth = _line(text, "x + y bandwidth")
    assert "25% faster" in bandwidth
    assert (
        against_recording(measured.results[1], mine.results[1], sizes=False)
        in bandwidth
    )
    tiny = _line(text, "tiny add call")
    assert "2.00 us" in tiny
    assert "128" in tiny
    assert "measured ceiling" in text
    assert "need a CUDA GPU: not measured" in text
    assert "No recorded devices" not in text


def test_report_never_compares_a_cpu_with_another_isa():
    # One model name and thread count, but this CPU names its ISA and the
    # recording does not: two devices, so no "against its recording".
    this_cpu = replace(
        CPU, short_name=f"{CPU.short_name}, AVX-512 BF16", isa="AVX-512 BF16"
    )
    measured = ResultsFile(device=this_cpu, results=(_matmul("fp32", 4.4e11),))
    old = ResultsFile(device=CPU, results=(_matmul("fp32", 3.1e9),))
    text = checkup.report(measured, [old])
    header = _line(text, "figure")
    assert f"{CPU.short_name} [rec]" in header
    assert "against its recording" not in text
    again = ResultsFile(device=this_cpu, results=(_matmul("fp32", 4.3e11),))
    assert "against its recording" in checkup.report(measured, [old, again])


def test_report_without_recordings_on_a_gpu():
    measured = ResultsFile(device=H100, results=(_matmul("fp32", 3.35e13), _tiny(5e-6)))
    text = checkup.report(measured)
    assert "[rec]" not in _line(text, "figure")
    assert "against its recording" not in text
    assert "50%" in _line(text, "best matmul fp32")
    assert "datasheet" in text
    assert "No recorded devices to compare with" in text
    assert "need a CUDA GPU" not in text


def test_main_prints_the_report_against_the_results_folder(
    tmp_path, monkeypatch, capsys
):
    device = results.current_device()
    measured = ResultsFile(
        device=replace(device, peaks={"fp32": 1e11}), results=(_matmul("fp32", 5e10),)
    )
    recording = ResultsFile(
        device=replace(device, date="2024-01-01T00:00:00+00:00"),
        results=(_matmul("fp32", 4e10),),
    )
    results_files.save(recording, tmp_path / results_files.file_name(device))
    monkeypatch.setenv(RESULTS_DIR_ENV, str(tmp_path))
    calls = []

    def fake_checkup(dev, *, levels):
        calls.append((dev, levels))
        return measured

    monkeypatch.setattr(checkup, "checkup", fake_checkup)
    assert checkup.main(["--device", "cpu", "--levels", "3"]) == 0
    assert calls == [(torch.device("cpu"), 3)]
    out = capsys.readouterr().out
    assert f"{device.short_name} [rec]" in out
    assert "against its recording" in out
    assert "25% faster" in _line(out, "best matmul fp32")
    assert out.rstrip().endswith(" s)")


# -- against the recording: the check-up's column, and the site's -----------------------


def _r(name="copy", value=1.0, unit="s", *, spread=None, size=None):
    return Result("plot_demo", name, value, unit, spread=spread, size=size)


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


# -- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nope"], "error: unrecognized arguments: --nope"),
        (["--levels", "0"], "error: --levels must be >= 1, got 0"),
        (["--levels", "two"], "error: argument --levels: invalid int value: 'two'"),
    ],
)
def test_bad_flags_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        checkup.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("device", "message"),
    [
        pytest.param("cuda", "CUDA is not available", marks=NO_CUDA),
        ("tpu", "device must name a device"),
        ("gpu:0", "device must name a device"),
    ],
)
def test_a_device_that_is_not_there_exits_2(device, message, capsys):
    assert checkup.main(["--device", device]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m gpuguide: error: ")
    assert message in err
    assert err.count("\n") == 1


@NO_CUDA
def test_python_m_gpuguide_with_no_cuda_says_so_without_a_traceback():
    done = subprocess.run(
        [sys.executable, "-m", "gpuguide", "--device", "cuda"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "error: device 'cuda' was asked for" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_console_script_rejects_a_bad_level():
    script = Path(sys.executable).with_name("gpuguide-checkup")
    if not script.exists():
        pytest.skip(f"{script} is not installed")
    if "gpuguide_tools.checkup" not in script.read_text():
        pytest.skip(f"{script} was installed from an older checkout; reinstall")
    done = subprocess.run(
        [str(script), "--levels", "0"], capture_output=True, text=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "gpuguide: error: --levels must be >= 1" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_broken_results_folder_exits_2_naming_the_file(tmp_path, capsys):
    good = ResultsFile(device=H100, results=(_tiny(1e-6),))
    results_files.save(good, tmp_path / "a.json")
    truncated = tmp_path / "b.json"
    truncated.write_text(results_files.dumps(good)[:-40])
    assert checkup.main(["--device", "cpu", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"results file {truncated}: is not valid JSON" in err
    assert "Traceback" not in err
    assert checkup.main(["--device", "cpu", "--results", str(tmp_path / "no")]) == 2
    assert "does not exist" in capsys.readouterr().err


# -- CUDA-only figures, with fakes -------------------------------------------------------


def _constant(seconds, n=5):
    return Measurement("t", (seconds,) * n, "cuda:0", "cuda events")


def test_matmul_figures_on_a_gpu_search_tf32_with_tf32_allowed(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    searched = []

    def fake_search(dtype, flop_per_s, *, device, label, levels, tf32):
        searched.append((label, dtype, tf32, flop_per_s, levels))
        return (256, 512, 128), _constant(1e-12), 27  # 1e12 FLOP/s

    monkeypatch.setattr(precision, "search_matmul_shapes", fake_search)
    before = torch.backends.cuda.matmul.allow_tf32
    peaks = GPU_PEAKS["H100 SXM5"]
    figures = checkup.matmul_figures(torch.device("cuda:0"), 2, peaks)
    assert torch.backends.cuda.matmul.allow_tf32 == before  # restored
    assert [s[0] for s in searched] == ["fp64", "fp32", "tf32", "fp16", "bf16"]
    assert [s[1] for s in searched] == [
        torch.float64, torch.float32, torch.float32, torch.float16, torch.bfloat16,
    ]  # fmt: skip
    assert [s[2] for s in searched] == [False, False, True, False, False]
    assert searched[2][3] == peaks.flops_for(torch.float32, tf32=True)
    assert {s[4] for s in searched} == {2}
    assert [dict(f.config) for f in figures] == [{"dtype": s[0]} for s in searched]
    assert all(
        f.value == pytest.approx(1e12) and f.size == "256x512x128" for f in figures
    )
    assert [f.peak for f in figures] == [s[0] for s in searched]
    # Before Ampere there is no TF32; MPS has no fp64 either.
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    searched.clear()
    checkup.matmul_figures(torch.device("cuda:0"), 1, peaks)
    assert [s[0] for s in searched] == ["fp64", "fp32", "fp16", "bf16"]
    searched.clear()
    checkup.matmul_figures(torch.device("mps"), 1, peaks)
    assert [s[0] for s in searched] == ["fp32", "fp16", "bf16"]


class _FakeTensor:
    def __init__(self, where):
        self.where = where
        self.copied_from = None

    def pin_memory(self):
        return _FakeTensor("pinned")

    def copy_(self, src):
        self.copied_from = src.where
        return self


def test_transfer_figures_on_a_gpu(monkeypatch):
    def empty(numel, device=None, pin_memory=False):
        assert numel * 4 == checkup.COPY_BYTES
        return _FakeTensor(
            "device" if device else "pinned" if pin_memory else "pageable"
        )

    fake_torch = SimpleNamespace(
        randn=lambda numel: _FakeTensor("pageable"), empty=empty
    )
    monkeypatch.setattr(checkup, "torch", fake_torch)
    times = {
        "H2D pageable": 0.01,
        "H2D pinned": 0.004,
        "D2H pageable": 0.02,
        "D2H pinned": 0.005,
    }
    copies = {}

    def fake_interleave(variants, **options):
        assert options["device"].type == "cuda"
        for name, call in variants.items():
            dst = call()
            copies[name] = (dst.copied_from, dst.where)
        return {name: _constant(times[name]) for name in variants}

    monkeypatch.setattr(checkup, "interleave", fake_interleave)
    figures = checkup.transfer_figures(torch.device("cuda:0"))
    assert copies == {
        "H2D pageable": ("pageable", "device"),
        "H2D pinned": ("pinned", "device"),
        "D2H pageable": ("device", "pageable"),
        "D2H pinned": ("device", "pinned"),
    }
    # The transfers page's keys: "<way> bandwidth", memory=..., the copy's size
    # as the page names it, peak host_link.
    copy = format_bytes(checkup.COPY_BYTES)
    assert [(f.page, f.name, dict(f.config), f.peak) for f in figures] == [
        (
            "plot_transfer_bandwidth",
            f"{way} bandwidth",
            {"memory": memory, "copy": copy},
            "host_link",
        )
        for way, memory in (k.split() for k in times)
    ]
    page = (
        ROOT / "examples" / "02_transfers" / "plot_transfer_bandwidth.py"
    ).read_text()
    assert "copy=format_bytes(" in page  # the page names its copies the same way
    assert [f.value for f in figures] == pytest.approx(
        [checkup.COPY_BYTES / t for t in times.values()]
    )
    assert all(f.unit == "B/s" and f.size == checkup.COPY_BYTES for f in figures)


class _Stream:
    def wait_stream(self, other):
        pass


class _Graph:
    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


def test_launch_figures_on_a_gpu(monkeypatch):
    graphs = []

    def new_graph():
        graphs.append(_Graph())
        return graphs[-1]

    fake_cuda = SimpleNamespace(
        Stream=_Stream,
        current_stream=_Stream,
        stream=lambda side: contextlib.nullcontext(),
        CUDAGraph=new_graph,
        graph=lambda graph: contextlib.nullcontext(),
    )
    fake_torch = SimpleNamespace(
        randn=lambda n, device: torch.randn(n), sin=torch.sin, cuda=fake_cuda
    )
    monkeypatch.setattr(checkup, "torch", fake_torch)
    short, long = checkup.CHAINS
    # eager: 10 us per op + 50 us fixed; graph: 2 us per op + 10 us fixed.
    times = {
        "eager short": _constant(50e-6 + short * 10e-6),
        "eager long": _constant(50e-6 + long * 10e-6),
        "graph short": _constant(10e-6 + short * 2e-6),
        "graph long": Measurement(
            "t", (10e-6 + long * 1.5e-6, 10e-6 + long * 2e-6, 10e-6 + long * 2.5e-6),
            "cuda:0", "wall-clock",
        ),
    }  # fmt: skip

    def fake_interleave(variants, **options):
        assert options["measure"] == "call"
        assert list(variants) == list(times)
        for call in variants.values():
            call()
        return times

    monkeypatch.setattr(checkup, "interleave", fake_interleave)
    eager, graph = checkup.launch_figures(torch.device("cuda:0"))
    assert [g.replays for g in graphs] == [1, 1]  # each captured graph replayed
    # The CUDA graphs page's keys.
    assert [(f.page, f.name, dict(f.config), f.unit) for f in (eager, graph)] == [
        ("plot_cuda_graphs", "per-op cost", {"mode": "eager"}, "s"),
        ("plot_cuda_graphs", "per-op cost", {"mode": "graph"}, "s"),
    ]
    assert eager.value == pytest.approx(10e-6)
    assert graph.value == pytest.approx(2e-6)
    assert eager.size == f"{short}-{long} ops"
    assert graph.spread[0] < graph.value < graph.spread[1]
    # Noise that makes the long chain the faster one leaves the figure out, as
    # the CUDA graphs page does, instead of reporting a cost of 0 or less.
    times["eager long"] = _constant(40e-6)
    (only,) = checkup.launch_figures(torch.device("cuda:0"))
    assert only.config["mode"] == "graph"


def test_version_names_gpuguide_torch_and_cuda(capsys, monkeypatch):
    from gpuguide.version import VersionInfo

    monkeypatch.setattr(
        checkup, "describe_version", lambda: VersionInfo("9.8.7", "abc1234", True)
    )
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    with pytest.raises(SystemExit) as done:
        checkup.main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    torch_part = f"torch {torch.__version__}"
    assert out == f"gpuguide 9.8.7 (abc1234+dirty) | {torch_part} | CUDA 12.8\n"


def test_python_m_gpuguide_version_measures_nothing():
    import gpuguide

    done = subprocess.run(
        [sys.executable, "-m", "gpuguide", "--version"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"gpuguide {gpuguide.__version__} (")
    assert f"| torch {torch.__version__} |" in done.stdout
    assert done.stdout.count("\n") == 1  # no check-up ran
