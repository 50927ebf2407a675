"""Where a step's time goes: a profile split into GEMM, attention, elementwise, ...

:func:`categorize` names the category of a kernel or an operator,
:func:`budget_from_events` adds a finished profile up per category, and
:func:`time_budget` times and profiles a step. A :class:`TimeBudget` closes when its
categories, ``idle`` included, add up to the step time measured without the
profiler.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CATEGORIES",
    "TimeBudget",
    "budget_from_events",
    "categorize",
    "time_budget",
]

CATEGORIES = (
    "gemm",
    "attention",
    "elementwise",
    "optimizer",
    "copy",
    "data",
    "other",
    "idle",
)

# First match wins: attention before gemm (flash kernels hold "gemm" in their names),
# optimizer before elementwise (a foreach kernel is elementwise work of the optimizer).
_PATTERNS = (
    ("data", "dataloader"),
    ("optimizer", "optimizer.step _foreach_ multi_tensor_apply fused_adam"),
    (
        "attention",
        "scaled_dot_product scaleddotproduct sdpa flash fmha efficient_attention",
    ),
    (
        "gemm",
        """aten::mm aten::addmm aten::bmm aten::baddbmm aten::matmul gemm cutlass xmma
        cublas triton_tem_ mmbackward""",
    ),
    ("copy", "memcpy memset aten::copy_ aten::to aten::_to_copy"),
    (
        "elementwise",
        """elementwise vectorized reduce norm softmax gelu relu silu dropout triton_poi_
        triton_red_ triton_per_ aten::add aten::mul aten::div aten::sub aten::pow
        aten::exp aten::sum aten::mean aten::fill_ aten::zero_ aten::embedding
        aten::cross_entropy aten::nll_loss aten::where aten::cat aten::clone index
        backward0""",
    ),
)


def categorize(name: str) -> str:
    """The category (one of :data:`CATEGORIES`, never ``"idle"``) of a CUDA kernel
    name or of a CPU operator / ``record_function`` name."""
    lowered = name.lower()
    for category, needles in _PATTERNS:
        if any(needle in lowered for needle in needles.split()):
            return category
    return "other"


@dataclass(frozen=True)
class TimeBudget:
    """Seconds per step in each category, beside the step time measured unprofiled.

    ``seconds["idle"]`` is the part of the profiled step with no device work (GPU: no
    kernel running; CPU: no operator running).
    """

    device: str
    step_s: float
    seconds: dict[str, float]

    @property
    def gap(self) -> float:
        """``|sum(seconds) - step_s| / step_s``; the budget closes when <= 0.05."""
        return abs(sum(self.seconds.values()) - self.step_s) / self.step_s

    def __str__(self) -> str:
        lines = [f"{'category':<12} {'ms/step':>9} {'share':>7}"]
        for category in CATEGORIES:
            seconds = self.seconds.get(category, 0.0)
            share = seconds / self.step_s
            lines.append(f"{category:<12} {seconds * 1e3:9.2f} {share:7.1%}")
        total = sum(self.seconds.values())
        lines.append(f"{'sum':<12} {total * 1e3:9.2f} {total / self.step_s:7.1%}")
        lines.append(f"measured step: {self.step_s * 1e3:.2f} ms on {self.device}")
        return "\n".join(lines)


def _op_category(event: Any) -> str:
    """The category of the outermost categorized operator around ``event``."""
    found = "other"
    while event is not None:
        category = categorize(event.name)
        found = category if category != "other" else found
        event = event.cpu_parent
    return found


def _spans(events: list[Any], cuda: bool) -> list[tuple[float, float, str]]:
    """(start_us, end_us, category) of each piece of device work in the profile."""
    if cuda:
        by_id = {e.id: e for e in events if e.device_type.name == "CPU"}
        spans = []
        for kernel in (e for e in events if e.device_type.name == "CUDA"):
            launcher = by_id.get(getattr(kernel, "linked_correlation_id", 0))
            category = _op_category(launcher) if launcher is not None else "other"
            if category == "other":
                category = categorize(kernel.name)
            spans.append((kernel.time_range.start, kernel.time_range.end, category))
        return spans
    spans = []
    todo = [e for e in events if e.cpu_parent is None and e.device_type.name == "CPU"]
    while todo:  # the outermost categorized operator holds its whole span
        event = todo.pop()
        category = categorize(event.name)
        children = [c for c in event.cpu_children if c.device_type.name == "CPU"]
        if category != "other" or not children:
            spans.append((event.time_range.start, event.time_range.end, category))
            continue
        spans.append((event.time_range.start, event.time_range.end, "other"))
        todo.extend(children)  # their spans override the parent's "other" below
    return spans


def budget_from_events(
    events: Iterable[Any], *, step_s: float, steps: int, device: str
) -> TimeBudget:
    """The :class:`TimeBudget` of a finished ``torch.profiler.profile``'s
    ``events()`` that cover ``steps`` steps, each measured at ``step_s`` unprofiled.

    Overlapping work counts once: the time goes to the innermost span that covers
    it (on a GPU, the kernel that started last).
    """
    events = [e for e in events if e.time_range.end > e.time_range.start]
    if not events:
        msg = "the profile holds no timed events"
        raise ValueError(msg)
    window_us = max(e.time_range.end for e in events) - min(
        e.time_range.start for e in events
    )
    spans = _spans(events, device.startswith("cuda"))
    edges = sorted({t for start, end, _ in spans for t in (start, end)})
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    # the innermost span at each point: the one that started last (CPU nests spans)
    spans.sort(key=lambda span: (span[0], -span[1]))
    active: list[tuple[float, float, str]] = []
    index = 0
    for left, right in itertools.pairwise(edges):
        while index < len(spans) and spans[index][0] <= left:
            active.append(spans[index])
            index += 1
        active = [span for span in active if span[1] > left]
        if active:
            seconds[active[-1][2]] += (right - left) * 1e-6 / steps
    seconds["idle"] = max(0.0, window_us * 1e-6 / steps - sum(seconds.values()))
    return TimeBudget(device=device, step_s=step_s, seconds=seconds)


def _no_sync() -> None:
    """A CPU operator has finished when it returns."""


def time_budget(
    step: Callable[[], object],
    *,
    steps: int = 3,
    warmup: int = 2,
    device: str | None = None,
) -> TimeBudget:
    """Warm ``step`` up, then in ``steps`` rounds time one step (synchronized) and
    profile one more; return the budget of the fastest profiled step beside the
    fastest timed one: interleaved, so both meet the same load, and the fastest of
    each, the one least disturbed by other work on the machine.

    ``device`` defaults to CUDA once CUDA is in use in this process, else the CPU.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device is None:
        device = "cuda" if torch.cuda.is_initialized() else "cpu"
    kind = torch.device(device).type
    sync: Callable[[], None] = torch.cuda.synchronize if kind == "cuda" else _no_sync
    name = f"cuda:{torch.cuda.current_device()}" if kind == "cuda" else kind
    activities = [ProfilerActivity.CPU]
    if kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    for _ in range(warmup):
        step()
    sync()
    times: list[float] = []
    budgets: list[TimeBudget] = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
        with profile(activities=activities) as prof:
            step()
            sync()
        budgets.append(
            budget_from_events(prof.events(), step_s=1, steps=1, device=name)
        )
    fastest = min(budgets, key=lambda budget: sum(budget.seconds.values()))
    return TimeBudget(name, min(times), fastest.seconds)
