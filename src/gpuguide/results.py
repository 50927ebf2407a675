"""Record a page's headline measurements, and read them back from a results file.

A page calls :func:`record` once per headline figure (a name, a value with its
unit and spread, and the configuration it was measured in). The values are kept
in memory for this process (:func:`recorded`); when the environment variable
``GPUGUIDE_RECORD`` names a file, every call also writes them there
(:func:`flush`), with the run's provenance (device, torch, CUDA, driver, date,
the gpuguide version and commit, and a CPU's vector instruction set).
Re-recording a page replaces that page's entries in the file and keeps the
other pages', so running every page on a device rebuilds its file page by page.

A results file is JSON with a schema version::

    {"schema": 1,
     "device": {"name": "NVIDIA H100 80GB HBM3", "short_name": "H100 SXM5",
                "kind": "cuda", "torch": "2.11.0", "cuda": "12.8",
                "driver": "570.86", "date": "2025-06-01T12:00:00+00:00",
                "gpuguide": "0.1.0", "commit": "f4b16f4", "dirty": false,
                "small": false, "peaks": {"bf16 matmul": 9.89e14}},
     "results": [{"page": "plot_dtype_throughput", "name": "best bf16 matmul",
                  "value": 6.7e14, "unit": "FLOP/s",
                  "spread": {"q25": 6.6e14, "q75": 6.8e14},
                  "config": {"size": 8192, "dtype": "bfloat16"}, "runs": 1}]}

:func:`load` validates a file strictly and raises :class:`ResultsFileError`,
whose message names the file and the problem, for anything else: truncated
JSON, a foreign or newer file, a value that is not a number. The gpuguide
version, commit and dirty mark, and a CPU's ``isa``, were added to schema 1
later: a file without them reads as "unknown" (and a CPU file without its ISA
is another device than one with it). :func:`merge` combines runs of one device
into medians with their spread.

The package does not know where a repository keeps its results: every
function takes a path.

Examples
--------
>>> from gpuguide.results import clear, record, recorded
>>> clear()
>>> r = record("matmul", 1.2e12, unit="FLOP/s", page="plot_demo", size=1024, dtype="fp32")
>>> (r.page, r.name, r.value, r.size, dict(r.config))
('plot_demo', 'matmul', 1200000000000.0, 1024, {'dtype': 'fp32'})
>>> len(recorded())
1
>>> clear()
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

from gpuguide.env import small_mode
from gpuguide.timing import Measurement
from gpuguide.version import version_label

if TYPE_CHECKING:
    from gpuguide.device import DeviceInfo
    from gpuguide.peaks import Peaks

__all__ = [
    "DEVICE_KINDS",
    "PEAK_NAMES",
    "RECORD_ENV",
    "SCHEMA_VERSION",
    "ConfigValue",
    "DeviceKey",
    "DeviceRecord",
    "Result",
    "ResultsFile",
    "ResultsFileError",
    "clear",
    "current_device",
    "default_page",
    "dumps",
    "flush",
    "load",
    "loads",
    "merge",
    "parse",
    "peak_figures",
    "record",
    "recorded",
    "recording_path",
    "save",
    "with_measured_ceilings",
]

#: The version of the file format this module writes and reads.
SCHEMA_VERSION = 1
#: A file to record into; unset or empty: :func:`record` keeps values in memory.
RECORD_ENV = "GPUGUIDE_RECORD"
#: What ``device.kind`` may be.
DEVICE_KINDS = ("cuda", "cpu", "mps")

#: The types a configuration value may have (floats finite).
ConfigValue: TypeAlias = str | int | float | bool
#: What identifies a device across results files (:attr:`DeviceRecord.key`).
DeviceKey: TypeAlias = tuple[str, str, str | None]

_TOP_KEYS = frozenset({"schema", "device", "results"})
_DEVICE_REQUIRED = ("name", "short_name", "kind", "torch", "cuda", "driver", "date")
_DEVICE_KEYS = frozenset(
    {*_DEVICE_REQUIRED, "small", "peaks", "isa", "gpuguide", "commit", "dirty"}
)
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_RESULT_REQUIRED = ("page", "name", "value", "unit")
_RESULT_KEYS = frozenset(
    {*_RESULT_REQUIRED, "spread", "config", "runs", "size", "x", "peak"}
)
#: What a result's ``peak`` may name: a :class:`gpuguide.peaks.Peaks` figure,
#: as :meth:`gpuguide.peaks.Peaks.percent_of` takes it.
PEAK_NAMES = ("fp64", "fp32", "tf32", "fp16", "bf16", "memory", "host_link")
_SPREAD_KEYS = ("q25", "q75")


class ResultsFileError(ValueError):
    """A results file that cannot be read: the message names the file and why."""


# --------------------------------------------------------------------------------------
# Checks with one style of message: "<name> must ..., got ..."
# --------------------------------------------------------------------------------------


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        msg = f"{name} must be a non-empty string, got {value!r}"
        raise ValueError(msg)
    return value


def _optional_text(name: str, value: object) -> str | None:
    return None if value is None else _text(name, value)


def _finite(name: str, value: object) -> float:
    """``value`` as a finite float; bools and strings are not numbers."""
    if isinstance(value, (bool, str, bytes)):
        msg = f"{name} must be a number, got {value!r}"
        raise ValueError(msg)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        msg = f"{name} must be a number, got {value!r}"
        raise ValueError(msg) from None
    if not math.isfinite(number):
        msg = f"{name} must be a finite number, got {value!r}"
        raise ValueError(msg)
    return number


def _config_value(name: str, value: object) -> ConfigValue:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _finite(name, value)
    if isinstance(value, str):
        return value
    msg = f"{name} must be a str, int, finite float or bool, got {value!r}"
    raise ValueError(msg)


def _date(name: str, value: object) -> str:
    text = _text(name, value)
    try:
        datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        msg = f"{name} must be an ISO 8601 date, got {value!r}"
        raise ValueError(msg) from None
    return text


def _sort_date(text: str) -> datetime:
    when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


# --------------------------------------------------------------------------------------
# The data
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DeviceRecord:
    """Where and when a results file was measured: its provenance.

    Attributes
    ----------
    name : str
        The device name (``"NVIDIA H100 80GB HBM3"``, the CPU model).
    short_name : str
        The label for figures (:attr:`gpuguide.device.DeviceInfo.short_name`).
    kind : str
        ``"cuda"``, ``"cpu"`` or ``"mps"``.
    torch : str
        The torch version.
    cuda : str or None
        The CUDA version torch was built with; None for CPU-only builds.
    driver : str or None
        The NVIDIA driver version; None where it is not known.
    date : str
        When it was measured, ISO 8601 (``"2025-06-01T12:00:00+00:00"``).
    small : bool
        Whether the pages ran at small sizes (``GPUGUIDE_SMALL``).
    peaks : mapping of str to float
        Optional peak rates of the device (``"bf16 matmul"``: FLOP/s), for
        percent-of-peak columns; empty when not recorded.
    isa : str or None
        A CPU's widest vector instruction set (``"AVX-512 BF16"``,
        :attr:`gpuguide.device.DeviceInfo.cpu_isa`), which the short name of a
        described CPU also names; None when unknown, and always for a GPU.
    gpuguide : str or None
        The version of the helpers that measured; None when not recorded
        (files from before it was).
    commit : str or None
        The commit those helpers were built from (hexadecimal, 7 to 40 digits);
        None when unknown.
    dirty : bool
        Whether that checkout had uncommitted changes.
    """

    name: str
    short_name: str
    kind: str
    torch: str
    cuda: str | None
    driver: str | None
    date: str
    small: bool = False
    peaks: Mapping[str, float] = field(default_factory=dict)
    isa: str | None = None
    gpuguide: str | None = None
    commit: str | None = None
    dirty: bool = False

    def __post_init__(self) -> None:
        _text("name", self.name)
        _text("short_name", self.short_name)
        if self.kind not in DEVICE_KINDS:
            msg = f"kind must be one of {', '.join(DEVICE_KINDS)}, got {self.kind!r}"
            raise ValueError(msg)
        _text("torch", self.torch)
        _optional_text("cuda", self.cuda)
        _optional_text("driver", self.driver)
        _date("date", self.date)
        if not isinstance(self.small, bool):
            msg = f"small must be a bool, got {self.small!r}"
            raise ValueError(msg)
        if not isinstance(self.peaks, Mapping):
            msg = f"peaks must be a mapping of names to rates, got {self.peaks!r}"
            raise ValueError(msg)
        peaks: dict[str, float] = {}
        for key, rate in self.peaks.items():
            _text("a peak's name", key)
            number = _finite(f"peak {key!r}", rate)
            if number <= 0:
                msg = f"peak {key!r} must be > 0, got {rate!r}"
                raise ValueError(msg)
            peaks[key] = number
        object.__setattr__(self, "peaks", MappingProxyType(peaks))
        self._check_identity()
        self._check_version()

    def _check_identity(self) -> None:
        if self.isa is None:
            return
        _text("isa", self.isa)
        if self.kind != "cpu":
            msg = (
                f"isa is a CPU's vector instruction set, for kind cpu only; "
                f"a {self.kind} record has none, got {self.isa!r}"
            )
            raise ValueError(msg)

    def _check_version(self) -> None:
        _optional_text("gpuguide", self.gpuguide)
        if self.commit is not None:
            if not isinstance(self.commit, str) or not _COMMIT.fullmatch(self.commit):
                msg = (
                    "commit must be a hexadecimal hash of 7 to 40 lower-case digits "
                    f"or null, got {self.commit!r}"
                )
                raise ValueError(msg)
            if self.gpuguide is None:
                msg = f"commit {self.commit!r} needs the gpuguide version beside it"
                raise ValueError(msg)
        if not isinstance(self.dirty, bool):
            msg = f"dirty must be a bool, got {self.dirty!r}"
            raise ValueError(msg)
        if self.dirty and self.commit is None:
            msg = "dirty must be false when the commit is unknown, got true"
            raise ValueError(msg)

    @property
    def key(self) -> DeviceKey:
        """``(kind, short_name, isa)``: two records with one key are the same
        device. A CPU recorded without its vector ISA (files from before it was
        recorded) is never the same device as one recorded with it."""
        return (self.kind, self.short_name, self.isa)

    @property
    def gpuguide_label(self) -> str:
        """``"gpuguide 0.1.0 (f4b16f4+dirty)"``, ``"gpuguide 0.1.0 (commit
        unknown)"`` or ``"gpuguide version unknown"``."""
        return version_label(self.gpuguide, self.commit, self.dirty)

    @classmethod
    def from_info(
        cls,
        info: DeviceInfo,
        *,
        date: str | None = None,
        small: bool | None = None,
        peaks: Mapping[str, float] | None = None,
    ) -> DeviceRecord:
        """The record of a described device (:func:`gpuguide.device.describe_device`).

        ``date`` defaults to now (UTC, to the second), ``small`` to
        :func:`gpuguide.env.small_mode`.
        """
        when = date or datetime.now(timezone.utc).replace(microsecond=0).isoformat()
        return cls(
            name=info.name,
            short_name=info.short_name,
            kind=info.type,
            torch=info.torch_version,
            cuda=info.cuda_version,
            driver=info.driver_version,
            date=when,
            small=small_mode() if small is None else small,
            peaks=dict(peaks or {}),
            isa=info.cpu_isa if info.type == "cpu" else None,
            gpuguide=info.gpuguide_version,
            commit=info.gpuguide_commit,
            dirty=info.gpuguide_dirty,
        )

    def to_json(self) -> dict[str, object]:
        """The record as the ``"device"`` object of a results file."""
        data: dict[str, object] = {
            "name": self.name,
            "short_name": self.short_name,
            "kind": self.kind,
            "torch": self.torch,
            "cuda": self.cuda,
            "driver": self.driver,
            "date": self.date,
            "small": self.small,
        }
        if self.kind == "cpu":
            data["isa"] = self.isa
        if self.gpuguide is not None:
            data.update(gpuguide=self.gpuguide, commit=self.commit, dirty=self.dirty)
        if self.peaks:
            data["peaks"] = dict(self.peaks)
        return data


@dataclass(frozen=True)
class Result:
    """One recorded figure of one page.

    Attributes
    ----------
    page : str
        The page's script name without ``.py`` (``"plot_dtype_throughput"``).
    name : str
        What was measured (``"best bf16 matmul"``).
    value : float
        The figure (a median), finite.
    unit : str
        Its unit (``"s"``, ``"FLOP/s"``, ``"B/s"``).
    spread : tuple of float or None
        ``(q25, q75)``, in the unit of ``value``, with ``q25 <= q75``; None when
        unknown. After :func:`merge`, the range over the runs' spreads.
    config : mapping of str to str, int, float or bool
        What it was measured with (``size``, ``dtype``, ``mode``).
    runs : int
        How many recording runs the figure combines (1, more after
        :func:`merge`).
    size : str, int, float, bool or None
        The problem size it was measured at (``8192``, ``"4096x8192x2048"``):
        shown beside the figure, but not part of what identifies it, so that a
        GPU's figure at its size and a CPU's at a smaller one line up.
    x : float or None
        The point's position on a sweep (its x value); None for a headline
        figure. Part of what identifies it.
    peak : str or None
        The device peak the figure is a share of: one of :data:`PEAK_NAMES`
        (``"bf16"`` for a bf16 matmul rate, ``"memory"``, ``"host_link"``).
    """

    page: str
    name: str
    value: float
    unit: str
    spread: tuple[float, float] | None = None
    config: Mapping[str, ConfigValue] = field(default_factory=dict)
    runs: int = 1
    size: ConfigValue | None = None
    x: float | None = None
    peak: str | None = None

    def __post_init__(self) -> None:
        _text("page", self.page)
        _text("name", self.name)
        object.__setattr__(self, "value", _finite("value", self.value))
        _text("unit", self.unit)
        if self.spread is not None:
            if not isinstance(self.spread, (tuple, list)) or len(self.spread) != 2:
                msg = f"spread must be (q25, q75) or None, got {self.spread!r}"
                raise ValueError(msg)
            q25 = _finite("spread q25", self.spread[0])
            q75 = _finite("spread q75", self.spread[1])
            if q25 > q75:
                msg = f"spread must have q25 <= q75, got q25={q25!r} > q75={q75!r}"
                raise ValueError(msg)
            object.__setattr__(self, "spread", (q25, q75))
        if not isinstance(self.config, Mapping):
            msg = f"config must be a mapping, got {self.config!r}"
            raise ValueError(msg)
        config: dict[str, ConfigValue] = {}
        for key, value in self.config.items():
            _text("a config key", key)
            config[key] = _config_value(f"config {key!r}", value)
        object.__setattr__(self, "config", MappingProxyType(config))
        if isinstance(self.runs, bool) or not isinstance(self.runs, int):
            msg = f"runs must be an integer >= 1, got {self.runs!r}"
            raise ValueError(msg)
        if self.runs < 1:
            msg = f"runs must be an integer >= 1, got {self.runs!r}"
            raise ValueError(msg)
        if self.size is not None:
            object.__setattr__(self, "size", _config_value("size", self.size))
        if self.x is not None:
            object.__setattr__(self, "x", _finite("x", self.x))
        if self.peak is not None and self.peak not in PEAK_NAMES:
            msg = f"peak must be one of {', '.join(PEAK_NAMES)} or None, got {self.peak!r}"
            raise ValueError(msg)

    @property
    def key(
        self,
    ) -> tuple[str, str, tuple[tuple[str, ConfigValue], ...], float | None]:
        """``(page, name, config, x)``: what identifies a figure across runs
        and devices (its size does not)."""
        return (self.page, self.name, tuple(sorted(self.config.items())), self.x)

    @property
    def is_sweep_point(self) -> bool:
        """Whether the figure is one point of a sweep (it has an ``x``)."""
        return self.x is not None

    def to_json(self) -> dict[str, object]:
        """The result as one entry of a results file's ``"results"``."""
        spread = (
            None
            if self.spread is None
            else {"q25": self.spread[0], "q75": self.spread[1]}
        )
        return {
            "page": self.page,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "spread": spread,
            "config": dict(self.config),
            "runs": self.runs,
        } | {
            key: value
            for key, value in (("size", self.size), ("x", self.x), ("peak", self.peak))
            if value is not None
        }


@dataclass(frozen=True)
class ResultsFile:
    """The contents of a results file: one device's provenance and its results.

    Attributes
    ----------
    device : DeviceRecord
        Where and when the results were measured.
    results : tuple of Result
        The figures, page by page.
    """

    device: DeviceRecord
    results: tuple[Result, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))

    @property
    def pages(self) -> tuple[str, ...]:
        """The pages with results, in file order, each once."""
        return tuple(dict.fromkeys(r.page for r in self.results))

    def for_page(self, page: str) -> tuple[Result, ...]:
        """The results of one page (empty when it has none)."""
        return tuple(r for r in self.results if r.page == page)

    def to_json(self) -> dict[str, object]:
        """The file's JSON object."""
        return {
            "schema": SCHEMA_VERSION,
            "device": self.device.to_json(),
            "results": [r.to_json() for r in self.results],
        }


# --------------------------------------------------------------------------------------
# Reading and writing files
# --------------------------------------------------------------------------------------


def _fail(source: str, problem: str) -> ResultsFileError:
    return ResultsFileError(f"results file {source}: {problem}")


def _unknown_keys(data: Mapping[str, object], allowed: frozenset[str]) -> list[str]:
    return sorted(str(k) for k in data if k not in allowed)


def _fields(
    data: object,
    where: str,
    required: Sequence[str],
    allowed: frozenset[str],
    source: str,
) -> dict[str, Any]:
    """``data`` as a JSON object with every required key and no unknown one."""
    if not isinstance(data, dict):
        raise _fail(source, f"{where} must be an object, got {data!r}")
    missing = [k for k in required if k not in data]
    if missing:
        raise _fail(source, f"{where} lacks {', '.join(missing)}")
    unknown = _unknown_keys(data, allowed)
    if unknown:
        raise _fail(source, f"{where} has unknown keys {', '.join(unknown)}")
    return data


def _parse_device(data: object, source: str) -> DeviceRecord:
    data = _fields(data, '"device"', _DEVICE_REQUIRED, _DEVICE_KEYS, source)
    try:
        return DeviceRecord(
            name=data["name"],
            short_name=data["short_name"],
            kind=data["kind"],
            torch=data["torch"],
            cuda=data["cuda"],
            driver=data["driver"],
            date=data["date"],
            small=data.get("small", False),
            peaks=data.get("peaks", {}),
            isa=data.get("isa"),
            gpuguide=data.get("gpuguide"),
            commit=data.get("commit"),
            dirty=data.get("dirty", False),
        )
    except (TypeError, ValueError) as error:
        raise _fail(source, f'"device": {error}') from None


def _parse_result(data: object, where: str, source: str) -> Result:
    data = _fields(data, where, _RESULT_REQUIRED, _RESULT_KEYS, source)
    spread = data.get("spread")
    pair: tuple[object, object] | None = None
    if spread is not None:
        if not isinstance(spread, dict) or set(spread) != set(_SPREAD_KEYS):
            problem = f'{where}: spread must be {{"q25": ..., "q75": ...}} or null'
            raise _fail(source, f"{problem}, got {spread!r}")
        pair = (spread["q25"], spread["q75"])
    config = data.get("config", {})
    if not isinstance(config, dict):
        raise _fail(source, f"{where}: config must be an object, got {config!r}")
    try:
        return Result(
            page=data["page"],
            name=data["name"],
            value=data["value"],
            unit=data["unit"],
            spread=pair,  # type: ignore[arg-type]
            config=config,
            runs=data.get("runs", 1),
            size=data.get("size"),
            x=data.get("x"),
            peak=data.get("peak"),
        )
    except (TypeError, ValueError) as error:
        raise _fail(source, f"{where}: {error}") from None


def parse(data: object, source: str = "<data>") -> ResultsFile:
    """Validate a results file's decoded JSON.

    Parameters
    ----------
    data : object
        What ``json.load`` returned.
    source : str, optional
        The file's name, for messages.

    Returns
    -------
    ResultsFile

    Raises
    ------
    ResultsFileError
        If ``data`` is not a results file of :data:`SCHEMA_VERSION`; the message
        names ``source`` and the problem.
    """
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise _fail(source, f"must hold a JSON object, got a JSON {kind}")
    if "schema" not in data:
        raise _fail(source, 'has no "schema": not a gpuguide results file')
    schema = data["schema"]
    if isinstance(schema, bool) or not isinstance(schema, int):
        raise _fail(source, f'"schema" must be an integer version, got {schema!r}')
    if schema != SCHEMA_VERSION:
        raise _fail(
            source,
            f"is schema version {schema}; this gpuguide reads version {SCHEMA_VERSION}",
        )
    unknown = _unknown_keys(data, _TOP_KEYS)
    if unknown:
        raise _fail(source, f"has unknown keys {', '.join(unknown)}")
    if "device" not in data:
        raise _fail(source, 'has no "device"')
    device = _parse_device(data["device"], source)
    results = data.get("results")
    if not isinstance(results, list):
        raise _fail(source, f'"results" must be a list, got {results!r}')
    parsed = tuple(
        _parse_result(entry, f"results[{i}]", source) for i, entry in enumerate(results)
    )
    seen: dict[object, int] = {}
    for i, result in enumerate(parsed):
        if result.key in seen:
            raise _fail(
                source,
                f"results[{i}] repeats results[{seen[result.key]}] "
                f"({result.page}: {result.name}, same config)",
            )
        seen[result.key] = i
    return ResultsFile(device=device, results=parsed)


def _reject_constant(constant: str) -> float:
    msg = f"{constant} is not a number JSON allows"
    raise ValueError(msg)


def loads(text: str, source: str = "<string>") -> ResultsFile:
    """Validate a results file's text (see :func:`load`)."""
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        problem = f"is not valid JSON (line {error.lineno}, column {error.colno}: "
        raise _fail(source, f"{problem}{error.msg})") from None
    except ValueError as error:
        raise _fail(source, f"is not valid JSON ({error})") from None
    return parse(data, source)


def load(path: str | os.PathLike[str]) -> ResultsFile:
    """Read and validate a results file.

    Parameters
    ----------
    path : str or path-like
        The file.

    Returns
    -------
    ResultsFile

    Raises
    ------
    ResultsFileError
        If the file cannot be read, is not JSON (truncated: the message gives
        line and column), is not a results file of :data:`SCHEMA_VERSION`, or
        holds a value that is not a finite number, a spread with ``q25 > q75``,
        a missing or unknown field. The message starts with the file's path.
    """
    source = os.fspath(path)
    try:
        text = Path(source).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise _fail(source, f"cannot be read ({error})") from None
    return loads(text, source)


def dumps(results_file: ResultsFile) -> str:
    """The text of a results file (JSON, indented, one trailing newline)."""
    return json.dumps(results_file.to_json(), indent=1, allow_nan=False) + "\n"


def save(results_file: ResultsFile, path: str | os.PathLike[str]) -> Path:
    """Write a results file atomically (a temporary file, then a rename over it).

    The directory is created where it is missing. Returns the path written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    text = dumps(results_file)
    fd, tmp = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        # mkstemp makes the file private (0600); a results file is for everyone.
        umask = os.umask(0)
        os.umask(umask)
        Path(tmp).chmod(0o666 & ~umask)
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


# --------------------------------------------------------------------------------------
# Merging runs of one device
# --------------------------------------------------------------------------------------


def merge(files: Sequence[ResultsFile]) -> ResultsFile:
    """Combine runs of one device into medians with their spread.

    Parameters
    ----------
    files : sequence of ResultsFile
        Results of the same device (same ``kind`` and ``short_name``).

    Returns
    -------
    ResultsFile
        For each figure (page, name and configuration): the median of the runs'
        values, a spread from the lowest ``q25`` to the highest ``q75`` of the
        runs (a run without a spread counts with its value), and the runs
        summed. A figure only some runs have is kept as it is. The provenance
        is that of the most recent run.

    Raises
    ------
    ValueError
        If ``files`` is empty, holds two devices, or one figure in two units.
    """
    if not files:
        msg = "files must hold at least one results file, got none"
        raise ValueError(msg)
    first = files[0].device
    for other in files[1:]:
        if other.device.key != first.key:
            msg = (
                f"files must be of one device, got {first.short_name} "
                f"({first.kind}) and {other.device.short_name} "
                f"({other.device.kind})"
            )
            raise ValueError(msg)
    groups: dict[object, list[Result]] = {}
    for results_file in files:
        for result in results_file.results:
            groups.setdefault(result.key, []).append(result)
    merged: list[Result] = []
    for group in groups.values():
        units = {r.unit for r in group}
        if len(units) > 1:
            head = group[0]
            msg = (
                f"{head.page}: {head.name} must have one unit in every run, got "
                f"{', '.join(sorted(units))}"
            )
            raise ValueError(msg)
        if len(group) == 1:
            merged.append(group[0])
            continue
        lows = [r.spread[0] if r.spread else r.value for r in group]
        highs = [r.spread[1] if r.spread else r.value for r in group]
        merged.append(
            Result(
                page=group[0].page,
                name=group[0].name,
                value=statistics.median(r.value for r in group),
                unit=group[0].unit,
                spread=(min(lows), max(highs)),
                config=group[0].config,
                runs=sum(r.runs for r in group),
                size=group[-1].size,
                x=group[0].x,
                peak=group[0].peak,
            )
        )
    latest = max((f.device for f in files), key=lambda d: _sort_date(d.date))
    return ResultsFile(device=latest, results=tuple(merged))


# --------------------------------------------------------------------------------------
# Recording from a page
# --------------------------------------------------------------------------------------

_recorded: dict[object, Result] = {}
_device_cache: list[DeviceRecord] = []
_with_peaks: dict[DeviceKey, dict[str, float]] = {}
_info_cache: list[DeviceInfo] = []


def recording_path() -> Path | None:
    """The file named by ``GPUGUIDE_RECORD``, or None when it is unset or empty."""
    name = os.environ.get(RECORD_ENV, "").strip()
    return Path(name) if name else None


def current_device() -> DeviceRecord:
    """The provenance of this process's device (:func:`gpuguide.device.describe_device`).

    Described once per process, then reused.
    """
    if not _device_cache:
        from gpuguide.device import describe_device

        _info_cache.append(describe_device())
        _device_cache.append(DeviceRecord.from_info(_info_cache[0]))
    return _device_cache[0]


def peak_figures(peaks: Peaks) -> dict[str, float]:
    """A :class:`gpuguide.peaks.Peaks` as a results file's ``"peaks"``.

    Keys are :data:`PEAK_NAMES`; figures that are unknown are left out.
    """
    figures: dict[str, float | None] = {
        **peaks.flops,
        "memory": peaks.memory_bandwidth_bytes_per_s,
        "host_link": peaks.host_link_bytes_per_s,
    }
    return {k: v for k, v in figures.items() if k in PEAK_NAMES and v is not None}


def with_measured_ceilings(results_file: ResultsFile) -> ResultsFile:
    """A CPU's file with each peak raised to the best rate recorded against it.

    A CPU's peaks are not a datasheet's but the best rates measured on it
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


def _recording_device() -> DeviceRecord:
    """:func:`current_device` with a GPU's datasheet peaks, for the file's provenance.

    A CPU's peaks are measured, which takes seconds and would run in the middle
    of a page (and draw on its random numbers), so a page leaves them out; the
    recorder (``nox -s record``) measures them once, after the pages. A device
    this process did not describe itself gets none.
    """
    device = current_device()
    if device.peaks or not _info_cache or device.kind != "cuda":
        return device
    if device.key not in _with_peaks:
        from gpuguide.peaks import device_peaks

        info = _info_cache[0]
        if DeviceRecord.from_info(info, date=device.date).key != device.key:
            return device
        _with_peaks[device.key] = peak_figures(device_peaks(info))
    return replace(device, peaks=_with_peaks[device.key])


def default_page() -> str:
    """The running script's name, without ``.py`` (sphinx-gallery sets
    ``sys.argv[0]`` to the page it runs); ``ValueError`` when there is none."""
    main = sys.modules.get("__main__")
    candidates = [sys.argv[0] if sys.argv else "", getattr(main, "__file__", None)]
    for candidate in candidates:
        if isinstance(candidate, str) and candidate:
            path = Path(candidate)
            if path.suffix == ".py" and not path.stem.startswith("__"):
                return path.stem
    msg = (
        "page must be given: no running script to name it after "
        f"(sys.argv[0] is {candidates[0]!r}); pass page='plot_...'"
    )
    raise ValueError(msg)


def record(
    name: str,
    value: float | Measurement,
    *,
    unit: str | None = None,
    spread: tuple[float, float] | None = None,
    page: str | None = None,
    size: ConfigValue | None = None,
    peak: str | None = None,
    x: float | None = None,
    **config: ConfigValue,
) -> Result:
    """Record one headline figure of the running page.

    Parameters
    ----------
    name : str
        What was measured (``"best bf16 matmul"``); with the page and the
        configuration, it identifies the figure across devices.
    value : float or Measurement
        The figure; a :class:`gpuguide.timing.Measurement` records its median
        time in seconds with its quartiles as the spread.
    unit : str
        The unit of ``value`` (``"FLOP/s"``, ``"B/s"``, ``"s"``); for a
        Measurement it may be omitted, and must be ``"s"`` if given.
    spread : tuple of float, optional
        ``(q25, q75)`` of ``value``, in its unit; for a Measurement, taken from it.
    page : str, optional
        The page's name; by default the running script's (``sys.argv[0]``,
        which sphinx-gallery sets to the page it runs).
    size : str, int, float or bool, optional
        The problem size (``8192``, ``"4096x8192x2048"``): shown with the
        figure, not part of what identifies it across devices.
    peak : str, optional
        The device peak the figure is a share of (:data:`PEAK_NAMES`).
    x : float, optional
        The figure's position on a sweep; :func:`gpuguide.plotting.plot_sweep`
        records its points so.
    **config : str, int, float or bool
        What identifies the figure beside its name: ``dtype="bf16", mode="eager"``.

    Returns
    -------
    Result
        What was recorded. Recording the same page, name and configuration
        again replaces it.

    Raises
    ------
    ValueError
        If ``name`` or ``unit`` is empty, the value or spread is not a finite
        number, a configuration value has another type, or no page is given
        and none can be derived.

    Notes
    -----
    The figure is kept in memory (:func:`recorded`). When ``GPUGUIDE_RECORD``
    names a file, it is also written there at once (:func:`flush`), so a page
    that fails later keeps what it recorded before.
    """
    if isinstance(value, Measurement):
        if unit not in (None, "s"):
            msg = f"unit must be 's' (or omitted) for a Measurement, got {unit!r}"
            raise ValueError(msg)
        if spread is not None:
            msg = f"spread must be omitted for a Measurement, got {spread!r}"
            raise ValueError(msg)
        unit, number = "s", value.median_s
        spread = (value.q25_s, value.q75_s)
    else:
        if unit is None:
            msg = f"unit must be given for a number, got None (recording {name!r})"
            raise ValueError(msg)
        number = value
    result = Result(
        page=default_page() if page is None else page,
        name=name,
        value=number,
        unit=unit,
        spread=spread,
        config=config,
        size=size,
        x=x,
        peak=peak,
    )
    _recorded.pop(result.key, None)
    _recorded[result.key] = result
    if recording_path() is not None:
        flush()
    return result


def recorded() -> tuple[Result, ...]:
    """What this process recorded so far, in the order it was (last) recorded."""
    return tuple(_recorded.values())


def clear() -> None:
    """Forget what this process recorded (the files written stay as they are)."""
    _recorded.clear()


def flush(
    path: str | os.PathLike[str] | None = None,
    *,
    device: DeviceRecord | None = None,
) -> Path | None:
    """Write what this process recorded into a results file.

    The pages recorded here replace their entries in the file; other pages'
    entries stay. The file's provenance becomes this run's.

    Parameters
    ----------
    path : str or path-like, optional
        The file; by default the one ``GPUGUIDE_RECORD`` names.
    device : DeviceRecord, optional
        The provenance; by default :func:`current_device`.

    Returns
    -------
    Path or None
        The file written; None when there was nothing to write or nowhere to
        write it.

    Raises
    ------
    ResultsFileError
        If the file exists but is not a valid results file, or holds results
        of another device (each device records into its own file).
    """
    target = Path(path) if path is not None else recording_path()
    if target is None or not _recorded:
        return None
    device = device or _recording_device()
    mine = recorded()
    pages = {r.page for r in mine}
    kept: tuple[Result, ...] = ()
    if target.exists():
        existing = load(target)
        if existing.device.key != device.key:
            raise _fail(
                os.fspath(target),
                f"holds results of {existing.device.short_name} "
                f"({existing.device.kind}), but this run is on {device.short_name} "
                f"({device.kind}); record each device into its own file",
            )
        kept = tuple(r for r in existing.results if r.page not in pages)
    # Sorted by page; the sort is stable, so each page keeps its own order.
    ordered = sorted((*kept, *mine), key=lambda r: r.page)
    return save(ResultsFile(device=device, results=tuple(ordered)), target)
