"""Sphinx configuration for gpuguide.

Every example under ``examples/`` is executed by sphinx-gallery during the
build; its printed output and figures are embedded in its page.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if (ROOT / "src" / "gpuguide").is_dir():
    # Import the helpers from this checkout even when they are not installed.
    sys.path.insert(0, str(ROOT / "src"))
# The build's own hooks (docs/_ext), which sphinx-gallery finds by name.
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))

import gpuguide
from gallery_hooks import connect_fingerprint, copy_artifacts, quiet_build_log

# Files that examples write for download (traces, snapshots) go to _build/artifacts
# and are copied to <html>/_artifacts when the build ends; pages link to them from
# auto_examples/<chapter>/<page>.html, hence the "../../".
ARTIFACTS = Path(__file__).resolve().parent / "_build" / "artifacts"
os.environ["GPUGUIDE_ARTIFACT_DIR"] = str(ARTIFACTS)
os.environ["GPUGUIDE_ARTIFACT_URL"] = "../../_artifacts/"

project = "gpuguide"
author = "the gpuguide authors"
copyright = f"2026, {author}"
release = version = gpuguide.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "myst_parser",
    "sphinx_copybutton",
    "sphinx_gallery.gen_gallery",
    "results_page",  # docs/_ext: recorded results, validated when the build starts
    "claims_page",  # docs/_ext: every page's checked claims, on a page and per page
    "site_wheel",  # docs/_ext: the helpers' wheel on the site, its install command
    "landing",  # docs/_ext: banner and chapter cards; actions and provenance on top
    "record_build",  # docs/_ext: --record writes this device's results file
    "api_examples",  # docs/_ext: each helper's API entry lists the examples using it
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_inventories", "**.ipynb_checkpoints", "README.md"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence", "deflist"]

# torch, numpy, matplotlib and Python names, in the examples' code and on the API
# pages, link to their documentation through inventories kept in the repository
# (docs/_inventories, made by tools/make_inventories.py): the build reads them from
# disk and never fetches one.
INVENTORIES = Path(__file__).resolve().parent / "_inventories"
intersphinx_mapping = {
    name: (url, str(INVENTORIES / f"{name}.inv"))
    for name, url in {
        "python": "https://docs.python.org/3/",
        "numpy": "https://numpy.org/doc/stable/",
        "matplotlib": "https://matplotlib.org/stable/",
        "torch": "https://docs.pytorch.org/docs/stable/",
    }.items()
}

autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = False
napoleon_use_rtype = False

html_theme = "pydata_sphinx_theme"
html_title = "gpuguide"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_show_sourcelink = False
# Absolute, so that a site built from another source folder with this
# configuration (the tests' small sites) finds them too.
STATIC = Path(__file__).resolve().parent / "_static"
html_static_path = [str(STATIC)]
html_css_files = ["gpuguide.css"]
html_logo = str(STATIC / "logo.svg")
html_favicon = str(STATIC / "favicon.svg")
# The theme's light/dark switch starts from "auto" (an empty mode is an error in
# the browser's console).
html_context = {"default_mode": "auto"}
# Where the site is served (GPUGUIDE_SITE_URL, e.g. https://your.host/guide/):
# the pages' canonical links, and the address from which downloaded scripts and
# notebooks install the helpers' wheel (<html_baseurl>_downloads/, see
# docs/_ext/site_wheel.py). Unset, the site has no canonical links and the
# downloads name the README's local server (`python -m http.server -d
# docs/_build/html 8000`); GPUGUIDE_PUBLISH=1 (a build for publishing) then
# stops with an error.
html_baseurl = os.environ.get("GPUGUIDE_SITE_URL", "").strip()

# Execute every example whose file name starts with plot_.
EXECUTED = r"/plot_"
gpuguide_full_pattern = EXECUTED  # a build with another pattern runs some pages

sphinx_gallery_conf = {
    "examples_dirs": ["../examples"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": EXECUTED,
    "within_subsection_order": "gallery_hooks.ChapterOrder",
    # Torch's global state (TF32 flags, dtype, threads, seeds, caches) is reset
    # before and after every example; warnings become errors inside examples.
    "reset_modules": ("matplotlib", "gallery_hooks.reset_torch_state"),
    "reset_modules_order": "both",
    # No arguments for an example; the hook also notes whether it raised, so a
    # recording build writes each page as it ends (docs/_ext/record_build.py).
    "reset_argv": "gallery_hooks.page_argv",
    "remove_config_comments": True,
    "download_all_examples": True,
    # Which examples use which helper: the API pages list them (docs/_ext/api_examples.py).
    "backreferences_dir": "_build/backreferences",
    "doc_module": ("gpuguide",),
    "min_reported_time": 0,
    "show_memory": False,
    # No sg_execution_times pages: they load jQuery and DataTables from CDNs, which
    # fail offline, and list timings the pages themselves print.
    "write_computation_times": False,
    # "first_notebook_cell": set by site_wheel (%pip install <the site's wheel>)
}


def _copy_artifacts(app, exception):
    if exception is None and app.builder.format == "html":
        copy_artifacts(ARTIFACTS, Path(app.outdir) / "_artifacts")


def setup(app):
    quiet_build_log()  # no extension's configuration dump in the build's log
    app.connect("build-finished", _copy_artifacts)
    # An example is re-executed when its source changed, and every example when
    # torch's version, the device, small mode, the GPU memory cap, the recorded
    # results, a helper (src/gpuguide) or a build extension (docs/_ext) changed.
    connect_fingerprint(app, filename_pattern=EXECUTED)
