"""Tests for gpuguide.tables: rows of any kind, cells by kind, aligned columns."""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import pytest

from gpuguide.tables import Table, table
from gpuguide.timing import Measurement


class Row(NamedTuple):
    mode: str
    step: Measurement
    speed_up: float
    peak_bytes: int | None


@dataclasses.dataclass(frozen=True)
class Result:
    dtype: str
    tflops: float


class Speed(NamedTuple):
    dtype: str
    tflops: float


STEP = Measurement("s", (0.0118, 0.012, 0.0122), "cpu", "wall-clock")
NOISY = Measurement("s", (0.010, 0.012, 0.014), "cpu", "wall-clock")


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "-"),
        ("fp32", "fp32"),
        (8192, "8192"),
        (1.23456, "1.23"),
        (0.5, "0.500"),
        (1234.5, "1234"),
        (math.inf, "inf"),
        (3.4028234663852886e38, "3.4e+38"),
        (-1.5e-5, "-1.5e-05"),
        (0.0, "0.00"),
        (STEP, "12.0 ms (11.9-12.1)"),
        (NOISY, "12.0 ms (11.0-13.0) NOISY"),
        (Measurement("once", (0.012,), "cpu", "wall-clock"), "12.0 ms (one run)"),
        (True, "True"),
    ],
)
def test_a_cell_is_written_by_its_kind(value, text):
    assert table([{"value": value}]).rows == ((text,),)


def test_named_tuples_print_as_aligned_columns():
    rows = [Row("fp32", STEP, 1.0, 2**20), Row("fp16 + scaler", NOISY, 2.345, None)]
    assert str(table(rows)).splitlines() == [
        "mode                                step  speed up  peak bytes",
        "fp32                 12.0 ms (11.9-12.1)      1.00     1048576",
        "fp16 + scaler  12.0 ms (11.0-13.0) NOISY      2.35           -",
        "NOISY: IQR > 10% of the median",
    ]


def test_numbers_are_right_aligned_and_text_left_aligned():
    rows = [{"op": "add", "regime": "memory-bound", "share": "87%", "x": "-"}]
    rows.append({"op": "matmul", "regime": "compute", "share": "101%", "x": "-"})
    assert str(table(rows)).splitlines() == [
        "op      regime        share  x",
        "add     memory-bound    87%  -",
        "matmul  compute        101%  -",
    ]


def test_named_tuples_mappings_and_titles():
    rows = [Speed("fp64", 59.61), Speed("bf16", 702.0)]
    assert str(table(rows, title="t")).splitlines() == [
        "t",
        "dtype  tflops",
        "fp64     59.6",
        "bf16      702",
    ]
    dicts = [{"% roof": "87%"}, {"% roof": "101%"}]
    assert str(table(dicts)).splitlines() == ["% roof", "   87%", "  101%"]


def test_an_empty_table_prints_nothing():
    assert str(table([])) == ""


def test_bad_rows_are_refused():
    with pytest.raises(TypeError, match="rows must be mappings or named tuples"):
        table([("fp32", 1.0)])  # a positional tuple says nothing about its columns
    with pytest.raises(TypeError, match="rows must be mappings or named tuples"):
        table([Result("fp32", 1.0)])
    with pytest.raises(KeyError, match=r"missing \['tflops'\]"):
        table([{"dtype": "fp32", "tflops": 1.0}, {"dtype": "fp32"}])
    with pytest.raises(ValueError, match="each row must have 2 cells"):
        Table(header=("a", "b"), rows=(("1",),))
