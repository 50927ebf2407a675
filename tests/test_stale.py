"""Pages are re-executed when what they measure on changes (docs/_ext/gallery_hooks).

The decision is tested with fake Sphinx applications and faked changes (torch's
version string, a fake CUDA device, small mode, the GPU memory cap, a changed
copy of the helpers or the build's extensions); one test builds a two-example
site several times to check the hooks against sphinx-gallery itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import ROOT

import gallery_hooks
import gpuguide
from gallery_hooks import (
    FINGERPRINT_FILE,
    build_fingerprint,
    check_fingerprint,
    fingerprint_changes,
    record_after_build,
    record_fingerprint,
    sources_digest,
)
from gpuguide import device as device_mod
from gpuguide import host

PATTERN = "/plot_"
GiB = 2**30


@pytest.fixture(autouse=True)
def cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages that would run on this machine's CPU, at full size, uncapped."""
    for name in ("GPUGUIDE_DEVICE", "GPUGUIDE_SMALL", "GPUGUIDE_GPU_MEMORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(device_mod, "_mps_available", lambda: False)
    monkeypatch.setattr(device_mod, "_applied_caps", {})
    monkeypatch.setattr(gallery_hooks, "_pending", {})


def fake_app(
    srcdir: Path,
    *,
    pattern: str = PATTERN,
    plot_gallery: bool = True,
    failing: dict[str, str] | None = None,
) -> SimpleNamespace:
    """What the hooks read of a Sphinx application, after sphinx-gallery's set-up."""
    conf = {
        "gallery_dirs": ["auto_examples"],
        "filename_pattern": pattern,
        "plot_gallery": plot_gallery,
        "run_stale_examples": False,
        "failing_examples": failing or {},
    }
    return SimpleNamespace(
        srcdir=str(srcdir), config=SimpleNamespace(sphinx_gallery_conf=conf)
    )


def stamp_of(srcdir: Path) -> Path:
    return srcdir / "auto_examples" / FINGERPRINT_FILE


def build(srcdir: Path, **app_kwargs) -> tuple[SimpleNamespace, str | None]:
    """One successful build: check before the examples run, record after."""
    app = fake_app(srcdir, **app_kwargs)
    line = check_fingerprint(app, filename_pattern=PATTERN)
    record_after_build(app, None)
    return app, line


def reruns(srcdir: Path) -> bool:
    app = fake_app(srcdir)
    check_fingerprint(app, filename_pattern=PATTERN)
    return bool(app.config.sphinx_gallery_conf["run_stale_examples"])


# -- the fingerprint -------------------------------------------------------------


def test_fingerprint_names_torch_device_mode_and_cap(monkeypatch) -> None:
    monkeypatch.delenv("GPUGUIDE_RESULTS_DIR", raising=False)
    info = device_mod.describe_device("cpu")
    assert build_fingerprint() == {
        "torch": torch.__version__,
        "device": info.short_name,
        "small mode": "off",
        "GPU memory cap": "none",
        "helpers": sources_digest(Path(gpuguide.__file__).parent, "**/*.py"),
        "build extensions": sources_digest(ROOT / "docs" / "_ext", "*.py"),
    }
    assert build_fingerprint(small=True)["small mode"] == "on"


def test_source_digests_are_of_the_package_as_imported_not_the_cwd(
    monkeypatch, tmp_path
) -> None:
    assert Path(gpuguide.__file__).resolve().parent == gallery_hooks.HELPERS_DIR
    assert (ROOT / "docs" / "_ext").resolve() == gallery_hooks.EXTENSIONS_DIR
    here = build_fingerprint()
    monkeypatch.chdir(tmp_path)  # a build started from elsewhere
    assert build_fingerprint() == here
    modules = len(list(gallery_hooks.HELPERS_DIR.rglob("*.py")))
    assert here["helpers"].startswith(f"{modules} file(s), sha256 ")
    extensions = len(list(gallery_hooks.EXTENSIONS_DIR.glob("*.py")))
    assert here["build extensions"].startswith(f"{extensions} file(s), sha256 ")


def test_sources_digest_follows_names_and_contents_not_the_folder(tmp_path) -> None:
    first = tmp_path / "one" / "gpuguide"
    shutil.copytree(ROOT / "src" / "gpuguide", first)
    second = tmp_path / "two" / "gpuguide"
    shutil.copytree(first, second)
    digest = sources_digest(first, "**/*.py")
    assert sources_digest(second, "**/*.py") == digest  # where it lies does not count
    (second / "__pycache__").mkdir(exist_ok=True)
    (second / "__pycache__" / "timing.cpython-312.pyc").write_bytes(b"compiled")
    (second / "_source.json").write_text('{"commit": "abc1234"}')
    assert sources_digest(second, "**/*.py") == digest  # neither is a source
    digests = {digest}
    with (second / "chapters" / "compiling.py").open("a") as f:
        f.write("# one more line\n")
    digests.add(sources_digest(second, "**/*.py"))  # a module in a subfolder
    (second / "timing.py").rename(second / "timing2.py")
    digests.add(sources_digest(second, "**/*.py"))  # a renamed module
    (second / "new.py").write_text("")
    digests.add(sources_digest(second, "**/*.py"))  # a new one
    assert len(digests) == 4
    assert sources_digest(tmp_path / "missing", "**/*.py") == "none"
    assert sources_digest(tmp_path, "*.py") == "none"


def _copy_of(monkeypatch, tmp_path: Path, name: str, source: Path) -> Path:
    """Point the fingerprint's ``name`` folder at a copy of ``source``."""
    copy = tmp_path / "copies" / source.name
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(gallery_hooks, name, copy)
    return copy


@pytest.mark.parametrize(
    ("name", "source", "changed", "entry"),
    [
        ("HELPERS_DIR", ROOT / "src" / "gpuguide", "timing.py", "helpers"),
        ("EXTENSIONS_DIR", ROOT / "docs" / "_ext", "landing.py", "build extensions"),
    ],
)
def test_a_changed_source_reruns_every_example_and_says_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name, source, changed, entry
) -> None:
    copy = _copy_of(monkeypatch, tmp_path, name, source)
    site = tmp_path / "site"
    build(site)
    old = build_fingerprint()[entry]
    assert not reruns(site)
    with (copy / changed).open("a") as f:
        f.write("\n# a change to one file\n")
    new = build_fingerprint()[entry]
    app, line = build(site)
    assert app.config.sphinx_gallery_conf["run_stale_examples"] is True
    assert line == f"gpuguide: re-executing every example: {entry} {old} -> {new}"
    assert old != new
    assert not reruns(site)  # recorded: the next build keeps the pages


# -- the decision ----------------------------------------------------------------


def test_unchanged_fingerprint_does_not_rerun(tmp_path: Path) -> None:
    build(tmp_path)
    app, line = build(tmp_path)
    assert line is None
    assert app.config.sphinx_gallery_conf["run_stale_examples"] is False


def test_new_torch_version_reruns_every_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path)
    old = torch.__version__
    monkeypatch.setattr(torch, "__version__", "2.99.0+cu999")
    app, line = build(tmp_path)
    assert app.config.sphinx_gallery_conf["run_stale_examples"] is True
    assert line == f"gpuguide: re-executing every example: torch {old} -> 2.99.0+cu999"
    assert not reruns(tmp_path)  # recorded: the next build keeps the pages


def fake_h100(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """From now on, pages would run on an H100 (faked); returns the fractions set."""
    h100 = SimpleNamespace(
        name="NVIDIA H100 80GB HBM3",
        multi_processor_count=132,
        total_memory=85_045_379_072,
        major=9,
        minor=0,
    )
    fractions: list[float] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: h100)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d: (h100.total_memory,) * 2)
    monkeypatch.setattr(
        torch.cuda,
        "set_per_process_memory_fraction",
        lambda fraction, d: fractions.append(fraction),
    )
    monkeypatch.setattr(host, "driver_version", lambda: "580.159.04")
    return fractions


def test_new_device_reruns_every_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path)  # on this machine's CPU
    cpu_name = device_mod.describe_device("cpu").short_name
    fake_h100(monkeypatch)
    app, line = build(tmp_path)
    assert app.config.sphinx_gallery_conf["run_stale_examples"] is True
    assert line is not None
    assert f"device {cpu_name} -> H100 SXM5" in line
    assert "torch" not in line
    assert not reruns(tmp_path)


def test_small_mode_change_reruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", "1")
    build(tmp_path)
    monkeypatch.setenv("GPUGUIDE_SMALL", "0")
    _, line = build(tmp_path)
    assert line == "gpuguide: re-executing every example: small mode on -> off"


def test_gpu_memory_cap_change_reruns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fractions = fake_h100(monkeypatch)
    build(tmp_path)
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GiB")
    _, line = build(tmp_path)
    assert line == (
        "gpuguide: re-executing every example: "
        "GPU memory cap none -> 16.0 GiB (17179869184 B)"
    )
    assert fractions == [16 * GiB / 85_045_379_072]  # the build's process is capped


def test_gpu_memory_cap_is_ignored_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path)
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GiB")
    assert not reruns(tmp_path)


def test_gpu_memory_cap_too_large_stops_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_h100(monkeypatch)
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "80GiB")  # the H100 has 79.2 GiB
    with pytest.raises(ValueError, match=r"GPUGUIDE_GPU_MEMORY asks for 80\.0 GiB"):
        build(tmp_path)


def test_missing_stamp_reruns(tmp_path: Path) -> None:
    app, line = build(tmp_path)  # nothing recorded before
    assert app.config.sphinx_gallery_conf["run_stale_examples"] is True
    assert line is not None
    assert f"{FINGERPRINT_FILE} is missing" in line
    assert stamp_of(tmp_path).is_file()


@pytest.mark.parametrize(
    "content",
    [b"", b"{not json", b"\xff\xfe\x00garbage", b"[1, 2, 3]", b'"a string"'],
    ids=["empty", "bad-json", "not-utf8", "a-list", "a-string"],
)
def test_corrupt_stamp_reruns(tmp_path: Path, content: bytes) -> None:
    build(tmp_path)
    stamp_of(tmp_path).write_bytes(content)
    assert reruns(tmp_path)


def test_stamp_with_other_entries_reruns(tmp_path: Path) -> None:
    current = build_fingerprint()
    record_fingerprint(stamp_of(tmp_path), {**current, "compiler": "gcc 9"})
    assert fingerprint_changes(stamp_of(tmp_path), current) == [
        "compiler gcc 9 -> unknown"
    ]
    record_fingerprint(stamp_of(tmp_path), current)
    assert fingerprint_changes(stamp_of(tmp_path), current) == []
    assert json.loads(stamp_of(tmp_path).read_text()) == current


# -- when the fingerprint is recorded --------------------------------------------


def test_failed_build_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path)
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    app = fake_app(tmp_path)
    check_fingerprint(app, filename_pattern=PATTERN)
    assert record_after_build(app, RuntimeError("the build broke")) is None
    assert reruns(tmp_path)  # the next build still re-executes every page


def test_build_with_a_failing_example_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path)
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    build(tmp_path, failing={"plot_x.py": "Traceback ..."})
    assert reruns(tmp_path)


def test_build_of_one_example_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    build(tmp_path)
    monkeypatch.setattr(torch, "__version__", "2.99.0")
    app, line = build(tmp_path, pattern="plot_profiler")  # --example plot_profiler
    assert line is not None
    assert "until a full build" in line
    assert app.config.sphinx_gallery_conf["run_stale_examples"] is False
    assert reruns(tmp_path)


def test_build_without_execution_checks_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_fingerprint(*args, **kwargs):
        raise AssertionError("not needed when no example runs")

    monkeypatch.setattr(gallery_hooks, "build_fingerprint", no_fingerprint)
    _, line = build(tmp_path, plot_gallery=False)
    assert line is None
    assert not stamp_of(tmp_path).exists()


# -- against sphinx-gallery ------------------------------------------------------

CONF = """
import sys
sys.path.insert(0, {ext!r})
from gallery_hooks import connect_fingerprint

extensions = ["sphinx_gallery.gen_gallery"]
exclude_patterns = ["_build"]
sphinx_gallery_conf = {{
    "examples_dirs": ["examples"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": "/plot_",
}}

def setup(app):
    connect_fingerprint(app, filename_pattern="/plot_")
"""

EXAMPLE = '''"""
{title}
=====

Counts its runs.
"""

import os

with open(os.environ["RUNS_FILE"], "a") as runs:
    runs.write("{title}\\n")
'''


@pytest.mark.slow
def test_sphinx_gallery_reruns_only_when_the_fingerprint_changes(
    tmp_path: Path,
) -> None:
    docs = tmp_path / "docs"
    (docs / "examples").mkdir(parents=True)
    (docs / "conf.py").write_text(CONF.format(ext=str(ROOT / "docs" / "_ext")))
    (docs / "index.rst").write_text(
        "Site\n====\n\n.. toctree::\n\n   auto_examples/index\n"
    )
    (docs / "examples" / "GALLERY_HEADER.rst").write_text("Gallery\n=======\n")
    for title in ("one", "two"):
        (docs / "examples" / f"plot_{title}.py").write_text(
            textwrap.dedent(EXAMPLE.format(title=title))
        )
    runs = tmp_path / "runs.txt"
    # The build imports a copy of the helpers, to change one of them below.
    helpers = tmp_path / "src" / "gpuguide"
    shutil.copytree(
        Path(gpuguide.__file__).parent, helpers,
        ignore=shutil.ignore_patterns("__pycache__"),
    )  # fmt: skip

    def sphinx(*args: str, small: str = "0") -> str:
        env = {
            **os.environ,
            "RUNS_FILE": str(runs),
            "GPUGUIDE_SMALL": small,
            "GPUGUIDE_DEVICE": "cpu",
            "MPLBACKEND": "Agg",
            "PYTHONPATH": str(helpers.parent),
        }
        env.pop("GPUGUIDE_GPU_MEMORY", None)
        result = subprocess.run(
            [sys.executable, "-m", "sphinx", "-b", "html", *args,
             str(docs), str(tmp_path / "html")],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout

    def ran() -> list[str]:
        text = runs.read_text() if runs.exists() else ""
        runs.unlink(missing_ok=True)
        return sorted(text.split())

    sphinx()
    assert ran() == ["one", "two"]
    assert (docs / "auto_examples" / FINGERPRINT_FILE).is_file()

    log = sphinx()  # nothing changed: sphinx-gallery keeps both pages
    assert ran() == []
    assert "re-executing" not in log

    log = sphinx(small="1")  # small mode changed: both pages run again
    assert ran() == ["one", "two"]
    assert "gpuguide: re-executing every example: small mode off -> on" in log

    with (helpers / "units.py").open("a") as units:
        units.write("\n# a helper changed\n")
    log = sphinx(small="1")  # a helper changed: both pages run again, and why
    assert ran() == ["one", "two"]
    assert "gpuguide: re-executing every example: helpers " in log
    assert "small mode" not in log


def test_what_a_removed_example_generated_is_removed(tmp_path):
    examples, gallery = tmp_path / "examples", tmp_path / "auto_examples"
    (examples / "01_a").mkdir(parents=True)
    (examples / "01_a" / "plot_kept.py").write_text('"""Kept\n====\n"""\n')
    thumbs = gallery / "01_a" / "images" / "thumb"
    thumbs.mkdir(parents=True)
    made = {}
    for stem in ("plot_kept", "plot_gone"):
        made[stem] = [
            gallery / "01_a" / f"{stem}{suffix}"
            for suffix in (".rst", ".py", ".ipynb", ".codeobj.json", ".zip")
        ] + [
            gallery / "01_a" / "images" / f"sphx_glr_{stem}_001.png",
            thumbs / f"sphx_glr_{stem}_thumb.png",
        ]
        for path in made[stem]:
            path.write_text("x")
    gone = gallery_hooks.remove_orphans(examples, gallery)
    assert sorted(gone) == sorted(made["plot_gone"])
    assert not any(path.exists() for path in made["plot_gone"])
    assert all(path.exists() for path in made["plot_kept"])
    assert gallery_hooks.remove_orphans(examples, tmp_path / "nowhere") == []
