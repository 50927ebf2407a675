"""Record every page's headline figures on this machine's device into one file.

``nox -s record`` runs this module: every example script runs as a reader
would run it, in its own process, with ``GPUGUIDE_RECORD`` naming a scratch
file, so each :func:`gpuguide.record` call of each page lands there. As soon as
a page ends, :func:`record_page` writes its figures into the device's file in
the results folder (``docs/results/<kind>-<device>.json``), atomically, with
what measured them (the commit, and digests of the page's code: a
:class:`gpuguide_tools.results_files.PageRun`); with ``--merge`` they are merged with the
page's earlier figures into medians with their spread. A run killed at any
moment keeps every page that finished. A page that fails keeps its earlier
figures, is marked failed in the file, and the run goes on; it exits non-zero,
naming the page.

Usage::

    python -m gpuguide_tools.recorder [--examples examples] [--results docs/results]
        [--example NAME ...] [--merge] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from gpuguide.host import usable_cpus
from gpuguide.peaks import Peaks, device_peaks
from gpuguide.results import Claim, DeviceRecord, Result, current_device
from gpuguide_tools.pages import page_code
from gpuguide_tools.results_files import (
    PEAK_NAMES,
    PageRecord,
    PageRun,
    ResultsFile,
    ResultsFileError,
    device_key,
    file_name,
    load,
    load_dir,
    save,
)

__all__ = [
    "busy_warning",
    "commit_warning",
    "finish_recording",
    "main",
    "merge",
    "page_run",
    "pages",
    "peak_figures",
    "record_page",
    "record_pages",
    "with_measured_ceilings",
]


def pages(examples: Path, names: Sequence[str] = ()) -> list[Path]:
    """The example scripts to run, in chapter order; ``names`` selects some.

    Raises ``ValueError`` for a name that matches no script.
    """
    scripts = sorted(examples.glob("*/plot_*.py"))
    if not names:
        return scripts
    chosen = []
    for name in names:
        stem = Path(name).stem
        found = [s for s in scripts if s.stem == stem]
        if not found:
            msg = f"no example named {name!r} in {examples}"
            raise ValueError(msg)
        chosen += found
    return chosen


def busy_warning(load: float | None = None, cpus: int | None = None) -> str:
    """A warning when other work keeps the machine's CPUs busy; else ``""``.

    A recording should be made on an otherwise idle machine: another process
    on the same cores slows every page (a CPU's matmul rate drops many times
    over). ``load`` defaults to the one-minute load average, ``cpus`` to the
    usable CPUs.
    """
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (AttributeError, OSError):  # not on every platform
            return ""
    cpus = cpus or usable_cpus()
    if load <= 0.5 * cpus:
        return ""
    return (
        f"warning: the load average is {load:.1f} on {cpus} CPU(s): other work is "
        "running, and it will slow the pages; record on an idle machine"
    )


def commit_warning(device: DeviceRecord) -> str:
    """A warning when the figures would not name the code that measured them.

    A copy of the checkout without its ``.git`` folder (a GPU machine's copy)
    knows its commit only from ``GPUGUIDE_COMMIT``; without it every figure
    says "commit unknown". Returns ``""`` when the commit is known.
    """
    if device.commit is not None:
        return ""
    return (
        "the gpuguide commit is unknown (no .git here and GPUGUIDE_COMMIT is not "
        "set): the figures recorded now will say 'an unknown commit'; set "
        "GPUGUIDE_COMMIT=$(git rev-parse --short HEAD) from your checkout"
    )


def page_run(
    script: Path, device: DeviceRecord, seconds: float | None = None
) -> PageRun:
    """The run of ``script`` on ``device`` ending now: the date, torch, the
    gpuguide commit and digests of the page's code (:func:`page_code`)."""
    code = page_code(script)
    when = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
    return PageRun(
        date=when, torch=device.torch, source=code.source, helpers=code.helpers,
        commit=device.commit, dirty=device.dirty,
        seconds=None if seconds is None else round(seconds, 1),
    )  # fmt: skip


def _device_for(device: DeviceRecord, old: ResultsFile | None) -> DeviceRecord:
    """The file's provenance after a page: this run's, keeping the file's peaks
    (a GPU's datasheet peaks when it has none) and clock limiters."""
    peaks = dict(device.peaks) or (dict(old.device.peaks) if old else {})
    if not peaks and device.kind != "cpu":  # a CPU's are measured once, at the end
        peaks = peak_figures(device_peaks())
    limits = tuple(device.gpu.clock_limits or ()) if device.gpu else ()
    if device.gpu is not None and old is not None and old.device.gpu is not None:
        seen = (*limits, *(old.device.gpu.clock_limits or ()))
        gpu = replace(device.gpu, clock_limits=tuple(dict.fromkeys(seen)) or None)
        device = replace(device, gpu=gpu)
    return replace(device, peaks=peaks)


def record_page(
    results: Path,
    page: str,
    figures: Sequence[Result],
    run: PageRun,
    *,
    device: DeviceRecord,
    failed: bool = False,
    merge_runs: bool = False,
    claims: Sequence[Claim] = (),
) -> Path:
    """Write one page's outcome into the device's file in ``results``, at once.

    The page's ``claims`` replace its earlier ones, unless it failed.

    A page that ran replaces its figures in the file with ``figures`` (with
    ``merge_runs``, merges them with its earlier ones into medians with their
    spread) and names ``run`` as what measured them. A page that ``failed``
    keeps its earlier figures; the file names ``run`` as its failed run. The
    other pages' figures are kept. The file is replaced in one step, so a
    build killed at any moment leaves it whole.

    Raises :class:`gpuguide_tools.results_files.ResultsFileError` for an invalid file or one
    of another device or of other sizes (small mode).
    """
    results.mkdir(parents=True, exist_ok=True)
    target = results / file_name(device)
    old = load(target) if target.exists() else None
    if old is not None and device_key(old.device) != device_key(device):
        theirs = f"{old.device.short_name} ({old.device.kind})"
        msg = (
            f"results file {target}: holds {theirs}, but this run is on "
            f"{device.short_name} ({device.kind})"
        )
        raise ResultsFileError(msg)
    if old is not None and old.device.small != device.small:
        sizes = {True: "small sizes", False: "full sizes"}
        msg = (
            f"results file {target}: holds figures at {sizes[old.device.small]}, but "
            f"this run is at {sizes[device.small]}; record it into another folder"
        )
        raise ResultsFileError(msg)
    before = old.page_record(page) if old is not None else None
    earlier = old.for_page(page) if old is not None else ()
    if failed:
        mine = earlier
        entry = PageRecord(before.recorded if before else None, run)
    else:
        mine = tuple(r for r in figures if r.page == page)
        if merge_runs and earlier and mine:
            mine = merge(
                [ResultsFile(old.device, earlier), ResultsFile(device, mine)]  # type: ignore[union-attr]
            ).results
        entry = PageRecord(run)
    kept = tuple(r for r in old.results if r.page != page) if old is not None else ()
    ordered = sorted((*kept, *mine), key=lambda r: r.page)  # stable: pages keep order
    runs = {**(old.pages_run if old is not None else {}), page: entry}
    checked = dict(old.claims) if old is not None else {}
    if not failed:
        checked.pop(page, None)
        if claims:
            checked[page] = tuple(claims)
    save(ResultsFile(_device_for(device, old), tuple(ordered), runs, checked), target)
    return target


def _run_page(script: Path, env: dict[str, str], timeout: float) -> tuple[bool, str]:
    try:
        done = subprocess.run(
            [sys.executable, script.name],
            cwd=script.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s"
    tail = (done.stdout + done.stderr)[-3000:]
    return done.returncode == 0, tail


def _clock(seconds: float) -> str:
    """``"4:05"`` (minutes and seconds) or ``"1:02:05"`` past an hour."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def record_pages(
    scripts: Sequence[Path],
    results: Path,
    *,
    merge_runs: bool = False,
    partial: bool = False,
    timeout: float = 3600.0,
    log: Callable[[str], object] = print,
    progress: Callable[[str], object] = _to_stderr,
    clock: Callable[[], float] = time.perf_counter,
) -> Path:
    """Run ``scripts`` with recording on; write each page into the device's file.

    Each page's figures are written into ``results`` as soon as it ends
    (:func:`record_page`); a page that fails keeps its earlier figures and is
    marked failed, and the others still run. Without ``partial`` (every page)
    the file then drops the pages that no longer exist. ``progress`` (stderr)
    gets a line as each page starts, ``log`` one as it ends, each with the
    time into the run (``clock``, in seconds). Returns the file written.
    Raises ``RuntimeError`` naming the pages that failed (after recording the
    others), and :class:`gpuguide_tools.results_files.ResultsFileError` for an invalid file.
    """
    say = log
    results.mkdir(parents=True, exist_ok=True)
    load_dir(results)  # a broken folder stops the run before it starts
    device = current_device()
    for warning in (busy_warning(), commit_warning(device)):
        if warning:
            say(f"warning: {warning.removeprefix('warning: ')}")
    with tempfile.TemporaryDirectory(prefix="gpuguide-record-") as scratch:
        fresh = Path(scratch) / file_name(device)
        env = {
            **os.environ,
            "GPUGUIDE_RECORD": os.fspath(fresh),
            "MPLBACKEND": "Agg",
            "PYTHONFAULTHANDLER": "1",
            # files a page writes for download (traces) stay out of the examples
            "GPUGUIDE_ARTIFACT_DIR": os.fspath(Path(scratch) / "artifacts"),
        }
        failed = []
        began = clock()
        for number, script in enumerate(scripts, 1):
            start = clock()
            where = f"{number}/{len(scripts)}"
            progress(f"[{where}] {script.stem}: running ({_clock(start - began)} in)")
            fresh.unlink(missing_ok=True)
            ok, tail = _run_page(script.resolve(), env, timeout)
            took = clock() - start
            say(
                f"{'ok  ' if ok else 'FAIL'} {script.stem} ({took:.0f} s; "
                f"{where} pages, {_clock(clock() - began)} in)"
            )
            recorded = load(fresh) if ok and fresh.exists() else None
            ran_on = recorded.device if recorded is not None else device
            record_page(
                results, script.stem, recorded.results if recorded else (),
                page_run(script, ran_on, took), device=ran_on, failed=not ok,
                merge_runs=merge_runs,
                claims=recorded.claims_of(script.stem) if recorded else (),
            )  # fmt: skip
            if not ok:
                say(tail)
                failed.append(script.stem)
        return finish_recording(
            results,
            device,
            pages=[script.stem for script in scripts],
            failed=failed,
            partial=partial,
            log=say,
        )


def finish_recording(
    results: Path,
    device: DeviceRecord,
    *,
    pages: Sequence[str],
    failed: Sequence[str] = (),
    partial: bool = False,
    log: Callable[[str], object] = print,
) -> Path:
    """After the pages ran (each written by :func:`record_page`): complete the file.

    A CPU's peaks are measured (once, here, not inside a page) and raised to
    the best rate recorded against them; a GPU's are its datasheet's. Without
    ``partial`` (every page of the guide ran) the pages the file holds but
    ``pages`` does not name (pages since removed) are dropped.

    Returns the file. Raises ``RuntimeError`` when ``failed`` names pages
    (they are marked failed in the file, their earlier figures kept) or when
    no page recorded a figure.
    """
    target = results / file_name(device)
    current = load(target) if target.exists() else None
    failures = (
        f"{len(failed)} page(s) failed: {', '.join(failed)}; {target} keeps "
        "their earlier figures and marks them failed"
    )
    if current is None or not any(current.for_page(page) for page in pages):
        none = f"no page recorded a figure; {target} holds none of {len(pages)} page(s)"
        raise RuntimeError(failures if failed else none)
    new = current
    if not partial:
        gone = sorted({r.page for r in new.results} - set(pages))
        gone += sorted(set(new.pages_run) - set(pages) - set(gone))
        if gone:
            log(f"dropped {len(gone)} page(s) that no longer exist: {', '.join(gone)}")
            new = replace(
                new,
                results=tuple(r for r in new.results if r.page not in gone),
                pages_run={k: v for k, v in new.pages_run.items() if k not in gone},
                claims={k: v for k, v in new.claims.items() if k not in gone},
            )
    if not new.device.peaks:
        peaks = peak_figures(device_peaks())
        new = replace(new, device=replace(new.device, peaks=peaks))
    new = with_measured_ceilings(new)
    save(new, target)
    ran = [page for page in pages if page not in failed]
    log(f"wrote {len(ran)} page(s) to {target} ({len(new.results)} figures in all)")
    checked = [c for page in ran for c in new.claims_of(page)]
    if checked:
        count = {
            o: sum(c.outcome == o for c in checked) for o in ("held", "failed", "n/a")
        }
        log(
            f"claims of those pages: {count['held']} held, {count['failed']} did not "
            f"hold, {count['n/a']} not checked here"
        )
        for page in ran:
            for c in new.claims_of(page):
                if c.outcome == "failed":
                    log(f"    did not hold: {page}: {c.text}; measured {c.measured}")
    if failed:
        raise RuntimeError(failures)
    return target


def peak_figures(peaks: Peaks) -> dict[str, float]:
    """A :class:`gpuguide.peaks.Peaks` as a results file's ``"peaks"``: the
    figures named in :data:`gpuguide_tools.results_files.PEAK_NAMES` that are known."""
    figures: dict[str, float | None] = {
        **peaks.flops,
        "memory": peaks.memory_bandwidth_bytes_per_s,
        "host_link": peaks.host_link_bytes_per_s,
    }
    return {k: v for k, v in figures.items() if k in PEAK_NAMES and v is not None}


def with_measured_ceilings(results_file: ResultsFile) -> ResultsFile:
    """A CPU's file with each peak raised to the best rate recorded against it.

    A CPU's peaks are the best rates measured on it
    (:func:`gpuguide.peaks.device_peaks`), so a page or the check-up that
    finds a faster shape has found the ceiling; shares of it then read at most
    100%. A GPU's datasheet peaks are returned unchanged.
    """
    device = results_file.device
    if device.kind != "cpu" or not device.peaks:
        return results_file
    peaks = dict(device.peaks)
    for r in results_file.results:
        if r.peak in peaks and r.unit.endswith("/s"):
            peaks[r.peak] = max(peaks[r.peak], r.value)
    return replace(results_file, device=replace(device, peaks=peaks))


def _when(date: str) -> datetime:
    when = datetime.fromisoformat(date[:-1] + "+00:00" if date.endswith("Z") else date)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def merge(files: Sequence[ResultsFile]) -> ResultsFile:
    """Combine runs of one device into medians with their spread.

    For each figure (page, name and configuration): the median of the runs'
    values, a spread from the lowest ``q25`` to the highest ``q75`` (a run
    without a spread counts with its value), and the runs summed. A figure
    only some runs have is kept as it is; the provenance is the most recent
    run's. Raises ``ValueError`` for no files, two devices, or one figure in
    two units.
    """
    if not files:
        msg = "files must hold at least one results file, got none"
        raise ValueError(msg)
    first = files[0].device
    for other in files[1:]:
        if device_key(other.device) != device_key(first):
            msg = (
                f"files must be of one device, got {first.short_name} "
                f"({first.kind}) and {other.device.short_name} ({other.device.kind})"
            )
            raise ValueError(msg)
    groups: dict[object, list[Result]] = {}
    for results_file in files:
        for result in results_file.results:
            groups.setdefault(result.key, []).append(result)
    merged: list[Result] = []
    for group in groups.values():
        head = group[0]
        units = sorted({r.unit for r in group})
        if len(units) > 1:
            msg = f"{head.page}: {head.name} must have one unit in every run, got {', '.join(units)}"
            raise ValueError(msg)
        if len(group) == 1:
            merged.append(head)
            continue
        lows = [r.spread[0] if r.spread else r.value for r in group]
        highs = [r.spread[1] if r.spread else r.value for r in group]
        value = statistics.median(r.value for r in group)
        merged.append(
            replace(
                head, value=value, spread=(min(lows), max(highs)),
                runs=sum(r.runs for r in group), size=group[-1].size,
            )
        )  # fmt: skip
    latest = max((f.device for f in files), key=lambda d: _when(d.date))
    runs: dict[str, PageRecord] = {}
    claims: dict[str, tuple[Claim, ...]] = {}
    for results_file in files:  # the later file's page records and claims win
        runs.update(results_file.pages_run)
        claims.update(results_file.claims)
    return ResultsFile(
        device=latest, results=tuple(merged), pages_run=runs, claims=claims
    )


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuguide_tools.recorder",
        description="Run the guide's pages on this device and record their figures.",
    )
    parser.add_argument("--examples", type=Path, default=Path("examples"))
    parser.add_argument("--results", type=Path, default=Path("docs/results"))
    parser.add_argument("--example", action="append", default=[], metavar="NAME")
    parser.add_argument(
        "--merge", action="store_true", help="merge with the device's recording"
    )
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS")
    args = parser.parse_args(argv)
    try:
        scripts = pages(args.examples, args.example)
        if not scripts:
            print(f"error: no example scripts in {args.examples}", file=sys.stderr)
            return 2
        record_pages(
            scripts,
            args.results,
            merge_runs=args.merge,
            partial=bool(args.example),
            timeout=args.timeout,
            log=lambda line: print(line, flush=True),  # as each page ends
        )
    except (ValueError, RuntimeError, ResultsFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
