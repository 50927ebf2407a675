"""Plumbing for the cold-start page: run a script in a fresh process, and, in that
process, time its first compiled call, its steady state and what the compiler's
caches did.

A fresh Python process spends seconds importing torch and inductor before it
compiles anything. Where the platform can fork (Linux, macOS), :func:`run_fresh`
forks each child from a server that imported them once (``multiprocessing``'s
``"forkserver"``): the child still starts with no compiled code, no loaded kernel
and empty in-memory caches, and it skips only the imports. The server must not
touch CUDA, or every child it forks fails ("Cannot re-initialize CUDA in forked
subprocess"): it starts with :data:`SERVER_ENV`, and on a GPU it skips the CPU
probe. Elsewhere it runs ``python -c``. Either way the child's stdout and stderr
are captured (compiler logs stay off the page) and its result comes back as one
JSON line (:func:`report`, marked with :data:`MARK`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuguide.chapters.spawning import spawn_safe
from gpuguide.timing import Measurement
from gpuguide.units import format_time
from gpuguide.verdicts import NO_DIFFERENCE, Comparison, break_even, compare

__all__ = [
    "MARK",
    "ChildFailed",
    "Growth",
    "Starts",
    "cache_counts",
    "compare_growth",
    "describe_caches",
    "first_calls",
    "growth",
    "measure",
    "payback",
    "phases",
    "probe_cpu",
    "read_result",
    "report",
    "run_fresh",
    "run_starts",
    "split_first_call",
    "steady",
]

#: Starts the line of a child's stdout that holds its result, as JSON.
MARK = "gpuguide-result: "
#: What the fork server imports once, so that no child pays for it; the last one
#: runs inductor's CPU probe there (:func:`probe_cpu`), which the children inherit,
#: and is left out where the children compile for another device (see
#: :func:`_forkserver`).
PRELOAD = (
    "gpuguide.chapters.coldstart", "torch", "torch._inductor.compile_fx",
    "gpuguide.chapters._forkserver_probe",
)  # fmt: skip
_PROBE = "gpuguide.chapters._forkserver_probe"
#: The fork server's environment, set before it imports anything. Importing
#: inductor asks ``torch.cuda.is_available()`` (torch 2.11: at module level, in
#: ``torch/_inductor/runtime/benchmarking.py``), which by default asks the CUDA
#: runtime for its devices: that initialises the driver in the server, and torch
#: then refuses CUDA in every process forked from it. With this variable torch asks
#: NVML instead, which leaves CUDA untouched. The children do not keep it (see
#: :func:`run_fresh`).
SERVER_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
#: Seconds the fork server spent in :func:`probe_cpu`; set there, inherited by the
#: children it forks, None in any other process.
SERVER_PROBE_S: float | None = None
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


def cache_counts(
    counters: Mapping[str, Mapping[str, int]],
) -> dict[str, dict[str, int]]:
    """Hits, misses and bypasses of the compiler's caches, from dynamo's ``counters``.

    Reads every ``*cache_hit``/``*cache_miss``/``*cache_bypass`` key of the
    ``"inductor"`` (FX graph cache) and ``"aot_autograd"`` (AOTAutograd cache)
    groups, whatever torch version named them: ``{"FX graph": {"hit": 1}, ...}``.
    """
    names = {"inductor": "FX graph", "aot_autograd": "AOTAutograd"}
    counts: dict[str, dict[str, int]] = {}
    for group, name in names.items():
        for key, value in counters.get(group, {}).items():
            prefix, _, outcome = key.rpartition("_")
            if (
                outcome in ("hit", "miss", "bypass")
                and prefix.endswith("cache")
                and value
            ):
                mine = counts.setdefault(name, {})
                mine[outcome] = mine.get(outcome, 0) + int(value)
    return counts


def describe_caches(counts: Mapping[str, Mapping[str, int]]) -> str:
    """``"FX graph 1 hit; AOTAutograd 1 miss"`` for :func:`cache_counts`' result;
    ``"none used"`` for an empty one."""
    parts = [
        f"{cache} " + ", ".join(f"{n} {outcome}" for outcome, n in outcomes.items())
        for cache, outcomes in counts.items()
    ]
    return "; ".join(parts) or "none used"


def phases(metrics: Mapping[str, Sequence[float]] | None = None) -> dict[str, float]:
    """Seconds spent in each of :data:`PHASES` that dynamo timed in this process
    (``torch._dynamo.utils.compilation_time_metrics``); absent ones are left out."""
    if metrics is None:
        from torch._dynamo import utils

        metrics = getattr(utils, "compilation_time_metrics", {})
    return {
        label: float(sum(metrics[key]))
        for key, label in PHASES.items()
        if key in metrics
    }


def _stop_compile_workers() -> None:
    """Stop inductor's compile workers, where the first call started them: they
    would go on taking the CPU (some still importing torch) from the steady steps,
    which compile nothing."""
    try:
        from torch._inductor.async_compile import shutdown_compile_workers
    except ImportError:  # pragma: no cover - inductor moved it
        return
    shutdown_compile_workers()


def _probe_cpu() -> None:
    """Inductor's probe of the CPU's vector instructions: a small C++ build into the
    cache directory, then a load in a subprocess. Inductor runs it once per process,
    before it compiles anything for a CPU, and keeps the answer in memory."""
    try:
        from torch._inductor.cpu_vec_isa import pick_vec_isa
    except ImportError:  # pragma: no cover - inductor moved it
        return
    pick_vec_isa()


@contextlib.contextmanager
def quiet_stderr() -> Iterator[None]:
    """Send this process's stderr to the null device for the block (file
    descriptor 2, which C++ and the logging handlers write to, and
    ``sys.stderr``), then restore it."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:  # noqa: PTH123
            os.dup2(null.fileno(), 2)
            with contextlib.redirect_stderr(null):
                yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def probe_cpu() -> float:
    """Seconds of :func:`_probe_cpu` in an empty cache directory (as a cold start
    pays it), the directory removed after; the answer stays in this process."""
    from gpuguide.chapters.compiling import first_calls_s

    with (
        tempfile.TemporaryDirectory(prefix="gpuguide-probe-") as folder,
        _environment({"TORCHINDUCTOR_CACHE_DIR": folder}),
    ):
        return first_calls_s(_probe_cpu, device="cpu", calls=1)


def _probe_outside(device: str) -> tuple[float, str]:
    """Seconds of inductor's CPU probe and where it ran, so that no first call pays
    it: inherited from the fork server, else run here (on a CPU only)."""
    if SERVER_PROBE_S is not None:
        return SERVER_PROBE_S, "in the fork server"
    if device != "cpu":
        return 0.0, "not needed on a GPU"
    from gpuguide.chapters.compiling import first_calls_s

    return first_calls_s(_probe_cpu, device=device, calls=1), "in this process"


def measure(
    model: Callable[[Any], Any], compiled: Callable[[Any], Any], x: Any, *,
    device: str, before: Callable[[], Any] | None = None, rep_ms: float = 60.0,
    also: Mapping[str, Callable[[Any], Any]] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """In the child: time ``before()`` and the first call of ``compiled(x)``
    together (a cache load counts in the start), then ``model`` (eager),
    ``compiled`` and the callables in ``also`` in alternating rounds (the compile
    workers stopped), without gradients; returns the times (``"steady"``, keyed
    ``"eager"``, ``"compiled"`` and ``also``'s names), each round's median
    (``"rounds"``, keyed alike), the cache counts and dynamo's phases, ready for
    :func:`report`.

    The cache counts and phases are read before ``also``'s first calls, which
    compile outside every figure. Inductor's CPU probe (:func:`probe_cpu`) is left
    out of the first call: it was run in the fork server (``"probed"``), or,
    without one, is timed here before it (on a CPU); its seconds are ``"probe_s"``."""
    import torch
    from torch._dynamo.utils import counters

    from gpuguide.chapters.compiling import first_calls_s
    from gpuguide.verdicts import interleave

    probe_s, probed = _probe_outside(device)
    variants = {"eager": model, "compiled": compiled, **(also or {})}
    with torch.no_grad():
        loaded_s = first_calls_s(before, device=device, calls=1) if before else 0.0
        first_s = first_calls_s(compiled, x, device=device, calls=1)
        caches, timers = cache_counts(counters), phases()
        for name in also or {}:
            variants[name](x)
        _stop_compile_workers()
        timed = interleave({name: functools.partial(fn, x) for name, fn in variants.items()},
                           rounds=10, rep_ms=rep_ms, device=device)  # fmt: skip
    return {
        "first_s": loaded_s + first_s, "load_s": loaded_s,
        "probe_s": probe_s, "probed": probed, "caches": caches, "phases": timers,
        "steady": {name: list(m.times_s) for name, m in timed.items()},
        "rounds": {name: list(m.rounds) for name, m in timed.items()},
    }  # fmt: skip


def report(result: Mapping[str, Any], file: Any = None) -> None:
    """Print ``result`` as the child's one JSON line, after :data:`MARK`."""
    print(MARK + json.dumps(dict(result)), file=file or sys.stdout, flush=True)


# ---- in the parent ----------------------------------------------------------


def read_result(
    stdout: str, stderr: str = "", returncode: int | None = 0
) -> dict[str, Any]:
    """The result a child reported on ``stdout`` (its last :data:`MARK` line).

    Raises :class:`ChildFailed`, quoting the end of ``stderr``, when the child
    failed or reported nothing.
    """
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    if returncode == 0 and lines:
        result = json.loads(lines[-1][len(MARK) :])
        if isinstance(result, dict):
            return result
    tail = "\n".join(stderr.strip().splitlines()[-_TAIL_LINES:])
    msg = f"the child process ended (exit code {returncode}) without a result"
    raise ChildFailed(f"{msg}; the end of its stderr:\n{tail}" if tail else msg)


def _child(code: str, argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In a forked child: the outputs to files, the server's own :data:`SERVER_ENV`
    dropped and ``env`` set, ``code`` run as ``__main__``."""
    for fd, path in ((1, out), (2, err)):
        with open(path, "w") as handle:  # noqa: PTH123
            os.dup2(handle.fileno(), fd)
    for name in SERVER_ENV:
        os.environ.pop(name, None)
    os.environ.update(env)
    sys.argv = ["-c", *argv]
    main = sys.modules["__main__"] = types.ModuleType("__main__")  # as ``python -c``
    try:
        exec(compile(code, "<string>", "exec"), main.__dict__)
    finally:
        atexit._run_exitfuncs()  # as Python's exit does (inductor stops its workers)
        sys.stdout.flush()
        sys.stderr.flush()


def _forkserver(device: object = "cpu") -> Any:
    """``multiprocessing``'s fork-server context, its imports set for children that
    compile for ``device`` (a CPU probe only where that is a CPU); None without one.

    The imports apply when the server starts: a server already running (one per
    process) keeps its own."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    kind = str(getattr(device, "type", device)).partition(":")[0]
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        [name for name in PRELOAD if kind == "cpu" or name != _PROBE]
    )
    return context


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, then restore it."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_fresh(
    code: str, args: Iterable[object] = (), *, env: Mapping[str, str] | None = None,
    timeout_s: float = 600.0, fork: bool = True, device: object = "cpu",
) -> dict[str, Any]:  # fmt: skip
    """Run ``code`` as a script in a fresh process, ``args`` as its ``sys.argv[1:]``
    and ``env`` added to its environment; return what it :func:`report`-ed.

    ``fork``: from the fork server where there is one (see the module), else (or
    with ``fork=False``) ``python -c``. ``device``: what the child compiles for
    (``"cuda"``, a ``torch.device``); the server runs inductor's CPU probe only for
    a CPU. Its stdout and stderr are kept off the page; a failure raises
    :class:`ChildFailed` with the end of its stderr.
    """
    argv, extra = [str(a) for a in args], dict(env or {})
    context = _forkserver(device) if fork else None
    # The child imports what this process imports: its folders, made absolute (a
    # relative PYTHONPATH means something else once a page changes directory).
    path = {
        "PYTHONPATH": os.pathsep.join(str(Path(p).absolute()) for p in sys.path if p)
    }
    if context is None:
        extra = path | extra
        done = subprocess.run([sys.executable, "-c", code, *argv], env={**os.environ, **extra},
                              capture_output=True, text=True, timeout=timeout_s, check=False)  # fmt: skip
        return read_result(done.stdout, done.stderr, done.returncode)
    # The child drops the server's SERVER_ENV, and gets back this process's values.
    extra = {k: os.environ[k] for k in SERVER_ENV if k in os.environ} | extra
    with tempfile.TemporaryDirectory(prefix="gpuguide-child-") as folder:
        out, err = Path(folder, "stdout"), Path(folder, "stderr")
        process = context.Process(
            target=_child, args=(code, argv, extra, str(out), str(err))
        )
        # The server, if it starts now, takes this environment before its imports.
        with spawn_safe(), _environment(path | SERVER_ENV):
            process.start()
        process.join(timeout_s)
        if process.is_alive():
            process.kill()
            process.join()
        stdout, stderr = (p.read_text() if p.exists() else "" for p in (out, err))
        return read_result(stdout, stderr, process.exitcode)


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
        """The first calls of ``case``'s processes at ``n`` blocks as one Measurement
        (:func:`first_calls`); None where none ran."""
        done = self.runs([case], n)
        return first_calls(done, case, self.device) if done else None

    def rows(self) -> list[dict[str, Any]]:
        """A table row per depth and case that ran: blocks, case, processes, their
        first call, and what the caches did in the first of them."""
        depths = sorted({n for by_depth in self.results.values() for n in by_depth})
        return [
            {"blocks": n, "case": case, "processes": len(done)}
            | {"first call": self.first(case, n)}
            | {"caches": describe_caches(done[0]["caches"])}
            for n in depths
            for case, by_depth in self.results.items()
            if (done := by_depth.get(n))
        ]


def run_starts(
    code: str,
    cases: Sequence[str],
    blocks: Sequence[int],
    plan: Callable[[str, int], int],
    *,
    dim: int,
    device: object,
) -> Starts:
    """Run ``code`` in fresh processes (:func:`run_fresh`): at each depth ``n`` of
    ``blocks``, ``plan(case, n)`` processes of each of ``cases`` in turn, each with
    ``sys.argv[1:]``: the case, ``n``, ``dim``, ``device``, the path of the depth's
    Mega-Cache artifacts and whether ``n`` is the last depth.

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
                    run = run_fresh(code, args, env=env, device=device)
                    results[case][n].append(run)
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


def first_calls(
    results: Sequence[Mapping[str, Any]], label: str, device: str
) -> Measurement:
    """The first-call times of several children's ``results``, as one Measurement."""
    times = tuple(r["first_s"] for r in results)
    return Measurement(label, times, device, "host-clock, one process each")


def steady(
    results: Sequence[Mapping[str, Any]], name: str, label: str, device: str, *,
    relative: bool = False, paired: bool = False,
) -> Measurement:  # fmt: skip
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
    if paired:
        times = [t / statistics.median(r["steady"]["eager"])
                 for r in results for t in r["rounds"][name]]  # fmt: skip
        method = "round medians relative to eager, paired rounds"
        return Measurement(label, tuple(times), device, method, rounds=tuple(times))
    if relative:
        times = [statistics.median(r["steady"][name]) / statistics.median(r["steady"]["eager"])
                 for r in results]  # fmt: skip
        method = "median relative to eager, one per process"
    else:
        times = [t for r in results for t in r["steady"][name]]
        method = "wall-clock, pooled over processes"
    return Measurement(label, tuple(times), device, method)


def payback(
    results: Sequence[Mapping[str, Any]], first_call: Measurement, device: str,
    name: str = "compiled",
) -> tuple[tuple[int | None, int | None, int | None], Comparison]:  # fmt: skip
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
    low, median, high = (
        break_even(max(first_call.quantile(q) / unit_s - compiled.median_s, 0.0),
                   eager, compiled)
        for q in (0.25, 0.5, 0.75)
    )  # fmt: skip
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
    def single_run(self) -> bool:
        """Whether a depth ran one process only: the slope then has no spread."""
        return self.processes < 2

    @property
    def spread(self) -> tuple[float, float] | None:
        """``(low_s, high_s)``, or None for a :attr:`single_run`."""
        return None if self.single_run else (self.low_s, self.high_s)

    @property
    def short(self) -> str:
        """For a title: ``"457 ms"``, or ``"457 ms (410 ms to 500 ms)"``."""
        text = format_time(self.per_block_s)
        if self.single_run:
            return text
        return f"{text} ({format_time(self.low_s)} to {format_time(self.high_s)})"

    def __str__(self) -> str:
        text = f"{self.label}: {format_time(self.per_block_s)} per block"
        if self.single_run:
            return f"{text} (one process per depth: no spread)"
        span = f"{format_time(self.low_s)} to {format_time(self.high_s)}"
        if self.low_s <= 0 <= self.high_s:
            return f"{self.label}: no measurable growth per block ({span})"
        return f"{text} ({span})"


def growth(label: str, depths: Sequence[int], firsts: Sequence[Measurement]) -> Growth:
    """The :class:`Growth` of the first calls ``firsts`` measured at ``depths``
    (blocks), two depths or more."""
    if len(depths) != len(firsts) or len(set(depths)) < 2:
        msg = f"growth needs first calls at two depths or more, got depths {depths!r}"
        raise ValueError(msg)
    mean = statistics.fmean(depths)
    spread = sum((n - mean) ** 2 for n in depths)
    weights = [(n - mean) / spread for n in depths]
    slopes = [
        sum(
            w * m.quantile(q if w > 0 else 1 - q)
            for w, m in zip(weights, firsts, strict=True)
        )
        for q in (0.25, 0.5, 0.75)
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
    if steep.single_run or flat.single_run:
        return f"{adds} than {b}: one process per depth, so no spread and no verdict"
    low, high = steep.low_s - flat.high_s, steep.high_s - flat.low_s
    span = f"{format_time(low)} to {format_time(high)}"
    if low > 0 or high < 0:
        return f"{adds} than {b} ({span})"
    return f"{NO_DIFFERENCE} in growth per block between {a} and {b} ({span})"
