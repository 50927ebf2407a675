"""Start worker processes safely from scripts, notebooks and gallery pages.

DataLoader workers and distributed training ranks are often *spawned*: each is
a fresh Python interpreter (the only start method on Windows, the default on
macOS, and the safe one wherever the parent already runs threads, as torch
does). A spawned child rebuilds its task by unpickling it, so every function
and class it receives must be importable by name, from a module, not defined
in the parent's ``__main__``.

Before unpickling, the child also re-runs the parent's main script (as a
module called ``__mp_main__``) so that ``__main__``'s names exist. A script
without an ``if __name__ == "__main__":`` guard would then run from the top in
every child, and start its workers again. A gallery page or a notebook has no
such guard to give; :func:`spawn_safe` keeps the children from re-running it,
which is safe when, as in this guide, everything the children run comes from
an importable module.

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

_MISSING = object()


@contextmanager
def spawn_safe() -> Iterator[None]:
    """Keep processes spawned inside the block from re-running ``__main__``.

    While the block runs, the ``__main__`` module's ``__file__`` and
    ``__spec__`` are hidden, so that :mod:`multiprocessing` (and everything
    built on it: DataLoader workers, ``torch.multiprocessing``) does not tell
    its spawned children to re-run the main script. Both are restored when the
    block ends, also after an exception.

    Where ``__main__`` has no file (an interactive session, a notebook, a
    sphinx-gallery page, whose ``__main__`` is a stand-in module), this changes
    nothing.

    Notes
    -----
    Processes are started where the work begins: by ``iter(loader)`` for a
    DataLoader with ``num_workers > 0`` (and only the first time with
    ``persistent_workers=True``), by ``Process.start()`` for a process. Wrap
    those calls. A child that needs a name defined in ``__main__`` fails
    inside the block with an ``AttributeError`` that names it: move that name
    into a module.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved_file = main.__dict__.pop("__file__", _MISSING)
    saved_spec = main.__dict__.get("__spec__", _MISSING)
    if saved_spec is not _MISSING:
        main.__spec__ = None
    try:
        yield
    finally:
        if saved_file is not _MISSING:
            main.__file__ = saved_file
        if saved_spec is not _MISSING:
            main.__spec__ = saved_spec
