"""Print results as aligned columns, in the spirit of ``torch.utils.benchmark.Compare``.

A page keeps its results as rows (dataclasses, named tuples or dicts) and prints
``table(rows)``: one column per field, numbers right-aligned, text left-aligned.
Every table formats cells alike: a :class:`~gpuguide.timing.Measurement` as its
median with its interquartile range (:func:`~gpuguide.units.format_spread`,
flagged NOISY), a float with three significant digits
(``3.4e+38`` when extreme), None as ``-``, others by ``str``.

Examples
--------
>>> from typing import NamedTuple
>>> class Row(NamedTuple):
...     dtype: str
...     largest_n: int
...     tflops: float
>>> print(table([Row("fp32", 8192, 51.234), Row("bf16", 16384, 702.0)]))
dtype  largest n  tflops
fp32        8192    51.2
bf16       16384     702
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuguide.timing import NOISY_RELATIVE_IQR, Measurement
from gpuguide.units import significant

__all__ = ["Table", "format_cell", "table"]

_GAP = "  "


_NUMBER = re.compile(r"[-+]?\.?\d")
_NOISY = f"NOISY: IQR > {NOISY_RELATIVE_IQR:.0%} of the median"


def format_cell(value: object) -> str:
    """One cell's text, as the module describes: ``"1.23 ms (1.20-1.31)"``."""
    if value is None:
        return "-"
    if isinstance(value, Measurement):
        return str(value)
    if isinstance(value, float):  # 3 significant digits; scientific when extreme
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
        columns = list(zip(*lines, strict=True)) if lines[0] else []
        widths = [max(map(len, column)) for column in columns]
        numeric = [  # a column of numbers (and "-") is right-aligned, text left
            all(_NUMBER.match(c) or c == "-" for c in column[1:]) and len(column) > 1
            for column in columns
        ]
        text = [
            _GAP.join(
                c.rjust(w) if right else c.ljust(w)
                for c, w, right in zip(line, widths, numeric, strict=True)
            ).rstrip()
            for line in lines
        ]
        notes = [_NOISY] if any("NOISY" in c for row in self.rows for c in row) else []
        return "\n".join(([self.title] if self.title else []) + text + notes)


def _fields(row: object) -> dict[str, Any]:
    """A row's fields by name."""
    if isinstance(row, Mapping):
        return dict(row)
    if dataclasses.is_dataclass(row) and not isinstance(row, type):
        return {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}
    if isinstance(row, tuple) and hasattr(row, "_fields"):
        return dict(zip(row._fields, row, strict=True))
    msg = f"rows must be dataclasses, named tuples or mappings, got {row!r}"
    raise TypeError(msg)


def table(
    rows: Iterable[object],
    *,
    columns: Sequence[str] | Mapping[str, str] | None = None,
    title: str | None = None,
) -> Table:
    """Lay out result rows (dataclasses, named tuples or mappings) as a table; ``print`` it.

    ``columns`` are the fields to show, in order (default: the first row's),
    or a mapping from field to column title (default: the name, ``_`` as a
    space); ``title`` is a line above. Cells go through :func:`format_cell`.
    """
    records = [_fields(row) for row in rows]
    if columns is None:
        columns = list(records[0]) if records else []
    titles = (
        dict(columns)
        if isinstance(columns, Mapping)
        else {name: name.replace("_", " ") for name in columns}
    )
    cells = []
    for record in records:
        missing = [name for name in titles if name not in record]
        if missing:
            msg = f"every row must have the columns {list(titles)}, missing {missing}"
            raise KeyError(msg)
        cells.append(tuple(format_cell(record[name]) for name in titles))
    return Table(header=tuple(titles.values()), rows=tuple(cells), title=title)
