"""gpuguide.breakdown: categories of known names, and budgets that close."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from gpuguide.breakdown import (
    CATEGORIES,
    TimeBudget,
    budget_from_events,
    categorize,
    linked_events,
    time_budget,
)


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("aten::mm", "gemm"),
        ("aten::addmm", "gemm"),
        ("autograd::engine::evaluate_function: MmBackward0", "gemm"),
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
        ("ampere_sgemm_128x64_tn", "gemm"),
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NNT", "gemm"),  # cuBLAS on Hopper
        ("aten::_scaled_dot_product_flash_attention", "attention"),
        ("flash_fwd_kernel", "attention"),
        ("fmha_cutlassF_f16_aligned_64x64_rf_sm80", "attention"),
        ("Optimizer.step#AdamW.step", "optimizer"),
        ("aten::_foreach_mul_", "optimizer"),
        ("void at::native::multi_tensor_apply_kernel<...>", "optimizer"),
        ("Memcpy HtoD (Pageable -> Device)", "copy"),
        ("aten::copy_", "copy"),
        ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "data"),
        ("void at::native::vectorized_elementwise_kernel<4, ...>", "elementwise"),
        ("aten::native_layer_norm", "elementwise"),
        ("aten::gelu", "elementwise"),
        ("triton_poi_fused_add_0", "elementwise"),
        ("aten::to", "copy"),
        ("aten::topk", "other"),  # an operator by its whole name, not a prefix
        ("aten::add_", "elementwise"),
        ("aten::multinomial", "other"),
        ("aten::view", "other"),
        ("cudaLaunchKernel", "other"),
    ],
)
def test_categorize_known_names(name: str, category: str) -> None:
    assert categorize(name) == category


def _event(name, start, end, device="CPU", id=0, linked=0, parent=None):
    event = SimpleNamespace(
        name=name,
        time_range=SimpleNamespace(start=start, end=end),
        device_type=SimpleNamespace(name=device),
        id=id,
        linked_correlation_id=linked,
        cpu_parent=parent,
        cpu_children=[],
    )
    if parent is not None:
        parent.cpu_children.append(event)
    return event


def test_cuda_kernels_take_their_launching_operator_category() -> None:
    """A kernel counts under the outermost categorized operator that launched it
    (an elementwise kernel of the optimizer is optimizer time); overlaps count once;
    the window's uncovered rest is idle."""
    step = _event("Optimizer.step#AdamW.step", 0, 100, id=1)
    mul = _event("aten::mul", 10, 20, id=2, parent=step)
    mm = _event("aten::mm", 0, 5, id=3)
    kernels = [
        _event("vectorized_elementwise_kernel", 300, 400, "CUDA", linked=2),
        _event("ampere_sgemm_128x64_tn", 100, 300, "CUDA", linked=3),
        _event("triton_poi_fused_0", 250, 350, "CUDA", linked=99),  # overlaps both
    ]
    budget = budget_from_events(
        [step, mul, mm, *kernels], step_s=0.5e-3, steps=1, device="cuda:0"
    )
    assert budget.seconds["gemm"] == pytest.approx(150e-6)
    assert budget.seconds["elementwise"] == pytest.approx(50e-6)  # 250..300
    assert budget.seconds["optimizer"] == pytest.approx(100e-6)  # 300..400
    assert budget.seconds["idle"] == pytest.approx(100e-6)  # 0..100 host-only
    assert budget.gap == pytest.approx(0.2)
    assert "gemm" in str(budget)


def test_kernels_without_a_link_get_it_from_the_raw_kineto_events() -> None:
    """torch's events() without linked_correlation_id: each kernel's comes from the
    raw event with its span (the same us arithmetic), so it counts as its launcher's
    category; a kernel with no raw twin stays unlinked."""
    mm = _event("aten::mm", 0, 5, id=7)
    kernels = [_event("kernel_a", 10, 30, "CUDA"), _event("kernel_b", 40, 50, "CUDA")]
    for event in (mm, *kernels):
        del event.linked_correlation_id

    def raw(start_us, end_us, device, linked):
        start, end = 1000 * start_us + 5000, 1000 * end_us + 5000
        kind = SimpleNamespace(name=device)
        return SimpleNamespace(
            start_ns=lambda: start,
            end_ns=lambda: end,
            device_type=lambda: kind,
            linked_correlation_id=lambda: linked,
        )

    results = SimpleNamespace(
        trace_start_ns=lambda: 5000,
        events=lambda: [raw(0, 5, "CPU", 0), raw(10, 30, "CUDA", 7)],
    )
    prof = SimpleNamespace(
        events=lambda: [mm, *kernels],
        profiler=SimpleNamespace(kineto_results=results),
    )
    events = linked_events(prof)
    assert [getattr(e, "linked_correlation_id", None) for e in events] == [None, 7, 0]
    budget = budget_from_events(events, step_s=50e-6, steps=1, device="cuda:0")
    assert budget.seconds["gemm"] == pytest.approx(20e-6)
    assert budget.seconds["other"] == pytest.approx(10e-6)


def test_cpu_self_time_of_an_uncategorized_parent_is_other() -> None:
    outer = _event("aten::linear", 0, 10)
    _event("aten::addmm", 2, 9, parent=outer)
    gelu = _event("aten::gelu", 12, 16)
    budget = budget_from_events(
        [outer, *outer.cpu_children, gelu, _event("aten::view", 20, 20)],
        step_s=16e-6,
        steps=1,
        device="cpu",
    )
    assert budget.seconds["gemm"] == pytest.approx(7e-6)
    assert budget.seconds["other"] == pytest.approx(3e-6)
    assert budget.seconds["elementwise"] == pytest.approx(4e-6)
    assert budget.seconds["idle"] == pytest.approx(2e-6)
    assert budget.gap == pytest.approx(0.0, abs=1e-9)


def test_gap_is_relative_to_the_measured_step() -> None:
    seconds = dict.fromkeys(CATEGORIES, 0.0) | {"gemm": 0.9, "idle": 0.2}
    assert TimeBudget("cpu", 1.0, seconds).gap == pytest.approx(0.1)


def test_budget_of_a_known_cpu_step_closes() -> None:
    """Matmuls dominate, the AdamW step and the elementwise ops show; the budget
    sums to the unprofiled step within 5% (best of three tries: this machine's cores
    are shared, and a burst of other work can land on the timed or the profiled
    steps alone)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(768, 768), torch.nn.GELU(), torch.nn.Linear(768, 768)
    )
    optimizer = torch.optim.AdamW(model.parameters(), foreach=True)
    x = torch.randn(768, 768)

    def step() -> None:
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: a busy shared core slows it, not stalls it
    try:
        budgets = [time_budget(step, steps=10) for _ in range(3)]
    finally:
        torch.set_num_threads(threads)
    budget = min(budgets, key=lambda budget: budget.gap)
    seconds = budget.seconds
    assert budget.device == "cpu"
    assert max(seconds, key=seconds.__getitem__) == "gemm"
    assert seconds["optimizer"] > 0
    assert seconds["elementwise"] > 0
    assert seconds["attention"] == seconds["data"] == 0
    assert budget.gap <= 0.05, str(budget)
