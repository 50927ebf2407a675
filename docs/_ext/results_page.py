"""Recorded results in the build: validated first, shown on their own page.

A local Sphinx extension (``docs/conf.py`` lists it). When the build starts,
every results file in the folder ``GPUGUIDE_RESULTS_DIR`` names (the guide's
``docs/results`` unless set otherwise) is read and validated; a malformed,
truncated or foreign file stops the build at once with a message naming the
file and the problem, before any page runs. The examples then read the same
folder (:func:`gpuguide.recordings.recordings`) to show the recorded figures
beside their own.

The ``recorded-results`` directive renders the "Results across devices" page:
a table of every file, then one table per page with each device's figures and
their share of the device's peak.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.errors import ConfigError
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gpuguide.recordings import RESULTS_DIR_ENV, devices_table, load_dir, page_table
from gpuguide.results import ResultsFileError
from gpuguide.tables import Table

__all__ = ["RecordedResults", "check_results", "setup", "table_node"]

logger = logging.getLogger(__name__)


def check_results(folder: Path) -> int:
    """Validate every results file in ``folder``; return how many there are.

    Raises
    ------
    sphinx.errors.ConfigError
        Naming the file and the problem (:class:`gpuguide.results.ResultsFileError`).
    """
    try:
        return len(load_dir(folder))
    except ResultsFileError as error:
        msg = f"recorded results: {error}"
        raise ConfigError(msg) from None


def _config_inited(app: Any, config: Any) -> None:
    folder = Path(config.gpuguide_results_dir)
    os.environ[RESULTS_DIR_ENV] = os.fspath(folder)  # what the examples read
    count = check_results(folder)
    logger.info(f"recorded results: {count} file(s) in {folder}")


def _row(cells: tuple[str, ...]) -> nodes.row:
    row = nodes.row()
    for cell in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=cell)
        row += entry
    return row


def table_node(table: Table, title: str | None = None) -> nodes.table:
    """A :class:`gpuguide.tables.Table` as a docutils table (header row first)."""
    node = nodes.table(classes=["gpuguide-recorded"])
    if title:
        node += nodes.title(text=title)
    group = nodes.tgroup(cols=len(table.header))
    node += group
    for _ in table.header:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    head += _row(table.header)
    body = nodes.tbody()
    for row in table.rows:
        body += _row(row)
    group += head
    group += body
    return node


def _page_docs(examples: Path) -> dict[str, str]:
    """Page name -> its document (``auto_examples/05_dtypes/plot_x``)."""
    return {
        script.stem: f"auto_examples/{script.parent.name}/{script.stem}"
        for script in sorted(examples.glob("*/plot_*.py"))
    }


class RecordedResults(SphinxDirective):
    """``.. recorded-results::``: every recorded device, and each page's figures."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        folder = Path(self.config.gpuguide_results_dir)
        self.env.note_dependency(os.fspath(folder))
        files = load_dir(folder)  # validated when the build started
        for path in files:
            self.env.note_dependency(os.fspath(path))
        if not files:
            return [nodes.paragraph(text=f"No results files in {folder.name}/ yet.")]
        out: list[nodes.Node] = [table_node(devices_table(files), "Recorded devices")]
        docs = _page_docs(Path(self.config.gpuguide_examples_dir))
        recorded = list(files.values())
        order = list(docs)
        pages = list(dict.fromkeys(p for f in recorded for p in f.pages))
        pages.sort(key=lambda p: (order.index(p) if p in order else len(order), p))
        for page in pages:
            table = page_table(page, recorded)
            if table is None:
                continue
            heading = nodes.rubric()
            if page in docs:
                link = addnodes.pending_xref(
                    "", refdomain="std", reftype="doc", reftarget=docs[page],
                    refexplicit=True, refwarn=True, refdoc=self.env.docname,
                )  # fmt: skip
                link += nodes.inline(text=page)
                heading += link
            else:
                heading += nodes.Text(page)
            out += [heading, table_node(table)]
        return out


def setup(app: Any) -> dict[str, Any]:
    here = Path(__file__).resolve().parent.parent
    default = os.environ.get(RESULTS_DIR_ENV, "").strip() or os.fspath(here / "results")
    app.add_config_value("gpuguide_results_dir", default, "env")
    app.add_config_value(
        "gpuguide_examples_dir", os.fspath(here.parent / "examples"), "env"
    )
    app.connect("config-inited", _config_inited)
    app.add_directive("recorded-results", RecordedResults)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
