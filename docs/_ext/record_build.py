"""Record this device's results file from the build's own execution of the pages.

A local Sphinx extension (``docs/conf.py`` lists it). ``nox -s docs -- --record``
sets ``gpuguide_record`` to ``"replace"`` (``--record --merge``: ``"merge"``); then

1. before sphinx-gallery runs the examples, every example of the build is marked
   to run (even one whose page is up to date);
2. right after the examples ran, before any page is read, what each page
   recorded while it ran (every build keeps it: :func:`gallery_hooks.page_figures`)
   becomes ``docs/results/<kind>-<device>.json`` by
   :func:`gpuguide_tools.recorder.finish_recording` (validated, written
   atomically, merged with the earlier recording for ``"merge"``), so the
   results page of that same build already shows it (each page's own section
   compares with the earlier recording). A build of some pages
   (``--example NAME``) replaces those pages' figures and keeps the others'.

A page that failed leaves the device's file as it was, and the build log names
the page. When the build ends the log lists every executed page's time,
slowest first, with the build's total.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sphinx.errors import ConfigError
from sphinx.util import logging

from gallery_hooks import page_figures, page_times
from gpuguide.results import ResultsFile, current_device
from gpuguide_tools.recorder import finish_recording

__all__ = ["MODES", "finish", "setup", "start", "times_summary"]

logger = logging.getLogger(__name__)

#: The values of ``gpuguide_record``: off, replace the device's file, merge with it.
MODES = ("", "replace", "merge")

_state: dict[str, Any] = {}


def _mode(app: Any) -> str:
    mode = str(app.config.gpuguide_record or "").strip().lower()
    if mode not in MODES:
        msg = f"gpuguide_record must be one of {MODES}, got {mode!r}"
        raise ConfigError(msg)
    return mode


def start(app: Any) -> str | None:
    """Before the examples run: mark every example of a recording build to run.

    Returns the mode (``"replace"`` or ``"merge"``), or None when the build
    does not record.
    """
    _state.clear()
    _state["started"] = time.perf_counter()
    mode = _mode(app)
    if not mode:
        return None
    conf = app.config.sphinx_gallery_conf
    if not conf["plot_gallery"]:
        msg = (
            "recording needs the pages executed; it cannot be combined with "
            "--no-exec (plot_gallery=0)"
        )
        raise ConfigError(msg)
    conf["run_stale_examples"] = True  # every page of the build records
    _state.update(mode=mode, pattern=conf["filename_pattern"])
    logger.info(f"gpuguide: recording this device's figures ({mode})")
    return mode


def finish(app: Any, *, full_pattern: str) -> Path | None:
    """After the examples ran: write the device's results file.

    Returns the file written; None when the build does not record or the
    recording was not written (the reason goes to the log as a warning, so a
    build with ``-W`` fails).
    """
    if "mode" not in _state:
        return None
    conf = app.config.sphinx_gallery_conf
    failed = sorted(Path(name).stem for name in conf["failing_examples"])
    figures = page_figures()
    ordered = tuple(r for page in sorted(figures) for r in figures[page])
    new = ResultsFile(current_device(), ordered) if ordered else None
    try:
        written = finish_recording(
            new,
            Path(app.config.gpuguide_results_dir),
            failed=failed,
            merge_runs=_state["mode"] == "merge",
            partial=_state["pattern"] != full_pattern,
            log=lambda line: logger.info(f"gpuguide: {line}"),
        )
    except (RuntimeError, ValueError) as error:  # ResultsFileError is a ValueError
        logger.warning(f"gpuguide: recording not written: {error}")
        return None
    _state["written"] = written
    return written


def times_summary(times: dict[str, float], total_s: float | None) -> list[str]:
    """Lines for the build log: each page's execution time, slowest first."""
    if not times:
        return []
    width = max(len(name) for name in times)
    lines = ["gpuguide: page execution times, slowest first"]
    for name, seconds in sorted(times.items(), key=lambda item: -item[1]):
        lines.append(f"    {name:<{width}}  {seconds:7.1f} s")
    pages = sum(times.values())
    line = f"    {len(times)} page(s): {pages:.0f} s"
    if total_s is not None:
        line += f" of the build's {total_s:.0f} s"
    lines.append(line)
    return lines


def _build_finished(app: Any, exception: BaseException | None) -> None:
    started = _state.get("started")
    total = None if started is None else time.perf_counter() - started
    for line in times_summary(page_times(), total):
        logger.info(line)
    if "written" in _state:
        logger.info(f"gpuguide: this device's results: {_state['written']}")


def setup(app: Any) -> dict[str, Any]:
    app.add_config_value("gpuguide_record", "", "env")
    # conf.py's own pattern: a build with another one executes only some pages.
    app.add_config_value("gpuguide_full_pattern", r"/plot_", "env")

    def _finish(app: Any) -> None:
        finish(app, full_pattern=app.config.gpuguide_full_pattern)

    # After the fingerprint check (200) and before the examples run (500) ...
    app.connect("builder-inited", start, priority=300)
    # ... and after they ran, before any page is read.
    app.connect("builder-inited", _finish, priority=800)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
