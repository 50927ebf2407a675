"""Tests for gpuguide.env: the switches read from the environment."""

from __future__ import annotations

import pytest

from gpuguide.env import device_override, gpu_memory_cap, small_mode

GiB = 2**30


@pytest.fixture
def parse_bytes(monkeypatch):
    """gpu_memory_cap of a GPUGUIDE_GPU_MEMORY of ``text``."""

    def parse(text):
        monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", text)
        return gpu_memory_cap()

    return parse


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


# -- GPUGUIDE_GPU_MEMORY ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("16GiB", 16 * GiB),
        ("16 GiB", 16 * GiB),
        ("16gib", 16 * GiB),
        ("16Gi", 16 * GiB),
        ("16384MiB", 16 * GiB),
        ("1.5 GiB", 3 * GiB // 2),
        ("17179869184", 16 * GiB),
        ("17179869184B", 16 * GiB),
        (" 4096 ", 4096),
        ("1KiB", 1024),
        ("1TiB", 2**40),
        # Without an "i" the units are decimal (SI): 16 GB is 14.9 GiB.
        ("16GB", 16 * 10**9),
        ("16G", 16 * 10**9),
        ("16 gb", 16 * 10**9),
        ("500MB", 500 * 10**6),
        ("2kB", 2000),
    ],
)
def test_parse_bytes_accepts_sizes(parse_bytes, text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        *("GiB", "sixteen", "16 GiB free", "1e9", "16X", "16 GiBs"),
        *("16 bytes", "16iB", "0", "0GiB", "0.0000001KiB", "-1", "-16GiB", "-0.5 GB"),
    ],
)
def test_parse_bytes_rejects_what_is_not_a_size(parse_bytes, text: str) -> None:
    with pytest.raises(ValueError, match="GPUGUIDE_GPU_MEMORY must be a size") as e:
        parse_bytes(text)
    assert repr(text) in str(e.value)


def test_gpu_memory_cap_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUGUIDE_GPU_MEMORY", raising=False)
    assert gpu_memory_cap() is None
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "  ")  # empty means unset
    assert gpu_memory_cap() is None
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16GiB")
    assert gpu_memory_cap() == 16 * GiB
    monkeypatch.setenv("GPUGUIDE_GPU_MEMORY", "16 furlongs")
    with pytest.raises(ValueError, match=r"GPUGUIDE_GPU_MEMORY.*'16 furlongs'"):
        gpu_memory_cap()
