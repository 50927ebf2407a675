"""The package's top level: every advertised name is there and documented."""

from __future__ import annotations

import inspect
import re

import pytest

import gpuguide


@pytest.mark.parametrize("name", [n for n in gpuguide.__all__ if n != "__version__"])
def test_public_name_is_exported_and_documented(name):
    value = getattr(gpuguide, name)
    assert value.__module__.split(".")[0] == "gpuguide"
    doc = inspect.getdoc(value) or ""
    assert len(doc.split()) >= 5, f"{name} needs a docstring"


def test_the_version_is_written_once():
    """The version comes from git (setuptools-scm); no file states one."""
    from conftest import ROOT

    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "', text, re.MULTILINE) is None
    assert re.search(r'^dynamic = \["version"\]', text, re.MULTILINE)
    assert re.search(r"^\[tool\.setuptools_scm\]$", text, re.MULTILINE)
    assert re.fullmatch(r"\d+(\.\d+)+(\.dev\d+)?(\+[\w.]+)?", gpuguide.__version__)


def test_the_project_files_are_there_and_agree():
    from conftest import ROOT

    licence = (ROOT / "LICENSE").read_text()
    assert licence.startswith("BSD 3-Clause License\n")
    assert "Copyright (c) 2026, the gpuguide authors" in licence
    assert re.search(
        r'^license = "BSD-3-Clause"$', (ROOT / "pyproject.toml").read_text(), re.M
    )
    cff = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0\n" in cff
    assert "license: BSD-3-Clause\n" in cff
    assert not re.search(r"^version:", cff, re.M)  # the version is written once
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    # the commands it gives are the noxfile's (docs --record, record)
    noxfile = (ROOT / "noxfile.py").read_text()
    assert "nox -s docs -- --record" in contributing
    assert 'parser.add_argument("--record"' in noxfile
    assert "docs/results/" in contributing
    assert "## " in (ROOT / "CHANGELOG.md").read_text()
