"""Moving data: a dataset of costly samples (in a module, so that ``"spawn"``
DataLoader workers can import it), a guard for starting such workers from a page,
and a matmul that keeps a GPU busy before a copy."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np

from gpuguide import checks
from gpuguide.sizes import largest_size

if TYPE_CHECKING:
    import torch


__all__ = ["SyntheticImages", "matmul_side", "spawn_safe"]


class SyntheticImages:
    """Random ``float32`` images in ``[0, 1]`` with labels in ``[0, 10)``, made on
    the fly: sample ``i`` is seeded with ``i`` ("decode"), smoothed ``work`` times
    by a 3 x 3 box filter (its CPU cost), then cropped and flipped ("augment")."""

    def __init__(
        self, length: int, *, shape: tuple[int, int, int] = (3, 32, 32), work: int = 2
    ) -> None:
        self.length = checks.integer("length", length, minimum=0)
        self.work = checks.integer("work", work, minimum=0)
        if len(tuple(shape)) != 3:
            msg = f"shape must be (channels, height, width), got {shape!r}"
            raise ValueError(msg)
        channels, height, width = (checks.integer("shape", s, minimum=1) for s in shape)
        self.shape = (channels, height, width)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        """Sample ``index`` and its label."""
        import torch

        if not 0 <= index < self.length:
            msg = f"index must be in [0, {self.length}), got {index}"
            raise IndexError(msg)
        rng = np.random.default_rng(index)
        channels, height, width = self.shape
        size = (channels, height + 8, width + 8)
        image = rng.integers(0, 256, size=size, dtype=np.uint8).astype(np.float32)
        for _ in range(self.work):
            image = _box_blur(image)
        top, left = rng.integers(0, 9, size=2)
        image = image[:, top : top + height, left : left + width]
        if rng.random() < 0.5:
            image = image[:, :, ::-1]
        label = int(rng.integers(10))
        tensor = torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32))
        return tensor.div_(255.0), label


def _box_blur(image: np.ndarray) -> np.ndarray:
    """Mean of each pixel's 3 x 3 neighbourhood (edges repeated), per channel."""
    padded = np.pad(image, ((0, 0), (1, 1), (1, 1)), mode="edge")
    rows = padded[:, :-2, :] + padded[:, 1:-1, :] + padded[:, 2:, :]
    total = rows[:, :, :-2] + rows[:, :, 1:-1] + rows[:, :, 2:]  # the shape of image
    smoothed: np.ndarray = (total / np.float32(9.0)).astype(np.float32, copy=False)
    return smoothed


def matmul_side(*, device: torch.device | str, call_s: float) -> int:
    """The side (a multiple of 64 up to 8192) of a square float32 matmul that takes
    about ``call_s`` seconds on ``device``, its inputs, result and a host copy in
    its memory budget."""
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


@contextmanager
def spawn_safe() -> Iterator[None]:
    """Keep processes spawned inside the block (``iter(loader)`` with workers,
    ``Process.start()``) from re-running ``__main__``.

    A *spawned* child (DataLoader workers, DDP ranks; the default on Windows and
    macOS) imports what it runs by name and re-runs the parent's main script as
    ``__mp_main__``: a page without an ``if __name__ == "__main__":`` guard would
    start its workers again in every child. This hides ``__main__``'s ``__file__``
    and ``__spec__`` until the block ends; a child that needs a name defined in
    ``__main__`` then fails with an ``AttributeError``: move it to a module."""
    main = sys.modules.get("__main__")
    names = vars(main) if main is not None else {}
    saved: dict[str, object] = {
        k: names[k] for k in ("__file__", "__spec__") if k in names
    }
    names.pop("__file__", None)
    if "__spec__" in saved:
        names["__spec__"] = None
    try:
        yield
    finally:
        names.update(saved)
