"""Every claim of every page, with where it held: a page of its own, a table on
each page, and the build log's count.

A local Sphinx extension (``docs/conf.py`` lists it). Each page declares what it
claims with :func:`gpuguide.claim`; the run checks each claim and records its
outcome with the page's figures: in this build's file beside the generated
page (:func:`results_page.live_file`) and, when a device recorded the page, in
that device's results file.

* ``.. recorded-claims::`` renders ``claims.html``: for each page, in the
  guide's order, each claim with its outcome in this build and on each recorded
  device (held, did not hold, not checked here), with what was measured and the
  commit that recorded it.
* :func:`claims_table` gives the same table for one page; the "Recorded
  results" section of each page shows it (:class:`results_page.RecordedFigures`).
* ``.. page-takeaway::`` (put under each example page's title by
  ``landing.page_top``) is the page's take-away: a box of the claims this
  build's run of the page checked, each with its outcome and what was measured
  (:func:`takeaway_box`).
* When the build ends, the log counts the claims of the pages it ran and lists
  each one that did not hold (:func:`claims_summary`).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from docutils import nodes
from results_page import _page_docs, _recordings, live_file, table_node
from sphinx import addnodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx_gallery.gen_rst import md5sum_is_current

from gallery_hooks import page_claims
from gpuguide.results import Claim
from gpuguide.tables import Table
from gpuguide_tools.results_files import ResultsFile, load

__all__ = [
    "OUTCOME_WORDS",
    "PageTakeaway",
    "RecordedClaims",
    "claims_summary",
    "claims_table",
    "setup",
    "takeaway_box",
]

logger = logging.getLogger(__name__)

#: How a cell names each outcome.
OUTCOME_WORDS = {"held": "held", "failed": "did not hold", "n/a": "not checked"}


def _cell(claim: Claim | None, commit: str | None = None) -> str:
    if claim is None:
        return "-"
    text = f"{OUTCOME_WORDS[claim.outcome]}: {claim.measured}"
    return f"{text} [{commit}]" if commit else text


def _commit(recording: ResultsFile, page: str) -> str | None:
    record = recording.page_record(page)
    run = record.recorded if record is not None else None
    return run.commit_label if run is not None else None


def claims_table(
    page: str, live: ResultsFile | None, recordings: Sequence[ResultsFile]
) -> Table | None:
    """A page's claims: one row each, with this build's outcome (``live``; None
    when the build did not run the page) and each recording's; None when no run
    checked a claim of the page."""
    sources = [f for f in recordings if f.claims_of(page)]
    texts = [c.text for f in ([live] if live else []) for c in f.claims_of(page)]
    texts += [c.text for f in sources for c in f.claims_of(page)]
    texts = list(dict.fromkeys(texts))
    if not texts:
        return None
    header = ["claim"]
    columns: list[tuple[dict[str, Claim], str | None]] = []
    if live is not None:
        header.append(f"this build ({live.device.short_name})")
        columns.append(({c.text: c for c in live.claims_of(page)}, None))
    for recording in sources:
        header.append(f"{recording.device.short_name} [rec]")
        by_text = {c.text: c for c in recording.claims_of(page)}
        columns.append((by_text, _commit(recording, page)))
    rows = tuple(
        (text, *(_cell(by_text.get(text), commit) for by_text, commit in columns))
        for text in texts
    )
    return Table(header=tuple(header), rows=rows)


def claims_summary(claims: Mapping[str, Sequence[Claim]]) -> list[str]:
    """Lines for the build log: the claims' outcomes counted, then each one
    that did not hold, with its page and what was measured."""
    every = [(page, c) for page, cs in claims.items() for c in cs]
    if not every:
        return []
    count = {o: sum(c.outcome == o for _, c in every) for o in OUTCOME_WORDS}
    lines = [
        f"gpuguide: claims of the {len(claims)} page(s) run: {count['held']} held, "
        f"{count['failed']} did not hold, {count['n/a']} not checked here"
    ]
    lines += [
        f"    did not hold: {page}: {c.text}; measured {c.measured}"
        for page, c in every
        if c.outcome == "failed"
    ]
    return lines


def live_results(srcdir: str | Path, docname: str) -> ResultsFile | None:
    """What this build's run of a generated page recorded, if its output is
    from a run of its current source; else None."""
    script = Path(srcdir, docname + ".py")
    if live_file(script).exists() and md5sum_is_current(script, mode="t"):
        return load(live_file(script))
    return None


class RecordedClaims(SphinxDirective):
    """``.. recorded-claims::``: every page's claims, this build's outcome beside
    each recorded device's."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        folder = Path(self.config.gpuguide_results_dir)
        self.env.note_dependency(os.fspath(folder))
        recordings = list(_recordings(folder).values())
        docs = _page_docs(Path(self.config.gpuguide_examples_dir))
        out: list[nodes.Node] = []
        total = 0
        for page, doc in docs.items():
            script = Path(self.env.srcdir, doc + ".py")
            live = live_results(self.env.srcdir, doc)
            if live is not None:
                self.env.note_dependency(os.fspath(live_file(script)))
            table = claims_table(page, live, recordings)
            if table is None:
                continue
            total += len(table.rows)
            heading = nodes.rubric()
            link = addnodes.pending_xref(
                "", refdomain="std", reftype="doc", reftarget=doc,
                refexplicit=False, refwarn=True, refdoc=self.env.docname,
            )  # fmt: skip
            link += nodes.inline(text=page)
            heading += link
            out += [heading, table_node(table)]
        if not out:
            return [
                nodes.paragraph(text="No page has checked a claim in this build yet.")
            ]
        count = f"{total} claims on {len(out) // 2} pages."
        return [nodes.paragraph(text=count), *out]


def _not_checked(claims: Sequence[Claim]) -> str:
    """``"3 claims (needs CUDA; this run is on CPU)"``, or with several reasons
    ``"3 claims: 2 (needs CUDA; ...), 1 (small mode: ...)"``."""
    reasons = Counter(c.measured for c in claims)
    head = f"{len(claims)} claim" + ("s" if len(claims) > 1 else "")
    if len(reasons) == 1:
        return f"{head} ({next(iter(reasons))})"
    return f"{head}: " + ", ".join(f"{n} ({why})" for why, n in reasons.items())


def _see_recorded(text: str) -> nodes.paragraph:
    """``text`` and a link to the page's own "Recorded results" section."""
    link = nodes.reference("", "Recorded results", refuri="#recorded-results")
    return nodes.paragraph("", text, link, nodes.Text("."))


def takeaway_box(page: str, live: ResultsFile | None) -> nodes.admonition | None:
    """A page's take-away: the claims this build's run of it checked.

    Each claim that held or did not hold is an item with what was measured; the
    claims the run could not check are counted in one line, with why, pointing
    at the page's recorded results. ``live`` None (the build did not run the
    page): one line saying so. None when the run checked no claim.
    """
    box = nodes.admonition(classes=["gpuguide-takeaway"])
    if live is None:
        box += nodes.title(text="Take-away")
        text = "This build did not run this page; each device's run of it is in "
        box += _see_recorded(text)
        return box
    claims = live.claims_of(page)
    if not claims:
        return None
    where = live.device.short_name
    box += nodes.title(text=f"Take-away, measured in this build on {where}")
    checked = [c for c in claims if c.outcome != "n/a"]
    if checked:
        items = nodes.bullet_list()
        for c in checked:
            item = nodes.paragraph()
            item += nodes.strong(text=OUTCOME_WORDS[c.outcome])
            item += nodes.Text(f": {c.text} (measured {c.measured})")
            items += nodes.list_item("", item, classes=[f"gpuguide-{c.outcome}"])
        box += items
    rest = [c for c in claims if c.outcome == "n/a"]
    if rest:
        box += _see_recorded(f"Not checked here: {_not_checked(rest)}; see ")
    return box


class PageTakeaway(SphinxDirective):
    """``.. page-takeaway::``: the page's take-away box (:func:`takeaway_box`)."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        script = Path(self.env.srcdir, self.env.docname + ".py")
        live = live_results(self.env.srcdir, self.env.docname)
        if live is not None:
            self.env.note_dependency(os.fspath(live_file(script)))
        box = takeaway_box(script.stem, live)
        return [] if box is None else [box]


def _build_finished(app: Any, exception: BaseException | None) -> None:
    for line in claims_summary(page_claims()):
        logger.info(line)


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("recorded-claims", RecordedClaims)
    app.add_directive("page-takeaway", PageTakeaway)
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
