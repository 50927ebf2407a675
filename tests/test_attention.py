"""Tests for gpuguide.chapters.attention: FLOP count, naive memory, the table's
memory guard (with a fake out-of-memory), backend probing (with a fake sdpa_kernel),
the profiler's backend names, the agreement check, and the which-kernel page's
priority order, table of cases, one-off timing and times per call."""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F

from gpuguide.chapters import attention
from gpuguide.chapters.attention import (
    agreement,
    attention_flop,
    backend_of,
    case_rows,
    naive_bytes,
    timed_once,
    usable_backends,
)

# -- attention_flop ------------------------------------------------------------


def test_flop_is_two_matmuls_per_head() -> None:
    b, s, h, d = 2, 64, 3, 16
    # q @ k.T and p @ v: each 2 * s * s * d FLOP per head and sequence.
    assert attention_flop(b, s, h, d) == b * h * 2 * (2 * s * s * d)


def test_flop_at_the_papers_shape() -> None:
    # S = 8192, batch 16384 / S = 2, 16 heads of 128: 4 * 2 * 8192**2 * 16 * 128.
    assert attention_flop(2, 8192, 16, 128) == pytest.approx(1.0995e12, rel=1e-4)


def test_causal_halves_and_backward_adds_two_and_a_half() -> None:
    full = attention_flop(4, 128, 2, 64)
    assert attention_flop(4, 128, 2, 64, causal=True) == full / 2
    assert attention_flop(4, 128, 2, 64, backward=True) == 3.5 * full
    assert attention_flop(4, 128, 2, 64, causal=True, backward=True) == 1.75 * full


def test_flop_quadratic_in_length_linear_in_the_rest() -> None:
    base = attention_flop(1, 100, 1, 10)
    assert attention_flop(1, 200, 1, 10) == 4 * base
    assert attention_flop(2, 100, 3, 20) == 12 * base


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_flop_rejects_bad_sizes(bad) -> None:
    with pytest.raises((ValueError, TypeError)):
        attention_flop(1, bad, 1, 1)


# -- naive_bytes ---------------------------------------------------------------


def test_naive_bytes_three_score_matrices_and_four_inputs() -> None:
    b, s, h, d, e = 2, 32, 4, 8, 2
    assert naive_bytes(b, s, h, d, e) == e * b * h * (3 * s * s + 4 * s * d)


def test_naive_bytes_covers_what_the_written_out_path_allocates() -> None:
    b, s, h, d = 2, 128, 2, 16
    q, k, v = (torch.randn(b, h, s, d) for _ in range(3))
    scores = (q * d**-0.5) @ k.transpose(-2, -1)
    probs = torch.softmax(scores, dim=-1)
    held = q.nbytes + k.nbytes + v.nbytes + scores.nbytes + probs.nbytes
    assert held <= naive_bytes(b, s, h, d, 4)


def test_naive_bytes_grows_with_the_square_of_length() -> None:
    small, large = naive_bytes(1, 4096, 16, 128, 2), naive_bytes(1, 8192, 16, 128, 2)
    assert 3.5 < large / small <= 4


# -- case_rows: the budget, and a fake out-of-memory error ----------------------


def _rows(fn, needed=10, budget=100):
    return attention.case_rows(
        {"case": fn}, lambda fn: "ran", needed, budget, device="cpu"
    )


def test_out_of_memory_skips_the_case() -> None:
    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory (fake)")

    assert _rows(oom) == [{"case": "case", "backend": None, "peak memory (MiB)": None}]


def test_other_errors_propagate() -> None:
    def broken():
        raise ValueError("a bug, not memory")

    with pytest.raises(ValueError, match="a bug"):
        _rows(broken)


def test_budget_logic_with_a_fake_cuda_budget() -> None:
    """The page's sweep: the naive path runs while it fits a 15 GiB cap's half."""
    budget = 0.5 * 15 * 2**30
    lengths = (512, 1024, 2048, 4096, 8192, 16384)
    need = {s: naive_bytes(16384 // s, s, 16, 128, 2) for s in lengths}
    ran = [s for s in lengths if _rows(list, need[s], budget)[0]["backend"]]
    assert ran == [512, 1024, 2048, 4096]


# -- usable_backends: a fake sdpa_kernel -------------------------------------------


def test_usable_backends_keeps_those_that_run_and_order(monkeypatch) -> None:
    from torch.nn.attention import SDPBackend

    current = []

    @contextlib.contextmanager
    def fake_kernel(backend):
        current.append(backend)
        yield

    def attend():
        if current[-1] in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION):
            warnings.warn(
                "Flash attention kernel not used because: ...",
                UserWarning,
                stacklevel=1,
            )
            msg = "No available kernel. Aborting execution."
            raise RuntimeError(msg)

    monkeypatch.setattr(torch.nn.attention, "sdpa_kernel", fake_kernel)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as under python -W error
        got = usable_backends(attend)
    assert list(got) == ["math", "memory-efficient"]


def test_usable_backends_on_this_cpu() -> None:
    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    got = usable_backends(lambda: F.scaled_dot_product_attention(q, k, v))
    assert "math" in got  # the math backend runs everywhere
    assert set(got) <= {"math", "flash", "memory-efficient", "cuDNN"}
    if not torch.cuda.is_available():
        assert "memory-efficient" not in got  # a CUDA-only kernel


# -- backend_of ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "backend"),
    [
        (
            [
                "aten::scaled_dot_product_attention",
                "aten::_scaled_dot_product_cudnn_attention",
            ],
            "cuDNN",
        ),
        (["aten::_scaled_dot_product_flash_attention", "aten::empty"], "flash"),
        (["aten::_scaled_dot_product_flash_attention_for_cpu"], "flash (CPU)"),
        (["aten::_scaled_dot_product_efficient_attention"], "memory-efficient"),
        (["aten::_scaled_dot_product_attention_math", "aten::bmm"], "math"),
        (["aten::mm", "aten::softmax"], None),
    ],
)
def test_backend_of(ops, backend) -> None:
    assert backend_of(ops) == backend


def test_backend_of_takes_the_first() -> None:
    ops = [
        "aten::_scaled_dot_product_attention_math",
        "aten::_scaled_dot_product_flash_attention",
    ]
    assert backend_of(ops) == "math"


def test_backend_of_a_real_cpu_call() -> None:
    from torch.profiler import profile

    q = k = v = torch.randn(1, 2, 32, 16)
    with profile() as prof:
        F.scaled_dot_product_attention(q, k, v)
    assert backend_of(e.name for e in prof.events()) in {"flash (CPU)", "math"}


# -- agreement --------------------------------------------------------------------


def test_agreement_within_and_beyond_tolerance() -> None:
    ref = torch.tensor([1.0, -2.0, 0.5])
    error, ok = agreement(ref + torch.tensor([0.0, 0.02, 0.0]), ref, tolerance=0.02)
    assert error == pytest.approx(0.01)  # relative to the largest value, 2
    assert ok
    error, ok = agreement(ref + torch.tensor([0.1, 0.0, 0.0]), ref, tolerance=0.02)
    assert error == pytest.approx(0.05)
    assert not ok


def test_agreement_nan_never_agrees() -> None:
    ref = torch.ones(3)
    assert not agreement(torch.tensor([1.0, float("nan"), 1.0]), ref, tolerance=1.0)[1]


def test_agreement_compares_in_float32_and_checks_shape() -> None:
    ref = torch.randn(4, 4, dtype=torch.float64)
    assert agreement(ref.to(torch.bfloat16), ref, tolerance=1e-2)[1]
    with pytest.raises(ValueError, match="one shape"):
        agreement(ref[:2], ref, tolerance=1e-2)


def test_sdpa_agrees_with_the_formula_on_cpu() -> None:
    q, k, v = (torch.randn(2, 2, 64, 16, dtype=torch.float64) for _ in range(3))
    ref = torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-1) @ v
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float())
    assert agreement(out, ref, tolerance=1e-5)[1]
    assert not agreement(out.flip(-2), ref, tolerance=1e-5)[1]


def test_case_rows_run_what_fits_and_skip_the_rest() -> None:
    ran = []

    def allocate():
        ran.append("fits")
        return torch.empty(2**20, dtype=torch.uint8)

    def never():
        ran.append("over")

    cases = {"fits": allocate, "over budget": never}
    needed = {"fits": 10, "over budget": 1000}
    rows = [
        case_rows({n: fn}, lambda fn: fn.__name__, needed[n], 100, device="cpu")[0]
        for n, fn in cases.items()
    ]
    assert [r["case"] for r in rows] == ["fits", "over budget"]
    assert rows[0]["backend"] == "allocate"
    assert isinstance(rows[0]["peak memory (MiB)"], float)
    assert rows[0]["peak memory (MiB)"] >= 0
    assert rows[1] == {
        "case": "over budget",
        "backend": None,
        "peak memory (MiB)": None,
    }
    assert ran == ["fits"]


def test_timed_once_returns_the_result_and_its_seconds() -> None:
    calls = []
    result, seconds = timed_once(lambda: calls.append(1) or "mask", device="cpu")
    assert result == "mask"
    assert calls == [1]
    assert 0 <= seconds < 1


def test_peak_memory_measures_what_the_sweep_ran_and_skips_the_rest() -> None:
    class Ran:
        sizes = (1024, 4096)

        @staticmethod
        def ran(name: str) -> list[int]:
            return [1024, 4096] if name == "big" else [1024]

    def allocate(x: torch.Tensor) -> torch.Tensor:
        return torch.ones(x.numel() * 256)  # 1 KiB of floats per element

    found = attention.peak_memory(
        Ran(),  # type: ignore[arg-type]
        {"big": allocate, "small": allocate},
        lambda n: [torch.empty(n)],
        device="cpu",
    )
    assert found["small"][1] is None  # not run at 4096
    assert len(found["big"]) == 2
