"""Print results as aligned columns, in the spirit of ``torch.utils.benchmark.Compare``.

A page keeps its results as rows, each a small dataclass, a named tuple or a
dict, and prints ``table(rows)``: one column per field, with a header, the first
column left-aligned and the others right-aligned. Cells are formatted by kind,
so that every table of the guide reads the same: a
:class:`~gpuguide.timing.Measurement` as its median ± half its IQR, a float
with three significant digits, None as ``-``, anything else with ``str``.

Examples
--------
>>> from typing import NamedTuple
>>> from gpuguide.tables import table
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuguide.timing import Measurement
from gpuguide.units import format_time, significant

__all__ = ["Table", "format_cell", "table"]

_GAP = "  "


def format_cell(value: object) -> str:
    """One cell's text: a Measurement as ``"1.23 ms ± 45.6 us"``, a float with
    three significant digits, None as ``"-"``, anything else with ``str``."""
    if value is None:
        return "-"
    if isinstance(value, Measurement):
        return f"{format_time(value.median_s)} ± {format_time(value.iqr_s / 2)}"
    if isinstance(value, float):
        return significant(value) if math.isfinite(value) else str(value)
    return str(value)


@dataclass(frozen=True)
class Table:
    """Rows of formatted cells (each as long as ``header``) under a header and an
    optional title line, printed as aligned columns."""

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
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.header))]
        text = [
            _GAP.join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
            for line in lines
        ]
        return "\n".join(([self.title] if self.title else []) + text)


def _fields(row: object) -> dict[str, Any]:
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
    """Lay out result rows as a table; ``print`` it.

    Parameters
    ----------
    rows : iterable
        Dataclass instances, named tuples or mappings. Every row needs the
        fields of the columns.
    columns : sequence of str or mapping of str to str, optional
        The fields to show, in order (default: every field of the first row),
        or a mapping from field to column title. Without a title, a field's
        name with ``_`` read as a space is its title.
    title : str, optional
        A line printed above the table.

    Returns
    -------
    Table
        Prints as aligned columns; cells are formatted with :func:`format_cell`.
        A row that is not a dataclass, named tuple or mapping raises a
        ``TypeError``, a column that a row lacks a ``KeyError``.
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
