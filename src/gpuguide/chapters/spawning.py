"""Start worker processes safely from scripts, notebooks and gallery pages.

A *spawned* child (DataLoader workers, DDP ranks: the only start method on
Windows, the default on macOS, the safe one once threads run) is a fresh
interpreter that unpickles its task, so what it runs must be importable by name
from a module. It also re-runs the parent's main script as ``__mp_main__``: a
page without an ``if __name__ == "__main__":`` guard would start its workers
again in every child. :func:`spawn_safe` keeps the children from re-running it.

Examples
--------
>>> import multiprocessing
>>> from gpuguide.chapters.spawning import spawn_safe
>>> ctx = multiprocessing.get_context("spawn")
>>> with spawn_safe():  # doctest: +SKIP
...     p = ctx.Process(target=print, args=("hello from a child",))
...     p.start()
>>> p.join()  # doctest: +SKIP
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["spawn_safe"]


@contextmanager
def spawn_safe() -> Iterator[None]:
    """Keep processes spawned inside the block from re-running ``__main__``.

    Hides ``__main__.__file__`` and ``__spec__`` while the block runs, so that
    :mod:`multiprocessing` (and DataLoader workers, ``torch.multiprocessing``)
    does not tell its children to re-run the main script; restores them after,
    also after an exception. Without a main file (a notebook, a gallery page)
    nothing changes. Wrap where processes start: ``iter(loader)`` with
    ``num_workers > 0``, ``Process.start()``. A child that needs a name defined
    in ``__main__`` fails with an ``AttributeError`` naming it: move it to a module.
    """
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
