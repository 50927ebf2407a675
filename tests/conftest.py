"""Shared test set-up: the ``gpu`` marker, paths, matplotlib, sample /proc texts, and
the site built once for the whole session."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

# In the guide's own tests (and the pages and builds they run), a rate above a
# datasheet peak is an error, never a flag (gpuguide.env.strict_peaks).
os.environ["GPUGUIDE_STRICT_PEAKS"] = "1"
# ... and a claim a page states that does not hold here fails the page
# (gpuguide.claims.strict): the site build and every page run in the tests.
os.environ["GPUGUIDE_STRICT_CLAIMS"] = "1"

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*/plot_*.py"))
#: Recordings the tests use as fixtures (docs/results holds GPU recordings only).
DATA = Path(__file__).resolve().parent / "data"
# The docs build's hooks (not part of the package) are tested too.
sys.path.insert(0, str(ROOT / "docs" / "_ext"))

#: /proc/cpuinfo samples. x86: two sockets x 2 cores x 2 hyper-threads, so 8
#: logical CPUs and 4 physical cores.
CPUINFO_X86 = "\n\n".join(
    f"processor\t: {cpu}\n"
    "vendor_id\t: GenuineIntel\n"
    "model name\t: Intel(R) Xeon(R)   Platinum 8375C CPU @ 2.90GHz\n"
    f"physical id\t: {cpu // 4}\n"
    f"core id\t\t: {cpu % 2}\n"
    "cpu cores\t: 2"
    for cpu in range(8)
)
CPUINFO_ARM = (
    "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"
    "processor\t: 1\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"
)
CPUINFO_PI = "processor\t: 0\nmodel name\t: ARMv7 Processor rev 3 (v7l)\n\nHardware\t: BCM2835\nModel\t: Raspberry Pi 4\n"
CPUINFO_PPC = "processor\t: 0\ncpu\t\t: POWER9, altivec supported\nclock\t\t: 2.3GHz\n"

#: A measured number with its unit, as the examples print them.
MEASURED = re.compile(
    r"\d+(\.\d+)?\s*(ns|us|ms|s|[kMGT]?B/s|[MGT]?FLOP/s|[kM]?samples/s|[KMG]iB|x|%)"
    r"(?!\w)"
)

#: Torch's own log and warning lines, which must never reach a page: autotune
#: tables, C++ source locations, glog-style log lines, profiler and DataLoader
#: notices. Each alternative was seen on a page of a real GPU build.
TORCH_LOG = re.compile(
    r"AUTOTUNE |Autotune Choices Stats|\(Triggered internally at "
    r"|TypedStorage is deprecated|Profiler clears events"
    r"|DataLoader worker \(pid|killed by signal"
    r"|^(\[rank\d+\]:)?[IWEF]\d{4} \d\d:\d\d:\d\d",
    re.MULTILINE,
)

#: The repr of a value left as a cell's last expression, which sphinx-gallery (and
#: Jupyter) print: ``Result(page=..., config=mappingproxy({}), ...)`` from a
#: ``gpuguide.record(...)``, or a default ``<module.Class object at 0x7f...>``.
STRAY_REPR = re.compile(
    r"\bResult\(|\bmappingproxy\(|<[\w.]+ object at 0x[0-9a-fA-F]+>"
    # ... and the repr of a helper object or dataclass printed instead of text
    r"|<(Measurement|Peaks|Rate|Comparison) |\btorch\.Size\(|\bClaim\(text="
    r"|\b[A-Z]\w*(Config|Shape|Info|Record)\(\w+="
    # ... and a string left as a cell's last value, quotes and \n escapes shown
    r"|^(?P<quote>['\"])[^\n]*\\n[^\n]*(?P=quote)$",
    re.MULTILINE,
)
#: A share above 100% ("257% of a large copy_"): a page compares with a
#: reference its figure cannot exceed, or it has picked the wrong one.
SHARE_ABOVE_100 = re.compile(r"(?<![\d.])(\d{3,}(?:\.\d+)?)% of\b")

#: A reference to the texts the guide was written from, which readers do not have:
#: "Seed 004 says", "(seed 002 says ~10 us)", "as the seeds say". Random seeds
#: (``torch.manual_seed``, "seeded the same way") are not references.
SEED_REFERENCE = re.compile(
    r"\bseeds?[ /]?\d{3}|\bthe seeds\b|\bseeds? (say|says|quote|quotes)\b"
    r"|\bsource texts?\b",
    re.IGNORECASE,
)


def pytest_addoption(parser: pytest.Parser, pluginmanager: pytest.PytestPluginManager):
    """Without pytest-timeout (an interpreter that has only pytest), accept its
    setting in pyproject.toml, so that ``--strict-config`` passes; no timeout then."""
    if not pluginmanager.hasplugin("timeout"):
        parser.addini("timeout", "seconds per test (pytest-timeout is not installed)")


#: Terminal colours, which Sphinx writes into its log when it thinks it may (CI).
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def failing_examples(log: str) -> set[str]:
    """The pages a Sphinx build's log names as failing examples (sphinx-gallery's
    "plot_x.py failed leaving traceback" and "... unexpectedly failed")."""
    plain = ANSI.sub("", log)
    found = re.finditer(r"(plot_\w+)\.py\s+(?:unexpectedly )?failed", plain)
    return {m[1] for m in found}


#: A file the docs build's hooks append each executed page's name to
#: (``gallery_hooks``): the count of page executions in one pytest run.
EXECUTED_LOG_ENV = "GPUGUIDE_EXECUTED_LOG"


def _shared_scratch(name: str) -> Path:
    """A folder shared by this run's processes (the builds it starts inherit
    the environment set here)."""
    variable = f"GPUGUIDE_TEST_{name.upper()}"
    if not os.environ.get(variable):
        os.environ[variable] = tempfile.mkdtemp(prefix=f"gpuguide-{name}-")
    return Path(os.environ[variable])


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.hasplugin("timeout"):
        config.addinivalue_line(
            "markers", "timeout(seconds): pytest-timeout's limit (not installed here)"
        )
    # One wheel for the whole run: every site a test builds takes it from here.
    os.environ.setdefault("GPUGUIDE_WHEEL_CACHE", str(_shared_scratch("wheels")))
    os.environ.setdefault(
        EXECUTED_LOG_ENV, str(_shared_scratch("executed") / "pages.txt")
    )


def executed_pages() -> list[str]:
    """The guide's pages executed so far in this run, once per execution."""
    log = Path(os.environ.get(EXECUTED_LOG_ENV, "") or os.devnull)
    names = log.read_text().split() if log.is_file() else []
    guide = {script.stem for script in EXAMPLES}
    return [name for name in names if name in guide]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line: how many of the guide's pages ran in this run, and how often."""
    if hasattr(terminalreporter.config, "workerinput"):  # an xdist worker
        return
    runs = executed_pages()
    again = sorted({name for name in runs if runs.count(name) > 1})
    line = (
        f"gpuguide: {len(runs)} page execution(s) in this run, "
        f"{len(set(runs))} of the guide's {len(EXAMPLES)} pages"
    )
    line += f"; more than once: {', '.join(again)}" if again else ", each once"
    terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run that executes one of the guide's pages twice fails: each page runs
    once per run, in the session's site build (tests/test_docs_build.py)."""
    if hasattr(session.config, "workerinput"):
        return
    runs = executed_pages()
    if len(runs) != len(set(runs)) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Run the tests of the session's site last (its build runs beside the
    others: :func:`pytest_collection_finish`), and skip tests marked ``gpu``
    cleanly when CUDA is not available."""
    items.sort(key=_uses_the_site)  # stable: the others keep their order
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clean_matplotlib() -> Iterator[None]:
    """Every test starts from the default rcParams and leaves no figure open."""
    with mpl.rc_context():
        yield
    plt.close("all")


@pytest.fixture
def ax() -> plt.Axes:
    """Fresh axes on a new figure."""
    return plt.subplots()[1]


#: The fake GPU whose recording the site build shows beside the CPU's.
FAKE_GPU = {
    "kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "short_name": "Fake H100",
    "cuda": "12.8", "driver": "570.86",
}  # fmt: skip


#: The session's site build, started as soon as the tests are collected (a
#: subprocess beside the other tests): its folder, process and log files.
_SITE_BUILD: dict[str, Any] = {}

#: The longest a site build may take (a slow or busy machine), in seconds.
SITE_BUILD_TIMEOUT_S = 1800


def _start_site_build(work: Path) -> None:
    """Start building the whole site at small sizes in ``work`` (a copy of
    ``docs/``, ``examples/`` and ``src/``, so the reader's own build is never
    touched), without waiting for it."""
    shutil.copytree(
        ROOT / "docs",
        work / "docs",
        ignore=shutil.ignore_patterns(
            "_build", "auto_examples", "sg_execution_times.rst"
        ),
    )
    shutil.copytree(ROOT / "examples", work / "examples")
    shutil.copytree(ROOT / "src", work / "src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):  # the site's wheel
        shutil.copy2(ROOT / name, work / name)
    # The recorded results, and a fake GPU recording made from a CPU's
    # (tests/data: a recording of every page, of schema version 1), as a
    # CPU-only build would show a real one.
    results = work / "results"
    shutil.copytree(ROOT / "docs" / "results", results)
    data = json.loads((DATA / "cpu-recording.json").read_text())
    data["device"].pop("isa", None)  # a CPU's vector ISA; no GPU has one
    data["device"].update(FAKE_GPU)
    (results / "cuda-fake-h100.json").write_text(json.dumps(data))
    env = {
        **os.environ, "GPUGUIDE_SMALL": "1", "MPLBACKEND": "Agg",
        "GPUGUIDE_RESULTS_DIR": str(results),
        # a local build: no site address (test_docs_build checks what that gives)
        "GPUGUIDE_SITE_URL": "", "GPUGUIDE_PUBLISH": "",
    }  # fmt: skip
    # Files, not pipes: nobody reads the log until the build ends.
    out, err = (work / "build.stdout").open("w"), (work / "build.stderr").open("w")
    process = subprocess.Popen(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going",
         str(work / "docs"), str(work / "html")],
        env=env, stdout=out, stderr=err, text=True,
    )  # fmt: skip
    _SITE_BUILD.update(work=work, process=process, logs=(out, err))


def _uses_the_site(item: pytest.Item) -> bool:
    """Whether a test uses this file's session ``site`` (not a module's own)."""
    defs = getattr(item, "_fixtureinfo", None)
    found = defs.name2fixturedefs.get("site", ()) if defs is not None else ()
    return bool(found) and getattr(found[-1].func, "__module__", None) == __name__


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the site build as soon as a collected test needs it, so that it
    runs beside the other tests (which run first: the site's tests are last)."""
    if "work" in _SITE_BUILD or not any(map(_uses_the_site, session.items)):
        return
    factory = session.config._tmp_path_factory  # type: ignore[attr-defined]
    _start_site_build(factory.mktemp("site"))


@pytest.fixture(scope="session")
def site(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """The whole site built once, at small sizes, every page executed once: its
    output folder and the build's result, whose output is the build log a
    reader sees (test_docs_build.py, test_browser.py and test_intersphinx.py
    share it). The build starts when the tests are collected and runs beside
    the other tests (:func:`pytest_collection_finish`); the first test that
    needs it waits for the rest of it (several minutes on two cores: the
    suite's longest wait, hence ``slow`` on those tests).
    """
    if "work" not in _SITE_BUILD:  # a run that started no build: build it now
        _start_site_build(tmp_path_factory.mktemp("site"))
    work, process = _SITE_BUILD["work"], _SITE_BUILD["process"]
    try:
        process.wait(timeout=SITE_BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for log in _SITE_BUILD["logs"]:
        log.close()
    result = subprocess.CompletedProcess(
        process.args,
        process.returncode,
        (work / "build.stdout").read_text(),
        (work / "build.stderr").read_text(),
    )
    return work / "html", result


def build_mini_site(root: Path, example_code: str, *sphinx_args: str, **extra_env: str):
    """Build a site with the project's configuration and one example, at small
    sizes (``root/html``), with ``sphinx_args`` added to sphinx's command line;
    returns sphinx's completed process."""

    docs, chapter = root / "docs", root / "examples" / "01_only"
    chapter.mkdir(parents=True, exist_ok=True)  # again: an incremental build
    docs.mkdir(exist_ok=True)
    (docs / "conf.py").write_text(
        f"__file__ = {str(ROOT / 'docs' / 'conf.py')!r}\n"
        f"exec(compile(open(__file__).read(), __file__, 'exec'))\n"
        f"sphinx_gallery_conf['examples_dirs'] = [{str(root / 'examples')!r}]\n"
        f"ARTIFACTS = Path({str(root / 'artifacts')!r})\n"
        f"os.environ['GPUGUIDE_ARTIFACT_DIR'] = str(ARTIFACTS)\n"
    )
    (docs / "index.rst").write_text(
        "Mini\n====\n\n.. toctree::\n\n   auto_examples/index\n"
    )
    (root / "examples" / "GALLERY_HEADER.rst").write_text("Gallery\n=======\n")
    (chapter / "GALLERY_HEADER.rst").write_text("Only\n----\n")
    (chapter / "plot_only.py").write_text(example_code)
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q",
         str(docs), str(root / "html"), *sphinx_args],
        env={**os.environ, "GPUGUIDE_SMALL": "1", **extra_env}, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def _device_records():
    from gpuguide.results import DeviceRecord

    h100 = DeviceRecord(
        name="NVIDIA H100 80GB HBM3", short_name="H100 SXM5", kind="cuda",
        torch="2.11.0", cuda="12.8", driver="570.86",
        date="2025-06-01T12:00:00+00:00",
    )  # fmt: skip
    cpu = DeviceRecord(
        name="Intel Xeon", short_name="CPU: Intel Xeon, 2 threads", kind="cpu",
        torch="2.13.0+cpu", cuda=None, driver=None, date="2025-06-02T12:00:00+00:00",
    )  # fmt: skip
    return h100, cpu


#: Provenance of a results file from an H100 and from a CPU, for the tests of
#: recorded results (with ``dataclasses.replace`` for peaks or small mode).
H100_RECORD, CPU_RECORD = _device_records()


@pytest.fixture
def fresh_results(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No recording file, no results folder, nothing recorded before."""
    from gpuguide import results

    monkeypatch.delenv("GPUGUIDE_RECORD", raising=False)
    monkeypatch.delenv("GPUGUIDE_RESULTS_DIR", raising=False)
    results.recorded(clear=True)
    yield
    results.recorded(clear=True)
