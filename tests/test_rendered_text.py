"""What the build's directives write, from a tiny Sphinx project built once: the
chapter cards render inline reST (code, not double backquotes), and the results
page heads each page's table with that page's title, not its script's name."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from conftest import H100_RECORD

from gpuguide.results import Result
from gpuguide_tools.results_files import ResultsFile, file_name, save

bs4 = pytest.importorskip("bs4")
pytest.importorskip("sphinx_gallery")

CONF = """
import sys
sys.path.insert(0, {ext!r})
extensions = ["results_page", "landing"]
gpuguide_examples_dir = {examples!r}
gpuguide_results_dir = {results!r}
exclude_patterns = ["_build"]

def setup(app):  # what sphinx-gallery would add; no examples run here
    app.add_config_value("sphinx_gallery_conf", {{"gallery_dirs": []}}, "env")
"""
HEADER = (
    "Chapter 6: ``torch.autocast`` at work\n"
    "=====================================\n\n"
    "Training with ``torch.autocast`` and *one* scaler, measured.\n"
    "A second sentence.\n"
)
PAGE = "What ``torch.compile`` costs\n============================\n\nText.\n"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    from sphinx.application import Sphinx

    root = tmp_path_factory.mktemp("mini")
    examples, results, docs = root / "examples", root / "results", root / "docs"
    chapter = examples / "06_mixed"
    chapter.mkdir(parents=True)
    (chapter / "GALLERY_HEADER.rst").write_text(HEADER)
    (chapter / "plot_amp.py").write_text('"""What torch.compile costs."""\n')
    save(
        ResultsFile(H100_RECORD, (Result("plot_amp", "speed-up", 2.0, "x"),)),
        results / file_name(H100_RECORD),
    )
    page = docs / "auto_examples" / "06_mixed"
    page.mkdir(parents=True)
    (page / "plot_amp.rst").write_text(PAGE)
    for suffix in (".py", ".ipynb", ".zip"):  # the downloads on top of every page
        (page / f"plot_amp{suffix}").write_text("")
    (docs / "index.rst").write_text(
        "Mini\n====\n\n.. chapter-cards::\n\n.. recorded-results::\n\n"
        ".. toctree::\n   :hidden:\n\n   auto_examples/06_mixed/plot_amp\n"
    )
    ext = Path(__file__).resolve().parent.parent / "docs" / "_ext"
    (docs / "conf.py").write_text(
        CONF.format(ext=str(ext), examples=str(examples), results=str(results))
    )
    warnings = io.StringIO()
    app = Sphinx(
        str(docs), str(docs), str(root / "html"), str(root / "doctrees"), "html",
        status=None, warning=warnings, freshenv=True,
    )  # fmt: skip
    app.build()
    # The thumbnail does not exist here (no example ran); nothing else may warn.
    problems = [
        line for line in warnings.getvalue().splitlines() if "thumb" not in line
    ]
    assert problems == [], problems
    return root / "html"


def test_a_chapter_card_shows_code_not_double_backquotes(built):
    soup = bs4.BeautifulSoup((built / "index.html").read_text(), "html.parser")
    card = soup.select_one("div.gpuguide-card")
    text = card.get_text(" ", strip=True)
    assert "``" not in text
    assert "Chapter 6: torch.autocast at work" in " ".join(text.split())
    codes = [code.get_text(strip=True) for code in card.select("code")]
    assert codes == ["torch.autocast", "torch.autocast"]  # title and sentence
    assert card.select_one("em").get_text() == "one"
    assert card.select_one("img")["alt"] == "Chapter 6: torch.autocast at work"
    assert "A second sentence" not in text  # the first sentence only


def test_the_results_page_heads_a_table_with_the_pages_title(built):
    soup = bs4.BeautifulSoup((built / "index.html").read_text(), "html.parser")
    headings = soup.select("p.rubric")
    assert len(headings) == 1
    link = headings[0].select_one("a")
    assert link.get_text(strip=True) == "What torch.compile costs"
    assert link["href"].endswith("auto_examples/06_mixed/plot_amp.html")
    assert "plot_amp" not in headings[0].get_text()
