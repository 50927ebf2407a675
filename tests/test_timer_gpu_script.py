"""benchmarks/timer_gpu.py: its bars, and a clean skip without a GPU."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "timer_gpu.py"
spec = importlib.util.spec_from_file_location("timer_gpu", SCRIPT)
timer_gpu = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = timer_gpu  # dataclasses look their module up
spec.loader.exec_module(timer_gpu)


def row(do_bench_us, ours_us):
    return timer_gpu.Row("op", do_bench_us, ours_us, ours_us, ours_us, ours_us)


@pytest.mark.parametrize(
    ("do_bench_us", "ours_us", "passes"),
    [
        (100.0, 104.0, True),  # long: 4% is within 5%
        (100.0, 106.0, False),
        (50.0, 47.0, False),  # 50 us counts as long: -6%
        (5.0, 5.4, True),  # short: 8% is within 10%
        (5.0, 4.4, False),  # -12%
        (5.0, 21.6, False),  # launch time reported as kernel time
    ],
)
def test_bars(do_bench_us, ours_us, passes):
    assert row(do_bench_us, ours_us).passes is passes


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip without a GPU")
def test_skips_cleanly_without_a_gpu():
    result = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("skipped: no CUDA GPU")


def test_rejects_zero_rounds(capsys):
    with pytest.raises(SystemExit) as exit_info:
        timer_gpu.main(["--rounds", "0"])
    assert exit_info.value.code == 2
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.gpu
def test_runs_on_a_gpu(tmp_path):
    out = tmp_path / "rows.json"
    code = timer_gpu.main(["--rounds", "1", "--json", str(out)])
    assert code in (0, 1)
    assert out.read_text().startswith("[")
