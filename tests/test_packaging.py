"""The helpers as a reader installs them: the wheel on the site, its install command.

``docs/_ext/site_wheel.py`` builds the wheel into the site and puts the command
that installs it at the top of every downloaded script and in every notebook's
first cell; ``nox -s build`` makes the sdist and wheel and checks them with twine.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import runpy
import shutil
import subprocess
import sys
import zipfile
from types import SimpleNamespace

import pytest
import site_wheel
from conftest import EXAMPLES, ROOT

import gpuguide

URL = "https://guide.example.org/gpu/_downloads/gpuguide-1.2.3-py3-none-any.whl"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return site_wheel.build_wheel(ROOT, tmp_path_factory.mktemp("site") / "_downloads")


def test_wheel_has_the_package_and_the_checkup_script(wheel):
    assert wheel.name == site_wheel.wheel_name(gpuguide.__version__)
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = f"gpuguide-{gpuguide.__version__}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert {"gpuguide/__init__.py", "gpuguide/py.typed"} <= names
    assert "gpuguide/chapters/__init__.py" in names
    # the programs beside the helpers ship in the same wheel
    assert {"gpuguide_tools/checkup.py", "gpuguide_tools/recorder.py"} <= names
    assert not any("__pycache__" in name for name in names)
    scripts = entry_points.split("[console_scripts]")[1]
    assert "gpuguide-checkup = gpuguide_tools.checkup:main" in scripts


def test_wheel_is_built_from_the_sources_not_a_stale_build_dir(wheel):
    # setuptools leaves build/lib in the tree; a module only there must not ship.
    modules = {p.relative_to(ROOT / "src").as_posix() for p in ROOT.glob("src/**/*.py")}
    with zipfile.ZipFile(wheel) as whl:
        shipped = {n for n in whl.namelist() if n.endswith(".py")}
    assert shipped == modules


def test_wheel_url_joins_the_base_url_with_or_without_a_slash():
    for base in ("https://guide.example.org/gpu", "https://guide.example.org/gpu/"):
        assert site_wheel.wheel_url(base, "1.2.3") == URL


def _docstring_first(source: str) -> str | None:
    tree = ast.parse(source)
    return ast.get_docstring(tree, clean=False)


@pytest.mark.parametrize(
    "prefix",
    ["", "#!/usr/bin/env python\n", "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n"],
)
def test_header_is_inserted_once_and_keeps_the_script_valid(prefix):
    original = prefix + EXAMPLES[0].read_text()
    once = site_wheel.insert_header(original, URL)
    assert site_wheel.insert_header(once, URL) == once
    # the shebang and encoding lines stay first, the header follows them
    assert once.startswith(prefix + site_wheel.HEADER_MARK)
    header = once[len(prefix) :].split('"""')[0]
    assert f'pip install "{URL}"' in header
    assert f"--extra-index-url {site_wheel.CPU_INDEX}" in header
    assert all(line.startswith("#") for line in header.strip().splitlines())
    assert 3 <= len(header.strip().splitlines()) <= 4
    assert _docstring_first(once) == _docstring_first(original) is not None
    lines = "\n".join(site_wheel.script_header(URL))
    assert once == prefix + lines + "\n" + original.removeprefix(prefix)


def test_header_takes_the_new_url_on_a_rebuild():
    source = EXAMPLES[0].read_text()
    old = site_wheel.insert_header(source, "http://localhost:8000/_downloads/a.whl")
    new = site_wheel.insert_header(old, URL)
    assert new == site_wheel.insert_header(source, URL)
    assert "localhost" not in new.split('"""')[0]


def _load_conf(monkeypatch, site_url: str | None) -> dict:
    if site_url is None:
        monkeypatch.delenv("GPUGUIDE_SITE_URL", raising=False)
    else:
        monkeypatch.setenv("GPUGUIDE_SITE_URL", site_url)
    # conf.py sets these for the examples; keep the test's environment as it was
    for name in ("GPUGUIDE_ARTIFACT_DIR", "GPUGUIDE_ARTIFACT_URL"):
        monkeypatch.setenv(name, "")
    monkeypatch.setattr(sys, "path", list(sys.path))
    return runpy.run_path(str(ROOT / "docs" / "conf.py"))


@pytest.mark.parametrize(
    ("site_url", "expected"),
    [
        (None, "http://localhost:8000/_downloads/"),
        ("https://guide.example.org/gpu", "https://guide.example.org/gpu/_downloads/"),
    ],
)
def test_first_notebook_cell_installs_the_wheel_from_the_site(
    monkeypatch, site_url, expected
):
    conf = _load_conf(monkeypatch, site_url)
    assert "site_wheel" in conf["extensions"]
    config = SimpleNamespace(
        html_baseurl=conf["html_baseurl"],
        release=conf["release"],
        sphinx_gallery_conf=dict(conf["sphinx_gallery_conf"]),
    )
    site_wheel._config_inited(None, config)
    cell = config.sphinx_gallery_conf["first_notebook_cell"]
    url = f"{expected}gpuguide-{gpuguide.__version__}-py3-none-any.whl"
    lines = cell.splitlines()
    assert lines[-1] == f'%pip install "{url}"'
    cpu = [line for line in lines if "--extra-index-url" in line]
    assert cpu == [f'# %pip install "{url}" --extra-index-url {site_wheel.CPU_INDEX}']
    assert all(line.startswith("#") for line in lines[:-1])


def test_downloads_get_the_command_in_scripts_notebooks_and_zips(tmp_path):
    source = EXAMPLES[0].read_text()
    cell = site_wheel.first_cell("http://localhost:8000/_downloads/old.whl")
    notebook = {"cells": [{"cell_type": "code", "source": [cell]}], "nbformat": 4}
    folder = tmp_path / "_downloads" / "0123abcd"
    folder.mkdir(parents=True)
    (folder / "plot_a.py").write_text(source)
    (folder / "plot_a.ipynb").write_text(json.dumps(notebook))
    older = {
        "cells": [
            {
                "source": [
                    "# This notebook needs the small gpuguide helper package:\n# pip install ."
                ]
            }
        ]
    }
    (folder / "plot_b.ipynb").write_text(json.dumps(older))
    theirs = json.dumps({"cells": [{"source": ["import torch"]}]})
    (folder / "other.ipynb").write_text(theirs)
    with zipfile.ZipFile(tmp_path / "_downloads" / "all.zip", "w") as zipped:
        zipped.writestr("plot_a.py", source)
        zipped.writestr("plot_a.ipynb", json.dumps(notebook))
    for _ in range(2):  # an incremental build runs the hook again
        assert site_wheel.stamp_downloads(tmp_path / "_downloads", URL) == 5
    expected = site_wheel.insert_header(source, URL)
    assert (folder / "plot_a.py").read_text() == expected
    first = json.loads((folder / "plot_a.ipynb").read_text())["cells"][0]["source"]
    assert first == [site_wheel.first_cell(URL)]
    older = json.loads((folder / "plot_b.ipynb").read_text())
    assert older["cells"][0]["source"] == [site_wheel.first_cell(URL)]
    assert (folder / "other.ipynb").read_text() == theirs  # not a gallery notebook
    with zipfile.ZipFile(tmp_path / "_downloads" / "all.zip") as zipped:
        assert zipped.read("plot_a.py").decode() == expected
        cells = json.loads(zipped.read("plot_a.ipynb"))["cells"]
    assert cells[0]["source"] == [site_wheel.first_cell(URL)]


def _importable(module: str) -> bool:
    # "build" alone would match the checkout's build/ folder (a namespace package)
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its package is missing
        return False


def test_sdist_and_wheel_pass_twine_check(tmp_path):
    for tool in ("build", "twine"):
        if not _importable(f"{tool}.__main__"):
            pytest.skip(f"{tool} is not installed (pyproject's test group has it)")
    tree = tmp_path / "package"
    shutil.copytree(
        ROOT / "src",
        tree / "src",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    dist = tmp_path / "dist"
    run = {"capture_output": True, "text": True, "check": False, "cwd": tmp_path}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, tree], **run
    )
    assert built.returncode == 0, built.stdout + built.stderr
    files = sorted(dist.iterdir())
    version = gpuguide.__version__
    assert [f.name for f in files] == [
        f"gpuguide-{version}-py3-none-any.whl",
        f"gpuguide-{version}.tar.gz",
    ]
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], **run
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2
