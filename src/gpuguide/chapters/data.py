"""A synthetic image dataset whose samples cost a chosen amount of CPU work.

Real input pipelines spend CPU time per sample: reading a file, decoding it,
augmenting it. :class:`SyntheticImages` imitates that without any files: sample
``i`` is built from a random generator seeded with ``(seed, i)``, so it is the
same in every process and on every run, and a ``work`` knob sets how many
smoothing passes (the stand-in for decoding) each sample goes through.

It lives in a module, not in an example, so that DataLoader workers started
with the ``"spawn"`` method can unpickle it: a spawned worker imports the
classes it receives by name (see :mod:`gpuguide.chapters.spawning`).

Examples
--------
>>> from gpuguide.chapters.data import SyntheticImages
>>> ds = SyntheticImages(1000, work=2)
>>> image, label = ds[3]
>>> tuple(image.shape), image.dtype, 0 <= label < 10
((3, 32, 32), torch.float32, True)
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING

import numpy as np

from gpuguide import checks

if TYPE_CHECKING:
    import torch

__all__ = ["SyntheticImages"]


class SyntheticImages:
    """Map-style dataset of random images made on the fly, with a CPU-cost knob.

    Each sample goes through the steps of a typical image pipeline: "decode"
    (a random ``uint8`` image, ``pad`` pixels larger on every side than the
    output, smoothed ``work`` times by a 3 x 3 box filter), a random crop back
    to ``shape``, a random horizontal flip, and conversion to a ``float32``
    tensor with values in ``[0, 1]``. The label is drawn from the same
    generator. It implements ``__len__`` and ``__getitem__``, which is all
    :class:`torch.utils.data.DataLoader` needs from a map-style dataset.

    Parameters
    ----------
    length : int
        Number of samples (>= 0). Nothing is stored, so a large length costs
        nothing.
    shape : tuple of int
        ``(channels, height, width)`` of each image (each >= 1).
    num_classes : int
        Labels are integers in ``[0, num_classes)`` (>= 1).
    work : int
        Smoothing passes per sample (>= 0): the CPU time of a sample grows
        about linearly with it. Measure it where you run (time
        ``dataset[0]``); it depends on the CPU and on ``shape``.
    pad : int
        Border added before the random crop, in pixels (>= 0).
    seed : int
        Seed shared by all samples (>= 0); sample ``i`` uses ``(seed, i)``.

    Raises
    ------
    ValueError
        For negative sizes or counts, or a shape that is not three positive
        integers.
    TypeError
        If a size or count is not an integer.

    Examples
    --------
    >>> from torch.utils.data import DataLoader
    >>> loader = DataLoader(SyntheticImages(64, work=0), batch_size=16)
    >>> images, labels = next(iter(loader))
    >>> tuple(images.shape), tuple(labels.shape)
    ((16, 3, 32, 32), (16,))
    """

    def __init__(
        self,
        length: int,
        *,
        shape: tuple[int, int, int] = (3, 32, 32),
        num_classes: int = 10,
        work: int = 2,
        pad: int = 4,
        seed: int = 0,
    ) -> None:
        self.length = checks.integer("length", length, minimum=0)
        self.work = checks.integer("work", work, minimum=0)
        self.pad = checks.integer("pad", pad, minimum=0)
        self.seed = checks.integer("seed", seed, minimum=0)
        self.num_classes = checks.integer("num_classes", num_classes, minimum=1)
        if len(tuple(shape)) != 3:
            msg = f"shape must be (channels, height, width), got {shape!r}"
            raise ValueError(msg)
        channels, height, width = (checks.integer("shape", s, minimum=1) for s in shape)
        self.shape = (channels, height, width)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """Sample ``index``: a ``float32`` image tensor of ``shape`` and its label.

        Negative indices count from the end, as for a list.
        """
        import torch

        index = operator.index(index)
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            msg = f"index must be in [-{self.length}, {self.length}), got {index}"
            raise IndexError(msg)
        rng = np.random.default_rng((self.seed, index))
        channels, height, width = self.shape
        pad = self.pad
        size = (channels, height + 2 * pad, width + 2 * pad)
        image = rng.integers(0, 256, size=size, dtype=np.uint8).astype(np.float32)
        for _ in range(self.work):
            image = _box_blur(image)
        top, left = rng.integers(0, 2 * pad + 1, size=2)
        image = image[:, top : top + height, left : left + width]
        if rng.random() < 0.5:
            image = image[:, :, ::-1]
        label = int(rng.integers(self.num_classes))
        tensor = torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32))
        return tensor.div_(255.0), label

    def __repr__(self) -> str:
        return (
            f"SyntheticImages(length={self.length}, shape={self.shape}, "
            f"num_classes={self.num_classes}, work={self.work}, pad={self.pad}, "
            f"seed={self.seed})"
        )


def _box_blur(image: np.ndarray) -> np.ndarray:
    """Mean of each pixel's 3 x 3 neighbourhood (edges repeated), per channel."""
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1)), mode="edge")
    height, width = image.shape[1:]
    rows = padded[:, :-2, :] + padded[:, 1:-1, :] + padded[:, 2:, :]
    total = rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:]
    smoothed: np.ndarray = (total / np.float32(9.0)).astype(np.float32, copy=False)
    return smoothed[:, :height, :width]
