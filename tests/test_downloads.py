"""A downloaded script and notebook, run as a reader runs them.

A small site (one example) is built for the address ``http://127.0.0.1:<port>/``
and served there, once for the module. Each test takes the downloads from the
build's ``_downloads/`` into a fresh folder outside the repository:

- pip: a fresh virtual environment, the helpers installed with the command the
  script's header gives (the CPU-only variant where this machine has no NVIDIA
  GPU), the script run with that environment's Python and the notebook with its
  Jupyter (``nbconvert --execute``, whose first cell runs its ``%pip install``
  again, with the CPU-only index on a Linux machine without an NVIDIA GPU). Only
  a fresh environment that cannot get torch and the rest from any index (no
  network and no local wheel folder) skips.
- uv: ``uv run plot_only.py``, which reads the script's inline metadata (PEP
  723) and runs it in an environment of its own. So that no torch is
  downloaded, the distributions the metadata asks for, and theirs, come from
  this environment, packed again as wheels into a folder (``--no-index
  --find-links``); the helpers come from the served site, by the URL in the
  metadata. It proves that the block is one uv reads, that the site serves the
  wheel it names, and that what it lists (with what that needs) is all the
  script needs; not that an index would resolve the same versions. Skips only
  where uv is not installed (pyproject's test group has it).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import site_wheel
from conftest import ROOT, build_mini_site
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gpuguide.version import __version__, git_commit

pytest.importorskip("sphinx_gallery")

#: The version the site's wheel gets: the checkout's now (an installed copy's
#: __version__ is the one of the commit it was installed at).
gpuguide_version = site_wheel.checkout_version(ROOT) or __version__

# A site build, a fresh environment and pip installs (72 s on 2 cores from local
# wheels; minutes more where pip downloads torch).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

EXAMPLE = '''"""
Only
====

One example, run as a reader runs it.
"""

import matplotlib.pyplot as plt
import torch

import gpuguide

device = gpuguide.pick_device()
print(gpuguide.describe_device(device).provenance())
print(f"helpers from {gpuguide.__file__}")
x = torch.linspace(0.0, 1.0, 50)
fig, ax = plt.subplots()
ax.plot(x.numpy(), (x * x).numpy())
gpuguide.label_device(fig, device)
plt.show()
'''

#: pip's words when no index can give it a package (offline, no local wheels).
NO_PACKAGE = re.compile(r"No matching distribution found for ([A-Za-z0-9_.\-]+)")


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The one-example site, built for and served on 127.0.0.1 (a free port):
    its address and the folder of its downloads."""
    root = tmp_path_factory.mktemp("downloads")
    html = root / "site" / "html"
    handler = functools.partial(_Quiet, directory=str(html))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        built = build_mini_site(
            root / "site", EXAMPLE, MPLBACKEND="Agg", GPUGUIDE_SITE_URL=url,
            GPUGUIDE_PUBLISH="",
        )  # fmt: skip
        assert built.returncode == 0, built.stderr[-3000:]
        yield url, html / "_downloads"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _has_nvidia_gpu() -> bool:
    return shutil.which("nvidia-smi") is not None or Path("/dev/nvidia0").exists()


def _install_command(header: str, url: str) -> str:
    """The header's ``pip install`` command (CPU-only where there is no NVIDIA GPU)."""
    commands = [
        line.removeprefix("#").strip()
        for line in header.splitlines()
        if line.startswith("#   pip install")
    ]
    assert len(commands) == 2, header
    plain, cpu = sorted(commands, key=len)
    assert plain.startswith(f'pip install "{url}_downloads/gpuguide-'), (url, header)
    assert cpu == f"{plain} --extra-index-url https://download.pytorch.org/whl/cpu"
    return plain if _has_nvidia_gpu() else cpu


def _unreachable_index(install: list[str]) -> str | None:
    """The index in the pip arguments that cannot be reached from here, if any."""
    for flag, value in itertools.pairwise(install):
        if flag == "--extra-index-url":
            try:
                with urllib.request.urlopen(value.rstrip("/") + "/", timeout=10):
                    pass
            except OSError:
                return value
    return None


def _reader_env(venv: Path, home: Path) -> dict[str, str]:
    """The environment of a reader's shell with ``venv`` activated: no
    PYTHONPATH, no MPLBACKEND (the script's run sets its own)."""
    env = {
        k: v
        for k, v in os.environ.items()
        # nox's MPLBACKEND=Agg would leave the notebook without inline figures
        if not k.startswith(
            ("PYTHON", "JUPYTER", "IPYTHON", "VIRTUAL_ENV", "CONDA", "MPLBACKEND")
        )
    }
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        VIRTUAL_ENV=str(venv),
        PYTHONNOUSERSITE="1",
        JUPYTER_DATA_DIR=str(home / "jupyter-data"),
        JUPYTER_CONFIG_DIR=str(home / "jupyter-config"),
        IPYTHONDIR=str(home / "ipython"),
        MPLCONFIGDIR=str(home / "matplotlib"),
        GPUGUIDE_SMALL="1",
    )
    return env


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


def _pip(venv: Path, args: list[str], env: dict[str, str], cwd: Path) -> None:
    """Run pip in ``venv``; skip only where an index cannot give a package."""
    done = _run(
        [str(venv / "bin" / "python"), "-m", "pip", *args],
        env=env, cwd=cwd, timeout=900,
    )  # fmt: skip
    if done.returncode == 0:
        return
    output = done.stdout + done.stderr
    missing = NO_PACKAGE.search(output)
    if missing and not missing.group(1).lower().startswith("gpuguide"):
        pytest.skip(
            f"a fresh environment cannot get {missing.group(1)!r} here "
            f"(no network and no local wheel folder?): pip {' '.join(args)}\n"
            + output[-1500:]
        )
    pytest.fail(f"pip {' '.join(args)} failed:\n{output[-5000:]}")


@pytest.fixture
def outside_the_repository():
    """A function giving a fresh folder outside the repository: ``tmp_path``
    itself where it is outside, else one in the system's temporary folder."""
    made: list[Path] = []

    def folder(tmp_path: Path) -> Path:
        if not tmp_path.resolve().is_relative_to(ROOT):
            return tmp_path
        for base in ("/tmp", "/var/tmp", str(Path.home())):
            if Path(base).is_dir() and not Path(base).resolve().is_relative_to(ROOT):
                made.append(Path(tempfile.mkdtemp(prefix="gpuguide-reader-", dir=base)))
                return made[-1]
        pytest.fail("no writable folder outside the repository for the reader")

    yield folder
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def test_a_downloaded_notebook_and_script_run_in_a_fresh_environment(
    tmp_path, site, outside_the_repository
):
    """A reader's run of a downloaded script, from a fresh virtual environment
    with pip and the site's wheel: slow (about 40 s on two cores from local
    wheels; minutes where pip downloads torch), because that environment and
    its torch are what a reader gets, and nothing shorter installs them."""
    started = time.perf_counter()
    url, downloads = site
    (notebook,) = downloads.rglob("plot_only.ipynb")
    (script,) = downloads.rglob("plot_only.py")
    cell = "".join(json.loads(notebook.read_text())["cells"][0]["source"])
    # The notebook installs the same wheel, from the same address.
    assert f'%pip install "{url}_downloads/gpuguide-' in cell, cell
    header = script.read_text().split('"""', 1)[0]
    command = _install_command(header, url)
    install = shlex.split(command)[1:]

    # The helpers' wheel is served where the command points.
    (wheel_url,) = [a for a in install if a.startswith(url)]
    with urllib.request.urlopen(wheel_url, timeout=30) as response:
        assert response.read()[:2] == b"PK", wheel_url  # a zip

    # The reader's folder and environment, outside the repository (nox's compat
    # sessions put the temporary folder inside it, under .nox).
    outside = outside_the_repository(tmp_path)
    reader = outside / "reader"
    reader.mkdir()
    assert not reader.resolve().is_relative_to(ROOT)
    for path in (notebook, script):
        shutil.copy2(path, reader / path.name)
    venv = outside / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    assert made.returncode == 0, made.stderr
    env = _reader_env(venv, outside / "home")
    python = str(venv / "bin" / "python")

    index = _unreachable_index(install)
    if index is not None:
        # This machine cannot reach PyTorch's CPU index, so the command cannot get
        # its CPU-only torch; without it pip would take the newest torch from the
        # other indexes (on Linux the CUDA build, several GB) after retrying the
        # index for every package. So take this interpreter's torch from the local
        # wheels first (the command then keeps it) and let pip not retry.
        env["PIP_RETRIES"] = "0"
        # The distribution's version: PyPI's CUDA build is "2.11.0", though it
        # calls itself 2.11.0+cu130 once imported.
        torch = importlib.metadata.version("torch")
        _pip(venv, ["install", f"torch=={torch}"], env, reader)
    _pip(venv, install, env, reader)
    _pip(venv, ["install", "nbconvert", "ipykernel"], env, reader)
    if index is None and not _has_nvidia_gpu():  # the CPU-only command did its job
        torch_build = _run([python, "-c", "import torch; print(torch.__version__)"],
                           env=env, cwd=reader, timeout=300)  # fmt: skip
        assert torch_build.stdout.strip().endswith("+cpu"), torch_build.stdout
    installed = time.perf_counter()

    where = _run([python, "-c", "import gpuguide; print(gpuguide.__file__)"],
                 env=env, cwd=reader, timeout=300)  # fmt: skip
    assert where.returncode == 0, where.stderr
    helpers = Path(where.stdout.strip())
    assert helpers.is_relative_to(venv), helpers
    assert "site-packages" in helpers.parts, helpers

    # The script, as `python plot_only.py` in the reader's folder.
    ran = _run([python, script.name], env={**env, "MPLBACKEND": "Agg"},
               cwd=reader, timeout=600)  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert f"helpers from {helpers}" in ran.stdout, ran.stdout
    assert "Measured on" in ran.stdout, ran.stdout
    # The wheel names the commit it was built from, as the site's own pages do.
    built_from = git_commit(ROOT)
    if built_from is not None:
        assert f"| gpuguide {gpuguide_version} ({built_from[0]}" in ran.stdout
    assert "Warning" not in ran.stderr, ran.stderr

    # The notebook, with a kernel that is the environment's own Python; its first
    # cell runs %pip install again (the CPU-only index where there is no GPU).
    kernel = _run([python, "-m", "ipykernel", "install", "--user",
                   "--name", "gpuguide-reader"], env=env, cwd=reader, timeout=300)  # fmt: skip
    assert kernel.returncode == 0, kernel.stderr
    executed = _run(
        [str(venv / "bin" / "jupyter"), "nbconvert", "--to", "notebook",
         "--execute", "--ExecutePreprocessor.kernel_name=gpuguide-reader",
         "--ExecutePreprocessor.timeout=600", "--output", "executed.ipynb",
         notebook.name],
        env=env, cwd=reader, timeout=900,
    )  # fmt: skip
    assert executed.returncode == 0, executed.stderr[-5000:]
    cells = json.loads((reader / "executed.ipynb").read_text())["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    text = "".join("".join(o.get("text", "")) for o in outputs)
    errors = [o for o in outputs if o["output_type"] == "error"]
    assert not errors, errors
    assert f"helpers from {helpers}" in text, text[-3000:]
    assert "Measured on" in text, text[-3000:]
    assert any("image/png" in o.get("data", {}) for o in outputs), "no figure"
    warnings = [o for o in outputs if o.get("name") == "stderr"]
    assert not any("Warning" in "".join(o["text"]) for o in warnings), warnings

    print(
        f"build+install {installed - started:.0f} s, "
        f"total {time.perf_counter() - started:.0f} s"
    )


def _requirements_closure(
    requirements: list[str],
) -> dict[str, importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need, theirs included,
    following the extras each asks for (``cuda-toolkit[cudart]``: the CUDA
    build of torch needs the runtime that extra names)."""

    def wanted(req: Requirement, extras: set[str]) -> bool:
        marker = req.marker
        return marker is None or any(
            marker.evaluate({"extra": e}) for e in {"", *extras}
        )

    found: dict[str, importlib.metadata.Distribution] = {}
    extras_of: dict[str, set[str]] = {}
    todo = [r for r in map(Requirement, requirements) if wanted(r, set())]
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        if name in found and set(req.extras) <= extras_of[name]:
            continue
        if name not in found:
            try:
                found[name] = importlib.metadata.distribution(req.name)
            except importlib.metadata.PackageNotFoundError:
                pytest.fail(
                    f"{req} is not installed here: the script's needs cannot be met"
                )
        extras = extras_of.setdefault(name, set())
        extras.update(req.extras)
        needs = map(Requirement, found[name].requires or [])
        todo += [r for r in needs if wanted(r, extras)]
    return found


def _wheel_of(dist: importlib.metadata.Distribution, folder: Path) -> Path:
    """An installed distribution packed again as a wheel in ``folder``: its files
    inside site-packages as its RECORD lists them, without bytecode, and a RECORD
    of what was packed (its scripts come back from entry_points.txt)."""
    tags = [
        line.split(":", 1)[1].strip()
        for line in (dist.read_text("WHEEL") or "").splitlines()
        if line.startswith("Tag:")
    ]
    assert tags, f"{dist.metadata['Name']} has no WHEEL file"
    parts = [".".join(sorted({tag.split("-")[i] for tag in tags})) for i in range(3)]
    name = canonicalize_name(dist.metadata["Name"]).replace("-", "_")
    wheel = folder / f"{name}-{dist.version}-{'-'.join(parts)}.whl"
    record, info = [], ""
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as out:
        for file in dist.files or []:
            if (
                ".." in file.parts
                or "__pycache__" in file.parts
                or file.suffix == ".pyc"
            ):
                continue
            if file.parts[0].endswith(".dist-info"):
                info = file.parts[0]
                if file.name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
                    continue
            path = Path(file.locate())
            if not path.is_file():
                continue
            data = path.read_bytes()
            out.writestr(file.as_posix(), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest())
            record.append(
                f"{file.as_posix()},sha256={digest.rstrip(b'=').decode()},{len(data)}"
            )
        record.append(f"{info}/RECORD,,")
        out.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return wheel


def test_a_downloaded_script_runs_with_uv_from_its_inline_metadata(
    tmp_path, site, outside_the_repository
):
    uv_module = pytest.importorskip(
        "uv", reason="uv is not installed (pyproject's test group has it)"
    )
    uv = uv_module.find_uv_bin()
    url, downloads = site
    (script,) = downloads.rglob("plot_only.py")
    text = script.read_text()
    # The block as PEP 723's reference code finds it: the wheel, what the page imports.
    blocks = re.findall(r"(?m)^# /// script$\s((?:^#(?:| .*)$\s)+)^# ///$", text)
    assert len(blocks) == 1, text[:3000]
    wheel = f"{url}_downloads/gpuguide-{gpuguide_version}-py3-none-any.whl"
    assert f'#     "gpuguide @ {wheel}",\n' in blocks[0]
    deps = re.findall(r'^#     "(.+)",$', blocks[0], re.MULTILINE)
    assert [Requirement(d).name for d in deps] == ["gpuguide", "matplotlib", "torch"]
    assert "#   uv run plot_only.py " in text

    outside = outside_the_repository(tmp_path)
    reader, wheels = outside / "reader", outside / "wheels"
    reader.mkdir()
    wheels.mkdir()
    shutil.copy2(script, reader / script.name)
    # What the block asks for but the helpers, from this environment (no torch download).
    # ... and what the helpers' wheel needs itself (jsonschema).
    helpers_need = importlib.metadata.requires("gpuguide") or []
    for dist in _requirements_closure([*deps[1:], *helpers_need]).values():
        _wheel_of(dist, wheels)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTHON", "VIRTUAL_ENV", "CONDA", "UV_", "PIP_"))
    }
    env.update(
        UV_CACHE_DIR=str(outside / "uv-cache"),  # a fresh cache: nothing from before
        UV_NO_CONFIG="1",
        MPLCONFIGDIR=str(outside / "matplotlib"),
        MPLBACKEND="Agg",
        GPUGUIDE_SMALL="1",
    )
    ran = _run(
        [uv, "run", "--no-index", "--find-links", str(wheels), "--python", sys.executable,
         script.name],
        env=env, cwd=reader, timeout=900,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert "Measured on" in ran.stdout, ran.stdout
    # The helpers were installed from the site into uv's own environment for the
    # script: not this checkout's, not this environment's.
    helpers = Path(re.search(r"^helpers from (.+)$", ran.stdout, re.M).group(1))
    assert helpers.is_relative_to(outside / "uv-cache"), helpers
    assert "site-packages" in helpers.parts, helpers
    assert "Warning" not in ran.stderr, ran.stderr
