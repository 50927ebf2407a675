"""Recorded results of other devices, shown beside what this run measured.

A folder of results files (one per device, :mod:`gpuguide.results`) is named
by the environment variable ``GPUGUIDE_RESULTS_DIR``; the guide's build sets
it to ``docs/results``. A page records its headline figures with
:func:`gpuguide.results.record` and ends with :func:`show_recorded`, which
prints them next to each recorded device's (a compact table, each device
marked as recorded, with its torch version and date) and, where this device
has a recording of its own, how this run compares with it. Sweeps drawn with
:func:`gpuguide.plotting.plot_sweep` and ``record=`` get the recorded
devices' curves drawn faintly (:func:`plot_recorded`).

Every file is validated when it is read: a malformed, truncated or foreign
file raises :class:`gpuguide.results.ResultsFileError` naming the file, never
a table with a device silently missing.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, TypeAlias

from gpuguide.results import (
    ConfigValue,
    DeviceKey,
    DeviceRecord,
    Result,
    ResultsFile,
    ResultsFileError,
    current_device,
    default_page,
    load,
    recorded,
    recording_path,
)
from gpuguide.tables import Table
from gpuguide.units import (
    format_bytes,
    format_rate,
    format_ratio,
    format_time,
    significant,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = [
    "RESULTS_DIR_ENV",
    "against_recording",
    "axis_unit",
    "device_label",
    "devices_table",
    "file_name",
    "forget_recordings",
    "format_value",
    "load_dir",
    "page_table",
    "percent_of_recorded_peak",
    "plot_recorded",
    "recorded_table",
    "recordings",
    "results_dir",
    "series_key",
    "show_recorded",
]

#: What identifies a figure across devices (:attr:`gpuguide.results.Result.key`).
Key: TypeAlias = tuple[str, str, tuple[tuple[str, ConfigValue], ...], float | None]

#: The folder of results files that pages show beside their own figures.
RESULTS_DIR_ENV = "GPUGUIDE_RESULTS_DIR"

# --------------------------------------------------------------------------------------
# Where the files are
# --------------------------------------------------------------------------------------


def results_dir() -> Path | None:
    """The folder ``GPUGUIDE_RESULTS_DIR`` names, or None when it is unset or empty."""
    name = os.environ.get(RESULTS_DIR_ENV, "").strip()
    return Path(name) if name else None


def file_name(device: DeviceRecord) -> str:
    """The file a device's results are kept in: ``"cuda-h100-sxm5.json"``,
    ``"cpu-amd-epyc-2-threads-avx-512-bf16.json"``.

    Made of the device's kind and short name (which for a CPU names its
    threads and vector ISA), so that re-recording a device replaces its file
    and two devices never share one.
    """
    name = re.sub(r"[^a-z0-9]+", "-", device.short_name.lower()).strip("-")
    if not name.startswith(f"{device.kind}-"):  # "CPU: AMD EPYC" names its kind
        name = f"{device.kind}-{name}"
    return name + ".json"


def load_dir(path: str | os.PathLike[str]) -> dict[Path, ResultsFile]:
    """Read and validate every ``*.json`` results file in a folder.

    Parameters
    ----------
    path : str or path-like
        The folder (``docs/results``).

    Returns
    -------
    dict of Path to ResultsFile
        One entry per file, in file-name order; empty for an empty folder.

    Raises
    ------
    ResultsFileError
        If the folder does not exist, a file is not a valid results file (the
        message starts with the file's path and says what is wrong), or two
        files hold the same device.
    """
    folder = Path(path)
    if not folder.is_dir():
        msg = f"results folder {os.fspath(folder)}: does not exist or is not a folder"
        raise ResultsFileError(msg)
    files: dict[Path, ResultsFile] = {}
    seen: dict[DeviceKey, Path] = {}
    for file in sorted(folder.glob("*.json")):
        loaded = load(file)
        key = loaded.device.key
        if key in seen:
            msg = (
                f"results file {file}: holds {loaded.device.short_name} "
                f"({loaded.device.kind}), as {seen[key]} does; keep one file per "
                "device (merge runs with gpuguide.results.merge)"
            )
            raise ResultsFileError(msg)
        seen[key] = file
        files[file] = loaded
    return files


_loaded: dict[tuple[str, str], tuple[ResultsFile, ...]] = {}


def recordings() -> tuple[ResultsFile, ...]:
    """The results files of ``GPUGUIDE_RESULTS_DIR``, read once per process.

    The file this run records into (``GPUGUIDE_RECORD``) is left out: it is not
    a recording yet. Empty when the variable is unset.
    """
    folder = results_dir()
    if folder is None:
        return ()
    target = recording_path()
    skip = target.resolve() if target is not None else None
    key = (os.fspath(folder.resolve()), os.fspath(skip or ""))
    if key not in _loaded:
        files = load_dir(folder)
        _loaded[key] = tuple(f for p, f in files.items() if p.resolve() != skip)
    return _loaded[key]


def forget_recordings() -> None:
    """Read the folder afresh on the next :func:`recordings` (after re-recording)."""
    _loaded.clear()


# --------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------


def format_value(value: float, unit: str) -> str:
    """A figure with its unit: ``"612 TFLOP/s"``, ``"1.20 ms"``, ``"16.0 MiB"``."""
    if unit == "s":
        return format_time(value)
    if unit == "B":
        return format_bytes(value)
    if unit.endswith("/s"):
        return format_rate(value, unit)
    if unit == "x":
        return f"{significant(value)}x"
    return f"{significant(value)} {unit}"


def device_label(device: DeviceRecord) -> str:
    """``"H100 SXM5 (recorded 2026-11-20, torch 2.11.0, CUDA 12.8, gpuguide
    0.1.0 (f4b16f4))"``; the gpuguide part only where the file names it, and
    "vector ISA not recorded" for a CPU whose file does not name its ISA."""
    parts = [f"recorded {device.date[:10]}", f"torch {device.torch}"]
    if device.cuda:
        parts.append(f"CUDA {device.cuda}")
    if device.gpuguide is not None:
        parts.append(device.gpuguide_label)
    if device.kind == "cpu" and device.isa is None:
        parts.append("vector ISA not recorded")
    if device.small:
        parts.append("small sizes")
    return f"{device.short_name} ({', '.join(parts)})"


def _figure(result: Result) -> str:
    config = ", ".join(f"{k} {v}" for k, v in result.config.items())
    return f"{result.name}, {config}" if config else result.name


def _bounds(result: Result) -> tuple[float, float]:
    return result.spread if result.spread is not None else (result.value, result.value)


def against_recording(live: Result, recording: Result, *, sizes: bool = True) -> str:
    """How a figure of this run compares with the same device's recording.

    Returns ``"within its spread"`` when the two interquartile ranges overlap,
    else the difference in percent with its direction: ``"12% slower"`` for a
    time that grew or a rate that fell, ``"faster"`` the other way,
    ``"higher"``/``"lower"`` for other units. A time or an amount (unit
    ``"s"`` or ``"B"``) measured at another size is not compared (the table
    shows both sizes); a rate or a ratio is, marked "(other size)", unless ``sizes`` is False (the check-up's
    rates, which do not depend on the size once it is large enough).
    """
    if live.unit != recording.unit:
        return f"not comparable: {live.unit} here, {recording.unit} recorded"
    other_size = sizes and live.size != recording.size
    if other_size and live.unit in ("s", "B"):  # a time or an amount grows with size
        return "not comparable: other size"
    note = " (other size)" if other_size else ""
    (low, high), (rec_low, rec_high) = _bounds(live), _bounds(recording)
    if low <= rec_high and rec_low <= high:
        return "within its spread" + note
    up = live.value > recording.value
    ratio = live.value / recording.value if recording.value else 0.0
    if ratio <= 0:  # a zero, or opposite signs: a direction, not a factor
        return _direction(live.unit, up) + note
    factor = max(ratio, 1 / ratio)
    # "12% slower" for a difference, "3.1x faster" for a multiple
    amount = f"{abs(ratio - 1) * 100:.0f}%" if factor < 2 else format_ratio(factor)
    return f"{amount} {_direction(live.unit, up)}{note}"


def _direction(unit: str, up: bool) -> str:
    """The word for a figure that grew (``up``) or fell: a time that grew is slower."""
    if unit == "s":
        return "slower" if up else "faster"
    if unit.endswith("/s"):
        return "faster" if up else "slower"
    return "higher" if up else "lower"


def _size(size: ConfigValue | None) -> str:
    """A size as a page shows it: powers of two from 1024 up as ``2^k``."""
    whole = isinstance(size, int) and not isinstance(size, bool)
    if whole and size >= 1024 and size & (size - 1) == 0:  # type: ignore[operator]
        return f"2^{size.bit_length() - 1}"  # type: ignore[union-attr]
    return str(size)


def _cell(result: Result | None) -> str:
    if result is None:
        return "-"
    text = format_value(result.value, result.unit)
    return f"{text} ({_size(result.size)})" if result.size is not None else text


def _running_page(live: Sequence[Result]) -> str | None:
    """The running script's page; else the page recorded last; else None."""
    try:
        return default_page()
    except ValueError:
        return live[-1].page if live else None


def recorded_table(
    page: str | None = None,
    *,
    live: Sequence[Result] | None = None,
    files: Sequence[ResultsFile] | None = None,
    device: DeviceRecord | None = None,
) -> Table | None:
    """This page's headline figures next to each recorded device's.

    Parameters
    ----------
    page : str, optional
        The page; by default the running script's
        (:func:`gpuguide.results.default_page`), else the one recorded last.
    live : sequence of Result, optional
        This run's figures; default :func:`gpuguide.results.recorded`.
    files : sequence of ResultsFile, optional
        The recordings; default :func:`recordings`.
    device : DeviceRecord, optional
        This run's device, to find its own recording; default
        :func:`gpuguide.results.current_device`.

    Returns
    -------
    Table or None
        A row per figure (sweep points left out; sizes in parentheses), a
        column for this run and one per recorded device with figures for the
        page, and a "this run against its recording" column when one of them
        is this device: the same kind, short name and (for a CPU) vector ISA
        (:attr:`gpuguide.results.DeviceRecord.key`), so a CPU is never compared
        with a recording of another CPU that shares its model name. None when
        neither this run nor any recording has a figure for the page.
    """
    live = recorded() if live is None else tuple(live)
    files = recordings() if files is None else tuple(files)
    if page is None:
        page = _running_page(live)
        if page is None:
            return None
    mine = [r for r in live if r.page == page and not r.is_sweep_point]
    shown = [
        (f, {r.key: r for r in f.for_page(page) if not r.is_sweep_point}) for f in files
    ]
    shown = [(f, by_key) for f, by_key in shown if by_key]
    if not mine and not shown:
        return None
    device = device or current_device()
    rows_by_key: dict[Key, Result] = {r.key: r for r in mine}
    for _, by_key in shown:
        for key, result in by_key.items():
            rows_by_key.setdefault(key, result)
    own = next((by_key for f, by_key in shown if f.device.key == device.key), None)
    header = ["figure", "this run"] + [f"{f.device.short_name} [rec]" for f, _ in shown]
    if own is not None:
        header.append("this run against its recording")
    live_by_key = {r.key: r for r in mine}
    rows = []
    for key, result in rows_by_key.items():
        now = live_by_key.get(key)
        row = [_figure(result), _cell(now)]
        row += [_cell(by_key.get(key)) for _, by_key in shown]
        if own is not None:
            then = own.get(key)
            row.append(against_recording(now, then) if now and then else "-")
        rows.append(tuple(row))
    return Table(
        header=tuple(header),
        rows=tuple(rows),
        title=f"{page}: this run and the recorded devices ([rec]: not measured now)",
    )


def show_recorded(page: str | None = None, *, file: TextIO | None = None) -> None:
    """Print :func:`recorded_table` with a line on each recorded device.

    Says so in one line where there is nothing to show, or no folder of
    recordings (``GPUGUIDE_RESULTS_DIR`` unset).
    """
    out = file or sys.stdout
    folder = results_dir()
    table = recorded_table(page)
    if table is None:
        where = f"in {folder}" if folder else f"({RESULTS_DIR_ENV} is not set)"
        print(f"No figures of this page recorded {where}.", file=out)
        return
    print(table, file=out)
    names = {cell.removesuffix(" [rec]") for cell in table.header[2:]}
    for recording in recordings():
        if recording.device.short_name in names:
            print(f"[rec] {device_label(recording.device)}", file=out)
    if folder is None:
        print(
            f"No recorded devices: set {RESULTS_DIR_ENV} to a folder of results "
            "files (the guide's docs/results) to see them here.",
            file=out,
        )


# --------------------------------------------------------------------------------------
# Sweeps
# --------------------------------------------------------------------------------------

_PREFIXES = {
    "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
    "m": 1e-3, "u": 1e-6, "\N{MICRO SIGN}": 1e-6, "\N{GREEK SMALL LETTER MU}": 1e-6,
    "n": 1e-9, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40,
}  # fmt: skip
_BASES = ("FLOP/s", "B/s", "FLOP", "s", "B")
_AXIS_UNIT = re.compile(r"\(([^()]*)\)\s*$")


def axis_unit(label: str) -> tuple[str, float]:
    """The base unit and scale of an axis label: ``"time (ms)"`` -> ``("s", 1e-3)``.

    Prefixed seconds, bytes, FLOP and their rates are recognised (SI prefixes,
    and Ki/Mi/Gi/Ti for bytes); any other unit is its own base, scale 1. A label
    without a unit in parentheses at its end raises ``ValueError``.
    """
    match = _AXIS_UNIT.search(label)
    if not match or not match.group(1).strip():
        msg = f"axis label must end with a unit in parentheses, got {label!r}"
        raise ValueError(msg)
    unit = match.group(1).strip()
    for base in _BASES:
        if unit.endswith(base) and unit[: -len(base)] in _PREFIXES:
            prefix = unit[: -len(base)]
            if prefix.endswith("i") and not base.startswith("B"):
                continue
            return base, _PREFIXES[prefix]
    return unit, 1.0


def series_key(label: str) -> str:
    """A series' name across devices: its label up to the first ``" ("``."""
    return label.split(" (", 1)[0].strip()


_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1)))


def plot_recorded(
    ax: Axes,
    name: str,
    ylabel: str,
    *,
    page: str | None = None,
    files: Iterable[ResultsFile] | None = None,
) -> int:
    """Draw the recorded devices' curves of a sweep faintly on ``ax``.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        The plot of this run's sweep (drawn first, so that a recorded series
        takes the colour of this run's series of the same name).
    name : str
        The sweep's recorded name (``plot_sweep(..., record=name)``).
    ylabel : str
        The plot's y label; its unit converts the recorded values.
    page : str, optional
        The page; by default the running script's.
    files : iterable of ResultsFile, optional
        The recordings; default :func:`recordings`.

    Returns
    -------
    int
        How many recorded curves were drawn. Each device gets one line style
        and one legend entry, "<device> (recorded <date>)".
    """
    base, scale = axis_unit(ylabel)
    page = page or default_page()
    colours = {
        series_key(str(line.get_label())): line.get_color() for line in ax.get_lines()
    }
    drawn = 0
    for index, recording in enumerate(recordings() if files is None else files):
        curves: dict[str, list[tuple[float, float]]] = {}
        for r in recording.for_page(page):
            if r.name == name and r.x is not None and r.unit == base:
                curves.setdefault(str(r.config.get("series", "")), []).append(
                    (r.x, r.value / scale)
                )
        if not curves:
            continue
        style = _STYLES[index % len(_STYLES)]
        for series, points in curves.items():
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(
                xs, ys, linestyle=style, linewidth=1.2, alpha=0.45,
                color=colours.get(series, "grey"), label="_nolegend_",
            )  # fmt: skip
            drawn += 1
        ax.plot(
            [], [], linestyle=style, color="grey", alpha=0.6,
            label=f"{recording.device.short_name} (recorded {recording.device.date[:10]})",
        )  # fmt: skip
    return drawn


# --------------------------------------------------------------------------------------
# Every device side by side
# --------------------------------------------------------------------------------------


def percent_of_recorded_peak(result: Result, device: DeviceRecord) -> float | None:
    """The figure as a percentage of the device's recorded peak, where it has one."""
    if result.peak is None or result.peak not in device.peaks:
        return None
    return 100.0 * result.value / device.peaks[result.peak]


def _gpuguide_cell(device: DeviceRecord) -> str:
    """``"0.1.0 (f4b16f4)"``, ``"0.1.0 (commit unknown)"``, or ``"-"`` (not recorded)."""
    if device.gpuguide is None:
        return "-"
    return device.gpuguide_label.removeprefix("gpuguide ")


def devices_table(files: dict[Path, ResultsFile]) -> Table:
    """One row per results file (:func:`load_dir`): device, torch, CUDA,
    driver, the gpuguide version and commit, date, sizes, figures and file name."""
    rows = tuple(
        (
            f.device.short_name,
            f.device.kind,
            f.device.torch,
            f.device.cuda or "-",
            f.device.driver or "-",
            _gpuguide_cell(f.device),
            f.device.date[:10],
            "small" if f.device.small else "full",
            str(len(f.results)),
            path.name,
        )
        for path, f in files.items()
    )
    header = ("device", "kind", "torch", "CUDA", "driver", "gpuguide", "recorded",
              "sizes", "figures", "file")  # fmt: skip
    return Table(header=header, rows=rows)


def page_table(page: str, files: Sequence[ResultsFile]) -> Table | None:
    """One page's headline figures on every recorded device, with % of its peak.

    A CPU's peaks are its measured ceilings; a GPU's its datasheet figures.
    None when no file has a figure for the page.
    """
    columns = [f for f in files if any(not r.is_sweep_point for r in f.for_page(page))]
    if not columns:
        return None
    by_file = [
        {r.key: r for r in f.for_page(page) if not r.is_sweep_point} for f in columns
    ]
    keys: dict[Key, Result] = {}
    for by_key in by_file:
        for key, result in by_key.items():
            keys.setdefault(key, result)
    rows = []
    for key, result in keys.items():
        row = [_figure(result)]
        for f, by_key in zip(columns, by_file, strict=True):
            found = by_key.get(key)
            cell = _cell(found)
            pct = percent_of_recorded_peak(found, f.device) if found else None
            row.append(cell if pct is None else f"{cell}, {pct:.0f}% of peak")
        rows.append(tuple(row))
    header = ("figure", *(f.device.short_name for f in columns))
    return Table(header=header, rows=tuple(rows))
