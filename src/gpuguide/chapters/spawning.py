"""Start worker processes safely from scripts, notebooks and gallery pages.

A *spawned* child (DataLoader workers, DDP ranks; the default on Windows and
macOS) is a fresh interpreter that imports what it runs by name and re-runs the
parent's main script as ``__mp_main__``: a page without an ``if __name__ ==
"__main__":`` guard would start its workers again in every child.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["spawn_safe"]


@contextmanager
def spawn_safe() -> Iterator[None]:
    """Keep processes spawned inside the block (``iter(loader)`` with workers,
    ``Process.start()``) from re-running ``__main__``, by hiding its ``__file__``
    and ``__spec__`` until the block ends. A child that needs a name defined in
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
