"""The docs build's hooks: examples independent of each other, files copied.

A local Sphinx extension module, not part of the gpuguide package: it is build
policy (warnings fail the build) that a reader who installs the helpers does
not need. ``docs/conf.py`` puts this folder on ``sys.path`` and names the hooks.

sphinx-gallery runs every example in one Python process, so a flag one example
sets (TF32, a default dtype, a thread count, a compiled-graph cache) would leak
into the next page's measurements. :func:`reset_torch_state` is registered in
``docs/conf.py`` as a ``reset_modules`` hook that runs before and after every
example. Before an example it also turns warnings into errors, so a warning
that an example does not catch on purpose fails the build; warnings that torch
attributes to its own modules are ignored (:mod:`gpuguide.quiet`), and the
log lines torch prints go to the build's log instead of the page (its
structured trace, which prints nothing, is left alone). :func:`quiet_build_log`
keeps other extensions' lines that no reader needs out of the build's log.

sphinx-gallery re-executes an example only when its source changed (an ``.md5``
file beside each generated page), so a build on a GPU after one on the CPU would
keep the CPU's pages, and a change to a helper in ``src/gpuguide`` would leave
every page showing what the old helper measured. :func:`connect_fingerprint`
closes that gap: the fingerprint of what the pages depend on besides their own
source (:func:`build_fingerprint`: torch's version, the device, small mode, the
GPU memory cap, and digests of the helpers' and these extensions' sources) is recorded after a build that executed every example
without a failure, and a build that finds another fingerprint re-executes every
example (sphinx-gallery's ``run_stale_examples``) and says in its log what
changed, e.g. ``gpuguide: re-executing every example: helpers 32 file(s),
sha256 3f2a... -> 32 file(s), sha256 9bc1...``.
"""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import random
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sphinx.util import logging as sphinx_logging

import gpuguide
from gpuguide import results as gpuguide_results
from gpuguide.device import DeviceInfo, describe_device
from gpuguide.env import small_mode
from gpuguide.quiet import ignore_torch_internal_warnings
from gpuguide.units import format_bytes
from gpuguide_tools.pages import chapter_pages

__all__ = [
    "EXTENSIONS_DIR",
    "FINGERPRINT_FILE",
    "HELPERS_DIR",
    "SEED",
    "UNNEEDED_LINES",
    "ChapterOrder",
    "PageEnd",
    "build_fingerprint",
    "check_fingerprint",
    "connect_fingerprint",
    "copy_artifacts",
    "fingerprint_changes",
    "on_page_end",
    "page_argv",
    "page_figures",
    "page_times",
    "quiet_build_log",
    "record_after_build",
    "record_fingerprint",
    "remove_orphans",
    "reset_torch_state",
    "sources_digest",
]

#: The seed every example starts from.
SEED = 0

# Warnings that are not about the example's code and must not fail the build.
_ALLOWED_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # matplotlib's non-interactive Agg backend complains about plt.show().
    (
        UserWarning,
        r"(?s).*(non-GUI backend|is non-interactive, and thus cannot be shown)",
    ),
)

# Objects that carry the TF32 switches of torch >= 2.9 (``fp32_precision``).
_PRECISION_PATHS = (
    "backends",
    "backends.cuda.matmul",
    "backends.cudnn",
    "backends.cudnn.conv",
    "backends.cudnn.rnn",
    "backends.mkldnn",
    "backends.mkldnn.matmul",
    "backends.mkldnn.conv",
    "backends.mkldnn.rnn",
)

_state: dict[str, Any] = {}

# When each running example started, how long each finished one took (s), and
# the figures it recorded (gpuguide.record) while it ran.
_page_started: dict[str, float] = {}
_page_seconds: dict[str, float] = {}
_page_figures: dict[str, tuple[gpuguide_results.Result, ...]] = {}
_page_claims: dict[str, tuple[gpuguide_results.Claim, ...]] = {}
# sphinx-gallery's variables of each running example (page_argv): they say
# whether it raised.
_page_vars: dict[str, dict[str, Any]] = {}
# What to call as each example ends (on_page_end).
_listeners: list[Callable[[PageEnd], object]] = []


@dataclass(frozen=True)
class PageEnd:
    """One example's end, as :func:`on_page_end` listeners get it: its ``page``
    name, its ``script``, its ``seconds``, the ``figures`` it recorded, whether
    it ``failed`` (raised) and the ``claims`` it checked."""

    page: str
    script: Path | None
    seconds: float
    figures: tuple[gpuguide_results.Result, ...]
    failed: bool
    claims: tuple[gpuguide_results.Claim, ...] = ()


def on_page_end(listener: Callable[[PageEnd], object] | None) -> None:
    """Call ``listener`` with a :class:`PageEnd` as each example ends, right
    after it ran (None: no listener). One listener at a time: a new one
    replaces the old."""
    _listeners.clear()
    if listener is not None:
        _listeners.append(listener)


def page_argv(gallery_conf: Any, script_vars: dict[str, Any]) -> list[str]:
    """sphinx-gallery's ``reset_argv`` hook: no arguments for the example.

    It also keeps the example's ``script_vars``, where sphinx-gallery notes an
    exception the example raised, so that the hook after the example
    (:func:`reset_torch_state`) can tell a failed page.
    """
    src = script_vars.get("src_file")
    if src:
        _page_vars[Path(src).stem] = script_vars
    return []


def page_figures() -> dict[str, tuple[gpuguide_results.Result, ...]]:
    """The figures each example executed in this process recorded, by page name:
    every ``gpuguide.record`` (and ``gpuguide.report``) call of its run, taken by
    :func:`reset_torch_state` after the example (a failed one included)."""
    return dict(_page_figures)


def page_claims() -> dict[str, tuple[gpuguide_results.Claim, ...]]:
    """The claims each example executed in this process checked, by page name
    (:func:`gpuguide.claim`), taken with its figures."""
    return dict(_page_claims)


def page_times() -> dict[str, float]:
    """Seconds each example executed in this process took, by page name.

    Measured by :func:`reset_torch_state` from the end of its call before the
    example to the start of its call after it.
    """
    return dict(_page_seconds)


def _resolve(path: str) -> Any:
    obj: Any = torch
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _precision_objects() -> dict[str, Any]:
    found = {}
    for path in _PRECISION_PATHS:
        obj = _resolve(path)
        if obj is not None and hasattr(obj, "fp32_precision"):
            found[path] = obj
    return found


def _snapshot_defaults() -> None:
    """Record the process's defaults the first time the hook runs."""
    if _state:
        return
    _state["num_threads"] = torch.get_num_threads()
    _state["fp32_precision"] = {
        path: obj.fp32_precision for path, obj in _precision_objects().items()
    }


def _reset_precision() -> None:
    # The new per-backend switches first, back to the process's own defaults,
    # then the legacy ones: torch refuses to read a TF32 flag whose two APIs
    # disagree, so both must end in the same, default, state (no TF32 for
    # matmuls, TF32 allowed for cuDNN convolutions).
    objects = _precision_objects()
    for path, value in _state["fp32_precision"].items():
        objects[path].fp32_precision = value
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True


def _reset_cuda() -> None:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    for index in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(index)
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True


class _ToBuildLog(logging.Filter):
    """Send a torch log record to the build's own log, not to the page.

    sphinx-gallery points ``sys.stderr`` at the page while an example runs, and
    from torch 2.15 on torch's log handlers write to whatever ``sys.stderr`` is
    at that moment, so a line such as ``W... No CUDA runtime is found`` would
    land on the page. This filter writes the record to the process's real
    stderr (``sys.__stderr__``, the build log) and stops the handler.

    It goes only on handlers that print (:func:`_prints`), and last among their
    filters: a record that reaches it has passed the logger's and the handler's
    levels and the handler's own filters, so it is exactly what torch would
    have printed.
    """

    def __init__(self, handler: logging.Handler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        stream = sys.__stderr__
        if stream is not None:
            stream.write(self.handler.format(record) + "\n")
            stream.flush()
        return False


#: torch's structured trace (``TORCH_TRACE``): its handler writes to a file when
#: a trace folder is set, and otherwise removes itself at its first record.
_TORCH_TRACE_LOGGER = "torch.__trace"


def _prints(handler: logging.Handler) -> bool:
    """Whether ``handler`` writes its records to a console stream.

    A ``StreamHandler`` does, except a file (``TORCH_LOGS_OUT``) and torch's
    trace handler, a ``StreamHandler`` that opens its file at the first record;
    so does a handler whose ``stream`` is a property that follows
    ``sys.stderr`` (torch 2.15's ``_StderrHandler``, a plain ``Handler``).
    """
    if isinstance(handler, logging.StreamHandler):
        return (
            not isinstance(handler, logging.FileHandler)
            and type(handler).__name__ != "LazyTraceHandler"
        )
    return isinstance(getattr(type(handler), "stream", None), property)


def _torch_logs_to_build_log() -> None:
    """Add :class:`_ToBuildLog` to every handler of torch's loggers that prints
    (once each); the structured trace and file handlers are left as they are."""
    names = [
        name
        for name in logging.root.manager.loggerDict
        if (name == "torch" or name.startswith("torch."))
        and name != _TORCH_TRACE_LOGGER
    ]
    for name in names:
        for handler in logging.getLogger(name).handlers:
            if _prints(handler) and not any(
                isinstance(f, _ToBuildLog) for f in handler.filters
            ):
                handler.addFilter(_ToBuildLog(handler))


class _Unneeded(logging.Filter):
    """Drop a logger's records below WARNING whose message contains ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or self.text not in record.getMessage()


#: Lines of other extensions that tell a reader of the build log nothing: the
#: logger and a text of the message. myst prints its whole configuration.
UNNEEDED_LINES = (("sphinx.myst_parser.sphinx_ext.main", "MdParserConfig("),)


def quiet_build_log() -> None:
    """Keep :data:`UNNEEDED_LINES` out of the build log (once per logger).

    Call it from ``conf.py``'s ``setup(app)``, before the builder starts.
    Warnings and errors of those loggers still reach the log.
    """
    for name, text in UNNEEDED_LINES:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Unneeded) and f.text == text for f in logger.filters):
            logger.addFilter(_Unneeded(text))


def _errors_for_warnings() -> None:
    warnings.simplefilter("error")
    for category, message in _ALLOWED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    # Torch's warnings about its own code are not the example's doing.
    ignore_torch_internal_warnings()


def reset_torch_state(
    gallery_conf: dict[str, Any] | None = None,
    fname: str | None = None,
    when: str = "before",
) -> None:
    """Put torch's global state back to its defaults around one example.

    Resets the TF32 and matmul-precision flags, the default dtype and device,
    the intra-op thread count, cuDNN's autotuner and determinism switches, the
    random seeds (Python, NumPy, torch on every device), dynamo's caches, and
    CUDA's cached blocks and peak-memory statistics, and the figures the
    previous example recorded (:func:`gpuguide.results.recorded`), after keeping
    them for :func:`page_figures`.

    Parameters
    ----------
    gallery_conf : dict, optional
        sphinx-gallery's configuration (unused; part of the hook's signature).
    fname : str, optional
        The example's file name (unused).
    when : {"before", "after"}
        ``"before"`` also turns warnings into errors for the example;
        ``"after"`` restores the warning filters that were in force before.

    Notes
    -----
    Register it in ``conf.py`` with ``"reset_modules_order": "both"`` and its
    fully qualified name, ``"gallery_hooks.reset_torch_state"``.
    """
    if when not in ("before", "after"):
        msg = f"when must be 'before' or 'after', got {when!r}"
        raise ValueError(msg)
    page = Path(fname).stem if fname else None
    ended = None
    if page is not None and when == "after" and page in _page_started:
        _page_seconds[page] = time.perf_counter() - _page_started.pop(page)
        kept = gpuguide_results.recorded()
        _page_figures[page] = tuple(
            r for r in kept if isinstance(r, gpuguide_results.Result)
        )
        _page_claims[page] = tuple(
            c for c in kept if isinstance(c, gpuguide_results.Claim)
        )
        # Only what the listeners need: the variables hold the example's globals.
        script_vars = _page_vars.pop(page, {})
        src, failed = script_vars.get("src_file"), "formatted_exception" in script_vars
        del script_vars
        ended = PageEnd(
            page=page,
            script=Path(src) if src else None,
            seconds=_page_seconds[page],
            figures=_page_figures[page],
            failed=failed,
            claims=_page_claims[page],
        )
    _snapshot_defaults()

    _reset_precision()
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    torch.set_num_threads(_state["num_threads"])
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.use_deterministic_algorithms(False)
    if "torch._dynamo" in sys.modules:  # imported only by examples that compile
        torch._dynamo.reset()
    # The previous example's globals hold its tensors in reference cycles (its
    # functions refer to the globals that hold them): collect them before
    # CUDA's cache is emptied, so the next example sizes itself with their
    # memory given back.
    gc.collect()
    _reset_cuda()

    random.seed(SEED)
    np.random.seed(SEED)  # noqa: NPY002 - the legacy global RNG is what examples share
    torch.manual_seed(SEED)
    gpuguide_results.recorded(clear=True)  # each page's figures are its own

    saved = _state.pop("warnings", None)
    if saved is not None:  # close the previous example's filters first
        saved.__exit__(None, None, None)
    if when == "before":
        saved = warnings.catch_warnings()
        saved.__enter__()
        _state["warnings"] = saved
        _errors_for_warnings()
        _torch_logs_to_build_log()
        if page is not None:
            _page_started[page] = time.perf_counter()
            _note_executed(page)
    if ended is not None:
        for listener in tuple(_listeners):
            listener(ended)


#: A file to append each executed page's name to (the tests count page runs).
EXECUTED_LOG_ENV = "GPUGUIDE_EXECUTED_LOG"


def _note_executed(page: str) -> None:
    """Append ``page`` to the file ``GPUGUIDE_EXECUTED_LOG`` names, if any."""
    log = os.environ.get(EXECUTED_LOG_ENV, "").strip()
    if log:
        with Path(log).open("a", encoding="utf-8") as handle:
            handle.write(page + "\n")


class ChapterOrder:
    """Order a chapter's examples as its ``order.txt`` lists them.

    sphinx-gallery's ``within_subsection_order`` hook: it is built with the
    chapter's folder and then used as a sort key on file names. Files that
    ``order.txt`` (one page a line with its GPU seconds, ``#`` comments
    allowed: :func:`gpuguide_tools.pages.chapter_pages`) does not list come
    after the listed ones, alphabetically.
    """

    def __init__(self, src_dir: str | Path) -> None:
        self.src_dir = Path(src_dir)
        names = [name for name, _ in chapter_pages(self.src_dir)]
        self.order = {name: rank for rank, name in enumerate(names)}

    def __call__(self, filename: str) -> tuple[int, str]:
        return (self.order.get(Path(filename).name, len(self.order)), filename)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} for {self.src_dir}>"


def copy_artifacts(source: str | Path, target: str | Path) -> list[Path]:
    """Copy the files examples wrote for download into the built site.

    Parameters
    ----------
    source : path
        The directory examples wrote to (``GPUGUIDE_ARTIFACT_DIR``). It may not
        exist: then nothing is copied.
    target : path
        Where the pages' links point to, e.g. ``<html>/_artifacts``.

    Returns
    -------
    list of pathlib.Path
        The files copied, sorted.
    """
    source, target = Path(source), Path(target)
    if not source.is_dir():
        return []
    copied = []
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        target.mkdir(parents=True, exist_ok=True)
        copied.append(Path(shutil.copy2(path, target / path.name)))
    return copied


# --------------------------------------------------------------------------------------
# Re-executing the examples when what they measure on changes
# --------------------------------------------------------------------------------------

#: The file, in the gallery's output folder (``docs/auto_examples``), that holds
#: the fingerprint of the last build that executed every example and passed.
FINGERPRINT_FILE = ".gpuguide-fingerprint.json"

#: The helpers the pages import: the package as imported (``src/gpuguide`` in a
#: checkout, or an installed copy), whatever the working directory is.
HELPERS_DIR = Path(gpuguide.__file__).resolve().parent
#: The build's extensions: this module's folder (``docs/_ext``).
EXTENSIONS_DIR = Path(__file__).resolve().parent

_logger = sphinx_logging.getLogger(__name__)

# What check_fingerprint saw at the start of a build, for record_after_build.
_pending: dict[str, Any] = {}


def build_fingerprint(
    info: DeviceInfo | None = None, *, small: bool | None = None
) -> dict[str, str]:
    """What the executed pages depend on besides their source.

    Parameters
    ----------
    info : DeviceInfo, optional
        The device the pages run on; by default ``gpuguide.describe_device()``,
        the device a page picks. On CUDA that initialises CUDA in the build's
        process, as its first example does, and applies ``GPUGUIDE_GPU_MEMORY``,
        so a cap that is not a size or too large stops the build here.
    small : bool, optional
        Small mode; by default :func:`gpuguide.env.small_mode`.

    Returns
    -------
    dict of str to str
        ``torch`` (its version), ``device`` (its short name: the GPU variant or
        name, or the CPU model, threads and vector ISA), ``small mode`` (``on``
        or ``off``), ``GPU memory cap`` (``none`` or the size), ``helpers`` (a
        digest of the helpers' sources, ``**/*.py`` under :data:`HELPERS_DIR`) and ``build extensions`` (of
        ``*.py`` in :data:`EXTENSIONS_DIR`), both :func:`sources_digest`.
    """
    info = describe_device() if info is None else info
    small = small_mode() if small is None else small
    cap = info.memory_cap_bytes
    return {
        "torch": info.torch_version,
        "device": info.short_name,
        "small mode": "on" if small else "off",
        "GPU memory cap": "none" if cap is None else f"{format_bytes(cap)} ({cap} B)",
        "helpers": sources_digest(HELPERS_DIR, "**/*.py"),
        "build extensions": sources_digest(EXTENSIONS_DIR, "*.py"),
    }


def sources_digest(folder: str | Path | None, pattern: str) -> str:
    """A digest of the files ``pattern`` matches under ``folder``: paths and contents.

    Returns ``"32 file(s), sha256 3f2a9c0d1e4b"`` (paths relative to
    ``folder``, so the digest does not depend on where the folder is), or
    ``"none"`` when the folder is missing or no file matches. Any change to a
    file's content or name, a new file or a deleted one changes it.
    """
    root = Path(folder) if folder is not None else None
    if root is None or not root.is_dir():
        return "none"
    files = sorted(p for p in root.glob(pattern) if p.is_file())
    if not files:
        return "none"
    digest = hashlib.sha256()
    for path in files:
        name = path.relative_to(root).as_posix().encode()
        digest.update(name + b"\0" + path.read_bytes() + b"\0")
    return f"{len(files)} file(s), sha256 {digest.hexdigest()[:12]}"


def fingerprint_changes(stamp: str | Path, current: Mapping[str, str]) -> list[str]:
    """Why the pages made by the build that wrote ``stamp`` are stale now.

    Parameters
    ----------
    stamp : path
        The fingerprint file (:func:`record_fingerprint`).
    current : mapping
        This build's fingerprint (:func:`build_fingerprint`).

    Returns
    -------
    list of str
        Empty when ``stamp`` holds ``current``; else one ``"torch 2.13.0+cpu ->
        2.11.0+cu130"`` per entry that changed, or one reason why the file
        cannot tell (missing, unreadable, not a fingerprint).
    """
    stamp = Path(stamp)
    try:
        recorded = json.loads(stamp.read_text())
    except FileNotFoundError:
        return [f"no fingerprint of an earlier build ({stamp.name} is missing)"]
    except (OSError, ValueError) as error:  # JSON and Unicode errors included
        return [f"{stamp.name} cannot be read ({type(error).__name__}: {error})"]
    if not isinstance(recorded, dict):
        return [f"{stamp.name} holds no fingerprint"]
    keys = [*current, *(key for key in recorded if key not in current)]
    return [
        f"{key} {recorded.get(key, 'unknown')} -> {current.get(key, 'unknown')}"
        for key in keys
        if recorded.get(key) != current.get(key)
    ]


def record_fingerprint(stamp: str | Path, current: Mapping[str, str]) -> Path:
    """Write ``current`` to ``stamp`` (replaced in one step); return its path."""
    stamp = Path(stamp)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    partial = stamp.with_name(stamp.name + ".tmp")
    partial.write_text(json.dumps(dict(current), indent=2) + "\n")
    partial.replace(stamp)
    return stamp


def _stamp_path(app: Any) -> Path:
    gallery_dirs = app.config.sphinx_gallery_conf["gallery_dirs"]
    first = gallery_dirs if isinstance(gallery_dirs, str) else gallery_dirs[0]
    return Path(app.srcdir) / first / FINGERPRINT_FILE


def check_fingerprint(
    app: Any, *, filename_pattern: str, fingerprint: Mapping[str, str] | None = None
) -> str | None:
    """Before the examples run: re-execute them all if the fingerprint changed.

    A ``builder-inited`` handler that must run after sphinx-gallery has filled
    in its configuration and before it executes the examples.

    Parameters
    ----------
    app : sphinx.application.Sphinx
        The application (only ``app.srcdir`` and ``app.config`` are read).
    filename_pattern : str
        The pattern of a full build (conf.py's). A build with another pattern
        (``nox -s docs -- --example NAME``) executes only some examples, so its
        fingerprint is never recorded.
    fingerprint : mapping, optional
        This build's fingerprint; :func:`build_fingerprint` by default.

    Returns
    -------
    str or None
        The line written to the build's log; None when nothing changed or the
        build executes no example (``plot_gallery=0``).
    """
    _pending.clear()
    conf = app.config.sphinx_gallery_conf
    if not conf["plot_gallery"]:
        return None
    current = dict(build_fingerprint() if fingerprint is None else fingerprint)
    stamp = _stamp_path(app)
    full = conf["filename_pattern"] == filename_pattern
    _pending.update(stamp=stamp, fingerprint=current, full=full)
    changes = fingerprint_changes(stamp, current)
    if not changes:
        return None
    if full:
        conf["run_stale_examples"] = True
        line = f"gpuguide: re-executing every example: {'; '.join(changes)}"
    else:
        line = (
            f"gpuguide: {'; '.join(changes)}; the pages this build does not "
            "execute keep their earlier output until a full build"
        )
    _logger.info(line)
    return line


def record_after_build(app: Any, exception: BaseException | None) -> Path | None:
    """After the build: record the fingerprint if every example ran and passed.

    A ``build-finished`` handler. Nothing is recorded after a build that
    raised, had a failing example, or executed no example or only some of them,
    so the next full build re-executes every page made under another
    fingerprint. Returns the file written, or None.
    """
    pending = dict(_pending)
    _pending.clear()
    if not pending or exception is not None or not pending["full"]:
        return None
    if app.config.sphinx_gallery_conf["failing_examples"]:
        return None
    return record_fingerprint(pending["stamp"], pending["fingerprint"])


def remove_orphans(examples: str | Path, gallery: str | Path) -> list[Path]:
    """Delete what sphinx-gallery generated for examples that no longer exist.

    A page that was renamed, split or removed leaves its ``.rst``, notebook,
    script copy and images in the gallery folder, and Sphinx then warns that
    the old ``.rst`` is in no toctree (a failed build under ``-W``). Returns
    the files deleted.
    """
    examples, gallery = Path(examples), Path(gallery)
    if not gallery.is_dir():
        return []
    gone: list[Path] = []
    for rst in sorted(gallery.glob("*/plot_*.rst")):
        chapter, stem = rst.parent.name, rst.stem
        if (examples / chapter / f"{stem}.py").exists():
            continue
        images = rst.parent / "images"
        for path in (
            *rst.parent.glob(f"{stem}.*"),
            *images.glob(f"sphx_glr_{stem}_*"),
            *(images / "thumb").glob(f"sphx_glr_{stem}_thumb.*"),
        ):
            path.unlink()
            gone.append(path)
    return gone


def connect_fingerprint(app: Any, *, filename_pattern: str) -> None:
    """Connect :func:`check_fingerprint` and :func:`record_after_build` to ``app``.

    Call it from ``conf.py``'s ``setup(app)`` with the ``filename_pattern`` that
    ``sphinx_gallery_conf`` sets.
    """

    def check(app: Any) -> None:
        conf = app.config.sphinx_gallery_conf
        for examples, gallery in zip(
            conf["examples_dirs"], conf["gallery_dirs"], strict=True
        ):
            source = Path(app.srcdir) / examples
            for path in remove_orphans(source, Path(app.srcdir) / gallery):
                _logger.info(f"gpuguide: removed {path.name}: its example is gone")
        check_fingerprint(app, filename_pattern=filename_pattern)

    # After sphinx-gallery fills in plot_gallery (priority 10), before it runs
    # the examples (generate_gallery_rst, default priority 500).
    app.connect("builder-inited", check, priority=200)
    app.connect("build-finished", record_after_build)
