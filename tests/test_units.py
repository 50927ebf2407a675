"""Tests for gpuguide.units: exact strings, rounding at unit boundaries."""

from __future__ import annotations

import math

import pytest

from gpuguide.units import (
    format_bytes,
    format_ratio,
    format_time,
    format_value,
    significant,
)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (812e-9, "812 ns"),
        (12.3e-6, "12.3 us"),
        (1.23e-3, "1.23 ms"),
        (2.5, "2.50 s"),
        (1.0, "1.00 s"),
        (1234.0, "1234 s"),
        (0.5e-9, "0.500 ns"),
        (0.0, "0 s"),
        (-1.2e-3, "-1.20 ms"),
        # Rounding that reaches the next unit moves to it.
        (999.6e-6, "1.00 ms"),
        (999.4e-6, "999 us"),
        (9.9996e-3, "10.0 ms"),
        (99.96e-3, "100 ms"),
        (0.99996e-6, "1.00 us"),
    ],
)
def test_format_time(seconds, expected):
    assert format_time(seconds) == expected


def test_format_time_non_finite():
    assert format_time(math.inf) == "inf s"
    assert format_time(math.nan) == "nan s"


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1023.6, "1.00 KiB"),
        (1024, "1.00 KiB"),
        (1536, "1.50 KiB"),
        (3 * 2**20, "3.00 MiB"),
        (-3 * 2**20, "-3.00 MiB"),
        (79.1 * 2**30, "79.1 GiB"),
        (1023.9 * 2**10, "1.00 MiB"),
        (1000 * 2**10, "1000 KiB"),
        (12.345 * 2**40, "12.3 TiB"),
        (2**60, "1.00 EiB"),
        (2**70, "1024 EiB"),
    ],
)
def test_format_bytes(n, expected):
    assert format_bytes(n) == expected


def test_format_bytes_non_finite():
    assert format_bytes(math.inf) == "inf B"
    assert format_bytes(-math.inf) == "-inf B"


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (1.2e12, "FLOP/s", "1.20 TFLOP/s"),
        (5e10, "B/s", "50.0 GB/s"),
        (3.35e12, "B/s", "3.35 TB/s"),
        (989.5e12, "FLOP/s", "990 TFLOP/s"),
        (999.6e12, "FLOP/s", "1.00 PFLOP/s"),
        (999.4, "B/s", "999 B/s"),
        (1500, "B/s", "1.50 kB/s"),
        (2.5e6, "FLOP/s", "2.50 MFLOP/s"),
        (0.5, "FLOP/s", "0.500 FLOP/s"),
        (0, "B/s", "0.00 B/s"),
        (-5e9, "B/s", "-5.00 GB/s"),
        (1e22, "B/s", "10000 EB/s"),
        (None, "B/s", "n/a"),
        (math.nan, "B/s", "nan B/s"),
    ],
)
def test_format_value_rates(value, unit, expected):
    assert format_value(value, unit) == expected


@pytest.mark.parametrize(
    ("x", "expected"),
    [
        (3.2, "3.2x"),
        (1.0, "1.00x"),
        (0.031, "0.031x"),
        (2, "2.00x"),
        (10, "10.0x"),
        (100, "100x"),
        (3.256, "3.26x"),
        (12.34, "12.3x"),
        (0.99999, "1.00x"),
        (0.1234, "0.123x"),
        (1234.5, "1234x"),
        (-2.5, "-2.5x"),
        (0, "0.00x"),
        (None, "n/a"),
        (math.inf, "infx"),
    ],
)
def test_format_ratio(x, expected):
    assert format_ratio(x) == expected


def test_format_ratio_at_most_three_significant_digits():
    for x in (1.23456, 45.678, 0.0123456, 7.891011):
        digits = format_ratio(x).rstrip("x").replace(".", "").lstrip("0")
        assert len(digits) <= 3, format_ratio(x)


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (0.0, (1.0, "s")),
        (math.nan, (1.0, "s")),
        (2e-6, (1e-6, "us")),
        (0.9996e-3, (1e-3, "ms")),
        (3e-12, (1e-9, "ns")),
    ],
)
def test_unit_scale_matches_format_time(seconds, expected):
    from gpuguide.units import unit_scale

    assert unit_scale(seconds, "s") == expected


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [
        (0.012345, 3, "0.0123"),
        (2.5, 3, "2.50"),
        (0.5, 2, "0.50"),
        (98765.0, 3, "98765"),
    ],
)
def test_significant(value, digits, text):
    assert significant(value, digits) == text


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (1.2e-3, "s", "1.20 ms"),
        (16 * 2**20, "B", "16.0 MiB"),
        (6.12e14, "FLOP/s", "612 TFLOP/s"),
        (5e10, "B/s", "50.0 GB/s"),
        (2.5, "x", "2.50x"),
        (12.345, "%", "12.3 %"),
    ],
)
def test_format_value(value, unit, text):
    assert format_value(value, unit) == text


@pytest.mark.parametrize(
    ("args", "text"),
    [
        ((1.23e-3, 1.2e-3, 1.31e-3, "s"), "1.23 ms (1.20-1.31)"),
        ((41.2e12, 40.8e12, 41.5e12, "FLOP/s"), "41.2 TFLOP/s (40.8-41.5)"),
        ((2.5, 2.41, 2.62, "x"), "2.50x (2.41-2.62)"),
        ((3 * 2**20, 2.9 * 2**20, 3.1 * 2**20, "B"), "3.00 MiB (2.90-3.10)"),
        ((0.5, -0.7, 1.0, ""), "0.500 (-0.700 to 1.00)"),
    ],
)
def test_a_spread_is_written_in_the_medians_unit(args, text):
    value, low, high, unit = args
    assert format_value(value, unit, (low, high)) == text
