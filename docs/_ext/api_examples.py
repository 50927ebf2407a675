"""Each helper's entry on the API pages lists the examples that use it.

sphinx-gallery records, for every example, the ``gpuguide`` names its code uses
(``doc_module``, ``backreferences_dir``) in ``backreferences_all.json`` before any
page is read; this extension appends a ``minigallery`` of those examples to the
docstring of each documented function and class that an example uses. A page
names a helper by where ``import gpuguide`` exports it (``gpuguide.benchmark``),
while autodoc names it by its module (``gpuguide.timing.benchmark``): both are
looked up. The same short names are also made link targets (``alias_exports``),
so that ``gpuguide.benchmark`` in an example's code links to the entry of
``gpuguide.timing.benchmark``.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

#: The packages whose exports are the short names that pages use.
EXPORTERS = ("gpuguide", "gpuguide.chapters")


def names_of(name: str, obj: Any) -> list[str]:
    """The documented name and the shorter names that export the same object."""
    names = [name]
    short = getattr(obj, "__name__", None)
    for package in EXPORTERS:
        try:
            exported = getattr(importlib.import_module(package), short or "", None)
        except ImportError:
            continue
        if short and exported is obj and f"{package}.{short}" not in names:
            names.append(f"{package}.{short}")
    return names


_READ: dict[tuple[Path, float], dict[str, Any]] = {}


def used_by_examples(app: Sphinx) -> dict[str, Any]:
    """sphinx-gallery's record: {name: the examples that use it}."""
    folder = app.config.sphinx_gallery_conf.get("backreferences_dir")
    path = Path(app.srcdir) / (folder or "") / "backreferences_all.json"
    if not folder or not path.is_file():
        return {}
    key = (path, path.stat().st_mtime)
    if key not in _READ:
        _READ.clear()
        _READ[key] = json.loads(path.read_text(encoding="utf-8"))
    return _READ[key]


def add_examples(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    if what not in {"function", "class"} or not name.startswith("gpuguide"):
        return
    used = used_by_examples(app)
    names = [n for n in names_of(name, obj) if used.get(n)]
    if names:
        lines.extend(["", ".. rubric:: Examples using it", ""])
        lines.append(".. minigallery:: " + " ".join(names))
        lines.append("")


def alias_exports(app: Sphinx, env: Any) -> None:
    """Make each exported short name (``gpuguide.benchmark``) a Python-domain
    target of the entry autodoc wrote for its module's name."""
    objects = env.get_domain("py").objects
    for package in EXPORTERS:
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        for short in getattr(module, "__all__", ()):
            obj = getattr(module, short, None)
            owner = getattr(obj, "__module__", None)
            entry = owner and objects.get(f"{owner}.{short}")
            alias = f"{package}.{short}"
            if entry and alias not in objects:
                objects[alias] = entry._replace(aliased=True)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", add_examples)
    app.connect("env-updated", alias_exports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
