"""Record this device's results file from the build's own execution of the pages.

A local Sphinx extension (``docs/conf.py`` lists it). ``nox -s docs -- --record``
sets ``gpuguide_record`` to ``"replace"`` (``--record --merge``: ``"merge"``); then

1. before sphinx-gallery runs the examples, every example of the build is marked
   to run (even one whose page is up to date);
2. as each page ends, what it recorded while it ran goes into
   ``docs/results/<kind>-<device>.json`` at once
   (:func:`gpuguide_tools.recorder.record_page`: written atomically, with the
   commit and digests of the page's code; merged with its earlier figures for
   ``"merge"``), so a build killed at any moment keeps every page that
   finished. A page that failed keeps its earlier figures and is marked failed
   in the file and named in the log; the other pages are recorded all the same;
3. right after the examples ran, before any page is read,
   :func:`gpuguide_tools.recorder.finish_recording` completes the file (a CPU's
   measured peaks; a full build drops pages that no longer exist), so the
   results page of that same build already shows it.

When the build ends the log lists every executed page's time, slowest first,
with the build's total, and on a GPU each page's time against the GPU seconds
its chapter's ``order.txt`` declares (:func:`times_summary`), flagging overruns.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sphinx.errors import ConfigError
from sphinx.util import logging

from gallery_hooks import PageEnd, on_page_end, page_times
from gpuguide.results import current_device
from gpuguide_tools.pages import GPU_BUDGET_S, gpu_budgets
from gpuguide_tools.recorder import (
    commit_warning,
    finish_recording,
    page_run,
    record_page,
)
from gpuguide_tools.results_files import file_name

__all__ = ["MODES", "finish", "page_ended", "setup", "start", "times_summary"]

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
    """Before the examples run: mark every example of a recording build to run,
    and write each page's figures as it ends (:func:`page_ended`).

    Returns the mode (``"replace"`` or ``"merge"``), or None when the build
    does not record.
    """
    _state.clear()
    _state["started"] = time.perf_counter()
    on_page_end(None)
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
    results = Path(app.config.gpuguide_results_dir)
    _state.update(mode=mode, pattern=conf["filename_pattern"], results=results)
    _state.update(pages=[], failed=[])
    device = current_device()
    logger.info(f"gpuguide: recording this device's figures ({mode}) into {results}")
    if warning := commit_warning(device):
        logger.warning(f"gpuguide: {warning}")
    on_page_end(lambda ended: page_ended(ended, results, merge_runs=mode == "merge"))
    return mode


def page_ended(ended: PageEnd, results: Path, *, merge_runs: bool = False) -> None:
    """Write one page's figures (or its failure) into the device's file now."""
    _state.setdefault("pages", []).append(ended.page)
    if ended.failed:
        _state.setdefault("failed", []).append(ended.page)
        logger.info(f"gpuguide: {ended.page} failed: its earlier figures are kept")
    if ended.script is None:  # pragma: no cover - sphinx-gallery always names it
        return
    device = current_device()
    try:
        record_page(
            results, ended.page, ended.figures,
            page_run(ended.script, device, ended.seconds), device=device,
            failed=ended.failed, merge_runs=merge_runs, claims=ended.claims,
        )  # fmt: skip
    except ValueError as error:  # ResultsFileError is a ValueError
        logger.warning(f"gpuguide: {ended.page} not recorded: {error}")


def finish(app: Any, *, full_pattern: str) -> Path | None:
    """After the examples ran: complete the device's file.

    Returns the file; None when the build does not record or the recording
    could not be completed (the reason goes to the log as a warning, so a
    build with ``-W`` fails). A failed page is a warning too.
    """
    on_page_end(None)
    if "mode" not in _state:
        return None
    try:
        written = finish_recording(
            _state["results"],
            current_device(),
            pages=_state["pages"],
            failed=_state["failed"],
            partial=_state["pattern"] != full_pattern,
            log=lambda line: logger.info(f"gpuguide: {line}"),
        )
    except RuntimeError as error:
        logger.warning(f"gpuguide: recording: {error}")
        target = _state["results"] / file_name(current_device())
        return target if target.exists() else None
    except ValueError as error:  # ResultsFileError is a ValueError
        logger.warning(f"gpuguide: recording not completed: {error}")
        return None
    _state["written"] = written
    return written


def times_summary(
    times: dict[str, float],
    total_s: float | None,
    budgets: dict[str, float | None] | None = None,
) -> list[str]:
    """Lines for the build log: each page's execution time, slowest first.

    With ``budgets`` (a GPU build: each page's declared GPU seconds), each line
    gives the page's budget and flags ``OVER BUDGET``, and the total is set
    against :data:`gpuguide_tools.pages.GPU_BUDGET_S`.
    """
    if not times:
        return []
    width = max(len(name) for name in times)
    title = "gpuguide: page execution times, slowest first"
    lines = [title + (" (GPU seconds declared in order.txt)" if budgets else "")]
    over = []
    for name, seconds in sorted(times.items(), key=lambda item: -item[1]):
        line = f"    {name:<{width}}  {seconds:7.1f} s"
        if budgets is not None:
            budget = budgets.get(name)
            if budget is None:
                line += "  (no budget declared)"
            else:
                line += f"  of {budget:5.1f} s"
                if seconds > budget:
                    line += "  OVER BUDGET"
                    over.append(name)
        lines.append(line)
    pages = sum(times.values())
    line = f"    {len(times)} page(s): {pages:.0f} s"
    if total_s is not None:
        line += f" of the build's {total_s:.0f} s"
    if budgets is not None:
        line += f"; the guide's GPU budget is {GPU_BUDGET_S:.0f} s for every page"
    lines.append(line)
    if over:
        lines.append(f"    over budget: {', '.join(over)}")
    return lines


def _build_finished(app: Any, exception: BaseException | None) -> None:
    started = _state.get("started")
    total = None if started is None else time.perf_counter() - started
    times, budgets = page_times(), None
    if times and current_device().kind == "cuda":  # the GPU budget is a GPU's
        examples = app.config.sphinx_gallery_conf["examples_dirs"][0]
        budgets = gpu_budgets(Path(app.srcdir) / examples)
    for line in times_summary(times, total, budgets):
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
