"""Record every page's headline figures on this machine's device into one file.

``nox -s record`` runs this module: every example script runs as a reader
would run it, in its own process, with ``GPUGUIDE_RECORD`` naming a scratch
file, so each :func:`gpuguide.record` call of each page lands there. When
every page ran, the file is validated and replaces the device's file in the
results folder (``docs/results/<kind>-<device>.json``), or with ``--merge`` is
merged with it into medians with their spread. A page that fails leaves the
device's file as it was and the run exits non-zero, naming the page.

Usage::

    python -m gpuguide.recorder [--examples examples] [--results docs/results]
        [--example NAME ...] [--merge] [--timeout SECONDS]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from gpuguide.host import usable_cpus
from gpuguide.peaks import device_peaks
from gpuguide.recordings import RESULTS_DIR_ENV, file_name, forget_recordings, load_dir
from gpuguide.results import (
    RECORD_ENV,
    ResultsFile,
    ResultsFileError,
    current_device,
    load,
    merge,
    peak_figures,
    save,
    with_measured_ceilings,
)

__all__ = ["busy_warning", "finish_recording", "main", "pages", "record_pages"]


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


def record_pages(
    scripts: Sequence[Path],
    results: Path,
    *,
    merge_runs: bool = False,
    partial: bool = False,
    timeout: float = 3600.0,
    log: Callable[[str], object] = print,
) -> Path:
    """Run ``scripts`` with recording on; write the device's file in ``results``.

    The new recording replaces the device's file; with ``partial`` (some pages
    only) it replaces those pages' figures and keeps the others'; with
    ``merge_runs`` it is merged with the file (:func:`gpuguide.results.merge`).
    Returns the file written. Raises ``RuntimeError`` naming the pages that
    failed (the results folder is then left untouched), and
    :class:`gpuguide.results.ResultsFileError` for an invalid existing file.
    """
    say = log
    results.mkdir(parents=True, exist_ok=True)
    load_dir(results)  # a broken folder stops the run before it starts
    target = results / file_name(current_device())
    busy = busy_warning()
    if busy:
        say(busy)
    with tempfile.TemporaryDirectory(prefix="gpuguide-record-") as scratch:
        fresh = Path(scratch) / target.name
        env = {
            **os.environ,
            RECORD_ENV: os.fspath(fresh),
            RESULTS_DIR_ENV: os.fspath(results.resolve()),
            "MPLBACKEND": "Agg",
            "PYTHONFAULTHANDLER": "1",
            # files a page writes for download (traces) stay out of the examples
            "GPUGUIDE_ARTIFACT_DIR": os.fspath(Path(scratch) / "artifacts"),
        }
        failed = []
        for script in scripts:
            start = time.perf_counter()
            ok, tail = _run_page(script.resolve(), env, timeout)
            took = time.perf_counter() - start
            say(f"{'ok  ' if ok else 'FAIL'} {script.stem} ({took:.0f} s)")
            if not ok:
                say(tail)
                failed.append(script.stem)
        return finish_recording(
            fresh,
            results,
            failed=failed,
            merge_runs=merge_runs,
            partial=partial,
            log=say,
        )


def finish_recording(
    fresh: Path,
    results: Path,
    *,
    failed: Sequence[str] = (),
    merge_runs: bool = False,
    partial: bool = False,
    log: Callable[[str], object] = print,
) -> Path:
    """Turn a scratch recording into the device's file in ``results``.

    ``fresh`` is the file the pages recorded into (``GPUGUIDE_RECORD``), by
    :func:`record_pages` or by a docs build that records
    (``nox -s docs -- --record``). It is validated, a CPU's peaks are measured
    (once, here, not inside a page) and the result replaces the device's file,
    atomically; with ``partial`` (some pages only) it replaces those pages'
    figures and keeps the others'; with ``merge_runs`` it is merged with the
    file into medians with their spread (:func:`gpuguide.results.merge`).

    Returns the file written. Raises ``RuntimeError`` when ``failed`` names
    pages or nothing was recorded (the results folder is then left untouched),
    and :class:`gpuguide.results.ResultsFileError` for an invalid file.
    """
    target = results / file_name(current_device())
    if failed:
        msg = (
            f"{len(failed)} page(s) failed: {', '.join(failed)}; {target} is unchanged"
        )
        raise RuntimeError(msg)
    if not fresh.exists():
        msg = f"no page recorded a figure; {target} is unchanged"
        raise RuntimeError(msg)
    new = load(fresh)
    target = results / file_name(new.device)
    if not new.device.peaks:  # a CPU's: measured once, here, not inside a page
        peaks = peak_figures(device_peaks())
        new = ResultsFile(replace(new.device, peaks=peaks), new.results)
    new = with_measured_ceilings(new)
    if merge_runs and target.exists():
        new = merge([load(target), new])
        log(f"merged with the recording already in {target}")
    elif partial and target.exists():
        new = _keep_other_pages(load(target), new)
    save(new, target)
    forget_recordings()
    log(f"wrote {len(new.results)} figures of {len(new.pages)} pages to {target}")
    return target


def _keep_other_pages(old: ResultsFile, new: ResultsFile) -> ResultsFile:
    """Re-recording some pages replaces theirs and keeps the file's other pages."""
    mine = set(new.pages)
    kept = tuple(r for r in old.results if r.page not in mine)
    ordered = sorted((*kept, *new.results), key=lambda r: r.page)
    return ResultsFile(device=new.device, results=tuple(ordered))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuguide.recorder",
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
        )
    except (ValueError, RuntimeError, ResultsFileError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
