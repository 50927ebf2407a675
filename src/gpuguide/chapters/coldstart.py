"""Plumbing for the cold-start page: run the child
(:mod:`gpuguide.chapters.coldstart_child`) in fresh processes, and, in each, time
its first compiled call, its steady state and what the compiler's caches did.

Each child is ``python -m gpuguide.chapters.coldstart_child``: a new interpreter
that imports torch, creates its own CUDA context where it runs on a GPU, and starts
with no compiled code, no loaded kernel and empty in-memory caches. Its stdout and
stderr are captured (compiler logs stay off the page) and its result comes back as
one JSON line (:func:`report`, marked with :data:`MARK`); a child that fails raises
:class:`ChildFailed`, which quotes the end of its stderr.
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

__all__ = [
    "compare_growth",
    "growth",
    "measure",
    "payback",
    "report",
    "run_starts",
    "split_first_call",
    "steady",
]

#: Starts the line of a child's stdout that holds its result, as JSON.
MARK = "gpuguide-result: "
#: The module each fresh process runs (``python -m``).
CHILD = "gpuguide.chapters.coldstart_child"
#: Dynamo's compile-time metrics that make up a first call, and what they are.
PHASES = {
    "bytecode_tracing": "Dynamo's tracing",
    "build_guards": "building guards",
    "OutputGraph.call_user_compiler": "AOTAutograd and inductor",
}
_TAIL_LINES = 8  # lines of a failed child's stderr quoted in the error


class ChildFailed(RuntimeError):
    """A fresh process ended without a result; the message quotes its stderr."""


# ---- in the child -----------------------------------------------------------


def describe_caches(counters: Mapping[str, Mapping[str, int]]) -> str:
    """What the compiler's caches did, from dynamo's ``counters``: ``"FX graph 1
    hit; AOTAutograd 1 miss"``, or ``"none used"``.

    Counts every ``*cache_hit``/``*cache_miss``/``*cache_bypass`` key of the
    ``"inductor"`` (FX graph cache) and ``"aot_autograd"`` (AOTAutograd cache)
    groups, whatever torch version named them; zeros are left out.
    """
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


def phases(metrics: Mapping[str, Sequence[float]] | None = None) -> dict[str, float]:
    """Seconds spent in each of :data:`PHASES` that dynamo timed in this process
    (``torch._dynamo.utils.compilation_time_metrics``); absent ones are left out."""
    if metrics is None:
        from torch._dynamo import utils

        metrics = getattr(utils, "compilation_time_metrics", {})
    return {label: sum(metrics[key]) for key, label in PHASES.items() if key in metrics}


def _probe_cpu() -> None:
    """Inductor's probe of the CPU's vector instructions: a small C++ build into the
    cache directory, then a load in a subprocess. Inductor runs it once per process,
    before it compiles anything for a CPU, and keeps the answer in memory."""
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
    rep_ms: float = 60.0,
    also: Mapping[str, Callable[[Any], Any]] | None = None,
) -> dict[str, Any]:
    """In the child: time ``before()`` and the first call of ``compiled(x)``
    together (a cache load counts in the start), then ``model`` (eager),
    ``compiled`` and the callables in ``also`` in alternating rounds (the compile
    workers stopped), without gradients; returns the times (``"steady"``, keyed
    ``"eager"``, ``"compiled"`` and ``also``'s names), each round's median
    (``"rounds"``, keyed alike), the cache counts and dynamo's phases, ready for
    :func:`report`.

    The cache counts and phases are read before ``also``'s first calls, which
    compile outside every figure. Inductor's probe of the CPU's vector
    instructions is left out of the first call: on a CPU it is timed before it
    (``"probe_s"``). Inductor is imported before anything is timed."""
    import torch
    import torch._inductor.compile_fx  # imported before anything is timed
    from torch._dynamo.utils import counters

    # timed apart on a CPU, so that no first call pays it
    probe_s = (
        first_calls_s(_probe_cpu, device=device, calls=1) if device == "cpu" else 0.0
    )
    variants = {"eager": model, "compiled": compiled, **(also or {})}
    with torch.no_grad():
        loaded_s = first_calls_s(before, device=device, calls=1) if before else 0.0
        first_s = first_calls_s(compiled, x, device=device, calls=1)
        caches, timers = describe_caches(counters), phases()
        for name in also or {}:
            variants[name](x)
        try:  # they would take the CPU from the steady steps, which compile nothing
            from torch._inductor.async_compile import shutdown_compile_workers
        except ImportError:  # pragma: no cover - inductor moved it
            pass
        else:
            shutdown_compile_workers()
        calls = {name: functools.partial(fn, x) for name, fn in variants.items()}
        timed = interleave(calls, rounds=10, rep_ms=rep_ms, device=device)
    return {
        "first_s": loaded_s + first_s,
        "load_s": loaded_s,
        "probe_s": probe_s,
        "caches": caches,
        "phases": timers,
        "steady": {name: list(m.times_s) for name, m in timed.items()},
        "rounds": {name: list(m.rounds) for name, m in timed.items()},
    }


def report(result: Mapping[str, Any], file: Any = None) -> None:
    """Print ``result`` as the child's one JSON line, after :data:`MARK`."""
    print(MARK + json.dumps(dict(result)), file=file or sys.stdout, flush=True)


# ---- in the parent ----------------------------------------------------------


def run_fresh(
    args: Iterable[object] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Run ``python -m`` :data:`CHILD` ``*args`` in a fresh process, ``env`` added to
    its environment, and return what it :func:`report`-ed (its last :data:`MARK`
    line). Its stdout and stderr stay off the page; a failure, no result, or a
    child past ``timeout_s`` raises :class:`ChildFailed` with the end of its stderr."""
    # The child imports what this process imports: its folders, made absolute (a
    # relative PYTHONPATH means something else once a page changes directory).
    path = os.pathsep.join(str(Path(p).absolute()) for p in sys.path if p)
    code: int | str
    try:
        done = subprocess.run(
            [sys.executable, "-m", CHILD, *map(str, args)],
            env={**os.environ, "PYTHONPATH": path, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as error:
        stderr = error.stderr.decode() if isinstance(error.stderr, bytes) else ""
        stdout, code = "", f"none: stopped after {timeout_s:g} s"
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    result = json.loads(lines[-1][len(MARK) :]) if code == 0 and lines else None
    if isinstance(result, dict):
        return result
    tail = "\n".join(stderr.strip().splitlines()[-_TAIL_LINES:])
    msg = f"the child process ended (exit code {code}) without a result"
    raise ChildFailed(f"{msg}; the end of its stderr:\n{tail}" if tail else msg)


@dataclass(frozen=True)
class Starts:
    """What :func:`run_starts` gathered: ``results[case][n]`` (also ``starts[case][n]``)
    holds the results of a case's fresh processes at ``n`` blocks, in the order they
    ran, for a child that compiled for ``device``."""

    results: Mapping[str, Mapping[int, Sequence[Mapping[str, Any]]]]
    device: str

    def __getitem__(self, case: str) -> Mapping[int, Sequence[Mapping[str, Any]]]:
        return self.results[case]

    def runs(self, cases: Iterable[str], n: int) -> list[Mapping[str, Any]]:
        """The results of the processes of ``cases`` at ``n`` blocks."""
        return [r for case in cases for r in self.results[case][n]]

    def first(self, case: str, n: int) -> Measurement | None:
        """The first calls of ``case``'s processes at ``n`` blocks as one
        Measurement; None where none ran."""
        times = tuple(r["first_s"] for r in self.runs([case], n))
        method = "host-clock, one process each"
        return Measurement(case, times, self.device, method) if times else None

    def rows(self) -> list[dict[str, Any]]:
        """A table row per depth and case that ran: blocks, case, processes, their
        first call, and what the caches did in the first of them."""
        depths = sorted({n for by_depth in self.results.values() for n in by_depth})
        return [
            {"blocks": n, "case": case, "processes": len(done)}
            | {"first call": self.first(case, n)}
            | {"caches": done[0]["caches"]}
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
    """Run the child in fresh processes (:func:`run_fresh`): at each depth ``n`` of
    ``blocks``, ``plan(case, n)`` processes of each of ``cases`` in turn, each with
    ``sys.argv[1:]``: the case, ``n``, ``dim``, ``device``, the path of the depth's
    Mega-Cache artifacts and whether ``n`` is the last depth. A child that fails
    raises :class:`ChildFailed`, naming the case and depth, with its stderr.

    Each case at a depth gets an inductor cache directory of its own
    (``TORCHINDUCTOR_CACHE_DIR``, with ``TRITON_CACHE_DIR`` inside), empty at
    first, but ``"warm"``, which reuses ``"cold"``'s; all of them, and the
    artifacts, live in one temporary directory, removed at the end."""
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
                        results[case][n].append(run_fresh(args, env=env))
                    except ChildFailed as error:
                        msg = f"the {case} start at {n} blocks on {device}: {error}"
                        raise ChildFailed(msg) from None
    return Starts(results, str(device))


def split_first_call(result: Mapping[str, Any]) -> dict[str, float]:
    """A child's first call, in seconds, and its parts: dynamo's :func:`phases`,
    the cache load (Mega-Cache) and the rest (running the graph, loading
    kernels), keyed ``"first call (s)"``, ``"Dynamo's tracing (s)"``..."""
    parts = {**result["phases"], "cache load": result["load_s"]}
    parts["rest"] = result["first_s"] - sum(parts.values())
    return {"first call (s)": result["first_s"]} | {
        f"{k} (s)": v for k, v in parts.items()
    }


def steady(
    results: Sequence[Mapping[str, Any]],
    name: str,
    label: str,
    device: str,
    *,
    relative: bool = False,
    paired: bool = False,
) -> Measurement:
    """Steady-state times ``name`` (``"eager"``, ``"compiled"``) of several children,
    pooled into one Measurement.

    ``relative``: one value per child instead, the median of its ``name`` steps
    over the median of its eager steps (timed in the same rounds), so that children
    slowed by their neighbours on a shared machine still compare fairly, and the
    spread is the spread between processes, which a burst of load in a few rounds
    does not widen.

    ``paired``: one value per round instead, its median of ``name`` over the
    process's eager median, the rounds kept (:class:`Measurement`'s ``rounds``):
    two names of the same processes then compare round by round."""

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
    """After how many steps a start pays for itself, from children's ``results``
    that timed the same compiled code (their steady steps ``name``) against eager,
    and ``first_call``: its cost is the first call beyond one compiled step, paid
    back by the steps saved over eager.

    Steps are compared each relative to its process's eager median (see
    :func:`steady`), or, from a single process, as it timed them (in the same
    rounds: their spread is its own). Returns the step counts at the first call's
    median, lower and upper quartiles (None where compiled is not measurably
    faster), and the compiled-against-eager comparison they rest on."""
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
    """How much a first call grows per block of the stack (``per_block_s``, the
    least-squares slope through the medians at each depth), with ``low_s`` and
    ``high_s`` the shallowest and steepest slopes through the quartiles;
    ``processes``: the fewest processes at a depth (one: no spread)."""

    label: str
    per_block_s: float
    low_s: float
    high_s: float
    processes: int

    @property
    def spread(self) -> tuple[float, float] | None:
        """``(low_s, high_s)``, or None where a depth ran one process: no spread."""
        return None if self.processes < 2 else (self.low_s, self.high_s)

    @property
    def short(self) -> str:
        """For a title: ``"457 ms"``, or ``"457 ms (410 ms to 500 ms)"``."""
        text = format_time(self.per_block_s)
        if self.spread is None:
            return text
        return f"{text} ({format_time(self.low_s)} to {format_time(self.high_s)})"


def growth(label: str, depths: Sequence[int], firsts: Sequence[Measurement]) -> Growth:
    """The :class:`Growth` of the first calls ``firsts`` measured at ``depths``
    (blocks), two depths or more."""
    if len(depths) != len(firsts) or len(set(depths)) < 2:
        msg = f"growth needs first calls at two depths or more, got depths {depths!r}"
        raise ValueError(msg)
    mean = statistics.fmean(depths)
    spread = sum((n - mean) ** 2 for n in depths)
    weights = [(n - mean) / spread for n in depths]
    slopes = [  # the shallowest: the deep first calls' low quartiles, the shallow high
        sum(
            w * m.quartiles_s[i if w > 0 else 2 - i]
            for w, m in zip(weights, firsts, strict=True)
        )
        for i in range(3)
    ]
    return Growth(label, slopes[1], slopes[0], slopes[2], min(m.n for m in firsts))


def compare_growth(steep: Growth, flat: Growth) -> str:
    """Whether ``steep``'s first call grows faster per block than ``flat``'s: a
    sentence, its verdict computed from both spreads (none from a single run)."""
    a, b = steep.label, flat.label
    more = steep.per_block_s - flat.per_block_s
    adds = (
        f"{a} adds {format_time(abs(more))} per block {'more' if more >= 0 else 'less'}"
    )
    if steep.spread is None or flat.spread is None:
        return f"{adds} than {b}: one process per depth, so no spread and no verdict"
    low, high = steep.low_s - flat.high_s, steep.high_s - flat.low_s
    span = f"{format_time(low)} to {format_time(high)}"
    if low > 0 or high < 0:
        return f"{adds} than {b} ({span})"
    return f"{NO_DIFFERENCE} in growth per block between {a} and {b} ({span})"
