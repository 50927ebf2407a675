"""Record a page's headline figures, and read them back from results files.

:func:`record` keeps a figure in memory (:func:`recorded`) and, when
``GPUGUIDE_RECORD`` names a file, writes it there with the run's provenance
(:class:`DeviceRecord`), replacing that page's figures. The format is stated
once, in the JSON Schema ``results.schema.json`` beside this module (the site
publishes it as ``_static/results.schema.json``): :func:`load` checks a file
against it with ``jsonschema``, and every record made here checks itself
against its part of it. :class:`ResultsFileError` names the file, the JSON
pointer of the bad field and the problem.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
import re
import sys
import tempfile
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

import jsonschema
from jsonschema.exceptions import best_match

from gpuguide import nvml
from gpuguide.env import small_mode
from gpuguide.nvml import GpuState
from gpuguide.timing import Measurement, Rate
from gpuguide.verdicts import Comparison
from gpuguide.version import version_label

if TYPE_CHECKING:
    from gpuguide.device import DeviceInfo

__all__ = [
    "ON_HOST",
    "OUTCOMES",
    "PEAK_NAMES",
    "READ_VERSIONS",
    "RECORD_ENV",
    "RESULTS_DIR_ENV",
    "SCHEMA_VERSION",
    "Claim",
    "ConfigValue",
    "DeviceRecord",
    "PageRecord",
    "PageRun",
    "Result",
    "ResultsFile",
    "ResultsFileError",
    "clear",
    "current_device",
    "dumps",
    "load",
    "load_dir",
    "loads",
    "record",
    "record_claim",
    "recorded",
    "recorded_claims",
    "save",
]

#: The version of the file format this module writes.
SCHEMA_VERSION = 3
#: The versions it reads: a version 1 file (before each page named the code
#: that measured it) reads as one whose pages' provenance is unknown, a version
#: 2 file (before claims were recorded) as one without claims.
READ_VERSIONS = (1, 2, 3)
#: A claim's outcomes: it held, it failed, or it does not apply on this device.
OUTCOMES = ("held", "failed", "n/a")
#: What a result's ``on`` may say: ``"host"``, a figure that a GPU machine
#: measured on its host CPU (the file's ``device.host``), not on the GPU.
ON_HOST = "host"
#: A file to record into; unset or empty: :func:`record` keeps values in memory.
RECORD_ENV = "GPUGUIDE_RECORD"
#: The folder of results files the site shows (``docs/results``) and the check-up reads.
RESULTS_DIR_ENV = "GPUGUIDE_RESULTS_DIR"
#: What a result's ``peak`` may name (:meth:`gpuguide.peaks.Peaks.share`).
PEAK_NAMES = ("fp64", "fp32", "tf32", "fp16", "bf16", "memory", "host_link")
#: The types a configuration value may have (floats finite).
ConfigValue: TypeAlias = str | int | float | bool

#: The JSON Schema of a results file, package data beside this module.
_SCHEMA_FILE = "results.schema.json"


class ResultsFileError(ValueError):
    """A results file that cannot be read: the message names the file and why."""


def _finite(checker: object, value: object) -> bool:
    """JSON's numbers: finite reals, not bools (JSON has no NaN or infinity)."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return real and math.isfinite(value)  # type: ignore[arg-type]


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "number", _finite
    ),
)


@functools.cache
def _validator(definition: str | None) -> Any:
    """A validator of a whole results file (None) or of one of its ``$defs``."""
    text = resources.files("gpuguide").joinpath(_SCHEMA_FILE).read_text("utf-8")
    schema = json.loads(text)
    if definition is not None:
        schema = {"$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return _Validator(schema)


def _problem(data: object, definition: str | None = None) -> str | None:
    """What ``data`` breaks of the schema, after the JSON pointer of the bad
    field; None when it follows the schema."""
    error = best_match(_validator(definition).iter_errors(data))
    if error is None:
        return None
    keys = (str(k).replace("~", "~0").replace("/", "~1") for k in error.absolute_path)
    pointer = "".join(f"/{key}" for key in keys)
    problem = f"{pointer}: {error.message}" if pointer else error.message
    for rule in (error, error.parent):  # a rule across fields says itself why
        if rule is not None and rule.validator in ("const", "anyOf"):
            why = rule.schema.get("description") if rule.schema is not True else None
            problem += f" ({why})" if why else ""
    return problem


def _check(record: Any, definition: str) -> None:
    """Raise ValueError when ``record``'s JSON breaks the schema's ``definition``."""
    if (problem := _problem(record.to_json(), definition)) is not None:
        msg = f"invalid {definition}: {problem}"
        raise ValueError(msg)


def _float(value: object) -> object:
    """A real number as a Python float (a numpy scalar, an int); others as given,
    for the schema to refuse."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


@dataclass(frozen=True)
class DeviceRecord:
    """Where and when a results file was measured: device, versions, date, peaks.

    ``peaks`` maps :data:`PEAK_NAMES` to rates; ``isa`` is a CPU's widest vector
    instruction set (None for a GPU); ``host`` a GPU machine's host CPU (model,
    threads, vector ISA: what its figures ``on`` the host ran on; None for a
    CPU); ``gpu`` a GPU's clocks, power limit, PCIe link and the clock limiters
    seen while figures were recorded (NVML's, where ``nvidia-ml-py`` is
    installed); None elsewhere means unknown.
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
    gpu: GpuState | None = None
    host: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "peaks", MappingProxyType(dict(self.peaks)))
        _check(self, "device")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeviceRecord:
        """The record of a results file's ``"device"`` object."""
        gpu = data.get("gpu")
        if gpu is not None and gpu.get("clock_limits") is not None:
            gpu = {**gpu, "clock_limits": tuple(gpu["clock_limits"])}
        return cls(**{**data, "gpu": None if gpu is None else GpuState(**gpu)})

    @property
    def key(self) -> tuple[str, str, str | None]:
        """``(kind, short_name, isa)``: two records with one key are one device."""
        return (self.kind, self.short_name, self.isa)

    @property
    def file_name(self) -> str:
        """The device's file in a results folder: ``"cuda-h100-sxm5.json"``."""
        name = re.sub(r"[^a-z0-9]+", "-", self.short_name.lower()).strip("-")
        if not name.startswith(f"{self.kind}-"):  # "CPU: AMD EPYC" names its kind
            name = f"{self.kind}-{name}"
        return name + ".json"

    @property
    def gpuguide_label(self) -> str:
        """``"gpuguide 0.1.0 (f4b16f4+dirty)"`` or ``"gpuguide version unknown"``."""
        return version_label(self.gpuguide, self.commit, self.dirty)

    @classmethod
    def from_info(
        cls,
        info: DeviceInfo,
        *,
        small: bool | None = None,
        peaks: Mapping[str, float] | None = None,
    ) -> DeviceRecord:
        """The record of a described device, dated now (UTC)."""
        gpu = info.type == "cuda"
        return cls(
            name=info.name,
            short_name=info.short_name,
            kind=info.type,
            torch=info.torch_version,
            cuda=info.cuda_version,
            driver=info.driver_version,
            date=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            small=small_mode() if small is None else small,
            peaks=dict(peaks or {}),
            isa=info.cpu_isa if info.type == "cpu" else None,
            gpuguide=info.gpuguide_version,
            commit=info.gpuguide_commit,
            dirty=info.gpuguide_dirty,
            gpu=info.gpu_state if gpu else None,
            host=None if info.type == "cpu" else host_label(info),
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
        if self.kind == "cpu" or self.isa is not None:
            data["isa"] = self.isa
        if (self.gpuguide, self.commit, self.dirty) != (None, None, False):
            data.update(gpuguide=self.gpuguide, commit=self.commit, dirty=self.dirty)
        if self.peaks:
            data["peaks"] = dict(self.peaks)
        if self.gpu is not None:
            data["gpu"] = self.gpu.to_json()
        if self.host is not None:
            data["host"] = self.host
        return data


def host_label(info: DeviceInfo) -> str:
    """A GPU machine's host CPU: ``"Intel(R) Xeon(R) Processor, 16 threads, AMX"``."""
    threads = f"{info.cpu_threads} thread{'s' if info.cpu_threads != 1 else ''}"
    label = f"{info.cpu_model}, {threads}"
    return f"{label}, {info.cpu_isa}" if info.cpu_isa else label


@dataclass(frozen=True)
class Result:
    """One recorded figure of one page: a median ``value`` in ``unit``, its
    ``spread`` ``(q25, q75)``, what identifies it (``key``), its ``size``,
    position ``x`` on a sweep, the ``peak`` it is a share of, and ``on``:
    :data:`ON_HOST` for a figure a GPU machine measured on its host CPU."""

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
    on: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", _float(self.value))
        object.__setattr__(self, "x", _float(self.x))
        if self.spread is not None:
            object.__setattr__(self, "spread", tuple(map(_float, self.spread)))
        object.__setattr__(self, "config", MappingProxyType(dict(self.config)))
        _check(self, "result")
        if self.spread is not None and self.spread[0] > self.spread[1]:
            msg = f"spread must have q25 <= q75, got {self.spread!r}"
            raise ValueError(msg)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Result:
        """The result of one entry of a results file's ``"results"``."""
        spread = data.get("spread")
        pair = None if spread is None else (spread["q25"], spread["q75"])
        return cls(**{**data, "spread": pair})

    @property
    def key(self) -> tuple[str, str, tuple[tuple[str, ConfigValue], ...], float | None]:
        """``(page, name, config, x)``: what identifies a figure across runs."""
        return (self.page, self.name, tuple(sorted(self.config.items())), self.x)

    @property
    def is_sweep_point(self) -> bool:
        """Whether the figure is one point of a sweep (it has an ``x``)."""
        return self.x is not None

    def to_json(self) -> dict[str, object]:
        """The result as one entry of a results file's ``"results"``."""
        q = self.spread
        data: dict[str, object] = {
            "page": self.page,
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "spread": None if q is None else {"q25": q[0], "q75": q[1]},
            "config": dict(self.config),
            "runs": self.runs,
        }
        extra = {"size": self.size, "x": self.x, "peak": self.peak, "on": self.on}
        return data | {k: v for k, v in extra.items() if v is not None}


@dataclass(frozen=True)
class Claim:
    """One claim a page states and its run checked (:func:`gpuguide.claim`): the
    ``text`` as the page states it, the ``outcome`` (one of :data:`OUTCOMES`) and
    ``measured``: what the run measured, or why the claim does not apply."""

    text: str
    outcome: str
    measured: str

    def __post_init__(self) -> None:
        _check(self, "claim")

    def to_json(self) -> dict[str, object]:
        """The claim as one entry of a results file's ``"claims"`` list of a page."""
        return {"text": self.text, "outcome": self.outcome, "measured": self.measured}


@dataclass(frozen=True)
class PageRun:
    """One run of one page: when, with which gpuguide commit and torch, and the
    code it ran: digests of the page's ``source`` and of the ``helpers`` it
    imports (:func:`gpuguide_tools.pages.page_code`), and how many ``seconds``
    it took (None when not timed)."""

    date: str
    torch: str
    source: str
    helpers: str
    commit: str | None = None
    dirty: bool = False
    seconds: float | None = None

    def __post_init__(self) -> None:
        _check(self, "pageRun")

    @property
    def commit_label(self) -> str:
        """``"2417e61"``, ``"2417e61+dirty"`` or ``"an unknown commit"``."""
        if self.commit is None:
            return "an unknown commit"
        return self.commit + ("+dirty" if self.dirty else "")

    def same_code(self, source: str, helpers: str) -> bool:
        """Whether this run ran the page and helpers whose digests are given."""
        return self.source == source and self.helpers == helpers

    def to_json(self) -> dict[str, object]:
        """The run as a results file writes it."""
        return {
            "date": self.date,
            "torch": self.torch,
            "source": self.source,
            "helpers": self.helpers,
            "commit": self.commit,
            "dirty": self.dirty,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class PageRecord:
    """What a results file knows of one page on its device: the run its figures
    come from (``recorded``; None when none did) and, when the page's latest
    run failed, that run (``failed``; its earlier figures are kept)."""

    recorded: PageRun | None = None
    failed: PageRun | None = None

    def __post_init__(self) -> None:
        _check(self, "pageRecord")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PageRecord:
        """The record of one entry of a results file's ``"pages"``."""
        runs = (data.get("recorded"), data.get("failed"))
        return cls(*(None if run is None else PageRun(**run) for run in runs))

    def to_json(self) -> dict[str, object]:
        """The record as a results file's ``"pages"`` entry."""

        def run(r: PageRun | None) -> object:
            return None if r is None else r.to_json()

        return {"recorded": run(self.recorded), "failed": run(self.failed)}


@dataclass(frozen=True)
class ResultsFile:
    """The contents of a results file: one device's provenance, its results,
    what each page's figures were measured by (``pages``, by page name; empty
    for a file of schema version 1) and the claims each page's recorded run
    checked (``claims``, by page name; empty before schema version 3). No
    figure twice, and no claim twice on a page."""

    device: DeviceRecord
    results: tuple[Result, ...] = ()
    pages_run: Mapping[str, PageRecord] = field(default_factory=dict)
    claims: Mapping[str, tuple[Claim, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(self.results))
        seen: dict[object, int] = {}
        for i, r in enumerate(self.results):
            if r.key in seen:
                msg = (
                    f"/results/{i} repeats /results/{seen[r.key]} ({r.page}: {r.name})"
                )
                raise ValueError(msg)
            seen[r.key] = i
        claims = {page: tuple(cs) for page, cs in sorted(dict(self.claims).items())}
        for page, page_claims in claims.items():
            texts = [c.text for c in page_claims]
            if twice := sorted({t for t in texts if texts.count(t) > 1}):
                msg = f"/claims/{page}: claims each stated once, got twice {twice}"
                raise ValueError(msg)
        object.__setattr__(self, "claims", MappingProxyType(claims))
        runs = dict(sorted(dict(self.pages_run).items()))
        object.__setattr__(self, "pages_run", MappingProxyType(runs))

    @property
    def pages(self) -> tuple[str, ...]:
        """The pages with results, in file order, each once."""
        return tuple(dict.fromkeys(r.page for r in self.results))

    def for_page(self, page: str) -> tuple[Result, ...]:
        """The results of one page (empty when it has none)."""
        return tuple(r for r in self.results if r.page == page)

    def claims_of(self, page: str) -> tuple[Claim, ...]:
        """The claims ``page``'s recorded run checked (empty when none)."""
        return self.claims.get(page, ())

    def page_record(self, page: str) -> PageRecord | None:
        """What the file knows of ``page``'s runs (None: nothing)."""
        return self.pages_run.get(page)

    def to_json(self) -> dict[str, object]:
        """The file's JSON object."""
        return {
            "schema": SCHEMA_VERSION,
            "device": self.device.to_json(),
            "pages": {page: run.to_json() for page, run in self.pages_run.items()},
            "claims": {p: [c.to_json() for c in cs] for p, cs in self.claims.items()},
            "results": [r.to_json() for r in self.results],
        }


def _fail(source: str, problem: str) -> ResultsFileError:
    return ResultsFileError(f"results file {source}: {problem}")


def _parse(data: Any, source: str) -> ResultsFile:
    """The contents of a results file's JSON, checked against the schema."""
    if (problem := _problem(data)) is not None:
        raise _fail(source, problem)
    results = []
    for i, entry in enumerate(data["results"]):
        try:
            results.append(Result.from_json(entry))
        except ValueError as error:
            raise _fail(source, f"/results/{i}: {error}") from None
    pages = data.get("pages", {})
    claims = data.get("claims", {})
    try:
        return ResultsFile(
            DeviceRecord.from_json(data["device"]),
            tuple(results),
            {page: PageRecord.from_json(run) for page, run in pages.items()},
            {page: tuple(Claim(**c) for c in cs) for page, cs in claims.items()},
        )
    except ValueError as error:
        raise _fail(source, str(error)) from None


def _no_constant(constant: str) -> float:
    msg = f"{constant} is not a number JSON allows"
    raise ValueError(msg)


def loads(text: str, source: str = "<string>") -> ResultsFile:
    """Validate a results file's text (see :func:`load`)."""
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as error:
        where = f"line {error.lineno}, column {error.colno}: {error.msg}"
        raise _fail(source, f"is not valid JSON ({where})") from None
    except ValueError as error:
        raise _fail(source, f"is not valid JSON ({error})") from None
    return _parse(data, source)


def load(path: str | os.PathLike[str]) -> ResultsFile:
    """Read and validate a results file; :class:`ResultsFileError` if it cannot be
    read, is not JSON, or breaks the schema (naming the bad field's JSON pointer)."""
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
    """Write a results file atomically, creating its folder; return its path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dumps(results_file))
        umask = os.umask(0)  # mkstemp makes the file private; a results file is not
        os.umask(umask)
        Path(tmp).chmod(0o666 & ~umask)
        Path(tmp).replace(target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def load_dir(path: str | os.PathLike[str]) -> dict[Path, ResultsFile]:
    """Read and validate every ``*.json`` results file of a folder, in name order;
    :class:`ResultsFileError` for no folder, an invalid file, or a device twice."""
    folder = Path(path)
    if not folder.is_dir():
        msg = f"results folder {os.fspath(folder)}: does not exist or is not a folder"
        raise ResultsFileError(msg)
    files: dict[Path, ResultsFile] = {}
    for file in sorted(folder.glob("*.json")):
        loaded = load(file)
        for other, earlier in files.items():
            if earlier.device.key == loaded.device.key:
                device = f"{loaded.device.short_name} ({loaded.device.kind})"
                problem = f"holds {device}, as {other} does; keep one file per device"
                raise _fail(os.fspath(file), problem)
        files[file] = loaded
    return files


_recorded: dict[object, Result] = {}
_claims: dict[tuple[str, str], Claim] = {}
_device: list[DeviceRecord] = []


def current_device() -> DeviceRecord:
    """The provenance of this process's device, described once per process; a
    GPU's clock limiters are those seen so far (:func:`_note_clock_limits`)."""
    if not _device:
        from gpuguide.device import describe_device

        _device.append(DeviceRecord.from_info(describe_device()))
    return _device[0]


def _with_limits(device: DeviceRecord, seen: Collection[str]) -> DeviceRecord:
    """``device`` with the clock limiters ``seen`` added to its own."""
    state = device.gpu
    if state is None or not seen:
        return device
    limits = tuple(dict.fromkeys((*(state.clock_limits or ()), *seen)))
    return replace(device, gpu=replace(state, clock_limits=limits))


def _note_clock_limits() -> None:
    """Add what limits the GPU's clocks now (after a measurement) to the limiters
    of this process's device, where NVML described it; else do nothing."""
    if not nvml.available() or current_device().gpu is None:
        return
    from gpuguide.device import gpu_state

    state = gpu_state()
    if state is not None and state.clock_limits is not None:
        _device[0] = _with_limits(_device[0], state.clock_limits)


def _default_page() -> str:
    """The running script's name without ``.py`` (sphinx-gallery sets ``sys.argv[0]``)."""
    main = sys.modules.get("__main__")
    candidates = [sys.argv[0] if sys.argv else "", getattr(main, "__file__", None)]
    for candidate in candidates:
        if isinstance(candidate, str) and candidate.endswith(".py"):
            stem = Path(candidate).stem
            if not stem.startswith("__"):
                return stem
    msg = (
        "page must be given: no running script to name it after "
        f"(sys.argv[0] is {candidates[0]!r}); pass page='plot_...'"
    )
    raise ValueError(msg)


def _figure(
    value: float | Measurement | Rate | Comparison,
    unit: str | None,
    spread: tuple[float, float] | None,
) -> tuple[float, str, tuple[float, float] | None]:
    """``(value, unit, spread)`` of a number, or read from a measured object."""
    if isinstance(value, Measurement):
        own = ("s", value.median_s, (value.q25_s, value.q75_s))
    elif isinstance(value, Rate):
        own = (value.unit, value.value, (value.low, value.high))
    elif isinstance(value, Comparison):
        own = ("x", value.speedup, (value.low, value.high))
    else:
        if unit is None:
            msg = "unit must be given for a number, got None"
            raise ValueError(msg)
        return value, unit, spread
    kind = type(value).__name__
    if unit not in (None, own[0]):
        msg = f"unit must be {own[0]!r} (or omitted) for a {kind}, got {unit!r}"
        raise ValueError(msg)
    if spread is not None:
        msg = f"spread must be omitted for a {kind} (it has its own), got {spread!r}"
        raise ValueError(msg)
    return own[1], own[0], own[2]


def _measured_on(value: object) -> str | None:
    """The device type a measured object ran on (``"cpu"``, ``"cuda"``), if it says."""
    if isinstance(value, Comparison):
        value = value.subject
    device = getattr(value, "device", None)
    return str(device).split(":")[0] if device is not None else None


def record(
    name: str,
    value: float | Measurement | Rate | Comparison,
    *,
    unit: str | None = None,
    spread: tuple[float, float] | None = None,
    page: str | None = None,
    size: ConfigValue | None = None,
    peak: str | None = None,
    x: float | None = None,
    host: bool | None = None,
    **config: ConfigValue,
) -> Result:
    """Record one headline figure of the running page; return its :class:`Result`.

    ``name``, ``config`` and ``page`` (default: the running script) identify the
    figure. ``value`` is a Measurement, Rate or Comparison (each with its unit
    and spread) or a number with its ``unit`` and optional ``spread``. Recording
    it again replaces it; with ``GPUGUIDE_RECORD`` set it is written at once.
    ``host``: whether the figure was measured on the host CPU of a GPU machine
    (the file files it as ``on: "host"``, labelled with that CPU); by default a
    Measurement, Rate or Comparison made on the CPU says so itself, and a plain
    number is taken as the device's. Ignored on a CPU, which is its own host.
    Raises ``ValueError`` for an invalid field, :class:`ResultsFileError` for an
    invalid file or one of another device.
    """
    number, unit, spread = _figure(value, unit, spread)
    if host is None:
        host = _measured_on(value) == "cpu"
    on = ON_HOST if host and current_device().kind != "cpu" else None
    result = Result(
        page=_default_page() if page is None else page,
        name=name,
        value=number,
        unit=unit,
        spread=spread,
        config=config,
        size=size,
        x=x,
        peak=peak,
        on=on,
    )
    _recorded.pop(result.key, None)
    _recorded[result.key] = result
    _note_clock_limits()
    if target := os.environ.get(RECORD_ENV, "").strip():
        _flush(Path(target), current_device())
    return result


def recorded() -> tuple[Result, ...]:
    """What this process recorded so far, in the order it was (last) recorded."""
    return tuple(_recorded.values())


def record_claim(claim: Claim, *, page: str | None = None) -> Claim:
    """Keep the outcome of one claim of the running page (``page``: default the
    running script); stating it again replaces it. Written at once, with the
    page's figures, when ``GPUGUIDE_RECORD`` is set."""
    if not isinstance(claim, Claim):
        msg = f"claim must be a Claim, got {type(claim).__name__}"
        raise TypeError(msg)
    page = _default_page() if page is None else page
    _claims.pop((page, claim.text), None)
    _claims[page, claim.text] = claim
    if target := os.environ.get(RECORD_ENV, "").strip():
        _flush(Path(target), current_device())
    return claim


def recorded_claims() -> dict[str, tuple[Claim, ...]]:
    """The claims this process checked so far, by page, in the order stated."""
    pages: dict[str, list[Claim]] = {}
    for (page, _), claim in _claims.items():
        pages.setdefault(page, []).append(claim)
    return {page: tuple(claims) for page, claims in pages.items()}


def clear() -> None:
    """Forget what this process recorded and the claims it checked (the files
    written stay as they are)."""
    _recorded.clear()
    _claims.clear()


def _flush(target: Path, device: DeviceRecord) -> None:
    """Write what this process recorded into ``target``, keeping the other pages'."""
    mine, my_claims = recorded(), recorded_claims()
    kept: tuple[Result, ...] = ()
    runs: Mapping[str, PageRecord] = {}
    claims: dict[str, tuple[Claim, ...]] = {}
    if target.exists():
        existing = load(target)
        if existing.device.key != device.key:
            theirs = f"{existing.device.short_name} ({existing.device.kind})"
            problem = (
                f"holds results of {theirs}, but this run is on {device.short_name} "
                f"({device.kind}); record each device into its own file"
            )
            raise _fail(os.fspath(target), problem)
        pages = {r.page for r in mine} | set(my_claims)
        kept = tuple(r for r in existing.results if r.page not in pages)
        runs = existing.pages_run
        claims = {p: c for p, c in existing.claims.items() if p not in pages}
        if existing.device.gpu is not None:  # the limiters the other pages saw too
            device = _with_limits(device, existing.device.gpu.clock_limits or ())
    ordered = sorted((*kept, *mine), key=lambda r: r.page)  # stable: pages keep order
    save(ResultsFile(device, tuple(ordered), runs, claims | my_claims), target)
