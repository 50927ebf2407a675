"""Results files: read, check, merge and write a device's recorded figures.

A page's :func:`gpuguide.record` calls land in memory, or in the file
``GPUGUIDE_RECORD`` names (:mod:`gpuguide.results`); the tools and the docs
build read such files (:func:`load`, :func:`load_dir`), add what measured each
page (:class:`PageRun`) and write the results folder (:func:`save`). The format
is the JSON Schema ``results.schema.json`` of the gpuguide package:
:func:`load` checks a file against it with ``jsonschema``, and
:class:`ResultsFileError` names the file, the JSON pointer of the bad field and
the problem.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from gpuguide.device import GpuState
from gpuguide.results import (
    SCHEMA_VERSION,
    Claim,
    DeviceRecord,
    Result,
    schema_problem,
)

__all__ = [
    "PEAK_NAMES",
    "RESULTS_DIR_ENV",
    "PageRecord",
    "PageRun",
    "ResultsFile",
    "ResultsFileError",
    "device_key",
    "dumps",
    "file_name",
    "load",
    "load_dir",
    "loads",
    "save",
]

#: The folder of results files the site shows (``docs/results``) and the check-up reads.
RESULTS_DIR_ENV = "GPUGUIDE_RESULTS_DIR"
#: What a result's ``peak`` may name (:meth:`gpuguide.peaks.Peaks.share`).
PEAK_NAMES = ("fp64", "fp32", "tf32", "fp16", "bf16", "memory", "host_link")


def device_key(device: DeviceRecord) -> tuple[str, str, str | None]:
    """``(kind, short_name, isa)``: two records with one key are one device."""
    return (device.kind, device.short_name, device.isa)


def file_name(device: DeviceRecord) -> str:
    """The device's file in a results folder: ``"cuda-h100-sxm5.json"``."""
    name = re.sub(r"[^a-z0-9]+", "-", device.short_name.lower()).strip("-")
    if not name.startswith(f"{device.kind}-"):  # "CPU: AMD EPYC" names its kind
        name = f"{device.kind}-{name}"
    return name + ".json"


class ResultsFileError(ValueError):
    """A results file that cannot be read: the message names the file and why."""


def _check(record: Any, definition: str) -> None:
    """Raise ValueError when ``record``'s JSON breaks the schema's ``definition``."""
    if (problem := schema_problem(record.to_json(), definition)) is not None:
        msg = f"invalid {definition}: {problem}"
        raise ValueError(msg)


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


def _device(data: Mapping[str, Any]) -> DeviceRecord:
    """The record of a results file's ``"device"`` object."""
    gpu = data.get("gpu")
    if gpu is not None and gpu.get("clock_limits") is not None:
        gpu = {**gpu, "clock_limits": tuple(gpu["clock_limits"])}
    return DeviceRecord(**{**data, "gpu": None if gpu is None else GpuState(**gpu)})


def _result(data: Mapping[str, Any]) -> Result:
    """The result of one entry of a results file's ``"results"``."""
    spread = data.get("spread")
    pair = None if spread is None else (spread["q25"], spread["q75"])
    return Result(**{**data, "spread": pair})


def _fail(source: str, problem: str) -> ResultsFileError:
    return ResultsFileError(f"results file {source}: {problem}")


def _parse(data: Any, source: str) -> ResultsFile:
    """The contents of a results file's JSON, checked against the schema."""
    if (problem := schema_problem(data)) is not None:
        raise _fail(source, problem)
    results = []
    for i, entry in enumerate(data["results"]):
        try:
            results.append(_result(entry))
        except ValueError as error:
            raise _fail(source, f"/results/{i}: {error}") from None
    pages = data.get("pages", {})
    claims = data.get("claims", {})
    try:
        return ResultsFile(
            _device(data["device"]),
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
            if device_key(earlier.device) == device_key(loaded.device):
                device = f"{loaded.device.short_name} ({loaded.device.kind})"
                problem = f"holds {device}, as {other} does; keep one file per device"
                raise _fail(os.fspath(file), problem)
        files[file] = loaded
    return files
