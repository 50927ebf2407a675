"""The landing page's banner and chapter cards, and the top of each example page.

``build-banner`` says what this copy of the site was measured on (the device,
torch, CUDA, the date of the build) and which devices have recorded results.
``chapter-cards`` shows one card per chapter of the gallery: the thumbnail of
the chapter's first page, the chapter's title and first sentence, linking to
the chapter.

On every example page (:func:`page_top`), right under the title: the page's
take-away (``.. page-takeaway::``, ``claims_page.py``: the claims this build's
run checked), then its provenance on one line ("Measured on ...", copied from
the page's own output) and a row of actions (download the script, the notebook,
both zipped, view the source as text). sphinx-gallery's "Go to the end" note
above the title goes: the actions are under the title.
"""

from __future__ import annotations

import re
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

from gpuguide.device import describe_device
from gpuguide_tools.pages import chapter_pages
from gpuguide_tools.results_files import load_dir

__all__ = [
    "BuildBanner",
    "ChapterCards",
    "DeviceFigures",
    "banner_text",
    "chapters",
    "copy_sources",
    "device_rows",
    "page_top",
    "setup",
]


def banner_text(now: datetime | None = None) -> str:
    """One sentence: the device, torch, CUDA, gpuguide and date this build measured on."""
    info = describe_device()
    cuda = f"CUDA {info.cuda_version}" if info.cuda_version else "no CUDA"
    when = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%d")
    if info.type == "cpu":
        device = f"{info.name} ({info.cpu_isa})" if info.cpu_isa else info.name
    else:
        device = f"{info.short_name} ({info.name})"
    kind = "the CPU" if info.type == "cpu" else "the GPU"
    return (
        f"This copy of the guide was built and measured on {kind} {device}, "
        f"with torch {info.torch_version}, {cuda} and {info.gpuguide_label}, "
        f"on {when}."
    )


def device_rows() -> list[tuple[str, str]]:
    """The build's device in figures: what it is, its SMs and memory, its peaks."""
    from gpuguide.peaks import device_peaks
    from gpuguide.units import format_bytes, format_value

    info = describe_device()
    peaks = device_peaks(info)
    rows = [("device", info.short_name if info.type == "cuda" else info.name)]
    if info.sm_count:
        rows.append(("streaming multiprocessors", str(info.sm_count)))
    if info.compute_capability:
        rows.append(("compute capability", ".".join(map(str, info.compute_capability))))
    if info.total_memory_bytes:
        rows.append(("device memory", format_bytes(info.total_memory_bytes)))
    if (state := info.gpu_state) is not None:  # NVML's, where nvidia-ml-py is installed
        if state.sm_clock_max_mhz:
            rows.append(("SM clock, maximum", f"{state.sm_clock_max_mhz} MHz"))
        if state.memory_clock_max_mhz:
            rows.append(("memory clock, maximum", f"{state.memory_clock_max_mhz} MHz"))
        if state.power_limit_w:
            rows.append(("power limit", f"{state.power_limit_w:.0f} W"))
        if state.link_label:
            rows.append(("host link, negotiated", state.link_label))
    if info.type == "cpu":
        rows.append(("cores / threads", f"{info.cpu_cores} / {info.cpu_threads}"))
        rows.append(("vector instruction set", info.cpu_isa or "unknown"))
    for key in ("fp64", "fp32", "tf32", "fp16", "bf16"):
        rate = peaks.flops.get(key)
        if rate is not None:
            rows.append((f"peak {key} matmul", format_value(rate, "FLOP/s")))
    if peaks.memory_bandwidth_bytes_per_s:
        rows.append(
            (
                "peak memory bandwidth",
                format_value(peaks.memory_bandwidth_bytes_per_s, "B/s"),
            )
        )
    if peaks.host_link_bytes_per_s:
        rows.append(
            (
                "host link, per direction",
                format_value(peaks.host_link_bytes_per_s, "B/s"),
            )
        )
    rows.append(("source of the peaks", peaks.source))
    return rows


def _first_sentence(text: str) -> str:
    flat = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", flat)
    return match.group(1) if match else flat


def chapters(examples: Path) -> list[dict[str, str]]:
    """Each chapter folder's title, first sentence, folder and first page."""
    found = []
    for folder in sorted(p for p in examples.iterdir() if p.is_dir()):
        header = folder / "GALLERY_HEADER.rst"
        if not header.exists():
            continue
        lines = header.read_text(encoding="utf-8").splitlines()
        title = lines[0].strip()
        body = "\n".join(lines[2:]).strip().split("\n\n")[0]
        pages = [name.removesuffix(".py") for name, _ in chapter_pages(folder)]
        pages = pages or sorted(p.stem for p in folder.glob("plot_*.py"))
        found.append(
            {
                "title": title,
                "sentence": _first_sentence(body),
                "folder": folder.name,
                "page": pages[0],
            }
        )
    return found


class BuildBanner(SphinxDirective):
    """``.. build-banner::``: what the build measured on; the recorded devices."""

    def run(self) -> list[nodes.Node]:
        text = banner_text()
        folder = getattr(self.config, "gpuguide_results_dir", "")  # results_page's
        files = load_dir(folder) if folder and Path(folder).is_dir() else {}
        if files:
            names = ", ".join(f.device.short_name for f in files.values())
            text += f" Each page also shows the results recorded on: {names}."
        box = nodes.container(classes=["gpuguide-banner"])
        box += nodes.paragraph(text=text)
        return [box]


class DeviceFigures(SphinxDirective):
    """``.. device-figures::``: the build's own device as a two-column table."""

    def run(self) -> list[nodes.Node]:
        from results_page import table_node

        from gpuguide.tables import Table

        rows = tuple(device_rows())
        return [table_node(Table(header=("this build's device", ""), rows=rows))]


class ChapterCards(SphinxDirective):
    """``.. chapter-cards::``: one card per chapter, with a thumbnail."""

    def run(self) -> list[nodes.Node]:
        examples = Path(self.config.gpuguide_examples_dir)
        grid = nodes.container(classes=["gpuguide-cards"])
        problems: list[nodes.Node] = []
        for chapter in chapters(examples):
            folder, page = chapter["folder"], chapter["page"]
            title, sentence = (
                self.inline(chapter[key], problems) for key in ("title", "sentence")
            )
            card = nodes.container(classes=["gpuguide-card"])
            thumb = f"/auto_examples/{folder}/images/thumb/sphx_glr_{page}_thumb.png"
            # The builder writes the link when the page is resolved (_card_links).
            link = nodes.reference("", "", internal=True, refuri="")
            link["gpuguide_target"] = f"auto_examples/{folder}/index"
            alt = "".join(node.astext() for node in title)
            link += nodes.image(uri=thumb, alt=alt, classes=["gpuguide-thumb"])
            link += nodes.strong("", "", *title)
            card += nodes.paragraph("", "", link)
            card += nodes.paragraph("", "", *sentence)
            grid += card
        return [grid, *problems]

    def inline(self, text: str, problems: list[nodes.Node]) -> list[nodes.Node]:
        """``text`` parsed as inline reST, as a chapter's header writes it (a name in
        double backquotes becomes code); what the parser reported goes to
        ``problems``."""
        parsed, messages = self.state.inline_text(text, self.lineno)
        problems += messages
        return parsed


_TITLE = re.compile(r"^(?P<title>[^\n]+)\n(?P<rule>=+)\n", re.MULTILINE)
_PROVENANCE = re.compile(r"^\s+(Measured on [^\n]+)$", re.MULTILINE)
#: A page's first figure, as sphinx-gallery writes it, and what its caption says.
_FIRST_FIGURE = re.compile(r"^[ *]*\.\. image-sg:: (\S+)$", re.MULTILINE)
_FIGURE_NOTE = (
    "The page's first figure, measured in this build; the code that draws it follows."
)
#: sphinx-gallery's note above the title: "Go to the end to download the full
#: example code" (its directive, its options and its indented text).
_END_NOTE = re.compile(
    r"^\.\. only:: html\n\n    \.\. note::\n        :class: sphx-glr-download-link-note\n"
    r"(?:\n|        [^\n]*\n)*",
    re.MULTILINE,
)


def page_top(source: str, script: str, *, takeaway: bool = True) -> str:
    """An example page's reST with its take-away, provenance, actions and first
    figure under its title, and without sphinx-gallery's "Go to the end" note.

    ``script`` is the page's file name (``plot_alignment.py``). A page whose
    output has no provenance line gets the take-away and the actions only; a
    page already done is returned unchanged. ``takeaway`` False: no take-away
    (a build without ``claims_page``, which renders it).
    """
    if "gpuguide-page-top" in source:
        return source
    source = _END_NOTE.sub("", source, count=1)
    anchor = source.find(".. rst-class:: sphx-glr-example-title")
    title = _TITLE.search(source, anchor if anchor >= 0 else 0)
    if title is None:
        return source
    stem = script.removesuffix(".py")
    actions = (
        f":download:`Download the script <{stem}.py>` · "
        f":download:`Download the notebook <{stem}.ipynb>` · "
        f":download:`Download both (zip) <{stem}.zip>` · "
        f"`View the source <{stem}.py.txt>`__"
    )
    lines = ["", *([".. page-takeaway::", ""] if takeaway else [])]
    lines += [".. container:: gpuguide-page-top", ""]
    found = _PROVENANCE.search(source, title.end())
    if found:
        text = found.group(1).strip().replace("\\", "\\\\").replace("|", "\\|")
        lines += [f"   {text}", ""]
    lines += [f"   {actions}", ""]
    figure = _FIRST_FIGURE.search(source, title.end())
    if figure:  # the first plot within the first screens; drawn again below
        lines += [f".. figure:: {figure.group(1)}", "   :class: gpuguide-first-figure"]
        lines += ["   :width: 80%", "", f"   {_FIGURE_NOTE}", ""]
    return source[: title.end()] + "\n".join(lines) + "\n" + source[title.end() :]


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    parts = docname.split("/")
    if len(parts) == 3 and parts[0] == "auto_examples" and parts[2].startswith("plot_"):
        takeaway = "claims_page" in app.extensions
        source[0] = page_top(source[0], parts[2] + ".py", takeaway=takeaway)


def _card_links(app: Any, doctree: nodes.document, docname: str) -> None:
    """Point each card's link at its chapter, relative to the page that shows it."""
    for link in doctree.findall(nodes.reference):
        if "gpuguide_target" in link:
            target = link.attributes.pop("gpuguide_target")
            link["refuri"] = app.builder.get_relative_uri(docname, target)


def copy_sources(examples: Path, outdir: Path) -> int:
    """Copy every example script next to its page as ``<name>.py.txt``.

    A ``.txt`` file is shown by a browser, where a ``.py`` one is downloaded:
    this is what "View the source" opens. Returns how many were copied.
    """
    count = 0
    for script in sorted(examples.glob("*/plot_*.py")):
        target = outdir / "auto_examples" / script.parent.name / f"{script.name}.txt"
        if target.parent.is_dir():
            shutil.copyfile(script, target)
            count += 1
    return count


def _build_finished(app: Any, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        copy_sources(Path(app.config.gpuguide_examples_dir), Path(app.outdir))


def setup(app: Any) -> dict[str, Any]:
    app.connect("source-read", _source_read)
    app.connect("doctree-resolved", _card_links)
    app.connect("build-finished", _build_finished)
    if "gpuguide_examples_dir" not in app.config.values:
        here = Path(__file__).resolve().parent.parent
        app.add_config_value(
            "gpuguide_examples_dir", str(here.parent / "examples"), "env"
        )
    app.add_directive("build-banner", BuildBanner)
    app.add_directive("chapter-cards", ChapterCards)
    app.add_directive("device-figures", DeviceFigures)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
