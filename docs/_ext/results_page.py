"""Recorded results in the build: validated first, added to every page, and a page
of their own.

A local Sphinx extension (``docs/conf.py`` lists it). When the build starts,
every results file in ``gpuguide_results_dir`` (``GPUGUIDE_RESULTS_DIR``, else
the guide's ``docs/results``) is read and validated; a malformed, truncated or
foreign file stops the build at once with a message naming the file and the
problem, before any page runs.

Right after the examples ran, what each executed page recorded while it ran
(:func:`gallery_hooks.page_figures`) is kept beside its generated page, as
``<page>.recorded.json`` (a results file of this build's device). Every
example page then gets a "Recorded results" section at its end (the
``recorded-figures`` directive, added when the page is read): a table of the
figures this build recorded beside each recorded device's, and where one of
them is this build's device, how this build compares with its recording
(:func:`recorded.recorded_table`); one line where no device recorded the page.
A page that is not run again (its source unchanged, or ``plot_gallery=0``)
keeps the figures of the run that made its output, and every example page is
read again when the results files changed, so its section always lists the
recorded devices. A page whose output is not from a run of its current source
has no "this build" column. The sections compare with the recordings as the
build found them when it started: a build that records (``--record``) compares
with the earlier recording of its device, not the one it writes.

The ``recorded-results`` directive renders the "Results across devices" page:
a table of every file, then one table per page, headed by the page's title
(linked), with each device's figures and their share of the device's peak.
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
from sphinx_gallery.gen_rst import md5sum_is_current

from gallery_hooks import page_claims, page_figures, sources_digest
from gpuguide.results import current_device
from gpuguide.tables import Table
from gpuguide_tools.pages import page_code
from gpuguide_tools.results_files import (
    RESULTS_DIR_ENV,
    ResultsFile,
    ResultsFileError,
    load,
    load_dir,
    save,
)
from recorded import (
    EARLIER,
    code_status,
    device_label,
    devices_table,
    no_longer_recorded,
    page_table,
    recorded_table,
)

__all__ = [
    "SECTION",
    "RecordedFigures",
    "RecordedResults",
    "add_section",
    "check_results",
    "live_file",
    "setup",
    "table_node",
    "write_live_files",
]

logger = logging.getLogger(__name__)

#: What :func:`add_section` puts at the end of an example page.
SECTION = "\n\nRecorded results\n----------------\n\n.. recorded-figures::\n\n"

#: The recordings as the build found them when it started (before ``--record``
#: rewrote this device's file), by folder, and their digest.
_found: dict[str, dict[Path, ResultsFile]] = {}
_digest: dict[str, str] = {}


def check_results(folder: Path) -> int:
    """Validate every results file in ``folder``; return how many there are.

    Raises
    ------
    sphinx.errors.ConfigError
        Naming the file and the problem (:class:`gpuguide_tools.results_files.ResultsFileError`).
    """
    try:
        _found[os.fspath(folder)] = load_dir(folder)
        _digest[os.fspath(folder)] = sources_digest(folder, "*.json")
    except ResultsFileError as error:
        msg = f"recorded results: {error}"
        raise ConfigError(msg) from None
    return len(_found[os.fspath(folder)])


def _recordings(folder: Path) -> dict[Path, ResultsFile]:
    if os.fspath(folder) not in _found:
        check_results(folder)
    return _found[os.fspath(folder)]


def _config_inited(app: Any, config: Any) -> None:
    folder = Path(config.gpuguide_results_dir)
    count = check_results(folder)
    logger.info(f"recorded results: {count} file(s) in {folder}")


def _is_example(docname: str) -> bool:
    parts = docname.split("/")
    return (
        len(parts) == 3 and parts[0] == "auto_examples" and parts[2].startswith("plot_")
    )


def _outdated(app: Any, env: Any, added: Any, changed: Any, removed: Any) -> list[str]:
    """Every example page, when the recordings differ from those it was read with."""
    folder = os.fspath(Path(app.config.gpuguide_results_dir))
    _recordings(Path(folder))
    if getattr(env, "gpuguide_results_digest", None) == _digest[folder]:
        return []
    env.gpuguide_results_digest = _digest[folder]
    return [doc for doc in env.found_docs if _is_example(doc)]


def live_file(script: Path) -> Path:
    """Where the figures of a generated page's run are kept: beside its copy of
    the script (``auto_examples/05_dtypes/plot_x.py`` -> ``plot_x.recorded.json``)."""
    return script.with_suffix(".recorded.json")


def write_live_files(
    srcdir: Path, gallery_dirs: list[str], figures: dict[str, tuple[Any, ...]],
    claims: dict[str, tuple[Any, ...]] | None = None,
) -> list[Path]:  # fmt: skip
    """Keep what each executed page recorded, and the claims it checked, beside
    its generated page; return the files written (one per page, empty results
    for a page that recorded nothing)."""
    written = []
    claims = claims or {}
    device = current_device() if figures else None
    for gallery in gallery_dirs:
        for script in sorted(Path(srcdir, gallery).glob("**/plot_*.py")):
            if script.stem in figures and device is not None:
                checked = (
                    {script.stem: claims[script.stem]}
                    if claims.get(script.stem)
                    else {}
                )
                live = ResultsFile(device, figures[script.stem], claims=checked)
                written.append(save(live, live_file(script)))
    return written


def _examples_ran(app: Any) -> None:
    conf = app.config.sphinx_gallery_conf
    dirs = conf["gallery_dirs"]
    dirs = [dirs] if isinstance(dirs, str) else list(dirs)
    write_live_files(Path(app.srcdir), dirs, page_figures(), page_claims())


def add_section(source: str) -> str:
    """A generated example page's reST with the "Recorded results" section at
    its end, before the running time and the download buttons; once only."""
    if ".. recorded-figures::" in source:
        return source
    for marker in (".. rst-class:: sphx-glr-timing", ".. _sphx_glr_download_"):
        at = source.find(marker)
        if at >= 0:
            return source[:at] + SECTION.lstrip("\n") + source[at:]
    return source + SECTION


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    if _is_example(docname):
        source[0] = add_section(source[0])


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


class RecordedFigures(SphinxDirective):
    """``.. recorded-figures::``: this page's figures in this build beside the
    recorded devices' (added to every example page by :func:`add_section`)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        page = self.env.docname.rsplit("/", 1)[-1]
        folder = Path(self.config.gpuguide_results_dir)
        files = _recordings(folder)  # a change reads every page again (_outdated)
        script = Path(self.env.srcdir, self.env.docname + ".py")
        live = None
        if live_file(script).exists() and md5sum_is_current(script, mode="t"):
            self.env.note_dependency(os.fspath(live_file(script)))
            live = load(live_file(script))
        code = page_code(script) if script.is_file() else None
        status = {
            f.device.short_name: code_status(f, page, code) for f in files.values()
        }
        earlier = [name for name, text in status.items() if "changed since" in text]
        table = recorded_table(page, live, list(files.values()), earlier)
        missing = [
            f.device.short_name
            for f in files.values()
            if f.device.kind != "cpu" and not f.for_page(page)
        ]
        lack = []
        if missing:
            text = f"Not recorded on {', '.join(missing)} yet."
            lack = [nodes.paragraph(text=text)]
        from claims_page import claims_table

        checked = claims_table(page, live, list(files.values()))
        claims_part: list[nodes.Node] = []
        if checked is not None:
            text = (
                "What this page claims, checked by each run that measured it "
                "([rec]: recorded, with the commit that recorded it):"
            )
            claims_part = [nodes.paragraph(text=text), table_node(checked)]
        if table is None:
            text = "No device has recorded figures of this page yet."
            return [nodes.paragraph(text=text), *claims_part]
        if live is None:
            intro = "This build did not run the page: the figures each device recorded"
        else:
            intro = f"What this build measured ({live.device.short_name}), beside"
            intro += " the figures each device recorded"
        intro += " ([rec]: not measured in this build); sizes in parentheses."
        if earlier:
            intro += f" {EARLIER.strip()}: recorded by an earlier version of this page."
        labels = nodes.bullet_list()
        names = {cell.removesuffix(" [rec]") for cell in table.header}
        gone = no_longer_recorded(page, live, list(files.values()))
        for recording in files.values():
            name = recording.device.short_name
            if name in names:
                label = f"[rec] {device_label(recording.device)}: {status[name]}"
                if gone.get(name):
                    label += (
                        f"; {gone[name]} of its figures are not shown: this page no "
                        "longer records them"
                    )
                labels += nodes.list_item("", nodes.paragraph(text=label))
        return [
            nodes.paragraph(text=intro),
            table_node(table),
            labels,
            *lack,
            *claims_part,
        ]


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
        legend = (
            f"{EARLIER.strip()}: recorded by an earlier version of the page (each "
            "page's own section says which code measured its figures)."
        )
        out.append(nodes.paragraph(text=legend))
        docs = _page_docs(Path(self.config.gpuguide_examples_dir))
        recorded = list(files.values())
        order = list(docs)
        pages = list(dict.fromkeys(p for f in recorded for p in f.pages))
        pages.sort(key=lambda p: (order.index(p) if p in order else len(order), p))
        examples = Path(self.config.gpuguide_examples_dir)
        scripts = {s.stem: s for s in examples.glob("*/plot_*.py")}
        for page in pages:
            code = page_code(scripts[page]) if page in scripts else None
            earlier = [
                f.device.short_name
                for f in recorded
                if "changed since" in code_status(f, page, code)
            ]
            table = page_table(page, recorded, earlier)
            if table is None:
                continue
            heading = nodes.rubric()
            if page in docs:
                # Not explicit: Sphinx writes the linked page's title.
                link = addnodes.pending_xref(
                    "", refdomain="std", reftype="doc", reftarget=docs[page],
                    refexplicit=False, refwarn=True, refdoc=self.env.docname,
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
    # After the examples ran (sphinx-gallery, priority 500), before pages are read.
    app.connect("builder-inited", _examples_ran, priority=700)
    app.connect("env-get-outdated", _outdated)
    app.connect("source-read", _source_read)
    app.add_directive("recorded-figures", RecordedFigures)
    app.add_directive("recorded-results", RecordedResults)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
