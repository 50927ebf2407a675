"""The helpers' wheel on the site, and what a download needs to install it.

A local Sphinx extension (``docs/conf.py`` lists it). A reader who has only the
built site needs the ``gpuguide`` helpers that every downloaded script and
notebook imports. So the build puts the helpers' wheel on the site, at
``_downloads/gpuguide-<version>-py3-none-any.whl``, and points every download
at it through the site's address (``html_baseurl``, from ``GPUGUIDE_SITE_URL``):

- every ``.py`` under ``_downloads/`` (and inside the zips there) starts with
  comment lines giving the commands (``uv run plot_x.py``; ``pip install``) and
  an inline script metadata block (PEP 723: ``# /// script``) whose
  ``dependencies`` are the helpers' wheel and the distributions the page
  imports, with the wheel's own version bounds, so ``uv run`` installs them;
- the first cell of every notebook installs the wheel with ``%pip``, taking
  PyTorch's CPU-only build on a Linux machine without an NVIDIA GPU.

A site built without ``GPUGUIDE_SITE_URL`` has no canonical links, and its
downloads name the local server of the README (``python -m http.server -d
docs/_build/html 8000``), saying so in a comment. A build for publishing
(``GPUGUIDE_PUBLISH=1``) stops without a public ``http(s)`` address.

The wheel is built once per build, offline: from a fresh copy of ``src/``,
``pyproject.toml``, ``README.md`` and ``LICENSE`` (setuptools keeps
``build/lib`` in the source tree, where a deleted module would live on), with
setuptools' own build backend in this interpreter (no build isolation, no
network). Its version is setuptools-scm's for the checkout when the build
started (``0.1.dev417+gb85636e1a``, :func:`checkout_version`), so each build's
wheel names its commit and a reader's ``pip install`` of a newer site's wheel
replaces the old helpers; the site's ``release`` is set to it. The copy is
stamped with the checkout's commit (:func:`write_stamp`), so
a reader's run of a downloaded page names the commit in its provenance line,
as the site's own pages do.
"""

from __future__ import annotations

import ast
import email.parser
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from sphinx.errors import ConfigError, ExtensionError
from sphinx.util import logging

from gpuguide.version import STAMP_FILE, git_commit

__all__ = [
    "CPU_INDEX",
    "LOCAL_URL",
    "Install",
    "build_wheel",
    "check_site_url",
    "checkout_version",
    "first_cell",
    "imported_distributions",
    "insert_header",
    "script_header",
    "setup",
    "wheel_name",
    "wheel_url",
]

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]

#: What the wheel is built from, beside ``src/`` (the licence travels with it).
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE")

#: PyPI's torch for Linux is the CUDA build (several GB); this index has CPU-only builds.
CPU_INDEX = "https://download.pytorch.org/whl/cpu"

#: The README's local server, named by the downloads of a site built without
#: ``GPUGUIDE_SITE_URL``.
LOCAL_URL = "http://localhost:8000/"
LOCAL_SERVER = "python -m http.server -d docs/_build/html 8000"

#: ``GPUGUIDE_PUBLISH=1``: a build meant for publishing, which needs the site's address.
PUBLISH_ENV = "GPUGUIDE_PUBLISH"

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

#: The modules that the helpers' wheel itself provides.
_OWN_MODULES = frozenset({"gpuguide", "gpuguide_tools"})
#: Modules torch's own wheels require where a page can use them: triton comes with
#: every Linux CUDA wheel of torch, and a page imports it only on CUDA.
_WITH_TORCH = frozenset({"triton"})

# The checkout's commit and dirty mark when the build started (_config_inited).
_source_at_start: list[tuple[str, bool] | None] = []

#: setuptools-scm's variable that gives the version of a copy without ``.git``.
PRETEND_ENV = "SETUPTOOLS_SCM_PRETEND_VERSION_FOR_GPUGUIDE"

_BUILD_CODE = (
    "import sys, setuptools.build_meta as backend; "
    "print(backend.build_wheel(sys.argv[1]))"
)


def write_stamp(package_dir: str | os.PathLike[str], commit: str, dirty: bool) -> Path:
    """Write the stamp that names ``commit`` into a copy of the package to build (the
    site's wheel), for :func:`gpuguide.version.describe_version` without a checkout; return its path."""
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        msg = f"commit must be a hexadecimal hash, got {commit!r}"
        raise ValueError(msg)
    stamp = Path(package_dir) / STAMP_FILE
    stamp.write_text(json.dumps({"commit": commit, "dirty": bool(dirty)}) + "\n")
    return stamp


def wheel_name(version: str) -> str:
    """The file name of the helpers' wheel: ``gpuguide-<version>-py3-none-any.whl``."""
    return f"gpuguide-{version}-py3-none-any.whl"


def wheel_url(baseurl: str, version: str) -> str:
    """Where the site serves the wheel: ``<baseurl>_downloads/<wheel_name>``."""
    base = baseurl if baseurl.endswith("/") else baseurl + "/"
    return f"{base}_downloads/{wheel_name(version)}"


def check_site_url(url: str, *, publish: bool) -> None:
    """Stop a build whose site address cannot serve downloads or canonical links.

    ``url`` (``GPUGUIDE_SITE_URL``) may be empty (a local build) unless
    ``publish``; when given it must be an absolute ``http(s)`` address, and a
    build for publishing refuses a loopback one.

    Raises
    ------
    sphinx.errors.ConfigError
        Naming the variables and what to set.
    """
    if not url:
        if publish:
            msg = (
                f"{PUBLISH_ENV}=1 builds a site for publishing, which needs its "
                "address: set GPUGUIDE_SITE_URL=https://your.host/guide/ (the "
                "canonical links and every download's install command use it)"
            )
            raise ConfigError(msg)
        return
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        msg = f"GPUGUIDE_SITE_URL must be an http(s) address, got {url!r}"
        raise ConfigError(msg)
    if publish and parts.hostname in ("localhost", "127.0.0.1", "::1"):
        msg = f"{PUBLISH_ENV}=1, but GPUGUIDE_SITE_URL is a local address: {url!r}"
        raise ConfigError(msg)


def _publishing() -> bool:
    return os.environ.get(PUBLISH_ENV, "").strip() not in ("", "0")


@dataclass(frozen=True)
class Install:
    """What a download needs to install the helpers.

    ``url`` is the wheel's address, ``local`` whether it is the README's local
    server (a site built without ``GPUGUIDE_SITE_URL``), ``requires_python`` and
    ``requires`` (canonical name -> requirement) come from the wheel's metadata.
    """

    url: str
    local: bool = False
    requires_python: str = ""
    requires: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_wheel(cls, wheel: Path, url: str, *, local: bool = False) -> Install:
        """Read ``Requires-Python`` and ``Requires-Dist`` from a built wheel."""
        with zipfile.ZipFile(wheel) as whl:
            (name,) = [n for n in whl.namelist() if n.endswith(".dist-info/METADATA")]
            meta = email.parser.Parser().parsestr(whl.read(name).decode("utf-8"))
        requires = {}
        for line in meta.get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is None or "extra" not in str(req.marker):
                requires[canonicalize_name(req.name)] = str(req)
        return cls(url, local, meta.get("Requires-Python", ""), requires)


def _optional(node: ast.Try) -> bool:
    """Whether a ``try`` catches ImportError (its imports are optional)."""
    names = {"ImportError", "ModuleNotFoundError"}
    for handler in node.handlers:
        caught = handler.type
        kinds = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if any(isinstance(k, ast.Name) and k.id in names for k in kinds):
            return True
    return False


def _imported_modules(source: str) -> set[str]:
    """The top-level modules ``source`` imports, but for relative and optional ones."""
    tree = ast.parse(source)
    optional = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and _optional(node):
            for stmt in node.body:
                optional |= {id(n) for n in ast.walk(stmt)}
    modules = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
    return modules


def imported_distributions(source: str) -> list[str]:
    """The distributions (canonical names) whose modules ``source`` imports.

    The standard library and the helpers' own modules are left out; the others
    are found among the distributions installed here (``numpy`` -> numpy,
    ``PIL`` -> pillow).

    Raises
    ------
    sphinx.errors.ExtensionError
        For a module that no installed distribution provides.
    """
    owners = importlib.metadata.packages_distributions()
    found = set()
    for module in sorted(_imported_modules(source)):
        if module in sys.stdlib_module_names or module in _OWN_MODULES | _WITH_TORCH:
            continue
        if module not in owners:
            msg = f"no installed distribution provides the imported module {module!r}"
            raise ExtensionError(msg)
        found.add(canonicalize_name(owners[module][0]))
    return sorted(found)


def _metadata_block(source: str, install: Install) -> list[str]:
    """The PEP 723 ``script`` block: the wheel, then torch and what ``source``
    imports. torch is always named, even for a page that runs it only in child
    processes: it is what the CPU-only index variants of the commands choose."""
    deps = [f"gpuguide @ {install.url}"]
    for name in sorted({*imported_distributions(source), "torch"}):
        if name != "gpuguide":
            deps.append(install.requires.get(name, name))
    lines = ["# /// script"]
    if install.requires_python:
        lines.append(f"# requires-python = {json.dumps(install.requires_python)}")
    lines.append("# dependencies = [")
    lines += [f"#     {json.dumps(dep)}," for dep in deps]
    return [*lines, "# ]", "# ///"]


def _local_note() -> list[str]:
    return [
        "# (Built without GPUGUIDE_SITE_URL, so the address is the README's local",
        f"# server: `{LOCAL_SERVER}` in the checkout that built it.)",
    ]


def first_cell(url: str, *, local: bool = False) -> str:
    """The notebooks' first cell: ``%pip install`` the wheel at ``url``, with
    PyTorch's CPU-only index on a Linux machine without an NVIDIA GPU."""
    return "\n".join(
        [
            CELL_MARK,
            *(_local_note() if local else []),
            "# PyPI's torch for Linux is the CUDA build (several GB): on a Linux machine",
            "# without an NVIDIA GPU, this cell takes PyTorch's CPU-only build instead.",
            "import shutil, sys",
            "from pathlib import Path",
            "",
            'nvidia_gpu = shutil.which("nvidia-smi") or Path("/proc/driver/nvidia").exists()',
            'linux = sys.platform.startswith("linux")',
            f'cpu_index = "" if nvidia_gpu or not linux else "--extra-index-url {CPU_INDEX}"',
            f'%pip install "{url}" $cpu_index',
        ]
    )


def script_header(source: str, install: Install, name: str = "plot.py") -> list[str]:
    """The comment lines put at the top of a downloaded script ``name``: the
    commands, then its inline metadata (PEP 723); blank line last."""
    url = install.url
    return [
        HEADER_MARK,
        *(_local_note() if install.local else []),
        f"#   uv run {name}        (uv installs what the block below lists)",
        "# or",
        f'#   pip install "{url}"',
        f"#   python {name}",
        "# On a Linux machine without an NVIDIA GPU, PyTorch's CPU-only build is far",
        "# smaller than PyPI's (CUDA) one:",
        f"#   uv run --index {CPU_INDEX} --index-strategy unsafe-best-match {name}",
        f'#   pip install "{url}" --extra-index-url {CPU_INDEX}',
        *_metadata_block(source, install),
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


def insert_header(source: str, install: Install, name: str = "plot.py") -> str:
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
    body = "\n".join(lines[at:])
    lines[at:at] = script_header(body, install, name)
    return "\n".join(lines)


def _set_first_cell(text: str, install: Install) -> str:
    notebook = json.loads(text)
    cells = notebook["cells"]
    source = "".join(cells[0]["source"]) if cells else ""
    if not source.startswith((CELL_MARK, *_OLD_CELLS)):  # not ours: leave it
        return text
    cells[0]["source"] = [first_cell(install.url, local=install.local)]
    return json.dumps(notebook, indent=2)  # as sphinx-gallery writes it


def _fix(name: str, text: str, install: Install) -> str:
    if name.endswith(".py"):
        return insert_header(text, install, Path(name).name)
    if name.endswith(".ipynb"):
        return _set_first_cell(text, install)
    return text


def _fix_zip(path: Path, install: Install) -> None:
    with zipfile.ZipFile(path) as old:
        members = [(info, old.read(info)) for info in old.infolist()]
    changed = []
    for info, data in members:
        if info.filename.endswith((".py", ".ipynb")):
            text = data.decode("utf-8")
            data = _fix(info.filename, text, install).encode("utf-8")
        changed.append((info, data))
    new = path.with_suffix(".zip.new")
    with zipfile.ZipFile(new, "w", zipfile.ZIP_DEFLATED) as out:
        for info, data in changed:
            out.writestr(info, data)
    new.replace(path)


def stamp_downloads(downloads: Path, install: Install) -> int:
    """Put the install commands in every script, notebook and zip under ``downloads``.

    Returns how many files were looked at.
    """
    count = 0
    for path in sorted(downloads.rglob("*")):
        if path.suffix in {".py", ".ipynb"}:
            text = path.read_text(encoding="utf-8")
            fixed = _fix(path.name, text, install)
            if fixed != text:
                path.write_text(fixed, encoding="utf-8")
        elif path.suffix == ".zip":
            _fix_zip(path, install)
        else:
            continue
        count += 1
    return count


def checkout_version(root: Path) -> str | None:
    """The version setuptools-scm gives the checkout at ``root`` now
    (``0.1.dev417+gb85636e1a``, ``.d20260101`` after it with uncommitted
    changes); None where ``root`` is no git checkout or setuptools-scm fails."""
    if git_commit(root) is None:
        return None
    done = subprocess.run(
        [sys.executable, "-m", "setuptools_scm"],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    lines = done.stdout.split()
    return lines[-1] if done.returncode == 0 and lines else None


def build_wheel(
    root: Path,
    outdir: Path,
    *,
    source: tuple[str, bool] | None = None,
    version: str | None = None,
) -> Path:
    """Build the helpers' wheel from the checkout at ``root`` into ``outdir``.

    Offline and without build isolation: setuptools' backend runs in this
    interpreter, on a fresh copy of the sources, stamped with ``source`` (a
    commit and its dirty mark) or else the commit of the checkout at ``root``
    now (:func:`gpuguide.version.git_commit`); not stamped where ``root`` is no
    git checkout, so the wheel's runs say "commit unknown". Its version is
    ``version``, else the checkout's (:func:`checkout_version`), else
    setuptools-scm's fallback (pyproject.toml).

    With ``GPUGUIDE_WHEEL_CACHE`` naming a folder (the tests set one per
    session), a wheel built from the same sources and stamp is taken from it
    instead of built again.

    Raises
    ------
    sphinx.errors.ExtensionError
        When setuptools fails, with its output.
    """
    outdir.mkdir(parents=True, exist_ok=True)
    source = source or git_commit(root)
    version = version or checkout_version(root)
    cache = os.environ.get(WHEEL_CACHE_ENV, "").strip()
    cached = Path(cache) / _wheel_key(root, (source, version)) if cache else None
    if cached is not None and cached.is_dir():
        for wheel in cached.glob("*.whl"):
            return Path(shutil.copy2(wheel, outdir / wheel.name))
    with tempfile.TemporaryDirectory(prefix="gpuguide-wheel-") as tmp:
        tree = Path(tmp) / "package"
        skip = shutil.ignore_patterns("__pycache__", "*.egg-info", STAMP_FILE)
        shutil.copytree(root / "src", tree / "src", ignore=skip)
        if source is not None:
            write_stamp(tree / "src" / "gpuguide", *source)
        for name in PACKAGE_FILES:
            shutil.copy2(root / name, tree / name)
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", _BUILD_CODE, str(wheels)],
            cwd=tree,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, PRETEND_ENV: version} if version else None,
        )
        if done.returncode != 0:
            msg = f"building the helpers' wheel failed:\n{done.stdout}{done.stderr}"
            raise ExtensionError(msg)
        built = wheels / done.stdout.split()[-1]
        target = outdir / built.name
        shutil.copy2(built, target)
        if cached is not None:  # whole or not at all: written aside, then renamed
            cached.parent.mkdir(parents=True, exist_ok=True)
            partial = Path(tempfile.mkdtemp(dir=cached.parent, prefix=".wheel-"))
            shutil.copy2(built, partial / built.name)
            try:
                partial.rename(cached)
            except OSError:  # another build cached it first
                shutil.rmtree(partial, ignore_errors=True)
    return target


#: A folder where :func:`build_wheel` keeps the wheels it built, by their sources.
WHEEL_CACHE_ENV = "GPUGUIDE_WHEEL_CACHE"


def _wheel_key(root: Path, source: object) -> str:
    """What a wheel is built from: the sources under ``src``, the package's
    files, the stamp and the version."""
    digest = hashlib.sha256(repr(source).encode())
    files = sorted(p for p in (root / "src").rglob("*") if p.is_file())
    files = [
        p for p in files if "__pycache__" not in p.parts and ".egg-info" not in str(p)
    ]
    files = [p for p in files if p.name != STAMP_FILE]
    for path in [*files, *(root / name for name in PACKAGE_FILES)]:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return "wheel-" + digest.hexdigest()[:16]


def _download_base(config: Any) -> tuple[str, bool]:
    """The address downloads name, and whether it is the local server's."""
    return (config.html_baseurl, False) if config.html_baseurl else (LOCAL_URL, True)


def _config_inited(app: Any, config: Any) -> None:
    check_site_url(config.html_baseurl, publish=_publishing())
    # The wheel's version, which the site's links name: this commit's, even
    # where the installed helpers are an editable install of an older one.
    config.release = config.version = checkout_version(ROOT) or config.release
    base, local = _download_base(config)
    url = wheel_url(base, config.release)
    config.sphinx_gallery_conf["first_notebook_cell"] = first_cell(url, local=local)
    # The commit as the pages run from it: files the build writes later (a
    # recording in docs/results) must not mark the wheel dirty.
    _source_at_start[:] = [git_commit(ROOT)]


def _build_finished(app: Any, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    downloads = Path(app.outdir) / "_downloads"
    base, local = _download_base(app.config)
    url = wheel_url(base, app.config.release)
    source = next(iter(_source_at_start), None)
    wheel = build_wheel(ROOT, downloads, source=source, version=app.config.release)
    if wheel.name != wheel_name(app.config.release):
        msg = f"the wheel is {wheel.name}, the site's links name {url}"
        raise ExtensionError(msg)
    install = Install.from_wheel(wheel, url, local=local)
    count = stamp_downloads(downloads, install)
    where = " (the local server's address: no GPUGUIDE_SITE_URL)" if local else ""
    logger.info(
        f"helpers' wheel: {wheel}; install commands in {count} download(s){where}"
    )


def setup(app: Any) -> dict[str, Any]:
    # Before sphinx-gallery reads its configuration (priority 10).
    app.connect("config-inited", _config_inited, priority=5)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
