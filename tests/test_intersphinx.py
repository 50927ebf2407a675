"""Names in the examples' code link to their documentation: intersphinx with the
inventories in docs/_inventories, which tools/make_inventories.py derives from the
projects' documentation sources; and the API pages list the examples using a helper."""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, build_mini_site
from sphinx.util.inventory import InventoryFile

TORCH_DOCS = "https://docs.pytorch.org/docs/stable/"

#: Names the pages use, and their own pages in PyTorch's documentation.
TORCH_PAGES = {
    "torch.compile": "generated/torch.compile.html#torch.compile",
    "torch.nn.functional.scaled_dot_product_attention": (
        "generated/torch.nn.functional.scaled_dot_product_attention.html"
        "#torch.nn.functional.scaled_dot_product_attention"
    ),
    "torch.cuda.Event": "generated/torch.cuda.Event.html#torch.cuda.Event",
    "torch.profiler.profile": "profiler.html#torch.profiler.profile",
    "torch.autocast": "amp.html#torch.autocast",
}

#: numpy and matplotlib names the pages use (a method of the Axes that
#: ``plt.subplots`` returns: sphinx-gallery finds its type after the run), and
#: their own pages in numpy's and matplotlib's documentation.
OTHER_PAGES = {
    "numpy.random.default_rng": (
        "https://numpy.org/doc/stable/reference/random/generator.html"
        "#numpy.random.default_rng"
    ),
    "matplotlib.axes.Axes.set_xlabel": (
        "https://matplotlib.org/stable/api/_as_gen/matplotlib.axes.Axes.set_xlabel.html"
        "#matplotlib.axes.Axes.set_xlabel"
    ),
    "matplotlib.ticker.MaxNLocator": (
        "https://matplotlib.org/stable/api/ticker_api.html"
        "#matplotlib.ticker.MaxNLocator"
    ),
}

EXAMPLE = '''"""
Linked names
============

A page whose code uses torch, numpy and matplotlib names that link to their
documentation.
"""

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.ticker import MaxNLocator

q = torch.randn(1, 2, 8, 4)
out = F.scaled_dot_product_attention(q, q, q)
sine = torch.compile(torch.sin, backend="eager")
with torch.autocast("cpu", dtype=torch.bfloat16):
    y = q @ q.transpose(-1, -2)
with torch.profiler.profile() as prof:
    torch.sin(q)
averages = prof.key_averages()
table = averages.table(row_limit=1)
n = 4
half = torch.zeros(n, dtype=torch.float16)
wide = half.to(torch.float32)
if torch.cuda.is_available():
    start = torch.cuda.Event(enable_timing=True)
    torch.backends.cuda.matmul.allow_tf32 = True
noise = np.random.default_rng(0).standard_normal(4)
fig, ax = plt.subplots()
ax.set_xlabel("step")
ax.xaxis.set_major_locator(MaxNLocator(integer=True))
plt.close(fig)
'''

LINK = re.compile(r'<a [^>]*href="([^"]+)" title="([^"]+)"')


def links(html: str) -> dict[str, set[str]]:
    """{title: hrefs} of the links in a page."""
    found: dict[str, set[str]] = {}
    for href, title in LINK.findall(html):
        found.setdefault(title, set()).add(href)
    return found


def load_tool():
    spec = importlib.util.spec_from_file_location(
        "make_inventories", ROOT / "tools" / "make_inventories.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def inventory(path: Path, base: str = "") -> dict[str, tuple[str, str]]:
    with path.open("rb") as f:
        loaded = InventoryFile.load(f, base, posixpath.join)
    return {
        name: (role, getattr(item, "uri", None) or item[2])
        for role, items in loaded.items()
        for name, item in items.items()
    }


@pytest.fixture(scope="module")
def linked_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("linked")
    built = build_mini_site(root, EXAMPLE)
    assert built.returncode == 0, built.stderr
    return (root / "html" / "auto_examples" / "01_only" / "plot_only.html").read_text()


@pytest.mark.parametrize("name", sorted(TORCH_PAGES))
def test_torch_names_link_to_their_own_pages(linked_page: str, name: str) -> None:
    assert links(linked_page).get(name) == {TORCH_DOCS + TORCH_PAGES[name]}


#: Names that link to where their page documents them (the dtypes are listed in
#: the table of ``torch.dtype``), on a built page and in the inventory.
LINKED = {
    "torch.float32": "tensor_attributes.html#torch.dtype",
    "torch.float16": "tensor_attributes.html#torch.dtype",
    "torch.backends.cuda.matmul.allow_tf32": (
        "backends.html#torch.backends.cuda.matmul.allow_tf32"
    ),
    "torch.profiler.profile.key_averages": (
        "profiler.html#torch.profiler.profile.key_averages"
    ),
    "torch.autograd.profiler_util.EventList.table": (
        "generated/torch.autograd.profiler_util.EventList.html"
        "#torch.autograd.profiler_util.EventList.table"
    ),
}


@pytest.mark.parametrize("name", sorted(LINKED))
def test_dtypes_settings_and_profiler_results_link(linked_page: str, name: str) -> None:
    assert links(linked_page).get(name) == {TORCH_DOCS + LINKED[name]}


def test_variables_do_not_link_to_builtin_types(linked_page: str) -> None:
    """``n = 4``: ``n`` is not a link to ``int`` (a name sphinx-gallery types by
    its value, a built-in one, is left plain)."""
    assert '<span class="n">n</span>' in linked_page
    assert "sphx-glr-backref-module-builtins" not in linked_page
    assert "int" not in links(linked_page)


def test_committed_torch_inventory_links_dtypes_settings_and_results() -> None:
    torch_inv = inventory(ROOT / "docs" / "_inventories" / "torch.inv")
    for name, page in LINKED.items():
        assert torch_inv[name][1] == page
    assert torch_inv["torch.bfloat16"][1] == "tensor_attributes.html#torch.dtype"


@pytest.mark.parametrize("name", sorted(OTHER_PAGES))
def test_numpy_and_matplotlib_names_link_to_their_own_pages(
    linked_page: str, name: str
) -> None:
    assert links(linked_page).get(name) == {OTHER_PAGES[name]}


def test_the_build_reads_the_inventories_from_the_repository() -> None:
    """Offline: every inventory is a file in docs/_inventories, never a URL."""
    conf: dict = {"__file__": str(ROOT / "docs" / "conf.py")}
    exec(
        compile((ROOT / "docs" / "conf.py").read_text(), conf["__file__"], "exec"), conf
    )
    mapping = conf["intersphinx_mapping"]
    assert set(mapping) == {"python", "numpy", "matplotlib", "torch"}
    for url, location in mapping.values():
        assert url.startswith("https://")
        assert Path(location).parent == ROOT / "docs" / "_inventories"
        assert inventory(Path(location))  # a valid inventory with names in it


def test_committed_torch_inventory_has_the_pages_names() -> None:
    torch_inv = inventory(ROOT / "docs" / "_inventories" / "torch.inv")
    for name, page in TORCH_PAGES.items():
        assert torch_inv[name][1] == page


@pytest.mark.parametrize(
    ("project", "base"),
    [("numpy", "https://numpy.org/doc/stable/"),
     ("matplotlib", "https://matplotlib.org/stable/")],
)  # fmt: skip
def test_committed_numpy_and_matplotlib_inventories_have_the_pages_names(
    project: str, base: str
) -> None:
    names = inventory(ROOT / "docs" / "_inventories" / f"{project}.inv")
    for name, url in OTHER_PAGES.items():
        if name.startswith(project + "."):
            assert base + names[name][1] == url


def test_the_tool_places_names_as_sphinx_does() -> None:
    tool = load_tool()
    text = tool.rest_of_text(
        "cuda.md",
        "# torch.cuda\n\n```{eval-rst}\n.. currentmodule:: torch.cuda\n```\n\n"
        "```{eval-rst}\n.. autosummary::\n    :toctree: generated\n    :nosignatures:\n\n"
        "    Event\n    synchronize\n    not_a_torch_name\n```\n\n"
        "Prose with .. autoclass:: torch.Tensor outside a fence is not read.\n\n"
        "```{eval-rst}\n.. currentmodule:: torch.cuda.nccl\n\n.. autofunction:: version\n\n"
        ".. autoclass:: torch.autocast\n    :members:\n```\n",
    )
    found = tool.page_entries("sub/cuda.md", text)
    assert found["torch.cuda.Event"] == (
        "py:class", "sub/generated/torch.cuda.Event.html#torch.cuda.Event",
    )  # fmt: skip
    assert found["torch.cuda.synchronize"][1].endswith(
        "torch.cuda.synchronize.html#torch.cuda.synchronize"
    )
    assert found["torch.cuda.nccl.version"] == (
        "py:function", "sub/cuda.html#torch.cuda.nccl.version",
    )  # fmt: skip
    assert found["torch.autocast"][1] == "sub/cuda.html#torch.autocast"
    assert "torch.cuda.not_a_torch_name" not in found
    assert "torch.Tensor" not in found


def test_the_tool_reads_module_members_and_several_signatures() -> None:
    """``automodule`` with ``:members:`` documents the module's ``__all__`` (and
    their members) on the page; ``py:``-prefixed directives and a directive
    naming several objects, one a line, are read; ``:members:`` with a list
    documents only those."""
    tool = load_tool()
    text = (
        ".. automodule:: matplotlib.ticker\n   :members:\n   :undoc-members:\n\n"
        ".. py:currentmodule:: numpy\n\n"
        ".. attribute:: uint8\n               uint16\n\n   Aliases.\n\n"
        ".. py:data:: float32\n\n"
        ".. autoclass:: numpy.generic\n   :members: __init__\n"
        "   :exclude-members: __init__\n"
    )
    found = tool.page_entries("api/page.rst", text)
    assert found["matplotlib.ticker.MaxNLocator"] == (
        "py:class", "api/page.html#matplotlib.ticker.MaxNLocator",
    )  # fmt: skip
    assert found["matplotlib.ticker.MaxNLocator.tick_values"][1] == (
        "api/page.html#matplotlib.ticker.MaxNLocator.tick_values"
    )
    assert "matplotlib.ticker.np" not in found  # imported, not in __all__
    assert found["numpy.uint8"] == ("py:attribute", "api/page.html#numpy.uint8")
    assert found["numpy.uint16"] == ("py:attribute", "api/page.html#numpy.uint16")
    assert found["numpy.float32"] == ("py:data", "api/page.html#numpy.float32")
    assert found["numpy.generic"][0] == "py:class"
    assert not [name for name in found if name.startswith("numpy.generic.")]


#: An extract of PyTorch's documentation sources (tests/data/pytorch_docs/README.md).
PYTORCH_DOCS = ROOT / "tests" / "data" / "pytorch_docs"
SAMPLE_PAGES = sorted(
    p.name for p in PYTORCH_DOCS.glob("*.md") if p.name != "README.md"
)

#: Builds the extract as PyTorch's conf.py does (autodoc, autosummary, its
#: templates and settings) and writes the Python objects' anchors to a file.
SPHINX_CONF = """
import ast, json, os
SRC = os.environ["PYTORCH_DOCS"]
extensions = ["sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon",
              "myst_parser"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
templates_path = [os.path.join(SRC, "_templates")]
exclude_patterns = ["_templates", "README.md"]
autosummary_generate = True
root_doc = "nn"
suppress_warnings = ["*"]
for node in ast.parse(open(os.path.join(SRC, "conf.py")).read()).body:
    globals()[node.targets[0].id] = ast.literal_eval(node.value)

def dump(app, exc):
    objects = app.env.get_domain("py").objects
    anchors = sorted({(o.docname, o.node_id) for o in objects.values()})
    with open(os.environ["ANCHORS"], "w") as f:
        json.dump(anchors, f)

def setup(app):
    app.connect("build-finished", dump)
"""


@pytest.fixture(scope="module")
def sphinx_anchors(tmp_path_factory: pytest.TempPathFactory) -> set[tuple[str, str]]:
    """(page, anchor) of every Python object Sphinx documents in the extract."""
    root = tmp_path_factory.mktemp("pytorch_docs")
    source, conf, out = root / "source", root / "conf", root / "anchors.json"
    shutil.copytree(PYTORCH_DOCS, source)
    conf.mkdir()
    (conf / "conf.py").write_text(SPHINX_CONF)
    env = {"PYTORCH_DOCS": str(source), "ANCHORS": str(out)}
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "dummy", "-q", "-c", str(conf),
         str(source), str(root / "build")],
        capture_output=True, text=True, check=False, env={**os.environ, **env},
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    return {(page, anchor) for page, anchor in json.loads(out.read_text())}


def sample_entries() -> dict[str, tuple[str, str]]:
    """What the tool derives from the extract."""
    tool = load_tool()
    config = tool.docs_config(PYTORCH_DOCS)
    found: dict[str, tuple[str, str]] = {}
    for page in SAMPLE_PAGES:
        text = (PYTORCH_DOCS / page).read_text()
        found.update(tool.page_entries(page, tool.rest_of_text(page, text), config))
        found.update(tool.class_values(page, text))
    return found


def anchor_of(uri: str) -> tuple[str, str]:
    page, _, anchor = uri.partition("#")
    return page.removesuffix(".html"), anchor


def test_the_tool_places_names_where_sphinx_writes_their_anchors(
    sphinx_anchors: set[tuple[str, str]],
) -> None:
    """Every name the tool derives from the extract points at an anchor that
    Sphinx writes on that page: a class page made from ``classtemplate.rst``
    documents its own members, one from ``autosummary/class.rst`` its inherited
    ones too."""
    found = sample_entries()
    missing = {
        n: u for n, (_, u) in found.items() if anchor_of(u) not in sphinx_anchors
    }
    assert not missing
    assert "torch.nn.Linear.forward" in found
    assert "torch.nn.Module.to" in found
    assert "torch.nn.Linear.to" not in found  # inherited: not on Linear's page
    assert "torch.autograd.profiler_util.EventList.table" in found
    assert "torch.autograd.profiler_util.EventList.append" in found  # from list
    assert found["torch.cuda.Stream"][1].startswith("generated/torch.cuda.Stream_class")
    assert "torch.float64" not in found


def test_committed_torch_anchors_exist_on_the_sampled_pages(
    sphinx_anchors: set[tuple[str, str]],
) -> None:
    """The committed inventory's names from the extract are the tool's, and every
    committed anchor on the generated pages sampled (whole pages: autosummary
    makes them from the template alone) is one Sphinx writes; an inherited member
    on a class page that does not document it (``torch.nn.Linear.to``) fails."""
    committed = inventory(ROOT / "docs" / "_inventories" / "torch.inv")
    found = sample_entries()
    for name, (_, uri) in found.items():
        assert committed[name][1] == uri
    sampled = {anchor_of(u)[0] for _, u in found.values() if u.startswith("generated/")}
    on_them = {n: u for n, (_, u) in committed.items() if anchor_of(u)[0] in sampled}
    assert len(on_them) > 50
    missing = {n: u for n, u in on_them.items() if anchor_of(u) not in sphinx_anchors}
    assert not missing


def test_written_inventory_reads_back(tmp_path: Path) -> None:
    tool = load_tool()
    entries = {
        "torch.compile": ("py:function", "generated/torch.compile.html#torch.compile"),
        "torch.cuda": ("py:module", "cuda.html#module-torch.cuda"),
    }
    tool.write_inventory(tmp_path / "t.inv", "PyTorch", "2.13", entries)
    assert inventory(tmp_path / "t.inv") == entries


def test_api_page_lists_the_examples_using_a_helper(tmp_path: Path) -> None:
    """A helper an example uses gets a mini-gallery on its API entry; one no example
    uses gets none."""
    code = (
        EXAMPLE + "\nimport gpuguide\n\nm = gpuguide.benchmark(torch.sin, args=(q,))\n"
    )
    assert build_mini_site(tmp_path, code).returncode == 0
    docs = tmp_path / "docs"
    (docs / "api.rst").write_text(
        "API\n===\n\n.. automodule:: gpuguide.timing\n   :members: benchmark, gpu_hold\n"
    )
    (docs / "index.rst").write_text(
        "Mini\n====\n\n.. toctree::\n\n   auto_examples/index\n   api\n"
    )
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "-q", str(docs),
         str(tmp_path / "html")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    api = (tmp_path / "html" / "api.html").read_text()
    benchmark, gpu_hold = api.split('id="gpuguide.timing.gpu_hold"')
    assert "Examples using it" in benchmark
    assert 'href="auto_examples/01_only/plot_only.html"' in benchmark
    assert "Examples using it" not in gpu_hold
    # and the example's call links to the helper's entry, by its exported name
    page = (
        tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    ).read_text()
    link = re.search(r'<a [^>]*href="([^"]*)" title="gpuguide.benchmark"', page)
    assert link, "gpuguide.benchmark is not a link"
    assert link[1] == "../../api.html#gpuguide.timing.benchmark"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the whole site is built once, shared
def test_built_example_pages_link_torch_compile(site) -> None:
    out, _ = site
    pages = [p.read_text() for p in (out / "auto_examples").glob("*/plot_*.html")]
    compiled = [links(p).get("torch.compile") for p in pages if "torch.compile" in p]
    assert any(compiled)
    assert all(h == {TORCH_DOCS + TORCH_PAGES["torch.compile"]} for h in compiled if h)


def test_tool_runs_from_the_command_line(tmp_path: Path) -> None:
    source = tmp_path / "docs"
    source.mkdir()
    for page in load_tool().PROJECTS["torch"].pages:
        (source / page).write_text("```{eval-rst}\n.. currentmodule:: torch\n```\n")
    (source / "torch.md").write_text(
        "```{eval-rst}\n.. currentmodule:: torch\n.. autosummary::\n"
        "    :toctree: generated\n\n    compile\n```\n"
    )
    out = tmp_path / "torch.inv"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "make_inventories.py"), "torch", str(source),
         "-o", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert inventory(out) == {
        "torch.compile": ("py:function", "generated/torch.compile.html#torch.compile")
    }
