"""Tests for gpuguide.env: the switches read from the environment."""

from __future__ import annotations

import pytest

from gpuguide.env import device_override, small_mode


@pytest.mark.parametrize("value", ["1", "true", "TRUE", "Yes", "on", " on "])
def test_small_mode_on(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", value)
    assert small_mode() is True


@pytest.mark.parametrize("value", ["", "0", "false", "no", "off", "small"])
def test_small_mode_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("GPUGUIDE_SMALL", value)
    assert small_mode() is False


def test_small_mode_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUGUIDE_SMALL", raising=False)
    assert small_mode() is False


@pytest.mark.parametrize(
    ("value", "expected"), [(" cuda:1 ", "cuda:1"), ("cpu", "cpu"), ("  ", None)]
)
def test_device_override(monkeypatch: pytest.MonkeyPatch, value, expected) -> None:
    monkeypatch.setenv("GPUGUIDE_DEVICE", value)
    assert device_override() == expected
    monkeypatch.delenv("GPUGUIDE_DEVICE")
    assert device_override() is None
