"""Shared test set-up: the ``gpu`` marker, the repository's paths, matplotlib."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*/plot_*.py"))

#: A measured number with its unit, as the examples print them.
MEASURED = re.compile(
    r"\d+(\.\d+)?\s*(ns|us|ms|s|[kMGT]?B/s|[MGT]?FLOP/s|[KMG]iB|x|%)(?!\w)"
)


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Skip tests marked ``gpu`` cleanly when CUDA is not available."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU (torch.cuda.is_available() is False)"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clean_matplotlib() -> Iterator[None]:
    """Every test starts from the default rcParams and leaves no figure open."""
    with mpl.rc_context():
        yield
    plt.close("all")


@pytest.fixture
def ax() -> plt.Axes:
    """Fresh axes on a new figure."""
    return plt.subplots()[1]
