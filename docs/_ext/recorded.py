"""Tables of recorded results for the site: each page's section, the results page.

Not part of the gpuguide package: rendering for the docs build. The build adds a
"Recorded results" section to every example page (``results_page.py``) with
:func:`recorded_table`: the figures the page recorded while it ran in this
build, beside each recorded device's (``docs/results``), and where one of them
is this build's device, how this build compares with its recording
(:func:`gpuguide_tools.checkup.against_recording`). The "Results across
devices" page shows :func:`devices_table` and one :func:`page_table` per page.
Sweep points (figures with an ``x``) are left out of every table.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from pathlib import Path

from gpuguide.results import DeviceRecord, Result
from gpuguide.tables import Table
from gpuguide.units import format_value
from gpuguide.version import version_label
from gpuguide_tools.checkup import against_recording
from gpuguide_tools.pages import PageCode
from gpuguide_tools.results_files import ResultsFile, device_key

__all__ = [
    "EARLIER",
    "code_status",
    "device_label",
    "devices_table",
    "no_longer_recorded",
    "page_table",
    "recorded_table",
]


def _version(device: DeviceRecord) -> str:
    return version_label(device.gpuguide, device.commit, device.dirty)


def device_label(device: DeviceRecord) -> str:
    """``"H100 SXM5 (recorded 2026-11-20, torch 2.11.0, CUDA 12.8, gpuguide
    0.1.0 (f4b16f4))"``; the gpuguide part only where the file names it, and
    "vector ISA not recorded" for a CPU whose file does not name its ISA."""
    parts = [f"recorded {device.date[:10]}", f"torch {device.torch}"]
    if device.cuda:
        parts.append(f"CUDA {device.cuda}")
    if device.gpuguide is not None:
        parts.append(_version(device))
    if device.kind == "cpu" and device.isa is None:
        parts.append("vector ISA not recorded")
    if device.small:
        parts.append("small sizes")
    return f"{device.short_name} ({', '.join(parts)})"


def _headlines(results_file: ResultsFile | None, page: str) -> dict[object, Result]:
    """A file's headline figures of ``page`` (no sweep points), by key."""
    if results_file is None:
        return {}
    return {r.key: r for r in results_file.for_page(page) if r.x is None}


def _figure(result: Result) -> str:
    config = ", ".join(f"{k} {v}" for k, v in result.config.items())
    return f"{result.name}, {config}" if config else result.name


def _size(size: str | int | float | bool | None) -> str:
    """A size as a page shows it: powers of two from 1024 up as ``2^k``."""
    whole = isinstance(size, int) and not isinstance(size, bool)
    if whole and size >= 1024 and size & (size - 1) == 0:  # type: ignore[operator]
        return f"2^{size.bit_length() - 1}"  # type: ignore[union-attr]
    return str(size)


def _cell(result: Result | None, device: DeviceRecord | None = None) -> str:
    """A figure with its size; one a GPU machine measured on its host CPU is
    labelled with that CPU, never with the GPU."""
    if result is None:
        return "-"
    text = format_value(result.value, result.unit)
    text = f"{text} ({_size(result.size)})" if result.size is not None else text
    if result.on == "host" and device is not None:
        text += f", on the host CPU: {device.host or 'not recorded'}"
    return text


def code_status(recording: ResultsFile, page: str, code: PageCode | None) -> str:
    """Whether ``recording``'s figures of ``page`` come from its current ``code``.

    ``"figures from this page's current code (2026-11-27, 6f805ee)"``,
    ``"recorded at 2417e61 (2026-11-25); this page changed since"`` (or "the
    helpers it uses"), ``"recorded at 2417e61, before pages named their code"``
    (a file without page records), with ``"; its latest run failed (...)"``
    where it did. ``code`` None: the page's code is unknown here.
    """
    record = recording.page_record(page)
    run = record.recorded if record is not None else None
    if run is None:
        commit = recording.device.commit or "an unknown commit"
        text = f"recorded at {commit}, before pages named the code that measured them"
    elif code is None:
        text = f"recorded at {run.commit_label} ({run.date[:10]})"
    elif run.same_code(code.source, code.helpers):
        text = f"figures from this page's current code ({run.date[:10]}, {run.commit_label})"
    else:
        what = "this page" if run.source != code.source else "the helpers it uses"
        text = f"recorded at {run.commit_label} ({run.date[:10]}); {what} changed since"
    if record is not None and record.failed is not None:
        failed = record.failed
        text += f"; its latest run failed ({failed.date[:10]}, {failed.commit_label})"
    return text


def no_longer_recorded(
    page: str, live: ResultsFile | None, files: Sequence[ResultsFile]
) -> dict[str, int]:
    """How many of each device's headline figures of ``page`` this build's run
    of the page, on the same kind of device, no longer records (by device
    short name; empty without such a run): :func:`recorded_table` does not
    show them as current figures."""
    if live is None:
        return {}
    mine = _headlines(live, page)
    counts = {}
    for f in files:
        if not _judged_by(live, f):
            continue
        gone = [key for key in _headlines(f, page) if key not in mine]
        if gone:
            counts[f.device.short_name] = len(gone)
    return counts


#: What marks a cell recorded by an earlier version of the page.
EARLIER = " \u2020"


def _judged_by(live: ResultsFile | None, recording: ResultsFile) -> bool:
    """Whether this build's run of a page tells which of ``recording``'s figures
    the page still records: a run on the same kind of device (a CPU run does
    not record what a page measures only on a GPU)."""
    return live is not None and live.device.kind == recording.device.kind


def recorded_table(
    page: str,
    live: ResultsFile | None,
    files: Sequence[ResultsFile],
    earlier: Collection[str] = (),
) -> Table | None:
    """A page's headline figures in this build next to each recorded device's.

    Parameters
    ----------
    page : str
        The page (``"plot_dtype_throughput"``).
    live : ResultsFile or None
        What the page recorded when it ran for this build, with this build's
        device; None when the page was not run (``plot_gallery=0``).
    files : sequence of ResultsFile
        The recorded devices (``docs/results``).
    earlier : collection of str
        The short names of the devices whose figures of the page an earlier
        version of it recorded (:func:`code_status`): their cells are marked
        with :data:`EARLIER`.

    Returns
    -------
    Table or None
        A row per figure (sizes in parentheses; a recorded figure that this
        build's run on the same kind of device no longer records is left out:
        :func:`no_longer_recorded`), a "this build" column, one
        column per recorded device with figures of the page, and a "this build
        against its recording" column where one of them is this build's device
        (the same kind, short name and, for a CPU, vector ISA). None when no
        recorded device has a headline figure of the page.
    """
    shown = [(f, _headlines(f, page)) for f in files]
    shown = [(f, by_key) for f, by_key in shown if by_key]
    if not shown:
        return None
    mine = _headlines(live, page)
    rows_by_key = dict(mine)
    for f, by_key in shown:
        if _judged_by(live, f):  # the run says which figures the page records
            continue
        for key, result in by_key.items():
            rows_by_key.setdefault(key, result)
    own = None
    if live is not None:
        own = next(
            (b for f, b in shown if device_key(f.device) == device_key(live.device)),
            None,
        )
    header = ["figure", *(["this build"] if live else [])]
    header += [f"{f.device.short_name} [rec]" for f, _ in shown]
    header += ["this build against its recording"] if own is not None else []
    rows = []
    for key, result in rows_by_key.items():
        now = mine.get(key)
        row = [_figure(result), *([_cell(now)] if live else [])]
        for f, by_key in shown:
            found = by_key.get(key)
            mark = EARLIER if found and f.device.short_name in earlier else ""
            row.append(_cell(found, f.device) + mark)
        if own is not None:
            then = own.get(key)
            row.append(against_recording(now, then) if now and then else "-")
        rows.append(tuple(row))
    return Table(header=tuple(header), rows=tuple(rows))


def _percent_of_peak(result: Result, device: DeviceRecord) -> float | None:
    if result.on == "host":  # a GPU's peaks say nothing of its host CPU
        return None
    if result.peak is None or result.peak not in device.peaks:
        return None
    return 100.0 * result.value / device.peaks[result.peak]


def page_table(
    page: str, files: Sequence[ResultsFile], earlier: Collection[str] = ()
) -> Table | None:
    """One page's headline figures on every recorded device, with % of its peak
    (a CPU's measured ceiling, a GPU's datasheet figure); None when no file
    has a headline figure of the page. The cells of the devices named in
    ``earlier`` (recorded by an earlier version of the page) are marked with
    :data:`EARLIER`."""
    columns = [(f, _headlines(f, page)) for f in files]
    columns = [(f, by_key) for f, by_key in columns if by_key]
    if not columns:
        return None
    keys: dict[object, Result] = {}
    for _, by_key in columns:
        for key, result in by_key.items():
            keys.setdefault(key, result)
    rows = []
    for key, result in keys.items():
        row = [_figure(result)]
        for f, by_key in columns:
            found = by_key.get(key)
            pct = _percent_of_peak(found, f.device) if found else None
            cell = _cell(found, f.device)
            cell = cell if pct is None else f"{cell}, {pct:.0f}% of peak"
            mark = EARLIER if found and f.device.short_name in earlier else ""
            row.append(cell + mark)
        rows.append(tuple(row))
    header = ("figure", *(f.device.short_name for f, _ in columns))
    return Table(header=header, rows=tuple(rows))


def _gpuguide_cell(device: DeviceRecord) -> str:
    """``"0.1.0 (f4b16f4)"``, ``"0.1.0 (commit unknown)"``, or ``"-"`` (not recorded)."""
    if device.gpuguide is None:
        return "-"
    return _version(device).removeprefix("gpuguide ")


def devices_table(files: dict[Path, ResultsFile]) -> Table:
    """One row per results file (:func:`gpuguide_tools.results_files.load_dir`): device,
    torch, CUDA, driver, the gpuguide version and commit, date, sizes, headline
    figures and file name."""
    rows = tuple(
        (
            f.device.short_name, f.device.kind, f.device.torch, f.device.cuda or "-",
            f.device.driver or "-", f.device.host or "-", _gpuguide_cell(f.device),
            f.device.date[:10],
            "small" if f.device.small else "full",
            str(sum(r.x is None for r in f.results)), path.name,
        )
        for path, f in files.items()
    )  # fmt: skip
    header = ("device", "kind", "torch", "CUDA", "driver", "host CPU", "gpuguide",
              "recorded", "sizes", "figures", "file")  # fmt: skip
    return Table(header=header, rows=rows)
