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


def test_version_matches_pyproject():
    from conftest import ROOT

    text = (ROOT / "pyproject.toml").read_text()
    match = re.search(r'^version = "([^"]+)"', text, re.MULTILINE)
    assert match is not None
    assert gpuguide.__version__ == match.group(1)
