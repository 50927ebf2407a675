"""Where a step's time goes: a profile split into GEMM, attention, elementwise, ..."""

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
    "linked_events",
    "time_budget",
]

#: The categories of a budget, in the order it prints them.
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
        cublas nvjet triton_tem_ mmbackward""",
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
    """The category (never ``"idle"``) of a kernel's or an operator's name."""
    lowered = name.lower()
    for category, needles in _PATTERNS:
        if any(_matches(lowered, needle) for needle in needles.split()):
            return category
    return "other"


def _matches(name: str, needle: str) -> bool:
    """An operator (``aten::to``) by its whole name, in place or not (not
    ``aten::topk``); a kernel by a part of its name."""
    if needle.startswith("aten::"):
        return name in (needle, needle.rstrip("_") + "_", needle.rstrip("_"))
    return needle in name


@dataclass(frozen=True)
class TimeBudget:
    """Seconds per step in each category (``idle``: no work running), beside the
    step time measured unprofiled."""

    device: str
    step_s: float
    seconds: dict[str, float]

    @property
    def gap(self) -> float:
        """``|sum(seconds) - step_s| / step_s``; the budget closes when <= 0.05."""
        return abs(sum(self.seconds.values()) - self.step_s) / self.step_s

    def __str__(self) -> str:
        lines = [f"{'category':<12} {'ms/step':>9} {'share':>7}"]
        sums = {**self.seconds, "sum": sum(self.seconds.values())}
        for name in (*CATEGORIES, "sum"):
            seconds = sums.get(name, 0.0)
            lines.append(
                f"{name:<12} {seconds * 1e3:9.2f} {seconds / self.step_s:7.1%}"
            )
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
        spans.append((event.time_range.start, event.time_range.end, category))
        if category == "other":  # the children's spans override the parent's
            todo.extend(children)
    return spans


def linked_events(prof: Any) -> list[Any]:
    """A finished profile's ``events()``, each device event with the correlation id
    of the operator that launched it (``linked_correlation_id``: torch's own where
    its events have one, else read from the raw Kineto events, matched by span)."""
    events = list(prof.events())
    if all(hasattr(e, "linked_correlation_id") for e in events):
        return events
    raw = prof.profiler.kineto_results
    origin_ns = raw.trace_start_ns()
    links = {  # the same arithmetic as torch's events(): start and end in us
        ((e.start_ns() - origin_ns) / 1000, (e.end_ns() - origin_ns) / 1000): (
            e.linked_correlation_id()
        )
        for e in raw.events()
        if e.device_type().name != "CPU"
    }
    for event in events:
        if event.device_type.name != "CPU":
            span = (event.time_range.start, event.time_range.end)
            event.linked_correlation_id = links.get(span, 0)
    return events


def budget_from_events(
    events: Iterable[Any], *, step_s: float, steps: int, device: str
) -> TimeBudget:
    """The budget of a profile's ``events()`` over ``steps`` steps of ``step_s``
    each; overlapping work counts once, for the span that started last."""
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


def time_budget(
    step: Callable[[], object],
    *,
    steps: int = 3,
    device: str | None = None,
) -> TimeBudget:
    """In ``steps`` rounds after a warm-up, time one step and profile one more: the
    fastest profiled step's budget beside the fastest timed step (default device:
    CUDA once this process uses it)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    if device is None:
        device = "cuda" if torch.cuda.is_initialized() else "cpu"
    kind = torch.device(device).type
    sync = torch.cuda.synchronize if kind == "cuda" else torch.cpu.synchronize
    name = f"cuda:{torch.cuda.current_device()}" if kind == "cuda" else kind
    activities = [ProfilerActivity.CPU]
    if kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    for _ in range(2):
        step()
    sync()
    times, budgets = [], []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
        with profile(activities=activities) as prof:
            step()
            sync()
        budgets.append(
            budget_from_events(linked_events(prof), step_s=1, steps=1, device=name)
        )
    fastest = min(budgets, key=lambda budget: sum(budget.seconds.values()))
    return TimeBudget(name, min(times), fastest.seconds)
