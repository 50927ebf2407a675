"""Moving data: a synthetic image dataset whose samples cost a chosen amount of CPU
work, and the size of a matmul that keeps a GPU busy before a copy.

:class:`SyntheticImages` imitates a pipeline's per-sample CPU time (read, decode,
augment) without files. It lives in a module so that DataLoader workers started
with ``"spawn"`` can import it by name (see :mod:`gpuguide.chapters.spawning`).
:func:`matmul_side` picks the size of a matmul that keeps a GPU busy before a
copy.

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
from gpuguide.sizes import largest_size

if TYPE_CHECKING:
    import torch


__all__ = ["SyntheticImages", "matmul_side"]


class SyntheticImages:
    """Map-style dataset of random images made on the fly, with a CPU-cost knob.

    Sample ``i`` comes from a generator seeded with ``(seed, i)``, the same in
    every process and run: a random ``uint8`` image ``pad`` pixels larger on
    every side than ``shape`` ("decode"), smoothed ``work`` times by a 3 x 3 box
    filter, cropped at random back to ``shape``, flipped at random, as a
    ``float32`` tensor in ``[0, 1]``, with a label in ``[0, num_classes)``.
    Nothing is stored, so a large ``length`` costs nothing. A sample's CPU time
    grows about linearly with ``work``; time ``dataset[0]`` where you run.

    Raises ``ValueError`` for a negative count or a shape that is not three
    positive integers, ``TypeError`` for a count that is not an integer.

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
        """Sample ``index`` (negative: from the end) and its label."""
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
    rows = padded[:, :-2, :] + padded[:, 1:-1, :] + padded[:, 2:, :]
    total = rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:]  # the shape of image
    smoothed: np.ndarray = (total / np.float32(9.0)).astype(np.float32, copy=False)
    return smoothed


def matmul_side(
    *, device: torch.device | str | None = None, call_s: float = 0.01
) -> int:
    """The side ``n`` of a square float32 matmul on ``device`` that takes about
    ``call_s`` (a copy queued behind it waits that long): the largest multiple of 64
    up to 8192 whose ``2 n^3`` FLOP and ``12 n^2`` bytes fit that time and whose
    four ``n x n`` matrices (two inputs, the result, a host copy) fit the budget."""
    return largest_size(
        64,
        8192,
        memory_at=lambda n: 4 * 4 * n * n,
        multiple_of=64,
        device=device,
        flop_at=lambda n: 2 * n**3,
        traffic_at=lambda n: 3 * 4 * n * n,
        call_s=call_s,
    )
