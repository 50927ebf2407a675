"""Tests for gpuguide.chapters.data: the synthetic images, also in spawned workers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from gpuguide.chapters import data
from gpuguide.chapters.data import SyntheticImages, _box_blur, spawn_safe


def test_sample_shape_dtype_range_and_label():
    ds = SyntheticImages(10, shape=(1, 8, 12))
    image, label = ds[4]
    assert image.shape == (1, 8, 12)
    assert image.dtype == torch.float32
    assert image.is_contiguous()
    assert 0.0 <= image.min().item() <= image.max().item() <= 1.0
    assert isinstance(label, int)
    assert 0 <= label < 10
    assert len(ds) == 10


def test_samples_are_reproducible_and_differ_by_index():
    a, b = SyntheticImages(100), SyntheticImages(100)
    torch.testing.assert_close(a[7][0], b[7][0], rtol=0, atol=0)
    assert a[7][1] == b[7][1]
    assert not torch.equal(a[7][0], a[8][0])


def test_labels_cover_the_classes():
    ds = SyntheticImages(200, work=0, shape=(1, 2, 2))
    assert {ds[i][1] for i in range(len(ds))} == set(range(10))


def test_out_of_range():
    ds = SyntheticImages(5, work=0)
    with pytest.raises(IndexError, match=r"index must be in \[0, 5\), got 5"):
        ds[5]
    with pytest.raises(IndexError):
        ds[-1]


def test_work_smooths_the_image():
    # More smoothing passes: less variation between neighbouring pixels.
    def roughness(work):
        image = SyntheticImages(1, work=work)[0][0]
        return (image[:, 1:, :] - image[:, :-1, :]).abs().mean().item()

    rough = [roughness(w) for w in (0, 1, 4)]
    assert rough[0] > rough[1] > rough[2]


def test_box_blur_keeps_constants_and_averages_neighbours():
    flat = np.full((2, 5, 4), 7.0, dtype=np.float32)
    np.testing.assert_allclose(_box_blur(flat), flat)
    spike = np.zeros((1, 3, 3), dtype=np.float32)
    spike[0, 1, 1] = 9.0
    out = _box_blur(spike)
    assert out.shape == (1, 3, 3)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.ones((1, 3, 3)))


def test_each_sample_is_a_crop_of_its_padded_image_flipped_at_random():
    ds = SyntheticImages(40, shape=(1, 4, 4), work=0)
    flipped = 0
    for i in range(40):
        rng = np.random.default_rng(i)
        raw = rng.integers(0, 256, size=(1, 12, 12), dtype=np.uint8)
        image = ds[i][0].numpy() * 255
        crops = [raw[:, t : t + 4, u : u + 4] for t in range(9) for u in range(9)]
        if not any(np.allclose(image, c, rtol=1e-6) for c in crops):
            flipped += 1
            assert any(np.allclose(image, c[:, :, ::-1], rtol=1e-6) for c in crops)
    assert 0 < flipped < 40


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"length": -1}, ValueError, "length"),
        ({"length": 2.5}, TypeError, "length"),
        ({"length": True}, TypeError, "length"),
        ({"length": 4, "work": -1}, ValueError, "work"),
        ({"length": 4, "shape": (3, 32)}, ValueError, "shape"),
        ({"length": 4, "shape": (3, 0, 8)}, ValueError, "shape must be >= 1"),
        ({"length": 4, "shape": (3, 8, "8")}, TypeError, "shape"),
    ],
)
def test_invalid_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        SyntheticImages(**kwargs)


def test_batches_from_spawned_workers_match_the_main_process():
    ds = SyntheticImages(12, shape=(3, 8, 8), work=1)
    loader = DataLoader(
        ds, batch_size=4, num_workers=1, multiprocessing_context="spawn"
    )
    with spawn_safe():
        batches = list(loader)
    expected = list(DataLoader(ds, batch_size=4))
    assert len(batches) == 3
    for (images, labels), (want_images, want_labels) in zip(
        batches, expected, strict=True
    ):
        torch.testing.assert_close(images, want_images, rtol=0, atol=0)
        torch.testing.assert_close(labels, want_labels, rtol=0, atol=0)


# -- the transfer pages: copy sizes, bandwidth curves, the pinned cache ----------


def test_matmul_side_plans_four_matrices_and_one_matmul(monkeypatch):
    asked = {}

    def fake_largest_size(lo, hi, **plan):
        asked.update(lo=lo, hi=hi, **plan)
        return 1024

    monkeypatch.setattr(data, "largest_size", fake_largest_size)
    assert data.matmul_side(device="cuda", call_s=0.02) == 1024
    assert (asked["lo"], asked["hi"], asked["multiple_of"]) == (64, 8192, 64)
    assert (asked["device"], asked["call_s"]) == ("cuda", 0.02)
    assert asked["memory_at"](100) == 4 * 4 * 100 * 100  # four float32 matrices
    assert asked["flop_at"](100) == 2 * 100**3
    assert asked["traffic_at"](100) == 3 * 4 * 100 * 100


def test_matmul_side_on_this_machine_grows_with_the_time_per_call():
    short = data.matmul_side(device="cpu", call_s=1e-4)
    long = data.matmul_side(device="cpu", call_s=0.05)
    assert 64 <= short <= long <= 8192
    assert long % 64 == 0
