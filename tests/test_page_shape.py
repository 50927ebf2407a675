"""The shape every example page keeps: short, lesson first, one setup line."""

from __future__ import annotations

import pytest
from conftest import EXAMPLES

#: The house limit on a page's length (lines); split a longer page in two.
MAX_LINES = 250


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_a_page_stays_within_the_house_limit(script):
    lines = script.read_text().count("\n")
    assert lines <= MAX_LINES, (
        f"{script.name} has {lines} lines, over the house limit of {MAX_LINES}: "
        "split it into two lessons, or move plumbing into gpuguide"
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
