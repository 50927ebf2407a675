"""The package's top level: every advertised name is there and documented."""

from __future__ import annotations

import inspect
import re

import pytest

import gpuguide


@pytest.mark.parametrize("name", [n for n in gpuguide.__all__ if n != "__version__"])
def test_public_name_is_exported_and_documented(name):
    value = getattr(gpuguide, name)
    assert value.__module__.startswith("gpuguide.")
    doc = inspect.getdoc(value) or ""
    assert len(doc.split()) >= 5, f"{name} needs a docstring"


def test_the_version_is_written_once():
    """pyproject.toml reads the version from gpuguide.version; it states none itself."""
    from conftest import ROOT

    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "', text, re.MULTILINE) is None
    assert re.search(r'^dynamic = \["version"\]', text, re.MULTILINE)
    source = r'^version = \{ attr = "gpuguide\.version\.__version__" \}'
    assert re.search(source, text, re.MULTILINE)
    assert re.fullmatch(r"\d+\.\d+\.\d+", gpuguide.__version__)