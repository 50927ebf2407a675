"""Tests for gpuguide.chapters.data.spawn_safe: hiding __main__ from spawned children."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import types

import pytest
from conftest import ROOT

from gpuguide.chapters.data import spawn_safe


@pytest.fixture
def fake_main(monkeypatch, tmp_path):
    """A stand-in ``__main__`` with a file and a spec, as ``python script.py`` has."""
    module = types.ModuleType("__main__")
    module.__file__ = str(tmp_path / "script.py")
    module.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", module)
    return module


def test_spawn_safe_hides_and_restores_the_main_file(fake_main):
    path = fake_main.__file__
    with spawn_safe():
        assert not hasattr(fake_main, "__file__")
        assert fake_main.__spec__ is None
    assert fake_main.__file__ == path


def test_spawn_safe_restores_after_an_exception(fake_main):
    spec = object()
    fake_main.__spec__ = spec
    seen = []

    def fail_inside():
        with spawn_safe():
            seen.append(fake_main.__spec__)
            raise KeyError("boom")

    with pytest.raises(KeyError):
        fail_inside()
    assert seen == [None]
    assert fake_main.__spec__ is spec
    assert fake_main.__file__.endswith("script.py")


def test_spawn_safe_changes_nothing_without_a_main_file(monkeypatch):
    module = types.ModuleType("__main__")  # like a notebook or sphinx-gallery
    monkeypatch.setitem(sys.modules, "__main__", module)
    with spawn_safe():
        assert not hasattr(module, "__file__")
    assert not hasattr(module, "__file__")
    assert module.__spec__ is None


def test_spawn_safe_without_any_main_module(monkeypatch):
    monkeypatch.delitem(sys.modules, "__main__")
    with spawn_safe():
        assert "__main__" not in sys.modules


# A script that starts a spawned child. Its top level appends a line to a log file;
# a child that re-runs the script (as ``__mp_main__``) adds a second line. The start
# itself is guarded, so that a re-run does not start children of its own.
SCRIPT = """
import multiprocessing, os, sys
sys.path.insert(0, {src!r})
from gpuguide.chapters.data import spawn_safe
with open({log!r}, "a") as f:
    f.write(f"{{__name__}}\\n")
if __name__ == "__main__":
    p = multiprocessing.get_context("spawn").Process(target=os.getpid)
    if sys.argv[1] == "safe":
        with spawn_safe():
            p.start()
    else:
        p.start()
    p.join()
    sys.exit(p.exitcode)
"""


@pytest.mark.parametrize(("mode", "runs"), [("safe", 1), ("plain", 2)])
def test_spawned_child_reruns_main_only_without_spawn_safe(tmp_path, mode, runs):
    src = str(ROOT / "src")
    log = tmp_path / "runs.log"
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT.format(src=src, log=str(log))))
    result = subprocess.run(
        [sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert len(log.read_text().splitlines()) == runs


def test_spawn_safe_lets_an_importable_target_run(fake_main):
    ctx = multiprocessing.get_context("spawn")
    process = ctx.Process(target=os.getpid)
    with spawn_safe():
        process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
