"""The helpers' wheel on the site, and the command that installs it.

A local Sphinx extension (``docs/conf.py`` lists it). A reader who has only the
built site needs the ``gpuguide`` helpers that every downloaded script and
notebook imports. So the build puts the helpers' wheel on the site, at
``_downloads/gpuguide-<version>-py3-none-any.whl``, and points every download
at it through the site's base URL (``html_baseurl``; ``docs/conf.py`` reads it
from ``GPUGUIDE_SITE_URL`` and defaults to the README's local server address):

- the first cell of every notebook is ``%pip install "<url of the wheel>"``;
- every ``.py`` under ``_downloads/`` (and inside the zips there) starts with
  comment lines giving the same command.

Both also give the command for a machine without an NVIDIA GPU, which adds
PyTorch's CPU-only index (the CUDA build of torch on Linux is several GB).

The wheel is built once per build, offline: from a fresh copy of ``src/``,
``pyproject.toml`` and ``README.md`` (setuptools keeps ``build/lib`` in the
source tree, where a deleted module would live on), with setuptools' own build
backend in this interpreter (no build isolation, no network). The copy is
stamped with the checkout's commit (:func:`gpuguide.version.write_stamp`), so a
reader's run of a downloaded page names the commit in its provenance line, as
the site's own pages do.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from sphinx.errors import ConfigError, ExtensionError
from sphinx.util import logging

from gpuguide.version import STAMP_FILE, git_commit, write_stamp

__all__ = [
    "CPU_INDEX",
    "build_wheel",
    "first_cell",
    "insert_header",
    "script_header",
    "setup",
    "wheel_name",
    "wheel_url",
]

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]

#: PyTorch's index of CPU-only wheels.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: The first line of the header in a downloaded script (how it is found again).
HEADER_MARK = (
    "# This script needs the gpuguide helpers, served by the site it came from:"
)
#: The first line of the notebook's first cell.
CELL_MARK = (
    "# This notebook needs the gpuguide helpers, served by the site it came from."
)
#: First lines of earlier versions of that cell, replaced as well.
_OLD_CELLS = ("# This notebook needs the small gpuguide helper package",)

# The checkout's commit and dirty mark when the build started (_config_inited).
_source_at_start: list[tuple[str, bool] | None] = []

_BUILD_CODE = (
    "import sys, setuptools.build_meta as backend; "
    "print(backend.build_wheel(sys.argv[1]))"
)


def wheel_name(version: str) -> str:
    """The file name of the helpers' wheel: ``gpuguide-<version>-py3-none-any.whl``."""
    return f"gpuguide-{version}-py3-none-any.whl"


def wheel_url(baseurl: str, version: str) -> str:
    """Where the site serves the wheel: ``<baseurl>_downloads/<wheel_name>``."""
    base = baseurl if baseurl.endswith("/") else baseurl + "/"
    return f"{base}_downloads/{wheel_name(version)}"


def _cpu_command(url: str, pip: str) -> str:
    return f'{pip} install "{url}" --extra-index-url {CPU_INDEX}'


def first_cell(url: str) -> str:
    """The notebooks' first cell: install the wheel at ``url`` (CPU variant in a comment)."""
    return (
        f"{CELL_MARK}\n"
        "# On a machine without an NVIDIA GPU, use PyTorch's CPU-only build instead\n"
        "# (the CUDA build is several GB):\n"
        f"# {_cpu_command(url, '%pip')}\n"
        f'%pip install "{url}"'
    )


def script_header(url: str) -> list[str]:
    """The comment lines put at the top of a downloaded script, blank line last."""
    return [
        HEADER_MARK,
        f'#   pip install "{url}"',
        "# On a machine without an NVIDIA GPU, PyTorch's CPU-only build is far smaller:",
        f"#   {_cpu_command(url, 'pip')}",
        "",
    ]


def _header_at(lines: list[str]) -> int:
    """Where the header goes: after a shebang and an encoding line, if any."""
    at = 0
    if lines and lines[0].startswith("#!"):
        at = 1
    if len(lines) > at and lines[at].startswith("#") and "coding" in lines[at]:
        at += 1
    return at


def insert_header(source: str, url: str) -> str:
    """``source`` with the install header at its top, replacing one already there.

    The header goes after a shebang or encoding line and before the docstring,
    so the docstring stays the module's first statement. Running it again (an
    incremental build) changes nothing, or only the URL where that changed.
    """
    lines = source.split("\n")
    at = _header_at(lines)
    if len(lines) > at and lines[at] == HEADER_MARK:
        end = lines.index("", at)  # the header's blank last line
        del lines[at : end + 1]
    lines[at:at] = script_header(url)
    return "\n".join(lines)


def _set_first_cell(text: str, url: str) -> str:
    notebook = json.loads(text)
    cells = notebook["cells"]
    source = "".join(cells[0]["source"]) if cells else ""
    if not source.startswith((CELL_MARK, *_OLD_CELLS)):  # not ours: leave it
        return text
    cells[0]["source"] = [first_cell(url)]
    return json.dumps(notebook, indent=2)  # as sphinx-gallery writes it


def _fix(name: str, text: str, url: str) -> str:
    if name.endswith(".py"):
        return insert_header(text, url)
    if name.endswith(".ipynb"):
        return _set_first_cell(text, url)
    return text


def _fix_zip(path: Path, url: str) -> None:
    with zipfile.ZipFile(path) as old:
        members = [(info, old.read(info)) for info in old.infolist()]
    changed = []
    for info, data in members:
        if info.filename.endswith((".py", ".ipynb")):
            text = data.decode("utf-8")
            data = _fix(info.filename, text, url).encode("utf-8")
        changed.append((info, data))
    new = path.with_suffix(".zip.new")
    with zipfile.ZipFile(new, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in changed:
            out.writestr(info, data)
    new.replace(path)


def stamp_downloads(downloads: Path, url: str) -> int:
    """Put the install command in every script, notebook and zip under ``downloads``.

    Returns how many files were looked at.
    """
    count = 0
    for path in sorted(downloads.rglob("*")):
        if path.suffix in {".py", ".ipynb"}:
            text = path.read_text(encoding="utf-8")
            fixed = _fix(path.name, text, url)
            if fixed != text:
                path.write_text(fixed, encoding="utf-8")
        elif path.suffix == ".zip":
            _fix_zip(path, url)
        else:
            continue
        count += 1
    return count


def build_wheel(
    root: Path, outdir: Path, *, source: tuple[str, bool] | None = None
) -> Path:
    """Build the helpers' wheel from the checkout at ``root`` into ``outdir``.

    Offline and without build isolation: setuptools' backend runs in this
    interpreter, on a fresh copy of the sources, stamped with ``source`` (a
    commit and its dirty mark) or else the commit of the checkout at ``root``
    now (:func:`gpuguide.version.git_commit`); not stamped where ``root`` is no
    git checkout, so the wheel's runs say "commit unknown".

    Raises
    ------
    sphinx.errors.ExtensionError
        When setuptools fails, with its output.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuguide-wheel-") as tmp:
        tree = Path(tmp) / "package"
        skip = shutil.ignore_patterns("__pycache__", "*.egg-info", STAMP_FILE)
        shutil.copytree(root / "src", tree / "src", ignore=skip)
        source = source or git_commit(root)
        if source is not None:
            write_stamp(tree / "src" / "gpuguide", *source)
        for name in ("pyproject.toml", "README.md"):
            shutil.copy2(root / name, tree / name)
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", _BUILD_CODE, str(wheels)],
            cwd=tree,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            msg = f"building the helpers' wheel failed:\n{done.stdout}{done.stderr}"
            raise ExtensionError(msg)
        built = wheels / done.stdout.split()[-1]
        target = outdir / built.name
        shutil.copy2(built, target)
    return target


def _config_inited(app: Any, config: Any) -> None:
    if not config.html_baseurl:
        msg = "html_baseurl (GPUGUIDE_SITE_URL) must give the site's address"
        raise ConfigError(msg)
    url = wheel_url(config.html_baseurl, config.release)
    config.sphinx_gallery_conf["first_notebook_cell"] = first_cell(url)
    # The commit as the pages run from it: files the build writes later (a
    # recording in docs/results) must not mark the wheel dirty.
    _source_at_start[:] = [git_commit(ROOT)]


def _build_finished(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    downloads = Path(app.outdir) / "_downloads"
    url = wheel_url(app.config.html_baseurl, app.config.release)
    count = stamp_downloads(downloads, url) if downloads.is_dir() else 0
    wheel = build_wheel(ROOT, downloads, source=next(iter(_source_at_start), None))
    if wheel.name != wheel_name(app.config.release):
        msg = f"the wheel is {wheel.name}, the site's links name {url}"
        raise ExtensionError(msg)
    logger.info(f"helpers' wheel: {wheel}; install command in {count} download(s)")


def setup(app: Any) -> dict[str, Any]:
    # Before sphinx-gallery reads its configuration (priority 10).
    app.connect("config-inited", _config_inited, priority=5)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
