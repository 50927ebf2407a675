"""The helpers' version and commit: from a git checkout, a wheel's stamp, or unknown."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import ROOT
from site_wheel import write_stamp

import gpuguide
from gpuguide import version
from gpuguide.version import VersionInfo, git_commit, version_label

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def git(folder: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t",
         "-c", "commit.gpgsign=false", *args],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A repository with a committed package and an ignored virtual environment."""
    repo = tmp_path / "repo"
    (repo / "src" / "pkg").mkdir(parents=True)
    (repo / "src" / "pkg" / "__init__.py").write_text("X = 1\n")
    (repo / "README.md").write_text("readme\n")
    (repo / ".gitignore").write_text(".venv/\n")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def test_labels():
    assert version_label("0.1.0", "f4b16f4") == "gpuguide 0.1.0 (f4b16f4)"
    assert version_label("0.1.0", "f4b16f4", True) == "gpuguide 0.1.0 (f4b16f4+dirty)"
    assert version_label("0.1.0", None) == "gpuguide 0.1.0 (commit unknown)"
    assert version_label(None, None) == "gpuguide version unknown"
    assert (
        VersionInfo("0.2.0", "abcdef1", True).label == "gpuguide 0.2.0 (abcdef1+dirty)"
    )


def test_the_version_is_the_package_s():
    assert version.__version__ == gpuguide.__version__


@needs_git
def test_a_clean_checkout_names_its_commit(checkout: Path):
    head = git(checkout, "rev-parse", "--short", "HEAD")
    assert git_commit(checkout / "src" / "pkg") == (head, False)
    assert git_commit(checkout) == (head, False)


@needs_git
@pytest.mark.parametrize(
    ("change", "dirty"),
    [
        (lambda repo: (repo / "README.md").write_text("changed\n"), True),
        (lambda repo: (repo / "src" / "pkg" / "new.py").write_text(""), True),
        (lambda repo: (repo / "src" / "pkg" / "__init__.py").unlink(), True),
        (lambda repo: (repo / "output.png").write_bytes(b"png"), False),
        (lambda repo: (repo / ".venv").mkdir() or (repo / ".venv" / "x.py").write_text(""), False),
    ],
    ids=["tracked-file-changed", "untracked-module", "file-deleted", "untracked-output", "ignored-module"],
)  # fmt: skip
def test_uncommitted_changes_mark_the_commit_dirty(checkout: Path, change, dirty):
    change(checkout)
    found = git_commit(checkout / "src")
    assert found is not None
    assert found[1] is dirty


@needs_git
def test_no_commit_where_git_cannot_tell(checkout: Path, tmp_path: Path, monkeypatch):
    # An installed copy inside an ignored folder of a checkout is no checkout.
    venv = checkout / ".venv" / "site-packages" / "pkg"
    venv.mkdir(parents=True)
    (venv / "__init__.py").write_text("")
    assert git_commit(venv) is None
    outside = tmp_path / "plain"
    outside.mkdir()
    assert git_commit(outside) is None  # not a repository
    assert git_commit(tmp_path / "missing") is None
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    (empty / "a.py").write_text("")
    git(empty, "add", "a.py")
    assert git_commit(empty) is None  # tracked, but no commit yet
    monkeypatch.setenv("PATH", "")
    assert git_commit(checkout) is None  # no git at all


@needs_git
def test_git_failing_to_start_tells_nothing(checkout: Path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("exec format error")

    monkeypatch.setattr(version.subprocess, "run", broken)
    assert git_commit(checkout) is None


def test_a_wheel_s_stamp_names_the_commit_where_git_cannot(tmp_path: Path, monkeypatch):
    monkeypatch.delenv(version.COMMIT_ENV, raising=False)
    package = tmp_path / "site-packages" / "gpuguide"
    package.mkdir(parents=True)
    assert version._describe(package) == VersionInfo(gpuguide.__version__)
    write_stamp(package, "f4b16f4", True)
    assert version._describe(package) == VersionInfo(
        gpuguide.__version__, "f4b16f4", True
    )
    for broken in ("{", "[]", '{"commit": "not hex"}', '{"dirty": true}'):
        (package / version.STAMP_FILE).write_text(broken)
        assert version._describe(package).commit is None, broken
    with pytest.raises(ValueError, match="hexadecimal"):
        write_stamp(package, "HEAD", False)


def test_a_copy_without_git_takes_the_commit_from_the_environment(
    tmp_path: Path, monkeypatch
):
    copy = tmp_path / "copy" / "src" / "gpuguide"  # a GPU machine's copy, no .git
    copy.mkdir(parents=True)
    monkeypatch.setenv(version.COMMIT_ENV, "2417E61+dirty")
    assert version._describe(copy) == VersionInfo(gpuguide.__version__, "2417e61", True)
    monkeypatch.setenv(version.COMMIT_ENV, "2417e61")
    assert version._describe(copy).label.endswith("(2417e61)")
    # A stamp wins over the variable; a value that is no hash tells nothing.
    write_stamp(copy, "f4b16f4", False)
    assert version._describe(copy).commit == "f4b16f4"
    (copy / version.STAMP_FILE).unlink()
    monkeypatch.setenv(version.COMMIT_ENV, "main")
    assert version._describe(copy).commit is None


@needs_git
def test_a_checkout_wins_over_a_stale_stamp(checkout: Path):
    package = checkout / "src" / "pkg"
    write_stamp(package, "0000000", False)  # untracked, not .py: not dirty
    head = git(checkout, "rev-parse", "--short", "HEAD")
    assert version._describe(package) == VersionInfo(gpuguide.__version__, head, False)


@needs_git
def test_this_checkout_describes_itself():
    found = git_commit(ROOT)
    if found is None:
        pytest.skip("the tests do not run from a git checkout")
    info = version.describe_version()
    # Imported from this checkout's src/ (not a copy installed into .nox or .venv).
    if Path(gpuguide.__file__).resolve().is_relative_to((ROOT / "src").resolve()):
        assert (info.commit, info.dirty) == found


@pytest.mark.slow
@needs_git
def test_the_site_s_wheel_names_the_commit_it_was_built_from(tmp_path: Path):
    import site_wheel

    wheel = site_wheel.build_wheel(ROOT, tmp_path / "wheel", source=("f4b16f4", True))
    with zipfile.ZipFile(wheel) as whl:
        stamp = json.loads(whl.read(f"gpuguide/{version.STAMP_FILE}"))
        whl.extractall(tmp_path / "installed")
    assert stamp == {"commit": "f4b16f4", "dirty": True}
    # A reader's run of the installed wheel, outside any checkout.
    code = "import gpuguide.version as v; print(v.describe_version().label)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
        env={"PYTHONPATH": str(tmp_path / "installed"), "PATH": "/usr/bin:/bin"},
        check=True,
    )  # fmt: skip
    built = wheel.name.split("-")[1]  # the checkout's version, as setuptools-scm says
    assert done.stdout.strip() == f"gpuguide {built} (f4b16f4+dirty)"
