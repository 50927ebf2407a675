"""Print results as aligned columns, in the spirit of ``torch.utils.benchmark.Compare``.

A page keeps its results as rows (dicts or named tuples) and prints
``table(rows)``: one column per field, numbers right-aligned, text left-aligned.

>>> print(table([{"dtype": "fp32", "tflops": 51.2}, {"dtype": "bf16", "tflops": 702.}]))
dtype  tflops
fp32     51.2
bf16      702
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuguide.timing import NOISY_RELATIVE_IQR
from gpuguide.units import significant

__all__ = ["Table", "table"]

_NUMBER = re.compile(r"[-+]?\.?\d")
_NOISY = f"NOISY: IQR > {NOISY_RELATIVE_IQR:.0%} of the median"


def _cell(value: object) -> str:
    """A float with three significant digits, None as ``-``, others by ``str``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value) or (value and not 1e-3 <= abs(value) < 1e6):
            return f"{value:.3g}"
        return significant(value)
    return str(value)


@dataclass(frozen=True)
class Table:
    """Rows of formatted cells under a header and an optional title, printed aligned."""

    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str | None = None

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.header):
                msg = f"each row must have {len(self.header)} cells, got {row!r}"
                raise ValueError(msg)

    def __str__(self) -> str:
        lines = [self.header, *self.rows]
        columns = list(zip(*lines, strict=True))
        widths = [max(map(len, column)) for column in columns]
        numeric = [  # a column of numbers (and "-") is right-aligned, text left
            len(column) > 1 and all(_NUMBER.match(c) or c == "-" for c in column[1:])
            for column in columns
        ]
        text = [
            "  ".join(
                c.rjust(w) if right else c.ljust(w)
                for c, w, right in zip(line, widths, numeric, strict=True)
            ).rstrip()
            for line in lines
        ]
        notes = [_NOISY] if any("NOISY" in c for row in self.rows for c in row) else []
        return "\n".join(([self.title] if self.title else []) + text + notes)


def _fields(row: object) -> dict[str, Any]:
    if isinstance(row, Mapping):
        return dict(row)
    if isinstance(row, tuple) and hasattr(row, "_fields"):
        return dict(zip(row._fields, row, strict=True))
    msg = f"rows must be mappings or named tuples, got {row!r}"
    raise TypeError(msg)


def table(rows: Iterable[object], *, title: str | None = None) -> Table:
    """Rows (mappings or named tuples) as a table, one column per field of the
    first row (``_`` read as a space); ``print`` it."""
    records = [_fields(row) for row in rows]
    names = list(records[0]) if records else []
    cells = []
    for record in records:
        missing = [name for name in names if name not in record]
        if missing:
            msg = f"every row must have the columns {names}, missing {missing}"
            raise KeyError(msg)
        cells.append(tuple(_cell(record[name]) for name in names))
    header = tuple(name.replace("_", " ") for name in names)
    return Table(header=header, rows=tuple(cells), title=title)
