"""Every gallery example runs as a plain script, at small sizes.

This is how a reader runs a downloaded example: ``python plot_x.py``. The
scripts run in a fresh interpreter with warnings turned into errors, as the
docs build runs them.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import pytest
from conftest import EXAMPLES, MEASURED, ROOT, TORCH_LOG


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
    assert MEASURED.search(out), "no measured number with a unit in the output"
    assert "Traceback" not in result.stderr
    log = TORCH_LOG.search(out)
    assert log is None, f"torch's own log in the output: {log and log.group(0)!r}"


@pytest.mark.gpu
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_cuda(script, tmp_path):
    result = _run(script, tmp_path, GPUGUIDE_DEVICE="cuda")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"^Measured on .*CUDA", result.stdout, re.MULTILINE)
