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

The names that an example's code links are those sphinx-gallery records in each
example's ``.codeobj.json``: for every name, the objects it may be, in the
order they are tried. Two kinds of candidate are corrected before the pages are
read (``name_what_it_is``): a variable holding a built-in value (``n = 4`` links
``n`` to ``int``) is not linked to the built-in's documentation, and a name that
is documented itself (``torch.float32``) links to its own entry before the
type of its value (``torch.dtype``).
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


def what_it_is(name: str, candidates: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The candidates for a name in an example's code, in the order to try them:
    those that are the name itself first (their last part is the name's), then
    the type of its value, except a built-in type (a variable is not ``int``)."""
    last = name.rpartition(".")[2]
    own = [c for c in candidates if c["name"].rpartition(".")[2] == last]
    typed = [
        c
        for c in candidates
        if c not in own and not (c["module"] == "builtins" and not c["is_class"])
    ]
    return own + typed


def name_what_it_is(app: Sphinx, env: Any, docnames: list[str]) -> None:
    """Rewrite the examples' ``.codeobj.json`` (written when the gallery is
    generated, read when the pages are written) with ``what_it_is``."""
    folders = app.config.sphinx_gallery_conf.get("gallery_dirs", [])
    for folder in [folders] if isinstance(folders, str) else folders:
        for path in sorted((Path(app.srcdir) / folder).rglob("*.codeobj.json")):
            names = json.loads(path.read_text(encoding="utf-8"))
            fixed = {n: what_it_is(n, c) for n, c in names.items()}
            fixed = {n: c for n, c in fixed.items() if c}
            if fixed != names:
                path.write_text(json.dumps(fixed, sort_keys=True), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("autodoc-process-docstring", add_examples)
    app.connect("env-before-read-docs", name_what_it_is)
    app.connect("env-updated", alias_exports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
