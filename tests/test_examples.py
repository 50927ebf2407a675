"""Every gallery example runs as a plain script, at small sizes.

This is how a reader runs a downloaded example: ``python plot_x.py``. The
scripts run in a fresh interpreter with warnings turned into errors, as the
docs build runs them.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, MEASURED, ROOT, TORCH_LOG

try:
    import fcntl
except ImportError:  # not on Windows: the pages then run as they come
    fcntl = None  # type: ignore[assignment]

#: What marks a page that runs torch's profiler (CUPTI on CUDA): the profiling
#: chapter's helpers, torch.profiler itself, or the kernel counts of ``passes``.
PROFILES = re.compile(r"torch\.profiler|chapters\.profiling|\bpasses\(")


def profiles(script: Path) -> bool:
    """Whether ``script`` runs torch's profiler."""
    return PROFILES.search(script.read_text()) is not None


@contextlib.contextmanager
def one_profiler_at_a_time(script: Path) -> Iterator[None]:
    """Run the pages that profile one at a time, across pytest-xdist's workers.

    The profiler page died with a segfault (rc -11) while other pages ran beside
    it under ``pytest -m gpu -n 4`` on an H100 (CUPTI under concurrency is the
    suspect); the other pages still run side by side.
    """
    if fcntl is None or not profiles(script):
        yield
        return
    lock = Path(tempfile.gettempdir()) / "gpuguide-profiler.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(script, tmp_path, **extra_env):
    env = {
        **os.environ,
        "GPUGUIDE_SMALL": "1",
        "MPLBACKEND": "Agg",
        "PYTHONFAULTHANDLER": "1",  # a native crash shows its Python stack
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p
        ),
        **extra_env,
    }
    return subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


def test_the_pages_that_profile_are_known():
    found = {script.stem for script in EXAMPLES if profiles(script)}
    assert {"plot_profiler", "plot_fusion", "plot_jit_script"} <= found
    assert "plot_device_basics" not in found


def test_pages_that_profile_take_turns(tmp_path):
    if fcntl is None:
        pytest.skip("no fcntl on this platform")
    profiler = next(s for s in EXAMPLES if s.stem == "plot_profiler")
    lock = Path(tempfile.gettempdir()) / "gpuguide-profiler.lock"
    # Another worker's attempt while this page holds the lock fails at once.
    with (
        one_profiler_at_a_time(profiler),
        lock.open("w") as other,
        pytest.raises(BlockingIOError),
    ):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with lock.open("w") as other:  # released afterwards
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _cell_ends(source):
    """The last statement of each ``# %%`` cell of an example's source."""
    for cell in re.split(r"^# %%.*$", source, flags=re.MULTILINE):
        body = ast.parse(cell).body
        if body:
            yield body[-1]


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_no_cell_ends_with_a_recorded_value(script):
    # sphinx-gallery and Jupyter print a cell's last value: Result(page=...).
    ends = [
        ast.unparse(end)[:80]
        for end in _cell_ends(script.read_text())
        if isinstance(end, ast.Expr)
        and isinstance(end.value, ast.Call)
        and ast.unparse(end.value.func).split(".")[-1] == "record"
    ]
    assert not ends, ends


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_as_a_script(script, tmp_path):
    result = _run(script, tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"^Measured on .+\| torch \S+", out, re.MULTILINE), out[:2000]
    # Traceable: the helpers' version and commit (or "commit unknown") are named.
    assert re.search(r"^Measured on .+ \| gpuguide \S+ \(", out, re.MULTILINE)
    assert MEASURED.search(out), "no measured number with a unit in the output"
    assert "Traceback" not in result.stderr
    log = TORCH_LOG.search(out)
    assert log is None, f"torch's own log in the output: {log and log.group(0)!r}"


@pytest.mark.gpu
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_cuda(script, tmp_path):
    with one_profiler_at_a_time(script):
        result = _run(script, tmp_path, GPUGUIDE_DEVICE="cuda")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"^Measured on .*CUDA", result.stdout, re.MULTILINE)
