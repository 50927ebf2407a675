"""Sessions for gpuguide: ``nox -s tests`` (default), ``nox -s docs``, ``nox -s lint``,
``nox -s record`` (record this device's figures in docs/results), ``nox -s
compat`` (the tests on the lowest supported and the newest torch) and ``nox -s
build`` (the sdist and wheel in dist/, checked with twine).

Environments are kept between runs and reinstalled only when ``pyproject.toml``
or this file changes. On a Linux machine with no NVIDIA GPU the sessions
(``compat`` excepted) install a CPU build of torch instead of the multi-GB
CUDA one; on a GPU machine they install the normal build. With ``nox
--no-venv`` the sessions install nothing and use the packages of the
interpreter that runs nox (a GPU machine that reaches no package registry);
``compat`` refuses to run so.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nox
from packaging.requirements import Requirement
from packaging.version import Version

nox.needs_version = ">=2025.2.9"
nox.options.sessions = ["tests"]
nox.options.reuse_venv = "yes"
# pip, not uv: pip honours a machine's pip configuration (local wheel folders).
nox.options.default_venv_backend = "virtualenv"

ROOT = Path(__file__).resolve().parent
DOCS = ROOT / "docs"
BUILD = DOCS / "_build"
DIST = ROOT / "dist"
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")

# The CPU build tried first on a machine without an NVIDIA GPU (a wheel that
# pip can find locally), then PyTorch's own CPU-only index.
CPU_TORCH = os.environ.get("GPUGUIDE_CPU_TORCH", "torch==2.13.0")
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"

#: The newest torch release, the upper end that ``compat`` tests.
NEWEST_TORCH = "2.15.0"


def _lowest_torch() -> str:
    """The lowest torch that pyproject.toml allows: ``torch>=2.11`` gives "2.11.0"."""
    for dep in PYPROJECT["project"]["dependencies"]:
        req = Requirement(dep)
        bounds = [s.version for s in req.specifier if s.operator in {">=", "==", "~="}]
        if req.name == "torch" and len(bounds) == 1:
            release = Version(bounds[0]).release
            return ".".join(str(n) for n in (*release, 0, 0)[:3])
    msg = "pyproject.toml must give torch one lower bound, as in torch>=2.11"
    raise RuntimeError(msg)


#: pip settings for ``compat``: no pip configuration files and none of the
#: settings that could pick another torch than PyPI's (a constraint file that
#: caps torch, local wheel folders, other indexes). An index mirror given by
#: PIP_INDEX_URL, certificates and proxies still apply.
PYPI_ONLY: dict[str, str | None] = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_CONSTRAINT": None,
    "PIP_FIND_LINKS": None,
    "PIP_EXTRA_INDEX_URL": None,
    "PIP_NO_INDEX": None,
}


def _has_nvidia_gpu() -> bool:
    if Path("/proc/driver/nvidia/version").exists():
        return True
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def _wants_cpu_torch() -> bool:
    # Only Linux wheels on PyPI bundle CUDA; macOS and Windows ones are CPU builds.
    return sys.platform.startswith("linux") and not _has_nvidia_gpu()


def _no_venv(session: nox.Session) -> bool:
    return session.venv_backend == "none"


def _python(session: nox.Session) -> str:
    """The interpreter to run: the session's, or nox's own with --no-venv."""
    return sys.executable if _no_venv(session) else "python"


def _installed_torch(session: nox.Session) -> str:
    """The torch version in the session's environment, or "" when none."""
    code = "import importlib.metadata as m; print('torch', m.version('torch'))"
    out = session.run_install("python", "-c", code, silent=True, success_codes=[0, 1])
    words = (out or "").split()
    return words[-1] if words[-2:-1] == ["torch"] else ""


def _install_torch(session: nox.Session) -> None:
    if not _wants_cpu_torch():
        return  # the project's own dependency pulls the normal (CUDA) build
    if "+cpu" in _installed_torch(session):
        return
    session.log("No NVIDIA GPU here: installing a CPU build of torch.")
    # A CPU wheel that pip finds without an index (a local wheel folder) ...
    session.run_install(
        "python", "-m", "pip", "install", "--no-index", "--no-deps", CPU_TORCH,
        success_codes=[0, 1],
    )  # fmt: skip
    if not _installed_torch(session):
        # ... else PyTorch's CPU-only index, which also mirrors torch's needs.
        session.install(CPU_TORCH.split("==")[0], "--index-url", CPU_TORCH_INDEX)


def _install(session: nox.Session, *groups: str, torch: str = "") -> None:
    """Install torch, the dependency groups and the package, once per change.

    With ``torch="2.11.0"``: exactly that release from PyPI (see PYPI_ONLY),
    and the package itself as a reader installs it (not editable), again on
    every run so that the tests see the current sources.
    """
    if _no_venv(session):
        session.log("--no-venv: using the packages this interpreter already has.")
        return
    env = PYPI_ONLY if torch else None
    key = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes()
        + Path(__file__).read_bytes()
        + repr((groups, torch)).encode()
    ).hexdigest()
    stamp = Path(session.virtualenv.location) / ".gpuguide-installed"
    if stamp.exists() and stamp.read_text() == key:
        session.log("Environment up to date; nothing to install.")
    else:
        if torch:
            session.install(f"torch=={torch}", env=env)
        else:
            _install_torch(session)
        session.install(*nox.project.dependency_groups(PYPROJECT, *groups), env=env)
        if torch:  # the package's own needs; the package itself follows
            session.install(*PYPROJECT["project"]["dependencies"], env=env)
        else:
            session.install("-e", ".")
        stamp.write_text(key)
    if not torch:
        _refresh_version(session)
    if torch:  # a copy without .git: its version names the commit by hand
        head = _head(short=True)
        pretend = {"SETUPTOOLS_SCM_PRETEND_VERSION_FOR_GPUGUIDE": f"0+g{head}"}
        copy = _fresh_copy(session)
        session.install(
            "--no-deps", "--force-reinstall", copy, env={**(env or {}), **pretend}
        )


def _head(*, short: bool = False) -> str:
    """The checkout's commit, "" outside a git checkout."""
    args = [
        "git",
        "-C",
        str(ROOT),
        "rev-parse",
        *(["--short"] if short else []),
        "HEAD",
    ]
    run = subprocess.run(args, capture_output=True, text=True, check=False)
    return run.stdout.strip() or ("unknown" if short else "")


def _refresh_version(session: nox.Session) -> None:
    """Reinstall the editable package when the checkout's commit moved, so its
    version (setuptools-scm's, fixed at install) names the commit it runs."""
    head = _head()
    stamp = Path(session.virtualenv.location) / ".gpuguide-commit"
    if head and (not stamp.exists() or stamp.read_text() != head):
        session.install("--no-deps", "-e", ".")
        stamp.write_text(head)


def _fresh_copy(session: nox.Session) -> str:
    """What the package is built from, copied afresh into the session's tmp.

    setuptools builds in the source tree and keeps ``build/lib`` between
    builds, so a module deleted from src/ would live on in the wheel.
    """
    tree = Path(session.create_tmp()) / "package"
    shutil.rmtree(tree, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", tree / "src", ignore=skip)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, tree / name)
    return str(tree)


def _env(session: nox.Session) -> dict[str, str]:
    env = {"MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}
    if _no_venv(session):  # make the checkout's package importable without installing
        src = str(ROOT / "src")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (src, os.environ.get("PYTHONPATH", "")) if p
        )
    return env


def _has_module(session: nox.Session, name: str) -> bool:
    # A dotted name ("build.__main__") tells a package from a folder of that name
    # in the working directory; its parent missing means the module is too.
    code = (
        "import importlib.util\n"
        f"try: print(importlib.util.find_spec({name!r}) is not None)\n"
        "except ModuleNotFoundError: print(False)"
    )
    out = session.run(_python(session), "-c", code, silent=True)
    return (out or "").strip() == "True"


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite with coverage of src/gpuguide (posargs go to pytest).

    The site build, which executes every page once, runs beside the other
    tests (tests/conftest.py); the 25 slowest tests are listed at the end.
    """
    _install(session, "test")
    args = ["-m", "pytest", "--durations=25"]
    if _has_module(session, "pytest_cov"):
        args += ["--cov=gpuguide", "--cov-report=term-missing"]
        if not session.posargs:  # a selection of tests cannot cover everything
            args.append("--cov-fail-under=95")
    else:
        session.log("pytest-cov is not installed here: running without coverage.")
    session.run(_python(session), *args, *session.posargs, env=_env(session))


def _docs_args(posargs: list[str]) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(prog="nox -s docs --", add_help=False)
    parser.add_argument("--no-exec", action="store_true")
    parser.add_argument("--example")
    parser.add_argument("--clean", action="store_true")
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--merge", action="store_true")
    parser.add_argument("--stale", action="store_true")
    parser.add_argument("--strict-claims", action="store_true")
    return parser.parse_known_args(posargs)


def _pages_pattern(pages: list[str]) -> str:
    """sphinx-gallery's ``filename_pattern`` that executes exactly ``pages``."""
    return "/(" + "|".join(pages) + r")\.py$"


def _stale_passes(session: nox.Session) -> list[tuple[str, list[str]]]:
    """The pages of a ``--stale`` build, in passes: those this device's results
    file lacks or marks failed, then those recorded from other code, then the
    rest (``gpuguide_tools.pages --stale`` says which and why)."""
    out = session.run(
        _python(session), "-m", "gpuguide_tools.pages", "--stale",
        "--examples", str(ROOT / "examples"), "--results", str(DOCS / "results"),
        silent=True, env=_env(session),
    )  # fmt: skip
    stale = [line.split("\t") for line in (out or "").splitlines() if "\t" in line]
    stale = [(page, why) for page, why in stale if page.startswith("plot_")]
    for page, why in stale:
        session.log(f"stale: {page}: {why}")
    missing = [page for page, why in stale if "changed since" not in why]
    changed = [page for page, why in stale if "changed since" in why]
    rest = sorted(
        {p.stem for p in (ROOT / "examples").glob("*/plot_*.py")}
        - set(missing + changed)
    )
    passes = [
        ("missing or failed", missing),
        ("recorded from other code", changed),
        ("up to date", rest),
    ]
    return [(what, pages) for what, pages in passes if pages]


@nox.session
def docs(session: nox.Session) -> None:
    """Build the site into docs/_build/html (--no-exec, --example NAME, --clean,
    --record, --merge, --stale, --strict-claims).

    ``--strict-claims``: a claim a page states (``gpuguide.claim``) that does
    not hold on this device fails the page, and so the build (the tests' build
    does the same); without it the page says so in place and the log lists it.

    ``GPUGUIDE_SITE_URL`` is the address the site is served from (canonical
    links, the downloads' install commands); ``GPUGUIDE_PUBLISH=1`` (a build for
    publishing) refuses to run without it.

    ``--record``: the same execution of the pages also writes this device's
    results file, ``docs/results/<kind>-<device>.json``, one page at a time:
    each page's figures are written (validated, in one step) as soon as it
    ends, so a build killed at any moment keeps every page that finished; a
    page that fails keeps its earlier figures, is marked failed and named in
    the log. The site shows the file. With ``--example NAME`` only those pages
    run; ``--merge`` (implies ``--record``) merges each page with its earlier
    recording into medians with their spread, as ``nox -s record`` does. Every
    page of the build is executed, even one that is up to date.

    ``--record --stale``: the pages this device's file lacks or marks failed
    run first, then those recorded from other code (the page or the helpers it
    imports changed), then the rest, each group in one sphinx build: a GPU
    loan spends its minutes where the site is out of date.
    """
    _install(session, "docs")
    opts, sphinx_args = _docs_args(session.posargs)
    publishing = os.environ.get("GPUGUIDE_PUBLISH", "").strip() not in ("", "0")
    if publishing and not os.environ.get("GPUGUIDE_SITE_URL", "").strip():
        # The build stops too (docs/_ext/site_wheel.py); this says it in one line.
        session.error(
            "GPUGUIDE_PUBLISH=1 needs the site's address: "
            "GPUGUIDE_SITE_URL=https://your.host/guide/"
        )
    if opts.merge:
        opts.record = True
    if opts.record and opts.no_exec:
        session.error("--record needs the pages executed; drop --no-exec")
    if opts.stale and not opts.record:
        session.error(
            "--stale orders the pages by this device's recording: add --record"
        )
    if opts.stale and opts.example:
        session.error("--stale chooses the pages itself; drop --example")
    if opts.clean:
        for path in (BUILD, DOCS / "auto_examples", DOCS / "sg_execution_times.rst"):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
    out = BUILD / "html"
    if opts.no_exec:
        # A separate output folder, so the executed pages are kept.
        sphinx_args = ["-D", "plot_gallery=0", *sphinx_args]
        out = BUILD / "html-noexec"
    if opts.record:
        mode = "merge" if opts.merge else "replace"
        sphinx_args = ["-D", f"gpuguide_record={mode}", *sphinx_args]
    passes: list[tuple[str, str | None]] = [("", opts.example)]
    if opts.stale:  # most stale first: a loan cut short has spent itself there
        passes = [
            (what, _pages_pattern(pages)) for what, pages in _stale_passes(session)
        ]
    env = _env(session)
    if opts.strict_claims:
        env["GPUGUIDE_STRICT_CLAIMS"] = "1"
    failed = []
    for what, pattern in passes:
        args = list(sphinx_args)
        if pattern:
            pattern = pattern.removesuffix(".py")
            args = [
                "-D", f"sphinx_gallery_conf.filename_pattern={pattern}",
                "-D", "sphinx_gallery_conf.run_stale_examples=1",  # even if unchanged
                *args,
            ]  # fmt: skip
        if what:
            session.log(f"--stale: the pages {what}")
        try:
            session.run(
                _python(session), "-m", "sphinx", "-b", "html", "-W", "--keep-going",
                "-d", str(BUILD / "doctrees" / out.name), str(DOCS), str(out), *args,
                env=env,
            )  # fmt: skip
        except nox.command.CommandFailed:
            if not opts.stale:
                raise
            failed.append(what)  # the later passes still record their pages
    if failed:
        session.error(f"--stale: the build of the pages {' and '.join(failed)} failed")
    session.log(f"Open {out / 'index.html'} in a browser.")


@nox.session
def record(session: nox.Session) -> None:
    """Run every page on this device and record its figures in docs/results.

    Writes each page into ``docs/results/<kind>-<device>.json`` as soon as it
    ends; a failing page keeps its earlier figures and is marked failed, and
    the other pages still run. posargs go to
    ``python -m gpuguide_tools.recorder``: ``--example NAME`` (some pages; the file's
    other pages are kept), ``--merge`` (merge with the recording already there
    into medians with their spread), ``--timeout SECONDS`` (per page).
    """
    _install(session, "docs")
    if os.environ.get("GPUGUIDE_SMALL", "").strip() not in ("", "0"):
        session.warn("GPUGUIDE_SMALL is set: the file will be marked as small sizes.")
    session.run(
        _python(session), "-m", "gpuguide_tools.recorder",
        "--examples", str(ROOT / "examples"), "--results", str(DOCS / "results"),
        *session.posargs, env=_env(session),
    )  # fmt: skip


@nox.session
def lint(session: nox.Session) -> None:
    """Check style with ruff and types with mypy (posargs go to ``ruff check``)."""
    # mypy checks against torch's, numpy's and matplotlib's own types.
    _install(session, "lint")
    ruff = (_python(session), "-m", "ruff")
    session.run(*ruff, "check", *session.posargs)
    session.run(*ruff, "format", "--check")
    if _no_venv(session) and not _has_module(session, "mypy"):
        session.log("mypy is not installed here: type checking skipped.")
        return
    session.run(_python(session), "-m", "mypy")  # its settings are in pyproject.toml


@nox.session
def build(session: nox.Session) -> None:
    """Build the sdist and wheel into dist/ and check their metadata with twine."""
    args = ["--outdir", str(DIST)]
    if _no_venv(session):
        # No package registry: build with this interpreter's setuptools.
        missing = [
            name
            for name, module in (
                ("build", "build.__main__"),
                ("twine", "twine.__main__"),
                ("setuptools", "setuptools.build_meta"),
            )
            if not _has_module(session, module)
        ]
        if missing:
            session.error(
                f"--no-venv: {', '.join(missing)} not installed in {sys.executable}; "
                "install them there, or run without --no-venv"
            )
        args.append("--no-isolation")
    else:
        session.install(*nox.project.dependency_groups(PYPROJECT, "build"))
    for old in DIST.glob("gpuguide-*"):  # check only what this run builds
        old.unlink()
    session.run(_python(session), "-m", "build", *args, str(ROOT))
    built = sorted(str(path) for path in DIST.glob("gpuguide-*"))
    session.run(_python(session), "-m", "twine", "check", "--strict", *built)


@nox.session
@nox.parametrize("torch", [_lowest_torch(), NEWEST_TORCH])
def compat(session: nox.Session, torch: str) -> None:
    """The tests, every page once (the site build), on the lowest and newest torch.

    The lowest is read from pyproject.toml. Each torch comes from PyPI, whatever
    this machine's pip configuration says; on Linux that is a CUDA build of
    several GB, which runs on a CPU too. posargs go to pytest.
    """
    if _no_venv(session):
        session.error(
            f"compat installs torch {torch} in its own environment; "
            "run it without --no-venv"
        )
    _install(session, "test", torch=torch)
    # PyPI's own build: its distribution version has no local label (+cpu).
    code = (
        "import importlib.metadata as m, torch; "
        "print(m.version('torch'), torch.__version__, torch.version.cuda)"
    )
    out = session.run("python", "-c", code, silent=True)
    if out is None:  # --install-only: nothing runs
        return
    dist, version, cuda = out.split()[-3:]
    if dist != torch:
        session.error(f"expected torch {torch} from PyPI, found {dist}")
    build = "a CPU build" if cuda == "None" else f"a CUDA {cuda} build"
    session.log(f"Running on torch {version}, {build}.")
    # Every page runs once, in the session's site build (tests/test_docs_build.py).
    # A reader's environment in the download tests installs from PyPI too.
    env = {**_env(session), **PYPI_ONLY}
    session.run("python", "-m", "pytest", *session.posargs, env=env)
