"""Recorded results: recording, the file format, strict loading, a folder of files,
and the JSON Schema the site publishes."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import replace
from importlib import resources

import jsonschema
import pytest
from conftest import CPU_RECORD, DATA, H100_RECORD, ROOT

import gpuguide
from gpuguide import results
from gpuguide.device import DeviceInfo
from gpuguide.results import SCHEMA_VERSION, DeviceRecord, Result
from gpuguide.timing import Measurement, Rate
from gpuguide.verdicts import compare
from gpuguide.version import version_label
from gpuguide_tools import results_files
from gpuguide_tools.results_files import ResultsFile, ResultsFileError

H100 = H100_RECORD
CPU = CPU_RECORD


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    monkeypatch.delenv("GPUGUIDE_RECORD", raising=False)
    results.recorded(clear=True)
    yield
    results.recorded(clear=True)


def _record(page, *args, **kwargs):
    """``results.record`` as run by the script ``page``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(results, "_default_page", lambda: page)
        return results.record(*args, **kwargs)


def _file(**overrides):
    """A valid results file's JSON object, with top-level keys overridden."""
    data = {
        "schema": SCHEMA_VERSION,
        "device": H100.to_json(),
        "results": [
            {
                "page": "plot_dtypes",
                "name": "best bf16 matmul",
                "value": 6.5e14,
                "unit": "FLOP/s",
                "spread": {"q25": 6.4e14, "q75": 6.6e14},
                "config": {"size": 8192, "dtype": "bfloat16", "compiled": False},
                "runs": 1,
            }
        ],
    }
    data.update(overrides)
    return data


def _write(tmp_path, data, name="h100.json"):
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _raw_value(literal):
    """A file's text whose first value is ``literal``, written as is."""
    text = json.dumps(_file(results=[_entry(value="VALUE")]))
    return text.replace('"VALUE"', literal)


def _entry(**overrides):
    entry = dict(_file()["results"][0])
    entry.update(overrides)
    return entry


# -- recording ---------------------------------------------------------------------


def test_record_keeps_values_in_memory_when_not_recording(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = _record("plot_copy", "copy", 1.5e12, unit="B/s", size=1024)
    assert results.recorded() == (r,)
    assert (r.page, r.name, r.value, r.unit, r.spread) == (
        "plot_copy",
        "copy",
        1.5e12,
        "B/s",
        None,
    )
    assert (r.size, dict(r.config)) == (1024, {})  # a size does not identify
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert results.recorded(clear=True) == (r,)  # returned, then forgotten
    assert results.recorded() == ()


def test_record_takes_a_measurement_as_median_and_quartiles():
    m = Measurement("mm", (1.0, 2.0, 3.0, 4.0, 5.0), "cpu", "wall-clock")
    r = _record("plot_mm", "matmul time", m, dtype="float32")
    assert (r.value, r.unit, r.spread) == (3.0, "s", (2.0, 4.0))
    with pytest.raises(ValueError, match=r"unit must be 's'.*got 'FLOP/s'"):
        _record("plot_mm", "x", m, unit="FLOP/s")
    with pytest.raises(ValueError, match="spread must be omitted"):
        _record("plot_mm", "x", m, spread=(1.0, 2.0))


def test_record_takes_a_rate_and_a_comparison_with_their_unit_and_spread():
    rate = Rate(4.1e13, "FLOP/s", 4.0e13, 4.2e13)
    r = _record("plot_mm", "fp32 matmul", rate, size=8192)
    assert (r.value, r.unit, r.spread, r.size) == (
        4.1e13,
        "FLOP/s",
        (4.0e13, 4.2e13),
        8192,
    )
    assert _record("p", "same", rate, unit="FLOP/s").unit == "FLOP/s"
    with pytest.raises(ValueError, match=r"unit must be 'FLOP/s'.*Rate, got 'B/s'"):
        _record("p", "x", rate, unit="B/s")
    fast = Measurement("fast", (1.0, 1.0, 1.0, 1.0), "cpu", "wall-clock")
    slow = Measurement("slow", (2.0, 2.0, 3.0, 3.0), "cpu", "wall-clock")
    c = compare(fast, slow)
    r = _record("p", "speed-up", c)
    assert (r.value, r.unit, r.spread) == (c.speedup, "x", (c.low, c.high))
    with pytest.raises(ValueError, match="spread must be omitted for a Comparison"):
        _record("p", "x", c, spread=(1.0, 2.0))


def test_recording_the_same_figure_again_replaces_it():
    _record("p", "a", 1.0, unit="s", n=1)
    _record("p", "a", 1.0, unit="s", n=2)
    _record("p", "a", 3.0, unit="s", n=1)
    assert [(r.value, r.config["n"]) for r in results.recorded()] == [
        (1.0, 2),
        (3.0, 1),
    ]
    # at another size it is still the same figure; sweep points differ by x
    _record("p", "a", 4.0, unit="s", n=1, size=64)
    _record("p", "a", 5.0, unit="s", n=1, x=2.0)
    assert [(r.value, r.size, r.x) for r in results.recorded()] == [
        (1.0, None, None),
        (4.0, 64, None),
        (5.0, None, 2.0),
    ]


def test_size_x_and_peak_round_trip_and_are_checked(tmp_path):
    r = Result("p", "rate", 1e12, "FLOP/s", size="64x64x64", x=4, peak="bf16")
    back = results_files.loads(
        results_files.dumps(results_files.ResultsFile(H100, (r,)))
    )
    assert back.results == (r,)
    assert back.results[0].x == 4.0
    with pytest.raises(ValueError, match=r"result: /peak: 'hbm' is not one of"):
        Result("p", "rate", 1.0, "B/s", peak="hbm")
    with pytest.raises(ValueError, match=r"/x: inf is not of type 'number'"):
        Result("p", "rate", 1.0, "B/s", x=float("inf"))
    with pytest.raises(ValueError, match=r"/size: \[1, 2\] is not of type"):
        Result("p", "rate", 1.0, "B/s", size=[1, 2])  # type: ignore[arg-type]


def test_the_page_defaults_to_the_running_script(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/x/examples/05_dtypes/plot_alignment.py"])
    assert results.record("a", 1.0, unit="s").page == "plot_alignment"
    monkeypatch.setattr(sys, "argv", ["-c"])
    monkeypatch.delattr(sys.modules["__main__"], "__file__", raising=False)
    with pytest.raises(ValueError, match="no running script"):
        results.record("a", 1.0, unit="s")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "", "value": 1.0, "unit": "s"}, "/name: '' does not match"),
        ({"name": "a", "value": float("nan"), "unit": "s"}, "/value: nan is not of"),
        ({"name": "a", "value": float("inf"), "unit": "s"}, "/value: inf is not of"),
        ({"name": "a", "value": True, "unit": "s"}, "/value: True is not of"),
        ({"name": "a", "value": "1", "unit": "s"}, "/value: '1' is not of"),
        ({"name": "a", "value": 1.0}, "unit must be given"),
        ({"name": "a", "value": 1.0, "unit": " "}, "/unit: ' ' does not match"),
        (
            {"name": "a", "value": 1.0, "unit": "s", "spread": (2.0, 1.0)},
            "q25 <= q75",
        ),
        (
            {"name": "a", "value": 1.0, "unit": "s", "shape": (1, 2)},
            r"/config/shape: \(1, 2\) is not of type 'string', 'integer'",
        ),
        (
            {"name": "a", "value": 1.0, "unit": "s", "ratio": float("nan")},
            "/config/ratio: nan is not of type",
        ),
    ],
)
def test_record_rejects_bad_figures(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _record("p", **kwargs)
    assert results.recorded() == ()


def test_recording_writes_this_process_figures_into_the_file(tmp_path, monkeypatch):
    path = tmp_path / "sub" / "h100.json"
    path.parent.mkdir()
    path.write_text("not this process's")  # the file is the process's own: replaced
    monkeypatch.setenv("GPUGUIDE_RECORD", str(path))
    monkeypatch.setattr(results, "current_device", lambda: H100)
    _record("plot_launch", "old", 1.0, unit="s")
    _record("plot_copy", "copy", 2.0e12, unit="B/s")
    _record("plot_launch", "old", 3.0, unit="s")  # replaces the first
    saved = results_files.load(path)
    assert saved.device == H100
    assert [(r.page, r.name, r.value) for r in saved.results] == [
        ("plot_copy", "copy", 2.0e12),
        ("plot_launch", "old", 3.0),
    ]
    assert [p.name for p in path.parent.iterdir()] == ["h100.json"]  # no temp left


def test_device_record_from_a_device_info():
    info = DeviceInfo(
        type="cuda",
        name="NVIDIA H200",
        variant="H200 SXM",
        index=0,
        sm_count=132,
        total_memory_bytes=150_000_000_000,
        compute_capability=(9, 0),
        torch_version="2.11.0",
        cuda_version="12.8",
        driver_version="570.86",
        cpu_model="Xeon",
        cpu_cores=16,
        cpu_threads=16,
        torch_threads=16,
        python_version="3.12.0",
    )
    device = DeviceRecord.from_info(info, peaks={"bf16 matmul": 9.9e14})
    assert (device.short_name, device.kind, device.cuda, device.driver) == (
        "H200 SXM",
        "cuda",
        "12.8",
        "570.86",
    )
    assert device.peaks == {"bf16 matmul": 9.9e14}
    assert (device.gpuguide, device.commit, device.dirty) == (
        gpuguide.__version__,
        None,
        False,
    )
    assert device.isa is None  # a GPU's host ISA is not what decides its speed
    text = json.dumps({**_file(), "device": device.to_json()})
    assert results_files.loads(text).device == device
    cpu = replace(
        info, type="cpu", name="AMD EPYC", cpu_model="AMD EPYC", cpu_threads=2,
        cpu_isa="AVX-512 BF16", gpuguide_commit="f4b16f4", gpuguide_dirty=True,
    )  # fmt: skip
    record = DeviceRecord.from_info(cpu)
    assert record.short_name == "CPU: AMD EPYC, 2 threads, AVX-512 BF16"
    assert (record.isa, record.commit, record.dirty) == (
        "AVX-512 BF16",
        "f4b16f4",
        True,
    )
    assert (
        version_label(record.gpuguide, record.commit, record.dirty)
        == f"gpuguide {gpuguide.__version__} (f4b16f4+dirty)"
    )
    saved = results_files.loads(json.dumps({**_file(), "device": record.to_json()}))
    assert saved.device == record
    assert record.to_json()["isa"] == "AVX-512 BF16"


def test_the_committed_results_files_load_with_their_provenance():
    h100 = results_files.load(ROOT / "docs" / "results" / "cuda-h100-sxm5.json").device
    # A GPU recording names the helpers' version and a commit, from a clean tree.
    assert re.fullmatch(r"\d+\.\d+[.\w+]*", h100.gpuguide or "")
    assert re.fullmatch(r"[0-9a-f]{7,40}", h100.commit or "")
    assert (
        version_label(h100.gpuguide, h100.commit, h100.dirty)
        == f"gpuguide {h100.gpuguide} ({h100.commit})"
    )
    # A CPU's recording of another machine is a test fixture, not the site's.
    assert not list((ROOT / "docs" / "results").glob("cpu-*.json"))
    for path in (ROOT / "docs" / "results").glob("*.json"):
        recording = results_files.load(path)
        assert recording.device.kind != "cpu"
        assert recording.device.host  # what its host-CPU figures ran on
        assert set(recording.pages_run) == set(recording.pages)  # each names its code
    cpu = results_files.load(DATA / "cpu-recording-no-isa.json").device
    # Recorded before versions and ISAs were: unknown, and another identity than
    # the same model and threads recorded with its ISA.
    assert (cpu.gpuguide, cpu.commit, cpu.isa) == (None, None, None)
    assert (
        version_label(cpu.gpuguide, cpu.commit, cpu.dirty) == "gpuguide version unknown"
    )
    with_isa = replace(cpu, short_name=f"{cpu.short_name}, AVX2", isa="AVX2")
    assert results_files.device_key(with_isa) != results_files.device_key(cpu)


def test_a_file_without_the_newer_device_fields_reads_as_unknown():
    newer = ("isa", "gpuguide", "commit", "dirty")
    old = {k: v for k, v in CPU.to_json().items() if k not in newer}
    device = results_files.loads(json.dumps(_file(device=old))).device
    assert (device.isa, device.gpuguide, device.commit, device.dirty) == (
        None, None, None, False,
    )  # fmt: skip
    assert device == CPU


# -- the file format ---------------------------------------------------------------


def test_a_file_round_trips(tmp_path):
    original = results_files.loads(json.dumps(_file()))
    path = results_files.save(original, tmp_path / "h100.json")
    assert results_files.load(path) == original
    assert results_files.loads(results_files.dumps(original)) == original
    (result,) = original.results
    assert result.spread == (6.4e14, 6.6e14)
    assert dict(result.config) == {"size": 8192, "dtype": "bfloat16", "compiled": False}
    assert original.for_page("plot_dtypes") == (result,)
    assert original.for_page("plot_other") == ()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(json.dumps(_file())[:-20], r"not valid JSON \(line 1, column", id="truncated"),
        pytest.param("", "not valid JSON", id="empty"),
        pytest.param("[1, 2]", r": \[1, 2\] is not of type 'object'", id="not-object"),
        pytest.param({"device": {}, "results": []}, "'schema' is a required property", id="no-schema"),
        pytest.param(_file(schema=4), r"/schema: 4 is not one of \[1, 2, 3\]", id="newer-schema"),
        pytest.param(_file(schema="1"), r"/schema: '1' is not one of", id="schema-string"),
        pytest.param(_file(schema=True), r"/schema: True is not one of", id="schema-bool"),
        pytest.param(_file(extra=1), r"Additional properties .*'extra' was unexpected", id="foreign-top-key"),
        pytest.param({"schema": 1, "results": []}, "'device' is a required property", id="no-device"),
        pytest.param(_file(device={**H100.to_json(), "date": None}), "/device/date: None is not of type 'string'", id="device-date-null"),
        pytest.param(_file(device={k: v for k, v in H100.to_json().items() if k != "torch"}), "/device: 'torch' is a required property", id="device-missing-field"),
        pytest.param(_file(device={**H100.to_json(), "kind": "tpu"}), r"/device/kind: 'tpu' is not one of \['cuda', 'cpu', 'mps'\]", id="device-kind"),
        pytest.param(_file(device={**H100.to_json(), "date": "yesterday"}), "/device/date: 'yesterday' does not match", id="device-date"),
        pytest.param(_file(device={**H100.to_json(), "fan": "x"}), r"/device: Additional properties .*'fan' was unexpected", id="device-foreign-key"),
        pytest.param(_file(device={**H100.to_json(), "gpuguide": "0.1.0", "commit": "f4b16g4"}), "/device/commit: 'f4b16g4' does not match", id="commit-not-hex"),
        pytest.param(_file(device={**H100.to_json(), "gpuguide": "0.1.0", "commit": 4}), "/device/commit: 4 is not of type 'string', 'null'", id="commit-number"),
        pytest.param(_file(device={**H100.to_json(), "commit": "f4b16f4"}), r"/device/commit: None was expected \(a commit needs the gpuguide version", id="commit-without-version"),
        pytest.param(_file(device={**H100.to_json(), "gpuguide": ""}), "/device/gpuguide: '' does not match", id="version-empty"),
        pytest.param(_file(device={**H100.to_json(), "gpuguide": "0.1.0", "commit": "f4b16f4", "dirty": "yes"}), "/device/dirty: 'yes' is not of type 'boolean'", id="dirty-string"),
        pytest.param(_file(device={**H100.to_json(), "gpuguide": "0.1.0", "dirty": True}), r"/device/dirty: False was expected \(dirty is false while the commit is unknown\)", id="dirty-without-commit"),
        pytest.param(_file(device={**H100.to_json(), "isa": "AVX2"}), r"/device/isa: None was expected \(isa is a CPU's, in a cpu record only\)", id="isa-on-a-gpu"),
        pytest.param(_file(device={**CPU.to_json(), "isa": ""}), "/device/isa: '' does not match", id="isa-empty"),
        pytest.param(_file(device={**CPU.to_json(), "gpu": {}}), r"/device/gpu: \{\} was expected|/device/gpu: None was expected \(NVML's facts of a CUDA GPU", id="gpu-on-a-cpu"),
        pytest.param(_file(results={}), r"/results: \{\} is not of type 'array'", id="results-not-list"),
        pytest.param(_file(results=[_entry(value="fast")]), "/results/0/value: 'fast' is not of type 'number'", id="value-string"),
        pytest.param(_file(results=[_entry(value=True)]), "/results/0/value: True is not of type 'number'", id="value-bool"),
        pytest.param(_file(results=[_entry(value=None)]), "/results/0/value: None is not of type 'number'", id="value-null"),
        pytest.param(_raw_value("NaN"), "NaN is not a number JSON allows", id="value-nan"),
        pytest.param(_raw_value("1e999"), "/results/0/value: inf is not of type 'number'", id="value-overflow"),
        pytest.param(_file(results=[_entry(spread={"q25": 2.0, "q75": 1.0})]), r"/results/0: spread must have q25 <= q75", id="spread-inverted"),
        pytest.param(_file(results=[_entry(spread={"q25": 1.0})]), "/results/0/spread: 'q75' is a required property", id="spread-incomplete"),
        pytest.param(_file(results=[_entry(config={"shape": [1, 2]})]), r"/results/0/config/shape: \[1, 2\] is not of type", id="config-list"),
        pytest.param(_file(results=[_entry(runs=0)]), "/results/0/runs: 0 is less than the minimum of 1", id="runs-zero"),
        pytest.param(_file(results=[{"page": "p", "name": "n", "unit": "s"}]), "/results/0: 'value' is a required property", id="result-missing"),
        pytest.param(_file(results=[_entry(note="x")]), r"/results/0: Additional properties .*'note' was unexpected", id="result-foreign-key"),
        pytest.param(_file(results=[_entry(), _entry(value=1.0)]), r"/results/1 repeats /results/0", id="duplicate"),
        pytest.param(_file(pages={"p/a": {"recorded": None, "failed": None}}), r"/pages/p~1a/failed: None is not of type 'object' \(.* needs a recorded run, a failed one, or both", id="page-without-runs"),
        pytest.param(_file(claims={"p": [{"text": "t", "outcome": "held", "measured": "1"}] * 2}), r"/claims/p: claims each stated once", id="claim-twice"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_with_its_name_and_problem(tmp_path, data, problem):
    path = _write(tmp_path, data)
    with pytest.raises(ResultsFileError) as info:
        results_files.load(path)
    message = str(info.value)
    assert message.startswith(f"results file {path}: ")
    assert re.search(problem, message), message


def test_a_missing_file_is_refused_with_its_name(tmp_path):
    path = tmp_path / "absent.json"
    with pytest.raises(ResultsFileError, match=f"{path}: cannot be read"):
        results_files.load(path)


def test_results_file_error_is_a_value_error():
    assert issubclass(ResultsFileError, ValueError)


# -- a folder of files -----------------------------------------------------------------


def _save(folder, device, *found, name=None):
    path = folder / (name or results_files.file_name(device))
    return results_files.save(ResultsFile(device=device, results=found), path)


def test_file_name_is_kind_and_short_name():
    assert results_files.file_name(H100) == "cuda-h100-sxm5.json"
    assert results_files.file_name(CPU) == "cpu-intel-xeon-2-threads.json"
    # A CPU's file names what decides its speed: threads and vector ISA.
    avx2 = replace(CPU, short_name="CPU: Intel Xeon, 2 threads, AVX2", isa="AVX2")
    assert results_files.file_name(avx2) == "cpu-intel-xeon-2-threads-avx2.json"
    # Re-recording a device (another date, torch) lands in the same file.
    again = replace(H100, date="2026-01-01T00:00:00+00:00", torch="2.15")
    assert results_files.file_name(again) == results_files.file_name(H100)


def test_load_dir_of_a_missing_or_empty_folder(tmp_path):
    with pytest.raises(
        ResultsFileError, match=r"results folder .*nope: does not exist"
    ):
        results_files.load_dir(tmp_path / "nope")
    (tmp_path / "file").write_text("{}")
    with pytest.raises(ResultsFileError, match="not a folder"):
        results_files.load_dir(tmp_path / "file")
    (tmp_path / "README.txt").write_text("not a results file")
    assert results_files.load_dir(tmp_path) == {}


def test_load_dir_reads_every_file_in_name_order(tmp_path):
    b = _save(tmp_path, H100, Result("p", "a", 2.0, "s"))
    a = _save(tmp_path, CPU, Result("p", "a", 3.0, "s"))
    loaded = results_files.load_dir(str(tmp_path))
    assert list(loaded) == [a, b]  # cpu-... before cuda-...
    assert [f.results[0].value for f in loaded.values()] == [3.0, 2.0]


def test_load_dir_refuses_two_files_of_one_device_and_names_a_bad_file(tmp_path):
    first = _save(tmp_path, H100, Result("p", "a", 1.0, "s"), name="a.json")
    later = replace(H100, date="2026-01-01T00:00:00+00:00")
    _save(tmp_path, later, Result("p", "a", 1.0, "s"), name="b.json")
    with pytest.raises(ResultsFileError, match=r"b\.json: holds H100 SXM5") as error:
        results_files.load_dir(tmp_path)
    assert str(first) in str(error.value)  # names the other file too
    (tmp_path / "b.json").unlink()
    bad = tmp_path / "truncated.json"
    bad.write_text(
        results_files.dumps(ResultsFile(CPU, (Result("p", "a", 1.0, "s"),)))[:60]
    )
    with pytest.raises(ResultsFileError) as error:
        results_files.load_dir(tmp_path)
    assert str(error.value).startswith(f"results file {bad}: is not valid JSON")


# -- the JSON Schema -------------------------------------------------------------------

SCHEMA = json.loads((ROOT / "docs" / "_static" / "results.schema.json").read_text())


def _schema_errors(data, schema=SCHEMA):
    """What ``data`` breaks of the published schema, as ``jsonschema`` says it."""
    validator = jsonschema.Draft202012Validator(schema)
    return [error.message for error in validator.iter_errors(data)]


def test_the_site_publishes_the_schema_the_package_reads():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    shipped = resources.files("gpuguide").joinpath("results.schema.json")
    assert json.loads(shipped.read_text()) == SCHEMA
    assert max(SCHEMA["properties"]["schema"]["enum"]) == SCHEMA_VERSION


COMMITTED = sorted((ROOT / "docs" / "results").glob("*.json"))


@pytest.mark.parametrize(
    "path", [*COMMITTED, *sorted(DATA.glob("*.json"))], ids=lambda p: p.name
)
def test_the_committed_files_follow_the_published_schema(path):
    assert COMMITTED  # the site's own files are among them
    assert _schema_errors(json.loads(path.read_text())) == []
    assert results_files.load(path).device.name


@pytest.mark.parametrize(
    "data",
    [
        _file(schema=4),
        _file(extra=1),
        _file(device={**H100.to_json(), "kind": "tpu"}),
        _file(device={k: v for k, v in H100.to_json().items() if k != "torch"}),
        _file(results=[_entry(value="fast")]),
        _file(results=[_entry(spread={"q25": 1.0})]),
        _file(results=[_entry(config={"shape": [1, 2]})]),
        _file(results=[_entry(runs=0)]),
        _file(results=[_entry(note="x")]),
        _file(results=[_entry(peak="hbm")]),
    ],
)
def test_the_schema_refuses_what_load_refuses(data, tmp_path):
    assert _schema_errors(data)
    with pytest.raises(ResultsFileError):
        results_files.load(_write(tmp_path, data))
