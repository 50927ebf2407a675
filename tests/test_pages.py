"""gpuguide_tools.pages: what code measured a page's figures, the pages' GPU
budgets, and which pages a device's recording leaves stale (``--stale``)."""

from __future__ import annotations

import functools
import importlib.util
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import CPU_RECORD, ROOT, build_mini_site

from gpuguide import results
from gpuguide.results import Result
from gpuguide_tools import pages, results_files
from gpuguide_tools.pages import (
    GPU_BUDGET_S,
    budget_problems,
    chapter_pages,
    gpu_budgets,
    helper_modules,
    page_code,
    stale_pages,
)
from gpuguide_tools.results_files import PageRecord, PageRun, ResultsFile


def _helpers(root: Path) -> Path:
    """A tiny helpers package: core, a chapter module, an unrelated module."""
    pkg = root / "gpuguide"
    (pkg / "chapters").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from gpuguide.core import thing\n")
    (pkg / "core.py").write_text("from . import units\nthing = 1\n")
    (pkg / "units.py").write_text('"""Units; see gpuguide.other."""\n')
    (pkg / "other.py").write_text("x = 2\n")
    (pkg / "chapters" / "__init__.py").write_text("")
    (pkg / "chapters" / "cold.py").write_text(
        "from ..core import thing\nPRELOAD = 'gpuguide.chapters.probe'\n"
    )
    (pkg / "chapters" / "probe.py").write_text("")
    return pkg


def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_a_pages_helpers_are_what_it_imports_transitively(tmp_path):
    pkg = _helpers(tmp_path)
    plain = _script(tmp_path / "ex", "plot_plain", "import gpuguide\n")
    cold = _script(tmp_path / "ex", "plot_cold", "from gpuguide.chapters import cold\n")
    names = {p.relative_to(pkg).as_posix() for p in helper_modules(plain, pkg)}
    # A docstring that names a module is no import of it.
    assert names == {"__init__.py", "core.py", "units.py"}
    names = {p.relative_to(pkg).as_posix() for p in helper_modules(cold, pkg)}
    assert names == {
        "__init__.py", "core.py", "units.py", "chapters/__init__.py",
        "chapters/cold.py", "chapters/probe.py",  # named in a string: a preload
    }  # fmt: skip


def test_the_code_digest_changes_with_what_the_page_runs_only(tmp_path):
    pkg = _helpers(tmp_path)
    page = _script(tmp_path / "ex", "plot_plain", "import gpuguide\nprint(1)\n")
    before = page_code(page, pkg)
    (pkg / "other.py").write_text("x = 3\n")  # not imported by the page
    assert page_code(page, pkg) == before
    (pkg / "units.py").write_text("y = 1\n")  # imported through core
    after = page_code(page, pkg)
    assert after.source == before.source
    assert after.helpers != before.helpers
    page.write_text("import gpuguide\nprint(2)\n")
    assert page_code(page, pkg).source != before.source
    # The digest does not depend on where the checkout is.
    copy = tmp_path / "elsewhere"
    copy.mkdir()
    moved = _script(copy / "ex", "plot_plain", page.read_text())
    (copy / "gpuguide").mkdir()
    for path in pkg.rglob("*.py"):
        target = copy / "gpuguide" / path.relative_to(pkg)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    assert page_code(moved, copy / "gpuguide") == page_code(page, pkg)


def test_order_files_declare_each_pages_gpu_seconds(tmp_path):
    chapter = tmp_path / "01_a"
    chapter.mkdir()
    (chapter / "order.txt").write_text(
        "# the order\nplot_b.py   gpu 12 s  # a comment\nplot_a.py\nplot_c.py gpu 2.5s\n"
    )
    assert chapter_pages(chapter) == [
        ("plot_b.py", 12.0),
        ("plot_a.py", None),
        ("plot_c.py", 2.5),
    ]
    (chapter / "order.txt").write_text("plot_b.py  12 seconds\n")
    with pytest.raises(ValueError, match=r"order.txt, line 1: expected"):
        chapter_pages(chapter)


def test_budget_problems_name_what_breaks_the_gpu_budget():
    assert budget_problems({"plot_a": 10.0, "plot_compile_cold_start": 60.0}) == []
    problems = budget_problems(
        {"plot_a": None, "plot_b": 26.0, "plot_compile_cold_start": 61.0}
    )
    assert problems == [
        "plot_a declares no GPU seconds",
        "plot_b declares 26 s, over its 25 s",
        "plot_compile_cold_start declares 61 s, over its 60 s",
    ]
    many = {f"plot_{i}": 25.0 for i in range(13)}
    assert budget_problems(many) == ["the pages declare 325 s in all, over 320 s"]


def test_every_page_of_the_guide_declares_its_gpu_seconds_within_the_budget():
    budgets = gpu_budgets(ROOT / "examples")
    assert len(budgets) == len(list((ROOT / "examples").glob("*/plot_*.py")))
    assert budget_problems(budgets) == []
    assert sum(budgets.values()) <= GPU_BUDGET_S  # type: ignore[arg-type]


def _run(page_source: str, helpers: str, *, date: str, commit: str = "abc1234"):
    return PageRun(
        date=date, torch="2.11.0", source=page_source, helpers=helpers, commit=commit
    )


def test_stale_pages_come_most_stale_first(tmp_path):
    pkg = _helpers(tmp_path)
    ex = tmp_path / "examples" / "01_a"
    scripts = {
        name: _script(ex, name, f"import gpuguide\nprint({name!r})\n")
        for name in ("plot_current", "plot_missing", "plot_old", "plot_older",
                     "plot_failed", "plot_helpers")
    }  # fmt: skip
    code = {name: page_code(path, pkg) for name, path in scripts.items()}

    def current(name, date):
        return _run(code[name].source, code[name].helpers, date=date)

    runs = {
        "plot_current": PageRecord(current("plot_current", "2026-01-01")),
        "plot_old": PageRecord(
            _run("none", code["plot_old"].helpers, date="2026-02-01")
        ),
        "plot_older": PageRecord(
            _run("none", code["plot_older"].helpers, date="2025-01-01")
        ),
        "plot_failed": PageRecord(
            current("plot_failed", "2026-01-01"), current("plot_failed", "2026-03-01")
        ),
        "plot_helpers": PageRecord(
            _run(code["plot_helpers"].source, "none", date="2026-01-05")
        ),
    }
    recording = ResultsFile(CPU_RECORD, (), runs)
    found = stale_pages(sorted(scripts.values()), recording, pkg)
    assert [s.page for s in found] == [
        "plot_missing",
        "plot_failed",
        "plot_older",
        "plot_helpers",
        "plot_old",
    ]
    why = {s.page: s.reason for s in found}
    assert why["plot_missing"] == "not recorded"
    assert why["plot_failed"].startswith("failed at its latest run (2026-03-01")
    assert (
        why["plot_older"] == "recorded at abc1234 (2025-01-01); the page changed since"
    )
    assert why["plot_helpers"].endswith("the helpers it uses changed since")
    # No recording at all: every page is stale; a version 1 file's figures are
    # from unknown code.
    assert len(stale_pages(sorted(scripts.values()), None, pkg)) == len(scripts)
    old = ResultsFile(CPU_RECORD, (Result("plot_current", "n", 1.0, "s"),))
    (first, *_) = stale_pages([scripts["plot_current"]], old, pkg)
    assert first.reason == "recorded before pages named their code"


@functools.cache  # nox registers the sessions once
def _noxfile():
    spec = importlib.util.spec_from_file_location("noxfile", ROOT / "noxfile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_a_stale_build_runs_missing_pages_then_changed_ones_then_the_rest():
    noxfile = _noxfile()
    said = []
    output = (
        "some log line\n"
        "plot_cpu_vs_gpu\tnot recorded\n"
        "plot_roofline\tfailed at its latest run (2026-11-01, abc1234)\n"
        "plot_ddp\trecorded at abc1234 (2026-10-01); the page changed since\n"
    )
    session = SimpleNamespace(
        run=lambda *args, **kwargs: output,
        log=said.append,
        venv_backend="none",
    )
    passes = noxfile._stale_passes(session)
    assert [what for what, _ in passes] == [
        "missing or failed",
        "recorded from other code",
        "up to date",
    ]
    assert passes[0][1] == ["plot_cpu_vs_gpu", "plot_roofline"]
    assert passes[1][1] == ["plot_ddp"]
    every = {p.stem for p in (ROOT / "examples").glob("*/plot_*.py")}
    assert set(passes[2][1]) == every - {"plot_cpu_vs_gpu", "plot_roofline", "plot_ddp"}
    assert said[0] == "stale: plot_cpu_vs_gpu: not recorded"


RECORDS = """
\"\"\"
A page that records
===================
\"\"\"

import gpuguide
open({marker!r}, "a").write("ran\\n")
gpuguide.record("answer", 42.0, unit="s")
"""


@pytest.mark.slow
def test_a_stale_pass_executes_only_the_stale_pages(tmp_path):
    """A site build (about 20 s): the pattern a --stale pass gives runs only
    the pages the results file lacks or recorded from other code."""
    folder = tmp_path / "results"
    chapter = tmp_path / "site" / "examples" / "01_only"
    marks = {name: tmp_path / f"{name}.ran" for name in ("plot_only", "plot_fresh")}
    chapter.mkdir(parents=True)
    fresh = chapter / "plot_fresh.py"
    fresh.write_text(RECORDS.format(marker=str(marks["plot_fresh"])))
    # plot_fresh is recorded from its current code; plot_only is not recorded.
    device = replace(results.current_device(), small=True)  # as the mini site runs
    code = page_code(fresh)
    run = _run(code.source, code.helpers, date="2026-11-01", commit="abc1234")
    figure = Result("plot_fresh", "answer", 1.0, "s")
    results_files.save(
        ResultsFile(device, (figure,), {"plot_fresh": PageRecord(run)}),
        folder / results_files.file_name(device),
    )
    only = RECORDS.format(marker=str(marks["plot_only"]))
    scripts = [fresh, chapter / "plot_only.py"]
    chapter.joinpath("plot_only.py").write_text(only)
    stale = [
        s.page
        for s in stale_pages(
            scripts, results_files.load(folder / results_files.file_name(device))
        )
    ]
    assert stale == ["plot_only"]
    pattern = _noxfile()._pages_pattern(stale)  # as nox -s docs -- --stale builds it
    built = build_mini_site(
        tmp_path / "site", only, "-D", "gpuguide_record=replace",
        "-D", f"sphinx_gallery_conf.filename_pattern={pattern}",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    assert marks["plot_only"].exists()
    assert not marks["plot_fresh"].exists()
    recording = results_files.load(folder / results_files.file_name(device))
    assert {r.page: r.value for r in recording.results} == {
        "plot_fresh": 1.0,  # kept: not executed
        "plot_only": 42.0,
    }
    assert stale_pages(scripts, recording) == []


def test_the_command_line_lists_budgets_and_stale_pages(tmp_path, capsys, monkeypatch):
    assert pages.main(["--examples", str(ROOT / "examples"), "--budgets"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(list((ROOT / "examples").glob("*/plot_*.py")))
    ex = tmp_path / "examples" / "01_a"
    _script(ex, "plot_x", "import gpuguide\n")
    monkeypatch.setattr(results, "current_device", lambda: CPU_RECORD)
    argv = ["--examples", str(tmp_path / "examples"), "--results", str(tmp_path / "r")]
    assert pages.main([*argv, "--stale"]) == 0
    assert capsys.readouterr().out == "plot_x\tnot recorded\n"
