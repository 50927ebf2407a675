"""Plumbing for the cold-start page: run its child
(:mod:`gpuguide.chapters.coldstart_child`) in fresh processes, each timing its first
compiled call, its steady state and what the compiler's caches did, and read them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuguide.chapters.coldstart_child import MARK
from gpuguide.timing import Measurement
from gpuguide.units import format_time
from gpuguide.verdicts import NO_DIFFERENCE, Comparison, break_even, compare

__all__ = ["run_starts"]

#: The module each fresh process runs (``python -m``).
_CHILD = "gpuguide.chapters.coldstart_child"


class ChildFailed(RuntimeError):
    """A fresh process ended without a result; the message quotes its stderr."""


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
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode == 0 and lines:
        result: dict[str, Any] = json.loads(lines[-1].removeprefix(MARK))
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

    def steady(
        self,
        cases: Iterable[str],
        n: int,
        name: str,
        label: str | None = None,
        *,
        relative: bool = False,
        paired: bool = False,
    ) -> Measurement:
        """The steady-state steps ``name`` (``"eager"``, ``"compiled"``) of the
        processes of ``cases`` at ``n`` blocks, pooled; ``relative``: one value per
        process, its median over its eager median (processes slowed by their
        neighbours compare fairly); ``paired``: one per round, kept as rounds."""
        results = self.runs(cases, n)

        def eager(result: Mapping[str, Any]) -> float:
            return float(statistics.median(result["steady"]["eager"]))

        label = name if label is None else label
        if paired:
            times = tuple(t / eager(r) for r in results for t in r["rounds"][name])
            method = "round medians relative to eager, paired rounds"
            return Measurement(label, times, self.device, method, rounds=times)
        if relative:
            times = tuple(
                statistics.median(r["steady"][name]) / eager(r) for r in results
            )
            method = "median relative to eager, one per process"
        else:
            times = tuple(t for r in results for t in r["steady"][name])
            method = "wall-clock, pooled over processes"
        return Measurement(label, times, self.device, method)

    def payback(
        self, case: str, n: int, among: Sequence[str], name: str = "compiled"
    ) -> tuple[tuple[int | None, int | None, int | None], Comparison]:
        """After how many steps ``case``'s first call at ``n`` blocks, beyond one
        compiled step, is paid back by the steps ``name`` saves over eager in the
        processes of ``among`` (relative where several): at its median and
        quartiles, None where not measurably faster, and the comparison."""
        first_call = self.first(case, n)
        if first_call is None:
            msg = f"no {case} process ran at {n} blocks"
            raise ValueError(msg)
        relative = len(self.runs(among, n)) > 1
        eager = self.steady(among, n, "eager", relative=relative)
        compiled = self.steady(among, n, name, relative=relative)
        # the unit of eager and compiled, in seconds: an eager step where relative
        unit_s = self.steady(among, n, "eager").median_s if relative else 1.0
        costs = [
            max(q / unit_s - compiled.median_s, 0.0) for q in first_call.quartiles_s
        ]
        low, median, high = (break_even(cost, eager, compiled) for cost in costs)
        return (median, low, high), compare(compiled, eager)

    def growth(self, case: str, label: str) -> Growth:
        """What each block adds to ``case``'s first call (:class:`Growth`), over the
        depths where it ran, two or more."""
        firsts = {n: m for n in self.results[case] if (m := self.first(case, n))}
        depths = list(firsts)
        if len(depths) < 2:
            msg = f"growth needs first calls at two depths or more, got {depths!r}"
            raise ValueError(msg)
        mean = statistics.fmean(depths)
        # the shallowest slope runs through the deep low quartiles and the shallow high
        low, median, high = (
            statistics.linear_regression(
                depths,
                [m.quartiles_s[i if n > mean else 2 - i] for n, m in firsts.items()],
            ).slope
            for i in range(3)
        )
        one = min(m.n for m in firsts.values()) < 2
        return Growth(label, median, None if one else (low, high))


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
