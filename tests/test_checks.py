"""Tests for gpuguide.checks: one message style for every argument error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpuguide import checks


def test_integer_accepts_integers_of_any_kind():
    assert checks.integer("n", 5) == 5
    assert checks.integer("n", np.int64(7), minimum=7) == 7
    assert type(checks.integer("n", np.int64(7))) is int


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (2.5, TypeError, "n must be an integer, got 2.5"),
        (True, TypeError, "n must be an integer, got True"),
        ("3", TypeError, "n must be an integer, got '3'"),
        (0, ValueError, "n must be >= 1, got 0"),
    ],
)
def test_integer_refuses(value, error, message):
    with pytest.raises(error) as info:
        checks.integer("n", value, minimum=1)
    assert str(info.value) == message


def test_numbers_accept_numpy_and_torch_scalars():
    assert checks.positive("x", np.float32(0.5)) == 0.5
    assert checks.non_negative("x", torch.tensor(0.0)) == 0.0
    assert checks.fraction("x", 1) == 1.0


@pytest.mark.parametrize(
    ("check", "value", "error", "message"),
    [
        (checks.positive, 0.0, ValueError, "x must be a finite number > 0, got 0.0"),
        (
            checks.positive,
            math.inf,
            ValueError,
            "x must be a finite number > 0, got inf",
        ),
        (checks.non_negative, -1, ValueError, "x must be a finite number >= 0, got -1"),
        (checks.non_negative, math.nan, ValueError, "x must be a finite number >= 0"),
        (checks.fraction, 0, ValueError, r"x must be in (0, 1], got 0"),
        (checks.fraction, 1.5, ValueError, r"x must be in (0, 1], got 1.5"),
        (checks.positive, "fast", TypeError, "x must be a number, got 'fast'"),
        (checks.positive, None, TypeError, "x must be a number, got None"),
        (checks.fraction, False, TypeError, "x must be a number, got False"),
    ],
)
def test_numbers_refuse(check, value, error, message):
    with pytest.raises(error) as info:
        check("x", value)
    assert str(info.value).startswith(message)
