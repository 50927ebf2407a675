"""The helpers as a reader installs them: the wheel on the site, its install command.

``docs/_ext/site_wheel.py`` builds the wheel into the site and puts the command
that installs it at the top of every downloaded script and in every notebook's
first cell; ``nox -s build`` makes the sdist and wheel and checks them with twine.
"""

from __future__ import annotations

import ast
import email.parser
import importlib.util
import json
import os
import re
import runpy
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
import site_wheel
from conftest import EXAMPLES, ROOT

import gpuguide

URL = "https://guide.example.org/gpu/_downloads/gpuguide-1.2.3-py3-none-any.whl"

#: setuptools-scm's version of this checkout now (an editable install's
#: gpuguide.__version__ is the one of the commit it was installed at).
VERSION = site_wheel.checkout_version(ROOT) or gpuguide.__version__


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    return site_wheel.build_wheel(ROOT, tmp_path_factory.mktemp("site") / "_downloads")


def test_wheel_has_the_package_and_the_checkup_script(wheel):
    assert wheel.name == site_wheel.wheel_name(VERSION)
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = f"gpuguide-{VERSION}.dist-info"
        entry_points = whl.read(f"{info}/entry_points.txt").decode()
    assert {"gpuguide/__init__.py", "gpuguide/py.typed"} <= names
    assert "gpuguide/results.schema.json" in names  # what gpuguide.results reads
    assert "gpuguide/chapters/__init__.py" in names
    # the programs beside the helpers ship in the same wheel
    assert {"gpuguide_tools/checkup.py", "gpuguide_tools/recorder.py"} <= names
    assert not any("__pycache__" in name for name in names)
    scripts = entry_points.split("[console_scripts]")[1]
    assert "gpuguide-checkup = gpuguide_tools.checkup:main" in scripts


def test_wheel_carries_the_licence_and_the_project_s_addresses(wheel):
    info = f"gpuguide-{VERSION}.dist-info"
    with zipfile.ZipFile(wheel) as whl:
        licence = whl.read(f"{info}/licenses/LICENSE")
        meta = email.parser.Parser().parsestr(whl.read(f"{info}/METADATA").decode())
    assert licence == (ROOT / "LICENSE").read_bytes()
    assert b"BSD 3-Clause License" in licence
    assert b"Copyright (c) 2026, the gpuguide authors" in licence
    assert meta["License-Expression"] == "BSD-3-Clause"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Version"] == VERSION
    labels = [url.split(",")[0] for url in meta.get_all("Project-URL") or []]
    assert labels == ["Homepage", "Documentation", "Source", "Issues", "Changelog"]


def test_the_wheel_s_version_names_the_commit_it_was_built_from(wheel):
    head = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{40}", head), "the tests run from a git checkout"
    version = wheel.name.split("-")[1]  # 0.1.dev417+gb85636e1a[.d20260101]
    found = re.fullmatch(
        r"\d+\.\d+(\.\d+)?\.dev\d+\+g([0-9a-f]{7,40})(\.d\d{8})?", version
    )
    assert found, version
    assert head.startswith(found[2])


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


#: PEP 723's reference regular expression for an inline metadata block.
PEP_723 = re.compile(
    r"(?m)^# /// (?P<type>[a-zA-Z0-9-]+)$\s(?P<content>(^#(| .*)$\s)+)^# ///$"
)


def script_metadata(source: str) -> dict:
    """The ``script`` block of ``source``, read as PEP 723's reference code reads it."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    blocks = [m for m in PEP_723.finditer(source) if m.group("type") == "script"]
    assert len(blocks) == 1, source[:2000]
    content = "".join(
        line[2:] if line.startswith("# ") else line[1:]
        for line in blocks[0].group("content").splitlines(keepends=True)
    )
    return tomllib.loads(content)


INSTALL = site_wheel.Install(
    URL,
    requires_python=">=3.10",
    requires={"torch": "torch>=2.11", "numpy": "numpy>=1.24", "matplotlib": "matplotlib>=3.7"},
)  # fmt: skip


@pytest.mark.parametrize(
    "prefix",
    ["", "#!/usr/bin/env python\n", "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n"],
)
def test_header_is_inserted_once_and_keeps_the_script_valid(prefix):
    original = prefix + EXAMPLES[0].read_text()
    once = site_wheel.insert_header(original, INSTALL, "plot_x.py")
    assert site_wheel.insert_header(once, INSTALL, "plot_x.py") == once
    # the shebang and encoding lines stay first, the header follows them
    assert once.startswith(prefix + site_wheel.HEADER_MARK)
    header = once[len(prefix) :].split('"""')[0]
    assert "#   uv run plot_x.py " in header
    assert f'#   pip install "{URL}"\n' in header
    assert (
        f'#   pip install "{URL}" --extra-index-url {site_wheel.CPU_INDEX}\n' in header
    )
    assert f"--index {site_wheel.CPU_INDEX} " in header
    assert "localhost" not in header
    assert all(line.startswith("#") for line in header.strip().splitlines())
    assert _docstring_first(once) == _docstring_first(original) is not None
    lines = "\n".join(site_wheel.script_header(original, INSTALL, "plot_x.py"))
    assert once == prefix + lines + "\n" + original.removeprefix(prefix)


def test_header_takes_the_new_url_on_a_rebuild():
    source = EXAMPLES[0].read_text()
    local = site_wheel.Install("http://localhost:8000/_downloads/a.whl", local=True)
    old = site_wheel.insert_header(source, local)
    assert "GPUGUIDE_SITE_URL" in old.split('"""')[0]  # says where the address is from
    new = site_wheel.insert_header(old, INSTALL)
    assert new == site_wheel.insert_header(source, INSTALL)
    assert "localhost" not in new.split('"""')[0]


SOURCE = """
\"""A page.\"""
import os
import numpy as np
from matplotlib import pyplot as plt
from PIL import Image
import gpuguide.chapters
from gpuguide_tools import checkup
from . import sibling
try:
    import not_a_module_anywhere
except ImportError:
    pass


def later():
    import torch.nn.functional as F
"""


def test_script_metadata_lists_the_wheel_and_what_the_page_imports():
    meta = script_metadata(site_wheel.insert_header(SOURCE, INSTALL))
    assert meta == {
        "requires-python": ">=3.10",
        "dependencies": [
            f"gpuguide @ {URL}",
            "matplotlib>=3.7",  # with the wheel's own bounds
            "numpy>=1.24",
            "pillow",  # PIL's distribution, found among those installed
            "torch>=2.11",  # imported in a function too
        ],
    }
    # not the standard library, the helpers, a relative or an optional import
    with pytest.raises(site_wheel.ExtensionError, match="'surely_not_installed'"):
        site_wheel.insert_header(SOURCE + "import surely_not_installed\n", INSTALL)


def test_triton_is_left_to_torch_which_requires_it_on_cuda():
    header = site_wheel.insert_header(SOURCE + "import triton\n", INSTALL)
    deps = script_metadata(header)["dependencies"]
    names = [re.split(r"[ <>=@;]", dep, maxsplit=1)[0] for dep in deps]
    assert "torch" in names
    assert "triton" not in names


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.stem for e in EXAMPLES])
def test_every_page_s_download_declares_its_imports(example):
    source = example.read_text()
    meta = script_metadata(site_wheel.insert_header(source, INSTALL, example.name))
    names = [re.split(r"[ <>=@;]", dep, maxsplit=1)[0] for dep in meta["dependencies"]]
    assert names[0] == "gpuguide"
    assert meta["dependencies"][0] == f"gpuguide @ {URL}"
    assert "torch" in names
    # matplotlib comes with gpuguide; a page that imports it names it itself
    imports_mpl = bool(re.search(r"^(import|from) matplotlib", source, re.M))
    assert ("matplotlib" in names) == imports_mpl
    assert ("numpy" in names) == bool(re.search(r"^import numpy", source, re.M))


def test_the_wheel_s_requirements_are_what_pyproject_declares(wheel):
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    install = site_wheel.Install.from_wheel(wheel, URL)
    assert sorted(install.requires.values()) == sorted(project["dependencies"])
    assert install.requires_python == project["requires-python"]


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


def _config(conf: dict) -> SimpleNamespace:
    return SimpleNamespace(
        html_baseurl=conf["html_baseurl"],
        release=conf["release"],
        sphinx_gallery_conf=dict(conf["sphinx_gallery_conf"]),
    )


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
    monkeypatch.delenv(site_wheel.PUBLISH_ENV, raising=False)
    conf = _load_conf(monkeypatch, site_url)
    assert "site_wheel" in conf["extensions"]
    # no canonical link (Sphinx writes none without html_baseurl) unless given
    assert conf["html_baseurl"] == (site_url or "")
    config = _config(conf)
    site_wheel._config_inited(None, config)
    cell = config.sphinx_gallery_conf["first_notebook_cell"]
    url = f"{expected}gpuguide-{VERSION}-py3-none-any.whl"
    lines = cell.splitlines()
    assert lines[-1] == f'%pip install "{url}" $cpu_index'
    assert ("GPUGUIDE_SITE_URL" in cell) == (site_url is None)


@pytest.mark.parametrize(
    ("platform", "smi", "driver", "index"),
    [
        ("linux", None, False, f"--extra-index-url {site_wheel.CPU_INDEX}"),
        ("linux", "/usr/bin/nvidia-smi", False, ""),
        ("linux", None, True, ""),  # a driver without nvidia-smi on PATH
        ("darwin", None, False, ""),  # PyPI's macOS torch is a CPU build already
        ("win32", None, False, ""),
    ],
)
def test_the_notebook_takes_cpu_only_torch_on_linux_without_an_nvidia_gpu(
    monkeypatch, platform, smi, driver, index
):
    cell = site_wheel.first_cell(URL)
    *code, magic = cell.splitlines()
    assert magic == f'%pip install "{URL}" $cpu_index'  # IPython expands $cpu_index
    monkeypatch.setattr(sys, "platform", platform)
    monkeypatch.setattr(
        shutil, "which", lambda name: smi if name == "nvidia-smi" else None
    )
    real_exists = Path.exists
    fake = {"/proc/driver/nvidia": driver}
    monkeypatch.setattr(Path, "exists", lambda p: fake.get(str(p), real_exists(p)))
    namespace: dict = {}
    exec("\n".join(code), namespace)
    assert namespace["cpu_index"] == index


@pytest.mark.parametrize(
    ("site_url", "publish", "error"),
    [
        (None, "1", "GPUGUIDE_PUBLISH=1 builds a site for publishing"),
        ("http://localhost:8000/", "1", "local address"),
        ("http://127.0.0.1:8000/guide/", "1", "local address"),
        ("guide.example.org/gpu/", "0", "must be an http"),
        ("file:///srv/guide/", "", "must be an http"),
        (None, "0", None),  # a local build
        ("http://localhost:8000/", "", None),
        ("https://guide.example.org/gpu/", "1", None),
    ],
)
def test_a_build_for_publishing_needs_the_site_s_address(
    monkeypatch, site_url, publish, error
):
    monkeypatch.setenv(site_wheel.PUBLISH_ENV, publish)
    config = _config(_load_conf(monkeypatch, site_url))
    if error is None:
        site_wheel._config_inited(None, config)
    else:
        with pytest.raises(site_wheel.ConfigError, match=re.escape(error)):
            site_wheel._config_inited(None, config)


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
        assert site_wheel.stamp_downloads(tmp_path / "_downloads", INSTALL) == 5
    expected = site_wheel.insert_header(source, INSTALL, "plot_a.py")
    assert "#   uv run plot_a.py " in expected
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
    for name in site_wheel.PACKAGE_FILES:
        shutil.copy2(ROOT / name, tree / name)
    dist = tmp_path / "dist"
    run = {"capture_output": True, "text": True, "check": False, "cwd": tmp_path}
    # A copy without .git is told its version (as the site's wheel is).
    env = {**os.environ, site_wheel.PRETEND_ENV: VERSION}
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, tree],
        env=env,
        **run,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    files = sorted(dist.iterdir())
    version = VERSION
    assert [f.name for f in files] == [
        f"gpuguide-{version}-py3-none-any.whl",
        f"gpuguide-{version}.tar.gz",
    ]
    checked = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files], **run
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.count("PASSED") == 2
    licence = (ROOT / "LICENSE").read_bytes()
    with zipfile.ZipFile(files[0]) as whl:
        assert whl.read(f"gpuguide-{version}.dist-info/licenses/LICENSE") == licence
    with tarfile.open(files[1]) as sdist:
        member = sdist.extractfile(f"gpuguide-{version}/LICENSE")
        assert member is not None
        assert member.read() == licence


def test_one_wheel_per_run_is_built_and_reused_until_a_source_changes(
    tmp_path, monkeypatch
):
    root = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "src", root / "src", ignore=shutil.ignore_patterns("*.egg-info")
    )
    for name in site_wheel.PACKAGE_FILES:
        shutil.copy2(ROOT / name, root / name)
    monkeypatch.setenv(site_wheel.WHEEL_CACHE_ENV, str(tmp_path / "cache"))
    source = ("abcdef1", False)
    first = site_wheel.build_wheel(root, tmp_path / "one", source=source)
    built = []
    real_run = subprocess.run

    def counting_run(*args, **kwargs):
        if site_wheel._BUILD_CODE in args[0]:  # a build, not a git question
            built.append(args)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(site_wheel.subprocess, "run", counting_run)
    again = site_wheel.build_wheel(root, tmp_path / "two", source=source)
    assert built == []  # taken from the cache
    assert again.read_bytes() == first.read_bytes()
    assert again.parent == tmp_path / "two"
    # Another stamp or a changed source is another wheel.
    site_wheel.build_wheel(root, tmp_path / "three", source=("abcdef1", True))
    assert len(built) == 1
    (root / "src" / "gpuguide" / "units.py").write_text("# changed\n", "utf-8")
    site_wheel.build_wheel(root, tmp_path / "four", source=source)
    assert len(built) == 2
    # Without the variable, every build builds.
    monkeypatch.delenv(site_wheel.WHEEL_CACHE_ENV)
    site_wheel.build_wheel(root, tmp_path / "five", source=source)
    assert len(built) == 3
