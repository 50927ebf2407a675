"""Which gpuguide measured a figure: its version (setuptools-scm's) and commit.

The commit comes from the git checkout the package is imported from, else from
the stamp a site wheel carries (:data:`STAMP_FILE`), else from
``GPUGUIDE_COMMIT``. A foundation module: it imports nothing else from gpuguide.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STAMP_FILE", "git_commit"]

#: The helpers' version: ``gpuguide.__version__``, the installed distribution's.
try:
    __version__ = importlib.metadata.version("gpuguide")
except importlib.metadata.PackageNotFoundError:  # sources imported, not installed
    __version__ = "0+unknown"

#: The file, beside this module in a built wheel, that names the commit.
STAMP_FILE = "_source.json"

#: The commit of a copy without its ``.git`` folder: ``2417e61`` or ``2417e61+dirty``.
COMMIT_ENV = "GPUGUIDE_COMMIT"

#: Seconds to wait for one git command before giving up.
_GIT_TIMEOUT_S = 5.0
_HASH = re.compile(r"[0-9a-f]{7,40}")


def version_label(version: str | None, commit: str | None, dirty: bool = False) -> str:
    """``"gpuguide 0.1.0 (f4b16f4+dirty)"``, ``"... (commit unknown)"``, or
    ``"gpuguide version unknown"``."""
    if version is None:
        return "gpuguide version unknown"
    if commit is None:
        return f"gpuguide {version} (commit unknown)"
    return f"gpuguide {version} ({commit}{'+dirty' if dirty else ''})"


@dataclass(frozen=True)
class VersionInfo:
    """The helpers a measurement ran with: version, commit (None: unknown), dirty."""

    version: str
    commit: str | None = None
    dirty: bool = False

    @property
    def label(self) -> str:
        return version_label(self.version, self.commit, self.dirty)


def _git(folder: Path, *args: str) -> str | None:
    """The output of ``git -C folder args``, or None when git fails or is missing."""
    # No index refresh: never take the lock beside the user's own git commands.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(folder), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_commit(folder: str | os.PathLike[str]) -> tuple[str, bool] | None:
    """The abbreviated commit of the checkout that tracks ``folder``, and whether it
    is dirty; None without git, a repository, a tracked file there or a commit."""
    path = Path(folder)
    if _git(path, "ls-files", "--error-unmatch", "--", ".") is None:
        return None  # not a repository, or nothing tracked here
    head = _git(path, "rev-parse", "--short", "HEAD")
    commit = (head or "").strip()
    if not _HASH.fullmatch(commit):
        return None
    status = _git(path, "status", "--porcelain", "--untracked-files=all")
    if status is None:
        return None
    # A changed tracked file or an untracked Python file (not a page's output).
    dirty = any(
        not line.startswith("??") or line.rstrip().rstrip('"').endswith(".py")
        for line in status.splitlines()
        if line.strip()
    )
    return commit, dirty


def _read_stamp(package_dir: Path) -> tuple[str, bool] | None:
    try:
        data = json.loads((package_dir / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    commit = data.get("commit") if isinstance(data, dict) else None
    if not isinstance(commit, str) or not _HASH.fullmatch(commit):
        return None
    return commit, data.get("dirty") is True


def _describe(package_dir: Path) -> VersionInfo:
    text = os.environ.get(COMMIT_ENV, "").strip().lower()  # a copy without .git
    commit = text.removesuffix("+dirty")
    from_env = (commit, text.endswith("+dirty")) if _HASH.fullmatch(commit) else None
    found = git_commit(package_dir) or _read_stamp(package_dir) or from_env
    return VersionInfo(__version__, *found) if found else VersionInfo(__version__)


@functools.lru_cache(maxsize=1)
def describe_version() -> VersionInfo:
    """The version of these helpers and their commit (see the module), once per
    process; never raises."""
    return _describe(Path(__file__).resolve().parent)
