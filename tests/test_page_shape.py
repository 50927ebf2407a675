"""The shape every example page keeps: formatted, short in code, one setup line."""

from __future__ import annotations

import ast
import re

import pytest
from conftest import EXAMPLES

#: The house line length, as ``ruff format`` writes it.
MAX_COLUMNS = 88
#: The most code lines a page may have (not blank, not comment, not docstring), as
#: ``../shared/tools/page_metrics.py`` counts them. A page that needs more teaches
#: two lessons: split it.
MAX_CODE_LINES = 100
#: Comments that switch the formatter off for a line or a block.
FORMATTER_OFF = re.compile(r"#\s*fmt:\s*(skip|off)\b")


def code_lines(text: str) -> list[str]:
    """The lines of ``text`` that are code: not blank, not a comment, not in a
    string statement (the docstring, or a bare string standing for prose)."""
    prose = set()
    for node in ast.walk(ast.parse(text)):
        value = node.value if isinstance(node, ast.Expr) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            prose.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return [
        line
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and number not in prose
    ]


def test_code_lines_leave_out_prose_comments_and_blank_lines():
    text = '"""Title\n\nProse.\n"""\n\n# %%\n# A cell\nx = 1\n\n"""aside"""\ny = (\n    2\n)\n'
    assert code_lines(text) == ["x = 1", "y = (", "    2", ")"]


def test_the_formatter_switch_is_found_in_its_spellings():
    for line in ("x = 1  # fmt: skip", "# fmt: off", "y  #fmt:skip"):
        assert FORMATTER_OFF.search(line), line
    assert not FORMATTER_OFF.search("# the format: skip nothing")


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_the_formatter_formats_every_line(script):
    marked = [
        number
        for number, line in enumerate(script.read_text().splitlines(), 1)
        if FORMATTER_OFF.search(line)
    ]
    assert not marked, (
        f"{script.name}: lines {marked} switch ruff format off; shorten the code "
        "instead of packing it"
    )


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_no_line_is_longer_than_the_house_limit(script):
    long = [
        number
        for number, line in enumerate(script.read_text().splitlines(), 1)
        if len(line) > MAX_COLUMNS
    ]
    assert not long, f"{script.name}: lines {long} are over {MAX_COLUMNS} columns"


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_a_page_stays_within_the_code_limit(script):
    count = len(code_lines(script.read_text()))
    assert count <= MAX_CODE_LINES, (
        f"{script.name} has {count} code lines, over {MAX_CODE_LINES}: say less in "
        "code (a loop over variants, a gpuguide helper) or split it into two lessons"
    )


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_a_page_sets_up_in_one_line_and_leaves_the_recorded_results_to_the_build(
    script,
):
    text = script.read_text()
    assert text.count("gpuguide.setup(") == 1, f"{script.name}: one gpuguide.setup()"
    assert "show_recorded" not in text, (
        f"{script.name}: the docs build adds the recorded results; the page "
        "prints only its own lesson"
    )
