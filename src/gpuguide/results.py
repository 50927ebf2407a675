"""Record a page's headline figures and the claims it checked, in memory and,
when ``GPUGUIDE_RECORD`` names a file, there, checked against the JSON Schema
``results.schema.json`` beside this module."""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeAlias

import jsonschema
from jsonschema.exceptions import best_match

from gpuguide.device import GpuState
from gpuguide.env import small_mode
from gpuguide.timing import Measurement, Rate
from gpuguide.verdicts import Comparison

if TYPE_CHECKING:
    from gpuguide.device import DeviceInfo

__all__ = [
    "Claim",
    "DeviceRecord",
    "Result",
    "current_device",
    "record",
    "record_claim",
    "recorded",
]

#: The version of the file format this module writes.
SCHEMA_VERSION = 3
#: A file to record into; unset or empty: :func:`record` keeps values in memory.
_RECORD_ENV = "GPUGUIDE_RECORD"
#: The types a configuration value may have (floats finite).
_ConfigValue: TypeAlias = str | int | float | bool


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
    text = resources.files("gpuguide").joinpath("results.schema.json").read_text()
    schema = json.loads(text)
    if definition is not None:
        schema = {"$defs": schema["$defs"], "$ref": f"#/$defs/{definition}"}
    return _Validator(schema)


def schema_problem(data: object, definition: str | None = None) -> str | None:
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
    if (problem := schema_problem(record.to_json(), definition)) is not None:
        msg = f"invalid {definition}: {problem}"
        raise ValueError(msg)


def _float(value: object) -> object:
    """A real number as a Python float; others as given, for the schema to refuse."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return value


@dataclass(frozen=True)
class DeviceRecord:
    """Where and when a results file was measured: device, versions, date, peaks.

    ``peaks`` maps peak names (:meth:`gpuguide.peaks.Peaks.share`) to rates;
    ``isa`` is a CPU's widest vector instruction set; ``host`` a GPU machine's
    host CPU; ``gpu`` a GPU's clocks, power limit, link and the clock limiters
    seen while recording (from NVML); None means unknown or not applicable.
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
    def from_info(
        cls, info: DeviceInfo, *, peaks: Mapping[str, float] | None = None
    ) -> DeviceRecord:
        """The record of a described device, dated now (UTC)."""
        cpu = info.type == "cpu"
        threads = f"{info.cpu_threads} thread{'s' if info.cpu_threads != 1 else ''}"
        host = ", ".join(filter(None, (info.cpu_model, threads, info.cpu_isa)))
        return cls(
            name=info.name,
            short_name=info.short_name,
            kind=info.type,
            torch=info.torch_version,
            cuda=info.cuda_version,
            driver=info.driver_version,
            date=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
            small=small_mode(),
            peaks=dict(peaks or {}),
            isa=info.cpu_isa if cpu else None,
            gpuguide=info.gpuguide_version,
            commit=info.gpuguide_commit,
            dirty=info.gpuguide_dirty,
            gpu=info.gpu_state if info.type == "cuda" else None,
            host=None if cpu else host,
        )

    def to_json(self) -> dict[str, object]:
        """The record as the ``"device"`` object of a results file."""
        own = ("name", "short_name", "kind", "torch", "cuda", "driver", "date", "small")
        data: dict[str, object] = {key: getattr(self, key) for key in own}
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


@dataclass(frozen=True)
class Result:
    """One recorded figure of one page: a median ``value`` in ``unit``, its
    ``spread`` ``(q25, q75)``, ``size``, position ``x`` on a sweep, the ``peak``
    it is a share of, and ``on="host"`` for a GPU machine's host CPU figure."""

    page: str
    name: str
    value: float
    unit: str
    spread: tuple[float, float] | None = None
    config: Mapping[str, _ConfigValue] = field(default_factory=dict)
    runs: int = 1
    size: _ConfigValue | None = None
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

    @property
    def key(
        self,
    ) -> tuple[str, str, tuple[tuple[str, _ConfigValue], ...], float | None]:
        """``(page, name, config, x)``: what identifies a figure across runs."""
        return (self.page, self.name, tuple(sorted(self.config.items())), self.x)

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
    """One claim a page states and its run checked (:func:`gpuguide.claim`): its
    ``text``, the ``outcome`` (``"held"``, ``"failed"``, ``"n/a"``) and
    ``measured``: what the run measured, or why the claim does not apply."""

    text: str
    outcome: str
    measured: str

    def __post_init__(self) -> None:
        _check(self, "claim")

    def to_json(self) -> dict[str, object]:
        """The claim as one entry of a results file's ``"claims"`` list of a page."""
        return asdict(self)


#: What this process recorded: figures by their key, claims by ``(page, text)``.
_recorded: dict[tuple[object, ...], Result | Claim] = {}
_device: list[DeviceRecord] = []


def current_device() -> DeviceRecord:
    """The provenance of this process's device, described once per process, with
    the GPU clock limiters seen so far."""
    if not _device:
        from gpuguide.device import describe_device

        _device.append(DeviceRecord.from_info(describe_device()))
    return _device[0]


def _note_clock_limits() -> None:
    """Add what limits the GPU's clocks now (after a measurement) to the limiters
    of this process's device, where NVML described it (once it is described)."""
    if not _device or (old := _device[0].gpu) is None:
        return
    from gpuguide.device import describe_device

    seen = getattr(describe_device().gpu_state, "clock_limits", None)
    if seen:
        limits = tuple(dict.fromkeys((*(old.clock_limits or ()), *seen)))
        _device[0] = replace(_device[0], gpu=replace(old, clock_limits=limits))


def _default_page() -> str:
    """The running script's name without ``.py`` (sphinx-gallery sets argv[0])."""
    main = sys.modules.get("__main__")
    candidates = [sys.argv[0] if sys.argv else "", getattr(main, "__file__", None)]
    for candidate in candidates:
        stem = Path(str(candidate)).stem
        if str(candidate).endswith(".py") and not stem.startswith("__"):
            return stem
    msg = f"no running script to name the page after (sys.argv[0]: {candidates[0]!r})"
    raise ValueError(msg)


def figure(
    value: float | Measurement | Rate | Comparison,
    unit: str | None = None,
    spread: tuple[float, float] | None = None,
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


def record(
    name: str,
    value: float | Measurement | Rate | Comparison,
    *,
    unit: str | None = None,
    spread: tuple[float, float] | None = None,
    size: _ConfigValue | None = None,
    peak: str | None = None,
    x: float | None = None,
    host: bool | None = None,
    **config: _ConfigValue,
) -> Result:
    """Record one headline figure of the running page; return its :class:`Result`.

    ``name`` and ``config`` identify the figure. ``value`` is a Measurement, Rate
    or Comparison (each with its unit and spread) or a number with its ``unit``
    and optional ``spread``. ``host``: whether a GPU machine measured it on its
    host CPU (default: whether a measured object ran on the CPU). Recording it
    again replaces it. Raises ``ValueError`` for an invalid field.
    """
    number, unit, spread = figure(value, unit, spread)
    if host is None:
        measured = value.subject if isinstance(value, Comparison) else value
        host = str(getattr(measured, "device", "")).startswith("cpu")
    result = Result(
        page=_default_page(),
        name=name,
        value=number,
        unit=unit,
        spread=spread,
        config=config,
        size=size,
        x=x,
        peak=peak,
        on="host" if host and current_device().kind != "cpu" else None,
    )
    _recorded.pop(result.key, None)
    _recorded[result.key] = result
    _note_clock_limits()
    _flush()
    return result


def record_claim(claim: Claim) -> None:
    """Keep the outcome of one claim of the running page; stating it again
    replaces it. Written at once when ``GPUGUIDE_RECORD`` is set."""
    key = (_default_page(), claim.text)
    _recorded.pop(key, None)
    _recorded[key] = claim
    _flush()


def recorded(*, clear: bool = False) -> tuple[Result | Claim, ...]:
    """The figures and claims this process recorded so far, in the order each was
    (last) recorded; ``clear=True`` also forgets them."""
    kept = tuple(_recorded.values())
    if clear:
        _recorded.clear()
    return kept


def _flush() -> None:
    """Write what this process recorded and checked into the file
    ``GPUGUIDE_RECORD`` names, replacing it; unset: do nothing."""
    target = os.environ.get(_RECORD_ENV, "").strip()
    if not target:
        return
    claims: dict[object, list[object]] = {}
    for (page, *_), kept in _recorded.items():
        if isinstance(kept, Claim):
            claims.setdefault(page, []).append(kept.to_json())
    figures = [r for r in _recorded.values() if isinstance(r, Result)]
    data = {
        "schema": SCHEMA_VERSION,
        "device": current_device().to_json(),
        "claims": claims,
        "results": [r.to_json() for r in sorted(figures, key=lambda r: r.page)],
    }
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.tmp")  # a killed run keeps the last file
    scratch.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    scratch.replace(path)
