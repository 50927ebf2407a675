"""Record every page's headline figures on this machine's device into one file.

``nox -s record`` runs this module: every example script runs as a reader
would run it, in its own process, with ``GPUGUIDE_RECORD`` naming a scratch
file, so each :func:`gpuguide.record` call of each page lands there. When
every page ran, the file is validated and replaces the device's file in the
results folder (``docs/results/<kind>-<device>.json``), or with ``--merge`` is
merged with it into medians with their spread. A page that fails leaves the
device's file as it was and the run exits non-zero, naming the page.

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
from gpuguide.results import (
    PEAK_NAMES,
    RECORD_ENV,
    Result,
    ResultsFile,
    ResultsFileError,
    current_device,
    load,
    load_dir,
    save,
)

__all__ = [
    "busy_warning",
    "finish_recording",
    "main",
    "merge",
    "pages",
    "peak_figures",
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
    """Run ``scripts`` with recording on; write the device's file in ``results``.

    The new recording replaces the device's file; with ``partial`` (some pages
    only) it replaces those pages' figures and keeps the others'; with
    ``merge_runs`` it is merged with the file (:func:`gpuguide.results.merge`).
    ``progress`` (stderr) gets a line as each page starts, ``log`` one as it
    ends, each with the time into the run (``clock``, in seconds). Returns the
    file written. Raises ``RuntimeError`` naming the pages that failed (the
    results folder is then left untouched), and
    :class:`gpuguide.results.ResultsFileError` for an invalid existing file.
    """
    say = log
    results.mkdir(parents=True, exist_ok=True)
    load_dir(results)  # a broken folder stops the run before it starts
    target = results / current_device().file_name
    busy = busy_warning()
    if busy:
        say(busy)
    with tempfile.TemporaryDirectory(prefix="gpuguide-record-") as scratch:
        fresh = Path(scratch) / target.name
        env = {
            **os.environ,
            RECORD_ENV: os.fspath(fresh),
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
            ok, tail = _run_page(script.resolve(), env, timeout)
            took = clock() - start
            say(
                f"{'ok  ' if ok else 'FAIL'} {script.stem} ({took:.0f} s; "
                f"{where} pages, {_clock(clock() - began)} in)"
            )
            if not ok:
                say(tail)
                failed.append(script.stem)
        return finish_recording(
            load(fresh) if fresh.exists() else None,
            results,
            failed=failed,
            merge_runs=merge_runs,
            partial=partial,
            log=say,
        )


def finish_recording(
    new: ResultsFile | None,
    results: Path,
    *,
    failed: Sequence[str] = (),
    merge_runs: bool = False,
    partial: bool = False,
    log: Callable[[str], object] = print,
) -> Path:
    """Turn a fresh recording into the device's file in ``results``.

    ``new`` is what the pages recorded, by :func:`record_pages` or by a docs
    build that records (``nox -s docs -- --record``). A CPU's peaks are
    measured (once, here, not inside a page), a GPU's are its datasheet's, and
    the result replaces the device's file, atomically; with ``partial`` (some
    pages only) it replaces those pages' figures and keeps the others'; with
    ``merge_runs`` it is merged with the file into medians with their spread
    (:func:`merge`).

    Returns the file written. Raises ``RuntimeError`` when ``failed`` names
    pages or nothing was recorded (the results folder is then left untouched),
    and :class:`gpuguide.results.ResultsFileError` for an invalid file.
    """
    target = results / (new.device if new else current_device()).file_name
    if failed:
        msg = (
            f"{len(failed)} page(s) failed: {', '.join(failed)}; {target} is unchanged"
        )
        raise RuntimeError(msg)
    if new is None or not new.results:
        msg = f"no page recorded a figure; {target} is unchanged"
        raise RuntimeError(msg)
    if not new.device.peaks:
        peaks = peak_figures(device_peaks())
        new = ResultsFile(replace(new.device, peaks=peaks), new.results)
    new = with_measured_ceilings(new)
    if merge_runs and target.exists():
        new = merge([load(target), new])
        log(f"merged with the recording already in {target}")
    elif partial and target.exists():
        new = _keep_other_pages(load(target), new)
    save(new, target)
    log(f"wrote {len(new.results)} figures of {len(new.pages)} pages to {target}")
    return target


def _keep_other_pages(old: ResultsFile, new: ResultsFile) -> ResultsFile:
    """Re-recording some pages replaces theirs and keeps the file's other pages."""
    mine = set(new.pages)
    kept = tuple(r for r in old.results if r.page not in mine)
    ordered = sorted((*kept, *new.results), key=lambda r: r.page)
    return ResultsFile(device=new.device, results=tuple(ordered))


def peak_figures(peaks: Peaks) -> dict[str, float]:
    """A :class:`gpuguide.peaks.Peaks` as a results file's ``"peaks"``: the
    figures named in :data:`gpuguide.results.PEAK_NAMES` that are known."""
    figures: dict[str, float | None] = {
        **peaks.flops,
        "memory": peaks.memory_bandwidth_bytes_per_s,
        "host_link": peaks.host_link_bytes_per_s,
    }
    return {k: v for k, v in figures.items() if k in PEAK_NAMES and v is not None}


def with_measured_ceilings(results_file: ResultsFile) -> ResultsFile:
    """A CPU's file with each peak raised to the best rate recorded against it.

    A CPU's peaks are the best rates measured on it
    (:func:`gpuguide.peaks.measure_cpu_peaks`), so a page or the check-up that
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
    return ResultsFile(replace(device, peaks=peaks), results_file.results)


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
        if other.device.key != first.key:
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
    return ResultsFile(device=latest, results=tuple(merged))


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
