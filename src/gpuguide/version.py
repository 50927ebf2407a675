"""Which gpuguide measured a figure: its version and the commit it was built from.

Every provenance line (:func:`gpuguide.device.provenance`) and every results
file (:class:`gpuguide.results.DeviceRecord`) names the helpers that made the
numbers, as ``gpuguide 0.1.0 (f4b16f4)``, with ``+dirty`` when the checkout
had uncommitted changes (``gpuguide 0.1.0 (f4b16f4+dirty)``), and ``commit
unknown`` where it cannot be told.

:func:`describe_version` finds the commit in one of three places:

- the git checkout the package is imported from (``src/gpuguide`` tracked by
  git): ``git rev-parse`` and ``git status``, run once per process, quietly, and
  never failing: without git, outside a repository, or with the package
  installed into an ignored folder of one (a virtual environment in the
  checkout), the checkout tells nothing;
- else a stamp file, ``_source.json`` beside this module, that the site's
  wheel is built with (``docs/_ext/site_wheel.py`` calls :func:`write_stamp`),
  so a reader who installs that wheel still runs with the commit named;
- else the variable ``GPUGUIDE_COMMIT`` (``2417e61`` or ``2417e61+dirty``), for
  a copy of a checkout without its ``.git`` folder (a GPU machine's copy, a
  tarball): whoever makes the copy knows the commit.

A foundation module: it imports nothing else from gpuguide.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMMIT_ENV",
    "STAMP_FILE",
    "VersionInfo",
    "__version__",
    "describe_version",
    "git_commit",
    "version_label",
    "write_stamp",
]

#: The helpers' version (also ``gpuguide.__version__``; pyproject.toml's).
__version__ = "0.1.0"

#: The file, beside this module in a built wheel, that names the commit.
STAMP_FILE = "_source.json"

#: The commit of a copy without its ``.git`` folder: ``2417e61`` or ``2417e61+dirty``.
COMMIT_ENV = "GPUGUIDE_COMMIT"

#: Seconds to wait for one git command before giving up.
_GIT_TIMEOUT_S = 5.0
_HASH = re.compile(r"[0-9a-f]{7,40}")
_PACKAGE_DIR = Path(__file__).resolve().parent


def version_label(version: str | None, commit: str | None, dirty: bool = False) -> str:
    """``"gpuguide 0.1.0 (f4b16f4)"``, ``"... (f4b16f4+dirty)"``, ``"... (commit
    unknown)"``; ``"gpuguide version unknown"`` when the version is not known
    either (a results file from before versions were recorded)."""
    if version is None:
        return "gpuguide version unknown"
    if commit is None:
        return f"gpuguide {version} (commit unknown)"
    return f"gpuguide {version} ({commit}{'+dirty' if dirty else ''})"


@dataclass(frozen=True)
class VersionInfo:
    """The helpers a measurement ran with.

    Attributes
    ----------
    version : str
        The package version (``"0.1.0"``).
    commit : str or None
        The abbreviated commit the package was built from (``"f4b16f4"``);
        None when it cannot be told.
    dirty : bool
        Whether the checkout had uncommitted changes (always False when the
        commit is unknown).
    """

    version: str
    commit: str | None = None
    dirty: bool = False

    @property
    def label(self) -> str:
        """``"gpuguide 0.1.0 (f4b16f4+dirty)"`` (:func:`version_label`)."""
        return version_label(self.version, self.commit, self.dirty)


def _git(folder: Path, *args: str) -> str | None:
    """The output of ``git -C folder args``, or None when git fails or is missing."""
    executable = shutil.which("git")
    if executable is None:
        return None
    # No index refresh: a status run beside the user's own git commands must not
    # take the index lock.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            [executable, "-C", os.fspath(folder), *args],
            capture_output=True,
            text=True,
            timeout=_GIT_TIMEOUT_S,
            check=False,
            env=env,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.stdout if done.returncode == 0 else None


def _is_dirty(status: str) -> bool:
    """Whether ``git status --porcelain --untracked-files=all`` output shows a
    change: a tracked file changed, or a Python file git does not know (another
    untracked file, a page's output say, does not count)."""
    for line in status.splitlines():
        if not line.strip():
            continue
        if not line.startswith("??"):
            return True
        if line.rstrip().rstrip('"').endswith(".py"):
            return True
    return False


def git_commit(folder: str | os.PathLike[str]) -> tuple[str, bool] | None:
    """The commit of the git checkout that tracks ``folder``, and whether it is dirty.

    Parameters
    ----------
    folder : str or path-like
        A folder whose files git tracks (the package's, or the checkout's root).

    Returns
    -------
    tuple of (str, bool) or None
        The abbreviated commit (``"f4b16f4"``) and whether the checkout has
        uncommitted changes (:func:`_is_dirty`); None when git is missing or
        fails, ``folder`` is in no repository or holds no tracked file (a
        package installed into an ignored virtual environment of a checkout),
        or the repository has no commit.
    """
    path = Path(folder)
    if not path.is_dir():
        return None
    if _git(path, "ls-files", "--error-unmatch", "--", ".") is None:
        return None  # not a repository, or nothing tracked here
    head = _git(path, "rev-parse", "--short", "HEAD")
    commit = (head or "").strip()
    if not _HASH.fullmatch(commit):
        return None
    status = _git(path, "status", "--porcelain", "--untracked-files=all")
    if status is None:
        return None
    return commit, _is_dirty(status)


def write_stamp(package_dir: str | os.PathLike[str], commit: str, dirty: bool) -> Path:
    """Write the stamp that names ``commit`` into a copy of the package to build.

    The site's wheel is built from a fresh copy of ``src/``; the stamp in it
    lets :func:`describe_version` name the commit where no checkout is at hand.
    Returns the file written.
    """
    if not _HASH.fullmatch(commit):
        msg = f"commit must be a hexadecimal hash, got {commit!r}"
        raise ValueError(msg)
    stamp = Path(package_dir) / STAMP_FILE
    stamp.write_text(json.dumps({"commit": commit, "dirty": bool(dirty)}) + "\n")
    return stamp


def _read_stamp(package_dir: Path) -> tuple[str, bool] | None:
    """The commit and dirty mark a stamp file names; None when there is no valid one."""
    try:
        data = json.loads((package_dir / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    commit, dirty = data.get("commit"), data.get("dirty", False)
    if not isinstance(commit, str) or not _HASH.fullmatch(commit):
        return None
    return commit, dirty is True


def _commit_from_env() -> tuple[str, bool] | None:
    """The commit ``GPUGUIDE_COMMIT`` names; None when unset or not a hash."""
    text = os.environ.get(COMMIT_ENV, "").strip().lower()
    commit = text.removesuffix("+dirty")
    if not _HASH.fullmatch(commit):
        return None
    return commit, text.endswith("+dirty")


def _describe(package_dir: Path) -> VersionInfo:
    found = git_commit(package_dir) or _read_stamp(package_dir) or _commit_from_env()
    if found is None:
        return VersionInfo(__version__)
    return VersionInfo(__version__, commit=found[0], dirty=found[1])


@functools.lru_cache(maxsize=1)
def describe_version() -> VersionInfo:
    """The version of these helpers and the commit they come from, once per process.

    From the git checkout the package is imported from, else from the stamp a
    built wheel carries, else from ``GPUGUIDE_COMMIT``, else with the commit
    unknown. Never raises.
    """
    return _describe(_PACKAGE_DIR)
