"""Make the intersphinx inventories in docs/_inventories, which the docs build reads
from disk (it never fetches one): the examples' code and the API pages link
torch, numpy, matplotlib and Python names to their documentation through them.

torch, numpy and matplotlib publish no inventory in any package registry, so
theirs are DERIVED from their own documentation sources: every page listed in
PROJECTS is read, and its directives say which names have a page and where,
as Sphinx would place them:

- ``.. autosummary::`` with ``:toctree: DIR`` gives each entry its own page,
  ``DIR/<full name>.html`` next to the page that lists it (the anchor is the full
  name, or the name ``autosummary_filename_map`` in the project's ``conf.py`` gives
  it); an entry is looked up under the current module first, as autosummary does.
  A class page documents what its template's ``autoclass`` asks for: the
  template is found as Sphinx finds it (``:template: x.rst`` is
  ``_templates/x.rst``, ``:template: x`` is ``_templates/autosummary/x.rst``, no
  template is ``_templates/autosummary/class.rst``), read from the sources, and
  its ``:members:`` and ``:inherited-members:`` decide which members get anchors
  (PyTorch's ``_templates/classtemplate.rst``, used by nn.md, has no
  ``:inherited-members:``; its ``autosummary/class.rst`` has). A template that
  is not in the sources is Sphinx's own ``class.rst``, which documents no
  members;
- ``.. autofunction::``, ``.. autoclass::`` (and its ``:members:``), ``.. function::``,
  ``.. class::``, ``.. py:data::`` ... document a name on the page itself,
  ``<page>.html#<full name>`` (a Python-domain directive may name several, one a
  line, as numpy's ``.. attribute:: int8`` / ``int16`` ...);
- ``.. currentmodule::`` (or ``py:currentmodule``), ``.. module::``, ``.. py:module::``
  and ``.. automodule::`` set the module that undotted names belong to; the last
  three also give the module an anchor, ``<page>.html#module-<name>``; an
  ``automodule`` with ``:members:`` documents on the page the names it lists, else
  the module's ``__all__``, else its public classes and functions, and their
  members (as matplotlib's ``ticker_api.rst``).

In MyST pages (``.md``) the reST inside ```` ```{eval-rst} ```` fences and the
``{autosummary}``-style fences are read; a table row under a ``.. class::``
(the dtype tables of ``tensor_attributes.md``) that names instances of that
class (``torch.float32``) links them to the class's anchor, where the page
documents them. A name that the installed package does
not have is left out (the stable documentation is built from a release). Where a
class's members are documented is found by importing the class (public members
with their own docstring, or all of them with ``:undoc-members:``, or the ones
``:members:`` lists; inherited ones only with ``:inherited-members:``).

Python's inventory is the one its documentation publishes (Debian's
``python3.11-doc`` package ships it as ``/usr/share/doc/python3.11/html/objects.inv``),
cut down to the Python objects of the standard modules that the repository imports
and the built-ins.

Usage, from the repository root (see docs/_inventories/README.md)::

    python tools/make_inventories.py torch PYTORCH_CHECKOUT/docs/source
    python tools/make_inventories.py numpy NUMPY_CHECKOUT/doc/source
    python tools/make_inventories.py matplotlib MATPLOTLIB_CHECKOUT/doc
    python tools/make_inventories.py python /usr/share/doc/python3.11/html/objects.inv
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import posixpath
import re
import sys
import textwrap
import warnings
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "_inventories"


@dataclass(frozen=True)
class Project:
    """A project whose inventory is derived from its documentation sources."""

    title: str  # the project name written in the inventory
    package: str  # what is imported to find names and their kinds
    pages: tuple[str, ...]  # documentation pages read, relative to the source folder


#: The pages that document the torch API the guide and its helpers use.
TORCH_PAGES = (
    "torch.md", "tensors.md", "tensor_attributes.md", "type_info.md",
    "nn.md", "nn.functional.md", "cuda.md", "cuda.aliases.md", "cpu.md",
    "amp.md", "autograd.md", "checkpoint.md", "profiler.md", "optim.md",
    "data.md", "torch.compiler_api.md", "benchmark_utils.md", "backends.md",
)  # fmt: skip

PROJECTS = {
    "torch": Project("PyTorch", "torch", TORCH_PAGES),
    "numpy": Project(
        "NumPy",
        "numpy",
        (
            "reference/routines.array-creation.rst",
            "reference/routines.array-manipulation.rst",
            "reference/routines.math.rst",
            "reference/routines.statistics.rst",
            "reference/routines.padding.rst",
            "reference/routines.polynomials.poly1d.rst",
            "reference/arrays.ndarray.rst",
            "reference/arrays.scalars.rst",
            "reference/random/generator.rst",
        ),
    ),
    "matplotlib": Project(
        "Matplotlib",
        "matplotlib",
        (
            "api/pyplot_summary.rst",
            "api/axes_api.rst",
            "api/figure_api.rst",
            "api/axis_api.rst",
            "api/ticker_api.rst",
            "api/layout_engine_api.rst",
            "api/matplotlib_configuration_api.rst",
        ),
    ),
}

MODULE_DIRECTIVES = {
    "currentmodule", "py:currentmodule", "module", "py:module", "automodule",
}  # fmt: skip
PY_DOMAIN = {  # the Python domain's directives (also written with "py:") -> role
    "function": "py:function", "class": "py:class", "exception": "py:exception",
    "data": "py:data", "method": "py:method", "attribute": "py:attribute",
}  # fmt: skip
OWN_PAGE = {  # directive -> inventory role, for names documented on the page itself
    "autofunction": "py:function", "autoclass": "py:class",
    "autoexception": "py:exception", "autodata": "py:data",
    "automethod": "py:method", "autoattribute": "py:attribute",
    "autoproperty": "py:property",
    **PY_DOMAIN, **{f"py:{name}": role for name, role in PY_DOMAIN.items()},
}  # fmt: skip
CLASS_LEVEL = {"automethod", "autoattribute", "autoproperty"}
DIRECTIVE = re.compile(r"^(\s*)\.\. ([\w:-]+)::\s*(.*)$")
NAME = re.compile(r"^[A-Za-z_][\w.]*$")
OPTION = re.compile(r"^\s*:([\w-]+):\s*(.*)$")
FENCE = re.compile(r"^(`{3,}|:{3,})\{([\w:-]+)\}\s*(.*)$")
CODE = re.compile(r"`([A-Za-z_][\w.]*)`")


@dataclass(frozen=True)
class DocsConfig:
    """What a project's documentation sources say beyond its pages: its
    templates (path under the source folder -> text), its ``conf.py``'s
    ``autosummary_filename_map`` and the members ``autodoc_default_options``
    excludes."""

    templates: dict[str, str] = field(default_factory=dict)
    filename_map: dict[str, str] = field(default_factory=dict)
    exclude: frozenset[str] = frozenset()


def docs_config(source: Path) -> DocsConfig:
    """Read the templates in ``_templates`` and the literal settings of ``conf.py``."""
    templates = {
        path.relative_to(source / "_templates").as_posix(): path.read_text("utf-8")
        for path in sorted((source / "_templates").rglob("*.rst"))
    }
    settings: dict[str, Any] = {}
    conf = source / "conf.py"
    if conf.is_file():
        for node in ast.parse(conf.read_text("utf-8")).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                try:
                    settings[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    continue
    excluded = settings.get("autodoc_default_options", {}).get("exclude-members", "")
    return DocsConfig(
        templates,
        dict(settings.get("autosummary_filename_map", {})),
        frozenset(n.strip() for n in excluded.split(",") if n.strip()),
    )


def template_options(config: DocsConfig, template: str) -> dict[str, str]:
    """The ``autoclass`` options of the template a class's autosummary page is
    made from, found as Sphinx finds it; Sphinx's own ``class.rst`` (a
    template not in the sources) has none, so it documents no members."""
    if template.endswith(".rst"):
        name = template
    else:
        name = f"autosummary/{template or 'class'}.rst"
    for found, _, options, _ in directives(config.templates.get(name, "")):
        if found == "autoclass":
            return options
    return {}


def rest_of_text(page: str, text: str) -> str:
    """The reST of a page: the whole text, or a MyST page's reST fences and its
    directive fences rewritten as reST directives."""
    if not page.endswith(".md"):
        return text
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        i += 1
        if not m:
            continue
        fence, name, arg = m.groups()
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        if name == "eval-rst":
            out.extend(body)
        elif name in OWN_PAGE or name in MODULE_DIRECTIVES or name == "autosummary":
            out.append(f".. {name}:: {arg}")
            out.extend("    " + line for line in body)
        out.append("")
    return "\n".join(out)


def directives(text: str) -> Iterator[tuple[str, str, dict[str, str], list[str]]]:
    """Each directive of a reST text: (name, argument, options, content lines).

    A Python-domain directive may name several objects, one signature a line
    (``.. attribute:: int8`` then ``int16`` ... indented below it): its argument
    is then those lines, joined with newlines."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = DIRECTIVE.match(lines[i])
        i += 1
        if not m:
            continue
        indent, name, arg = len(m.group(1)), m.group(2), m.group(3).strip()
        block = []
        while i < len(lines) and (
            not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent
        ):
            block.append(lines[i])
            i += 1
        signatures = []
        if name in OWN_PAGE and not name.startswith("auto"):
            for line in block:
                if not line.strip() or OPTION.match(line):
                    break
                signatures.append(line.strip())
        block = block[len(signatures) :]
        arg = "\n".join([arg, *signatures])
        options: dict[str, str] = {}
        content: list[str] = []
        for line in block:
            o = OPTION.match(line)
            if o and not content:
                options[o.group(1)] = o.group(2).strip()
            elif line.strip():
                content.append(line.strip())
        yield name, arg, options, content
        # Nested directives (a class's methods) are read as directives too.
        yield from directives(textwrap.dedent("\n".join(block)))


def resolve(name: str) -> Any:
    """The object a dotted name refers to, or None."""
    with warnings.catch_warnings():  # deprecated aliases warn when looked up
        warnings.simplefilter("ignore")
        return _resolve(name)


def _resolve(name: str) -> Any:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:
            continue
        try:
            for i, part in enumerate(parts[cut:], cut):
                obj = getattr(obj, part)
                # a module another one imports (torch.nn.functional.torch) is
                # not where autodoc finds the name
                if inspect.ismodule(obj) and obj.__name__ != ".".join(parts[: i + 1]):
                    return None
        except Exception:
            return None
        return obj
    return None


_MISSING = object()


def role_of(obj: object, parent: object = None) -> str:
    """The inventory role of an object (``parent``: what it is an attribute of)."""
    if inspect.isclass(parent) and not inspect.isclass(obj):
        return "py:method" if callable(obj) else "py:attribute"
    if inspect.ismodule(obj):
        return "py:module"
    if inspect.isclass(obj):
        return "py:exception" if issubclass(obj, BaseException) else "py:class"
    return "py:function" if callable(obj) else "py:data"


def members(
    cls: type,
    inherited: bool,
    undoc: bool = False,
    chosen: str = "",
    exclude: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """Public members of a class that autodoc documents with ``:members:`` (those
    with a docstring of their own; all of them with ``:undoc-members:``; only
    ``chosen`` ones where ``:members:`` lists names), and their roles."""
    owners = [c for c in cls.__mro__ if c is not object] if inherited else [cls]
    # autodoc leaves out what exceptions inherit from Python's own, and the
    # name and value of an enumeration's members
    owners = [c for c in owners if not _builtin_exception(c)]
    enum_like = hasattr(cls, "__members__")
    listed = {n.strip() for n in chosen.split(",") if n.strip()}
    found: dict[str, str] = {}
    seen: set[str] = set()
    for owner in owners:
        for name, raw in vars(owner).items():
            if name in seen or (name not in listed if listed else name[0] == "_"):
                continue
            seen.add(name)  # the first class that defines it decides (autodoc
            # reads the member from the class, an undocumented override included)
            if name in exclude or (enum_like and name in {"name", "value"}):
                continue
            doc = getattr(raw, "__doc__", None)
            if isinstance(raw, (staticmethod, classmethod)):
                doc = raw.__func__.__doc__
            documented = doc and doc != type(raw).__doc__
            if documented and str(doc).startswith("Alias for field number"):
                documented = False  # a namedtuple's field: autodoc skips it
            if inspect.isclass(raw) or not (documented or undoc or listed):
                continue
            routine = inspect.isroutine(raw) or isinstance(
                raw, (staticmethod, classmethod)
            )
            found[name] = "py:method" if routine else "py:attribute"
    return found


def _builtin_exception(owner: type) -> bool:
    return issubclass(owner, BaseException) and owner.__module__ == "builtins"


def module_members(module: str, options: dict[str, str]) -> dict[str, object]:
    """What ``.. automodule:: module`` with ``:members:`` documents: the names its
    ``:members:`` lists, else those in the module's ``__all__``, else the public
    classes and functions defined in it (not imported), each with a docstring
    unless ``:undoc-members:``."""
    mod = resolve(module)
    listed = [n.strip() for n in options["members"].split(",") if n.strip()]
    if listed:
        names = listed
    elif isinstance(getattr(mod, "__all__", None), (list, tuple)):
        names = list(mod.__all__)
    else:
        names = [
            n for n, v in vars(mod).items()
            if n[0] != "_" and getattr(v, "__module__", None) == module
        ]  # fmt: skip
    exclude = {n.strip() for n in options.get("exclude-members", "").split(",")}
    found: dict[str, object] = {}
    for name in names:
        obj = getattr(mod, name, None)
        if obj is None or name in exclude or inspect.ismodule(obj):
            continue
        if listed or "undoc-members" in options or getattr(obj, "__doc__", None):
            found[name] = obj
    return found


def page_entries(
    page: str, text: str, config: DocsConfig | None = None
) -> dict[str, tuple[str, str]]:
    """{full name: (role, uri)} for what one documentation page documents."""
    config = config or DocsConfig()
    here = posixpath.dirname(page)
    doc = posixpath.splitext(page)[0] + ".html"
    module: str | None = None
    found: dict[str, tuple[str, str]] = {}

    def add(full: str, role: str, uri: str) -> None:
        found.setdefault(full, (role, uri))

    def own_entry(name: str, target: str, options: dict[str, str]) -> None:
        """A name that a directive documents on the page itself."""
        if name.startswith("auto"):
            # autodoc: a dotted module-level name is absolute; a class-level
            # one is Class.member under the current module.
            dotted = target.count(".") >= (2 if name in CLASS_LEVEL else 1)
            full = target if dotted or not module else f"{module}.{target}"
            obj = resolve(full)
            if obj is None:
                return
            role = OWN_PAGE[name] if name in CLASS_LEVEL else role_of(obj)
        else:
            # The Python domain always puts the current module in front.
            full = f"{module}.{target}" if module else target
            obj, role = None, OWN_PAGE[name]
        add(full, role, f"{doc}#{full}")
        if inspect.isclass(obj) and "members" in options:
            inherit = "inherited-members" in options
            undoc = "undoc-members" in options
            skip = {n.strip() for n in options.get("exclude-members", "").split(",")}
            chosen = members(obj, inherit, undoc, options["members"], config.exclude)
            for member, role in chosen.items():
                if member not in skip:
                    add(f"{full}.{member}", role, f"{doc}#{full}.{member}")

    for name, arg, options, content in directives(text):
        if name in MODULE_DIRECTIVES:
            module = None if arg == "None" else arg
            if not name.endswith("currentmodule") and "noindex" not in options:
                add(arg, "py:module", f"{doc}#module-{arg}")
            if name == "automodule" and "members" in options:
                # autodoc hands the module's options down to its classes.
                undoc = "undoc-members" in options
                inherit = "inherited-members" in options
                for member, obj in module_members(arg, options).items():
                    qual = f"{arg}.{member}"
                    add(qual, role_of(obj), f"{doc}#{qual}")
                    if inspect.isclass(obj):
                        for m, role in members(obj, inherit, undoc).items():
                            add(f"{qual}.{m}", role, f"{doc}#{qual}.{m}")
        elif name == "autosummary" and "toctree" in options:
            folder = posixpath.normpath(posixpath.join(here, options["toctree"]))
            for entry in content:
                entry = entry.lstrip("~").split("(")[0].strip()
                tries = ([f"{module}.{entry}"] if module else []) + [entry]
                full = next((t for t in tries if resolve(t) is not None), None)
                if full is None:
                    continue
                obj = resolve(full)
                uri = f"{folder}/{config.filename_map.get(full, full)}.html"
                add(
                    full,
                    role_of(obj, resolve(full.rpartition(".")[0])),
                    f"{uri}#{full}",
                )
                if not inspect.isclass(obj):
                    continue
                documented = template_options(config, options.get("template", ""))
                if "members" in documented:
                    inherit = "inherited-members" in documented
                    chosen = members(obj, inherit, exclude=config.exclude)
                    for member, role in chosen.items():
                        add(f"{full}.{member}", role, f"{uri}#{full}.{member}")
        elif name in OWN_PAGE:
            for target in arg.splitlines():
                target = target.split("(")[0].strip()
                if NAME.match(target):
                    own_entry(name, target, options)
    return found


def class_values(page: str, text: str) -> dict[str, tuple[str, str]]:
    """Values a MyST page lists in a table under the ``.. class::`` that they are
    instances of (``tensor_attributes.md``: ``torch.float32`` under
    ``torch.dtype``), each linked to that class's anchor."""
    if not page.endswith(".md"):
        return {}
    doc = posixpath.splitext(page)[0] + ".html"
    module, owner = None, None
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        m = DIRECTIVE.match(line)
        if m and m.group(2) in MODULE_DIRECTIVES:
            module = m.group(3).strip()
        elif m and m.group(2) in {"class", "py:class"}:
            name = m.group(3).split("(")[0].strip()
            owner = name if "." in name or not module else f"{module}.{name}"
        elif line.startswith("#"):
            owner = None  # a new section
        elif owner and line.startswith("|"):
            cls = resolve(owner)
            for name in CODE.findall(line.split("|")[1]):
                if inspect.isclass(cls) and isinstance(resolve(name), cls):
                    found.setdefault(name, ("py:data", f"{doc}#{owner}"))
    return found


def write_inventory(
    path: Path, project: str, version: str, entries: dict[str, tuple[str, str]]
) -> None:
    """Write a Sphinx inventory (format 2), sorted, so that it regenerates the same."""
    header = (
        "# Sphinx inventory version 2\n"
        f"# Project: {project}\n# Version: {version}\n"
        "# The remainder of this file is compressed using zlib.\n"
    )
    lines = []
    for name, (role, uri) in sorted(entries.items(), key=lambda kv: (kv[0], kv[1][0])):
        if uri.endswith("#" + name):
            uri = uri[: -len(name)] + "$"
        lines.append(f"{name} {role} 1 {uri} -\n")
    body = zlib.compress("".join(lines).encode(), 9)
    path.write_bytes(header.encode() + body)


def derive(key: str, source: Path) -> dict[str, tuple[str, str]]:
    config = docs_config(source)
    entries: dict[str, tuple[str, str]] = {}
    for page in PROJECTS[key].pages:
        text = (source / page).read_text("utf-8")
        found = page_entries(page, rest_of_text(page, text), config)
        for name, value in [*found.items(), *class_values(page, text).items()]:
            entries.setdefault(name, value)
    return entries


def imported_modules() -> set[str]:
    """Top-level modules that the examples, helpers and build extensions import."""
    names: set[str] = set()
    for folder in ("examples", "src", "docs/_ext"):
        for path in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif (
                    isinstance(node, ast.ImportFrom) and node.module and not node.level
                ):
                    names.add(node.module.split(".")[0])
    return names


def python_subset(published: Path) -> tuple[str, dict[str, tuple[str, str]]]:
    """Python's published inventory, cut down to the Python objects of the standard
    modules the repository imports and the built-ins."""
    from sphinx.util.inventory import InventoryFile

    with published.open("rb") as f:
        inventory = InventoryFile.load(f, "", posixpath.join)
    keep = imported_modules() & set(sys.stdlib_module_names)
    entries: dict[str, tuple[str, str]] = {}
    version = ""
    for role, items in inventory.items():
        if not role.startswith("py:"):
            continue
        for name, item in items.items():
            version = str(getattr(item, "project_version", None) or item[1])
            uri = str(getattr(item, "uri", None) or item[2])
            top = name.split(".")[0]
            builtin = "." not in name or top in {
                "int",
                "float",
                "str",
                "dict",
                "list",
                "tuple",
                "set",
                "bytes",
                "object",
            }
            if top in keep or builtin:
                entries[name] = (role, uri)
    return version, entries


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("project", choices=[*PROJECTS, "python"])
    parser.add_argument(
        "source", type=Path, help="documentation sources, or objects.inv"
    )
    parser.add_argument("-o", "--output", type=Path, help="default: docs/_inventories/")
    args = parser.parse_args(argv)
    out = args.output or OUT / f"{args.project}.inv"
    if args.project == "python":
        version, entries = python_subset(args.source)
        title = "Python"
    else:
        entries = derive(args.project, args.source)
        package = importlib.import_module(PROJECTS[args.project].package)
        version = ".".join(package.__version__.split("+")[0].split(".")[:2])
        title = PROJECTS[args.project].title
    write_inventory(out, title, version, entries)
    print(f"{out}: {len(entries)} names")


if __name__ == "__main__":
    main()
