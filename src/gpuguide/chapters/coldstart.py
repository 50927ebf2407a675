"""Plumbing for the cold-start page: run its child
(:mod:`gpuguide.chapters.coldstart_child`) in fresh processes, each timing its first
compiled call, its steady state and what the compiler's caches did, and read them.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuguide.timing import Measurement, first_calls_s
from gpuguide.units import format_time
from gpuguide.verdicts import NO_DIFFERENCE, Comparison, break_even, compare, interleave

__all__ = ["growth", "measure", "payback", "run_starts", "steady"]

#: Starts the line of a child's stdout that holds its result, as JSON.
_MARK = "gpuguide-result: "
#: The module each fresh process runs (``python -m``).
_CHILD = "gpuguide.chapters.coldstart_child"
#: Dynamo's compile-time metrics that make up a first call, and what they are.
_PHASES = {
    "bytecode_tracing": "Dynamo's tracing",
    "build_guards": "building guards",
    "OutputGraph.call_user_compiler": "AOTAutograd and inductor",
}


class ChildFailed(RuntimeError):
    """A fresh process ended without a result; the message quotes its stderr."""


# ---- in the child -----------------------------------------------------------


def _describe_caches(counters: Mapping[str, Mapping[str, int]]) -> str:
    """What the FX graph and AOTAutograd caches did, from dynamo's ``counters``
    (any ``*cache_hit``/``_miss``/``_bypass`` key): ``"FX graph 1 hit"``."""
    parts = []
    for group, cache in {"inductor": "FX graph", "aot_autograd": "AOTAutograd"}.items():
        counts: Counter[str] = Counter()
        for key, value in counters.get(group, {}).items():
            prefix, _, outcome = key.rpartition("_")
            if outcome in ("hit", "miss", "bypass") and prefix.endswith("cache"):
                counts[outcome] += int(value)
        done = ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n)
        parts += [f"{cache} {done}"] if done else []
    return "; ".join(parts) or "none used"


def _probe_cpu() -> None:
    """Inductor's probe of the CPU's vector instructions: a C++ build, once a process."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # pragma: no cover - inductor moved it
        return
    pick_vec_isa()


def measure(
    model: Callable[[Any], Any],
    compiled: Callable[[Any], Any],
    x: Any,
    *,
    device: str,
    before: Callable[[], Any] | None = None,
    also: Mapping[str, Callable[[Any], Any]] | None = None,
) -> None:
    """In the child, without gradients: time ``before()`` and the first call of
    ``compiled(x)`` together, then ``model`` (eager), ``compiled`` and ``also``'s
    callables (first called untimed) in alternating rounds, and print the result
    as one marked line of JSON for the parent."""
    import torch
    import torch._inductor.compile_fx  # imported before anything is timed
    from torch._dynamo import utils
    from torch._inductor import async_compile

    probe_s = (
        first_calls_s(_probe_cpu, device=device, calls=1) if device == "cpu" else 0
    )
    variants = {"eager": model, "compiled": compiled, **(also or {})}
    with torch.no_grad():
        load_s = first_calls_s(before, device=device, calls=1) if before else 0.0
        first_s = first_calls_s(compiled, x, device=device, calls=1)
        caches = _describe_caches(utils.counters)
        metrics = getattr(utils, "compilation_time_metrics", {})
        timers = {k: sum(metrics[m]) for m, k in _PHASES.items() if m in metrics}
        for name in also or {}:
            variants[name](x)
        # the compile workers would take the CPU from the steady steps
        getattr(async_compile, "shutdown_compile_workers", lambda: None)()
        calls = {name: functools.partial(fn, x) for name, fn in variants.items()}
        timed = interleave(calls, rounds=10, rep_ms=60.0, device=device)
    result = {
        "first_s": load_s + first_s,
        "load_s": load_s,
        "probe_s": probe_s,
        "caches": caches,
        "phases": timers,
        "steady": {name: list(m.times_s) for name, m in timed.items()},
        "rounds": {name: list(m.rounds) for name, m in timed.items()},
    }
    print(_MARK + json.dumps(result), flush=True)


# ---- in the parent ----------------------------------------------------------


def _run_fresh(
    args: Iterable[object] = (), *, env: Mapping[str, str]
) -> dict[str, Any]:
    """Run ``python -m`` ``_CHILD`` ``*args`` in a fresh process, ``env`` added to
    its environment, and return its result; its output stays off the page."""
    # the child imports what this process imports (absolute: pages change directory)
    path = os.pathsep.join(str(Path(p).absolute()) for p in sys.path if p)
    done = subprocess.run(
        [sys.executable, "-m", _CHILD, *map(str, args)],
        env={**os.environ, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(_MARK)]
    if done.returncode == 0 and lines:
        result: dict[str, Any] = json.loads(lines[-1].removeprefix(_MARK))
        return result
    tail = "\n".join(done.stderr.strip().splitlines()[-8:])
    msg = f"the child process ended (exit code {done.returncode}) without a result"
    raise ChildFailed(f"{msg}; the end of its stderr:\n{tail}" if tail else msg)


@dataclass(frozen=True)
class Starts:
    """What :func:`run_starts` gathered: ``starts[case][n]``, the results of a case's
    fresh processes at ``n`` blocks, in the order they ran."""

    results: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]]
    device: str

    def __getitem__(self, case: str) -> Mapping[int, Sequence[Mapping[str, Any]]]:
        return self.results[case]

    def runs(self, cases: Iterable[str], n: int) -> list[Mapping[str, Any]]:
        """The results of the processes of ``cases`` at ``n`` blocks."""
        return [r for case in cases for r in self.results[case][n]]

    def first(self, case: str, n: int) -> Measurement | None:
        """The first calls of ``case``'s processes at ``n`` blocks; None if none ran."""
        times = tuple(r["first_s"] for r in self.runs([case], n))
        method = "host-clock, one process each"
        return Measurement(case, times, self.device, method) if times else None

    def first_call_parts(self, case: str, n: int) -> dict[str, float]:
        """The first call of ``case``'s first process at ``n`` blocks, in seconds, and
        its parts: dynamo's phases, the cache load (Mega-Cache) and the rest."""
        result = self.results[case][n][0]
        parts = {**result["phases"], "cache load": result["load_s"]}
        rest = result["first_s"] - sum(parts.values())
        parts = {"first call": result["first_s"], **parts, "rest": rest}
        return {f"{k} (s)": v for k, v in parts.items()}

    def rows(self) -> list[dict[str, Any]]:
        """A table row per depth and case that ran: its processes, their first
        calls, and what the caches did in the first of them."""
        depths = sorted({n for by_depth in self.results.values() for n in by_depth})
        return [
            {"blocks": n, "case": case, "processes": len(done)}
            | {"first call": self.first(case, n), "caches": done[0]["caches"]}
            for n in depths
            for case, by_depth in self.results.items()
            if (done := by_depth.get(n))
        ]


def run_starts(
    cases: Sequence[str],
    blocks: Sequence[int],
    plan: Callable[[str, int], int],
    *,
    dim: int,
    device: object,
) -> Starts:
    """At each depth ``n`` of ``blocks``, run ``plan(case, n)`` fresh children of each
    of ``cases`` in turn. Each case and depth gets an empty inductor cache directory
    (``TORCHINDUCTOR_CACHE_DIR``), but ``"warm"`` reuses ``"cold"``'s, and each
    depth a Mega-Cache file, all removed at the end."""
    results: dict[str, dict[int, list[dict[str, Any]]]] = {
        case: {n: [] for n in blocks} for case in cases
    }
    with tempfile.TemporaryDirectory(prefix="gpuguide-cold-start-") as root:
        for n in blocks:
            artifacts = Path(root, f"{n}.bin")
            for case in cases:
                cache = Path(root, f"{n}-{'cold' if case == 'warm' else case}")
                env = {"TORCHINDUCTOR_CACHE_DIR": str(cache)}
                env["TRITON_CACHE_DIR"] = str(cache / "triton")
                for _ in range(plan(case, n)):
                    args = [case, n, dim, device, artifacts, n == blocks[-1]]
                    try:
                        results[case][n].append(_run_fresh(args, env=env))
                    except (ChildFailed, subprocess.TimeoutExpired) as error:
                        msg = f"the {case} start at {n} blocks on {device}: {error}"
                        raise ChildFailed(msg) from None
    return Starts(results, str(device))


def steady(
    results: Sequence[Mapping[str, Any]],
    name: str,
    label: str,
    device: str,
    *,
    relative: bool = False,
    paired: bool = False,
) -> Measurement:
    """The steady-state steps ``name`` (``"eager"``, ``"compiled"``) of several
    children, pooled into one Measurement; ``relative``: one value per child, its
    median over its eager median (children slowed by their neighbours compare
    fairly); ``paired``: one per round, kept as rounds for pairing, alike."""

    def eager(result: Mapping[str, Any]) -> float:
        return float(statistics.median(result["steady"]["eager"]))

    if paired:
        times = [t / eager(r) for r in results for t in r["rounds"][name]]
        method = "round medians relative to eager, paired rounds"
        return Measurement(label, tuple(times), device, method, rounds=tuple(times))
    if relative:
        times = [statistics.median(r["steady"][name]) / eager(r) for r in results]
        method = "median relative to eager, one per process"
    else:
        times = [t for r in results for t in r["steady"][name]]
        method = "wall-clock, pooled over processes"
    return Measurement(label, tuple(times), device, method)


def payback(
    results: Sequence[Mapping[str, Any]],
    first_call: Measurement,
    device: str,
    name: str = "compiled",
) -> tuple[tuple[int | None, int | None, int | None], Comparison]:
    """After how many steps ``first_call``, beyond one compiled step, is paid back by
    the steps ``name`` saves over eager in ``results`` (relative where several): at
    its median and quartiles, None where ``name`` is not measurably faster, with the
    comparison these rest on."""
    relative = len(results) > 1
    eager = steady(results, "eager", "eager", device, relative=relative)
    compiled = steady(results, name, name, device, relative=relative)
    # the unit of eager and compiled, in seconds: an eager step where relative
    unit_s = steady(results, "eager", "eager", device).median_s if relative else 1.0
    costs = [max(q / unit_s - compiled.median_s, 0.0) for q in first_call.quartiles_s]
    low, median, high = (break_even(cost, eager, compiled) for cost in costs)
    return (median, low, high), compare(compiled, eager)


@dataclass(frozen=True)
class Growth:
    """What each block adds to a first call: ``per_block_s``, the least-squares slope
    through the medians, and ``spread``, the shallowest and steepest slopes through
    the quartiles (None where a depth ran a single process)."""

    label: str
    per_block_s: float
    spread: tuple[float, float] | None

    @property
    def short(self) -> str:
        """For a title: ``"457 ms"``, or ``"457 ms (410 ms to 500 ms)"``."""
        text = format_time(self.per_block_s)
        if self.spread is None:
            return text
        low, high = map(format_time, self.spread)
        return f"{text} ({low} to {high})"

    def compare(self, flat: Growth) -> str:
        """A sentence: whether this first call grows faster per block than ``flat``'s,
        its verdict from both spreads (none without them)."""
        a, b, more = self.label, flat.label, self.per_block_s - flat.per_block_s
        adds = f"{a} adds {format_time(abs(more))} per block "
        adds += f"{'more' if more >= 0 else 'less'} than {b}"
        if self.spread is None or flat.spread is None:
            return f"{adds}: one process per depth, so no spread and no verdict"
        low, high = self.spread[0] - flat.spread[1], self.spread[1] - flat.spread[0]
        span = f"{format_time(low)} to {format_time(high)}"
        if low > 0 or high < 0:
            return f"{adds} ({span})"
        return f"{NO_DIFFERENCE} in growth per block between {a} and {b} ({span})"


def growth(label: str, depths: Sequence[int], firsts: Sequence[Measurement]) -> Growth:
    """The :class:`Growth` of the first calls ``firsts`` measured at ``depths``
    (blocks), two depths or more."""
    if len(depths) != len(firsts) or len(set(depths)) < 2:
        msg = f"growth needs first calls at two depths or more, got depths {depths!r}"
        raise ValueError(msg)
    mean = statistics.fmean(depths)
    pairs = list(zip(depths, firsts, strict=True))
    # the shallowest slope runs through the deep low quartiles and the shallow high
    low, median, high = (
        statistics.linear_regression(
            depths, [m.quartiles_s[i if n > mean else 2 - i] for n, m in pairs]
        ).slope
        for i in range(3)
    )
    one = min(m.n for m in firsts) < 2
    return Growth(label, median, None if one else (low, high))
