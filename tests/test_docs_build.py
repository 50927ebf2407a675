"""Check the HTML of the whole site, built once at small sizes.

The build is conftest's session-wide ``site`` fixture (shared with the browser test).
"""

from __future__ import annotations

import re

import pytest
from conftest import (
    EXAMPLES,
    MEASURED,
    SEED_REFERENCE,
    SHARE_ABOVE_100,
    STRAY_REPR,
    TORCH_LOG,
    build_mini_site,
    failing_examples,
)
from test_examples import PAGE_CHECKS

bs4 = pytest.importorskip("bs4")
pytest.importorskip("sphinx_gallery")

# The first test to use the site pays for its build (about 100 s at small sizes
# on 2 cores, several minutes on a slow or busy machine), hence the longer limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def test_every_page_ends_with_its_recorded_results(site):
    """The first test of the site: it waits for the rest of its build, which
    runs every page once at small sizes (about four minutes on two cores,
    beside the other tests), hence slow."""
    from gpuguide_tools.results_files import load_dir

    out, _ = site
    files = load_dir(out.parent / "results")
    assert any(f.device.short_name == "Fake H100" for f in files.values())
    for script in EXAMPLES:
        soup = bs4.BeautifulSoup(_page(out, script).read_text(), "html.parser")
        section = soup.select_one("section#recorded-results")
        assert section is not None, script.stem
        text = section.get_text(" ", strip=True)
        recorded = [
            f for f in files.values()
            if any(r.x is None for r in f.for_page(script.stem))
        ]  # fmt: skip
        if not recorded:
            assert "No device has recorded figures of this page yet." in text
            continue
        header = [th.get_text(strip=True) for th in section.select("thead th")]
        assert header[:2] == ["figure", "this build"], (script.stem, header)
        for f in recorded:
            assert f"{f.device.short_name} [rec]" in header, (script.stem, f.device)
            assert f"recorded {f.device.date[:10]}" in text
        # The last thing on the page before its running time and downloads.
        assert not section.find_next_sibling("section"), script.stem
    across = bs4.BeautifulSoup((out / "results.html").read_text(), "html.parser")
    devices, *pages = across.select("table")  # the devices, then one per page
    for path, f in files.items():
        assert path.name in devices.get_text()
        assert f.device.short_name in devices.get_text()
    headline = {r.page for f in files.values() for r in f.results if r.x is None}
    assert len(pages) == len(headline)
    assert any("% of peak" in t.get_text() for t in pages)
    assert (out / "_static" / "results.schema.json").is_file()  # published


def test_the_landing_page_has_a_banner_and_a_card_per_chapter(site):
    import torch

    out, _ = site
    soup = bs4.BeautifulSoup((out / "index.html").read_text(), "html.parser")
    banner = soup.select_one("div.gpuguide-banner").get_text(" ", strip=True)
    assert "built and measured on" in banner
    assert torch.__version__ in banner
    assert "Each page also shows the results recorded on:" in banner
    assert "Fake H100" in banner  # the fake GPU's file
    cards = soup.select("div.gpuguide-card")
    assert len(cards) == len({s.parent.name for s in EXAMPLES}) >= 15
    for card in cards:
        image, link = card.select_one("img"), card.select_one("a")
        assert (out / image["src"]).is_file(), image["src"]
        assert (out / link["href"]).is_file(), link["href"]
        assert link["href"].endswith("/index.html")


def test_every_example_page_opens_with_its_take_away_provenance_and_actions(site):
    out, _ = site
    for script in EXAMPLES:
        page = _page(out, script)
        soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
        _check_page_top(soup, script.stem)
        top = soup.select_one("div.gpuguide-page-top")
        hrefs = [a["href"] for a in top.select("a")]
        assert [h.rsplit(".", 1)[-1] for h in hrefs] == ["py", "ipynb", "zip", "txt"]
        for href in hrefs:
            assert (page.parent / href).resolve().is_file(), (script.stem, href)


def _page(out, script):
    chapter = script.parent.name
    return out / "auto_examples" / chapter / f"{script.stem}.html"


def _before(first, second):
    """Whether the tag ``first`` starts before ``second`` in the page's HTML."""
    return (first.sourceline, first.sourcepos) < (second.sourceline, second.sourcepos)


def _check_page_top(soup, name):
    """What a reader sees first: no "Go to the end" note; the title, then the
    take-away box of this build's checked claims, then the provenance on one
    line, all before the page's first code cell."""
    assert "Go to the end" not in soup.get_text(), name
    assert not soup.select(".sphx-glr-download-link-note"), name
    box = soup.select_one("div.admonition.gpuguide-takeaway")
    assert box is not None, f"{name}: no take-away box"
    title = box.select_one("p.admonition-title").get_text(strip=True)
    assert title.startswith("Take-away, measured in this build on "), (name, title)
    assert box.find_previous_sibling().name == "h1", f"{name}: not under the title"
    first_code = soup.select_one("div.highlight-Python")
    assert first_code is not None, name
    assert _before(box, first_code), f"{name}: the take-away comes after code"
    top = soup.select_one("div.gpuguide-page-top")
    assert top is not None, name
    assert _before(box, top), name
    assert _before(top, first_code), name
    (line,) = [p for p in top.select("p") if "Measured on" in p.get_text()]
    assert "\n" not in line.get_text(), (name, line.get_text())
    assert "| gpuguide " in line.get_text(), (name, line.get_text())
    # The page's first figure, if it draws one, right after, still before the code.
    drawn = soup.select("img.sphx-glr-single-img, img.sphx-glr-multi-img")
    first = soup.select_one("img.gpuguide-first-figure")
    if not drawn:
        assert first is None, name
        return box
    assert first is not None, f"{name}: no first figure under the take-away"
    assert _before(top, first), name
    assert _before(first, first_code), name
    assert first["src"].rsplit("/", 1)[-1] == drawn[0]["src"].rsplit("/", 1)[-1]
    return box


def _png_size(path):
    """A PNG's width and height in pixels, from its header."""
    import struct

    return struct.unpack(">II", path.read_bytes()[16:24])


def _default_figure_px():
    """The size of a figure made with matplotlib's defaults, not the guide's style."""
    import matplotlib as mpl

    width, height = mpl.rcParamsDefault["figure.figsize"]
    dpi = mpl.rcParamsDefault["figure.dpi"]
    return round(width * dpi), round(height * dpi)


def test_build_has_no_warnings(site):
    _, result = site
    assert result.returncode == 0, result.stderr[-5000:]
    assert "WARNING" not in result.stderr, result.stderr[-5000:]


#: torch's structured trace (``torch.__trace``) as it would reach a build log: its
#: records are DEBUG ("V" in torch's format) with a JSON payload.
TORCH_TRACE = re.compile(
    r'^V\d{4} \d\d:\d\d:\d\d|"chromium_event"|inductor_config\[', re.MULTILINE
)


def test_the_build_log_is_for_people(site):
    _, result = site
    log = result.stdout + result.stderr
    lines = log.splitlines()
    assert len(lines) < 1000, f"{len(lines)} lines; the last:\n" + "\n".join(
        lines[-30:]
    )
    trace = TORCH_TRACE.search(log)
    assert trace is None, (
        f"torch's trace in the build log: {trace and trace.group(0)!r}"
    )
    assert "MdParserConfig(" not in log
    assert "generating gallery for" in log  # the log is sphinx's, not a quiet one


def test_no_page_refers_to_the_seeds(site):
    out, _ = site
    pages = sorted(out.rglob("*.html"))
    assert len(pages) > len(EXAMPLES)
    found = []
    for page in pages:
        text = bs4.BeautifulSoup(page.read_text(), "html.parser").get_text()
        found += [
            f"{page.relative_to(out)}: {m[0]}" for m in SEED_REFERENCE.finditer(text)
        ]
    assert not found, found


def test_landing_and_method_pages_exist(site):
    out, _ = site
    index = (out / "index.html").read_text()
    assert "auto_examples/index.html" in index
    measuring = bs4.BeautifulSoup((out / "measuring.html").read_text(), "html.parser")
    assert "measures" in measuring.title.get_text()


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_page_has_figures_output_and_provenance(site, script):
    """The page's test: it ran once, in the session's site build (at small
    sizes, warnings as errors), without an exception, and printed what every
    page prints (provenance, measured figures) and what it must
    (:data:`test_examples.PAGE_CHECKS`)."""
    out, result = site
    page = _page(out, script)
    assert page.exists(), f"no page for {script.name}"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    # An exception (a warning is one) shows as a traceback on the page, and the
    # build names the page among its failing examples.
    raised = "\n".join(b.get_text() for b in soup.select("div.highlight-pytb pre"))
    assert not raised, raised[-3000:]
    assert script.stem not in failing_examples(result.stderr), result.stderr[-3000:]

    figures = soup.select("img.sphx-glr-single-img, img.sphx-glr-multi-img")
    outputs = "\n".join(
        b.get_text() for b in soup.select("div.sphx-glr-script-out pre")
    )
    # A page whose plot this device cannot show says so in one line instead of
    # plotting noise (a part that needs CUDA, or more cores than this machine has).
    cannot = re.search(r"needs a CUDA GPU, and this run is on|too few", outputs)
    assert figures or cannot, "no figure on the page, and no line saying why"
    for img in figures:
        assert (page.parent / img["src"]).is_file(), img["src"]
        # A figure made before the house style was applied has matplotlib's size.
        size = _png_size(page.parent / img["src"])
        assert size != _default_figure_px(), f"{img['src']} ignores the plot style"

    assert MEASURED.search(outputs), outputs[-2000:]
    assert re.search(r"Measured on .+\| torch \S+ \|.+\d{4}-\d{2}-\d{2}", outputs)
    assert re.search(r"Measured on .+ \| gpuguide \S+ \(.+\) \| \d{4}-", outputs)
    assert "Traceback" not in outputs
    log = TORCH_LOG.search(outputs)
    assert log is None, f"torch's own log on the page: {log and log.group(0)!r}"
    stray = STRAY_REPR.search(outputs)
    assert stray is None, (
        f"a cell's last value on the page: {stray and stray.group(0)!r}"
    )
    shares = [
        m.group(0) for m in SHARE_ABOVE_100.finditer(outputs) if float(m[1]) > 100
    ]
    assert not shares, f"shares above 100%: {shares}"
    # Strict mode fails the page on a claim that did not hold; the page's own
    # lines say so too, and it states at least two claims.
    assert "Claim did not hold here" not in outputs
    stated = re.findall(
        r"^Claim (held|did not hold here|not checked here): ", outputs, re.M
    )
    assert len(stated) >= 2, f"{script.stem} states {len(stated)} claim(s)"
    check = PAGE_CHECKS.get(script.stem)
    if check is not None:
        check(outputs)

    # The reader can take the script (and a notebook) away.
    downloads = {a["href"].rsplit("/", 1)[-1] for a in soup.select("a.download")}
    assert f"{script.stem}.py" in downloads
    assert f"{script.stem}.ipynb" in downloads


def test_every_download_link_resolves(site):
    out, _ = site
    links = 0
    for page in (out / "auto_examples").rglob("*.html"):
        soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
        for a in soup.select("p.gpuguide-download a"):
            links += 1
            assert (page.parent / a["href"]).resolve().is_file(), (page, a["href"])
    assert links >= 1, "no example offers a file for download"


def test_a_site_built_without_its_address_names_no_localhost_for_canonical(site):
    # conftest builds it without GPUGUIDE_SITE_URL: no canonical link at all, and
    # the downloads name the README's local server, saying so.
    out, _ = site
    pages = sorted(out.rglob("*.html"))
    assert pages
    for page in pages:
        soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
        assert soup.select('link[rel="canonical"]') == [], page
    scripts = sorted((out / "_downloads").rglob("plot_*.py"))
    assert {s.stem for s in scripts} >= {e.stem for e in EXAMPLES}
    for script in scripts:
        text = script.read_text()
        head = text.split('"""', 1)[0]
        assert head.count("# /// script\n") == 1, script
        assert '#     "gpuguide @ http://localhost:8000/_downloads/gpuguide-' in head
        assert "GPUGUIDE_SITE_URL" in head, script  # the comment says why localhost
        assert '#     "torch>=' in head, script
        assert f"#   uv run {script.name} " in head, script


def test_gallery_lists_every_example(site):
    out, _ = site
    gallery = (out / "auto_examples" / "index.html").read_text()
    for script in EXAMPLES:
        assert f"{script.stem}.html" in gallery


def test_the_claims_page_lists_every_pages_claims(site):
    out, _ = site
    page = bs4.BeautifulSoup((out / "claims.html").read_text(), "html.parser")
    rows = page.select("table.gpuguide-recorded tbody tr")
    assert len(rows) >= 80, f"{len(rows)} claims on the claims page"
    # One heading per page, linked to it (its text is the page's title).
    links = {a["href"].rsplit("/", 1)[-1] for a in page.select("p.rubric a")}
    assert links == {f"{script.stem}.html" for script in EXAMPLES}
    # This build ran every page: each row has this build's outcome.
    cells = [r.select("td")[1].get_text(strip=True) for r in rows]
    assert all(c.split(":")[0] in ("held", "not checked") for c in cells), cells
    nav = (out / "index.html").read_text()
    assert 'href="claims.html"' in nav


EXAMPLE_HEAD = '"""\nOnly\n====\n\nOne example.\n"""\n\nimport warnings\n\n'


def test_an_uncaught_warning_fails_the_build(tmp_path):
    code = EXAMPLE_HEAD + 'warnings.warn("nobody caught me", UserWarning)\n'
    result = build_mini_site(tmp_path, code)
    assert result.returncode != 0
    assert "nobody caught me" in result.stdout + result.stderr
    # What the site's page test looks for: the traceback on the page, and the
    # page named among the failing examples.
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    raised = "\n".join(b.get_text() for b in soup.select("div.highlight-pytb pre"))
    assert "nobody caught me" in raised
    assert failing_examples(result.stderr) == {"plot_only"}
    coloured = "\x1b[01m../examples/01_only/plot_x.py\x1b[39;49;00m unexpectedly failed"
    assert failing_examples(coloured) == {"plot_x"}  # as CI's log writes it


def test_a_warning_caught_on_purpose_does_not(tmp_path):
    code = EXAMPLE_HEAD + (
        "with warnings.catch_warnings(record=True) as caught:\n"
        '    warnings.simplefilter("always")\n'
        '    warnings.warn("expected", DeprecationWarning)\n'
        'print(f"caught: {caught[0].message}")\n'
    )
    result = build_mini_site(tmp_path, code)
    assert result.returncode == 0, result.stderr[-3000:]
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    assert "caught: expected" in page.read_text()


def test_an_artifact_is_linked_and_copied(tmp_path):
    code = EXAMPLE_HEAD + (
        "import gpuguide\n"
        'path = gpuguide.artifact_path("only_trace.json")\n'
        'path.write_text("{}")\n'
        'gpuguide.download_link(path, "trace of nothing")\n'
    )
    result = build_mini_site(tmp_path, code)
    assert result.returncode == 0, result.stderr[-3000:]
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    (link,) = soup.select("p.gpuguide-download a")
    assert "trace of nothing" in link.get_text()
    assert (page.parent / link["href"]).resolve().read_text() == "{}"


def test_the_checks_catch_a_value_left_at_a_cell_end_and_keep_the_trace_out(tmp_path):
    code = EXAMPLE_HEAD + (
        "import logging\n\nimport gpuguide\nimport torch\n\n"
        'torch._logging.trace_structured("gpuguide_event", payload_fn=lambda: "12345")\n'
        'logging.getLogger("torch._dynamo").warning("a warning torch prints")\n'
        'print("the page goes on")\n'
        'gpuguide.record("left at the end of a cell", 1.0, unit="s")\n'
    )
    result = build_mini_site(tmp_path, code)
    assert result.returncode == 0, result.stderr[-3000:]
    log = result.stdout + result.stderr
    assert re.search(r"^W\d{4} .*\] a warning torch prints$", log, re.MULTILINE), log
    assert TORCH_TRACE.search(log) is None, log[-3000:]
    assert "gpuguide_event" not in log

    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    outputs = "\n".join(
        b.get_text() for b in soup.select("div.sphx-glr-script-out pre")
    )
    assert "the page goes on" in outputs
    assert TORCH_LOG.search(outputs) is None
    assert STRAY_REPR.search(outputs), outputs  # what the page test fails on


# -- recorded results ------------------------------------------------------------------

RECORDING = {
    "schema": 1,
    "device": {
        "name": "NVIDIA H100 80GB HBM3", "short_name": "H100 SXM5", "kind": "cuda",
        "torch": "2.11.0", "cuda": "12.8", "driver": "570.86",
        "date": "2026-11-20T10:00:00+00:00", "small": False,
        "peaks": {"fp32": 6.7e13},
    },
    "results": [
        {"page": "plot_only", "name": "best matmul", "value": 5.1e13,
         "unit": "FLOP/s", "spread": {"q25": 5.0e13, "q75": 5.2e13},
         "config": {"dtype": "fp32"}, "size": "8192x8192x8192", "peak": "fp32"},
    ],
}  # fmt: skip

RECORDING_EXAMPLE = EXAMPLE_HEAD + (
    "import gpuguide\n"
    'gpuguide.record("best matmul", 2.0e9, unit="FLOP/s", size="64x64x64", dtype="fp32")\n'
    'print("the page prints only its own lines")\n'
)


def _results_folder(tmp_path, text):
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "cuda-h100-sxm5.json").write_text(text)
    return folder


def _section(root):
    page = root / "html" / "auto_examples" / "01_only" / "plot_only.html"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    section = soup.select_one("section#recorded-results")
    assert section is not None
    outputs = "\n".join(
        b.get_text() for b in soup.select("div.sphx-glr-script-out pre")
    )
    return section, outputs


def test_the_build_adds_the_recorded_devices_beside_the_pages_own_figure(tmp_path):
    import json

    folder = _results_folder(tmp_path, json.dumps(RECORDING))
    result = build_mini_site(
        tmp_path, RECORDING_EXAMPLE, GPUGUIDE_RESULTS_DIR=str(folder)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    section, outputs = _section(tmp_path)
    assert "the page prints only its own lines" in outputs
    assert "[rec]" not in outputs  # the script prints no table of its own
    header = [th.get_text(strip=True) for th in section.select("thead th")]
    assert header == ["figure", "this build", "H100 SXM5 [rec]"]
    text = section.get_text(" ", strip=True)
    assert "51.0 TFLOP/s (8192x8192x8192)" in text  # the recorded figure
    assert "2.00 GFLOP/s (64x64x64)" in text  # this build's, as the page ran
    assert "H100 SXM5 (recorded 2026-11-20, torch 2.11.0, CUDA 12.8)" in text
    assert (
        tmp_path / "docs" / "auto_examples" / "01_only" / "plot_only.recorded.json"
    ).is_file()

    # Another device recorded since, and a build that runs no page
    # (plot_gallery=0): the page keeps its run's figures and shows both devices.
    other = json.loads(json.dumps(RECORDING))
    other["device"].update(short_name="H200 SXM", name="NVIDIA H200")
    other["results"][0]["value"] = 7.0e13
    (folder / "cuda-h200-sxm.json").write_text(json.dumps(other))
    again = build_mini_site(
        tmp_path, RECORDING_EXAMPLE, "-D", "plot_gallery=0",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    section, _ = _section(tmp_path)
    header = [th.get_text(strip=True) for th in section.select("thead th")]
    assert header == ["figure", "this build", "H100 SXM5 [rec]", "H200 SXM [rec]"]
    assert "70.0 TFLOP/s" in section.get_text()


def test_a_page_no_device_recorded_says_so_in_one_line(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    result = build_mini_site(
        tmp_path / "run", RECORDING_EXAMPLE, "-D", "plot_gallery=0",
        GPUGUIDE_RESULTS_DIR=str(folder),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    section, _ = _section(tmp_path / "run")
    own = [  # the section's own, not the page's footer (running time, downloads)
        e for e in section.find_all(["p", "table"], recursive=False)
        if not any(c.startswith("sphx-glr") for c in e.get("class", []))
    ]  # fmt: skip
    assert [p.get_text(strip=True) for p in own] == [
        "No device has recorded figures of this page yet."
    ]


def _broken(kind):
    import json

    if kind == "truncated JSON":
        return json.dumps(RECORDING)[:200], "is not valid JSON (line 1, column"
    data = json.loads(json.dumps(RECORDING))
    if kind == "wrong schema version":
        data["schema"] = 4
        return json.dumps(data), "/schema: 4 is not one of [1, 2, 3]"
    data["results"][0]["value"] = "fast"
    return json.dumps(data), "/results/0/value: 'fast' is not of type 'number'"


@pytest.mark.parametrize(
    "kind", ["truncated JSON", "wrong schema version", "a value that is not a number"]
)
def test_a_corrupted_results_file_stops_the_build_naming_the_file(tmp_path, kind):
    text, problem = _broken(kind)
    folder = _results_folder(tmp_path, text)
    result = build_mini_site(
        tmp_path, RECORDING_EXAMPLE, GPUGUIDE_RESULTS_DIR=str(folder)
    )
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert f"results file {folder / 'cuda-h100-sxm5.json'}: {problem}" in message
    assert not (tmp_path / "html" / "auto_examples").exists()  # stopped before pages


CLAIMS_CODE = EXAMPLE_HEAD + (
    "import gpuguide\n\n"
    "page = gpuguide.setup()\n"
    'gpuguide.claim("the sum of 2 and 2 is 4", holds=2 + 2 == 4, measured="4")\n'
    'gpuguide.claim("the sum of 2 and 2 is 5", holds=2 + 2 == 5, measured="4")\n'
    'gpuguide.claim("graphs help", None, at_least=1.0, on="cuda")\n'
    'print("the page goes on")\n'
)


TOP_CODE = EXAMPLE_HEAD + (
    "import matplotlib.pyplot as plt\n\nimport gpuguide\n\n"
    "before, _ = plt.subplots()  # drawn before setup: matplotlib's own style\n"
    "page = gpuguide.setup()\n"
    'gpuguide.claim("the sum of 2 and 2 is 4", holds=2 + 2 == 4, measured="4")\n'
    'gpuguide.claim("graphs help", None, at_least=1.0, on="cuda")\n'
    "fig, ax = plt.subplots()  # plain matplotlib, after setup\n"
    "ax.plot([1, 2], [50, 90])\n"
    "plt.show()\n"
    "gpuguide.takeaway()\n"
)


def test_a_page_opens_with_its_take_away_and_its_figures_have_the_plot_style(
    tmp_path,
):
    import matplotlib as mpl

    from gpuguide.plotting import style_axes

    result = build_mini_site(tmp_path, TOP_CODE)
    assert result.returncode == 0, result.stderr[-3000:]
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    box = _check_page_top(soup, "plot_only")
    items = [li.get_text(" ", strip=True) for li in box.select("li")]
    assert items == ["held : the sum of 2 and 2 is 4 (measured 4)"]
    assert "Not checked here: 1 claim (needs CUDA; this run is on" in box.get_text()
    assert box.select_one("a")["href"] == "#recorded-results"
    assert soup.select_one("section#recorded-results") is not None  # where it points
    # The script still prints its take-away at its end.
    outputs = "\n".join(p.get_text() for p in soup.select("div.sphx-glr-script-out"))
    assert "This page's claims in this run: 1 held, 0 did not hold" in outputs
    # The figure drawn after setup has the house style's size, the one before not.
    with mpl.rc_context():
        style_axes()
        width, height = mpl.rcParams["figure.figsize"]
        house = (
            round(width * mpl.rcParams["savefig.dpi"]),
            round(height * mpl.rcParams["savefig.dpi"]),
        )
    images = soup.select("img.sphx-glr-multi-img, img.sphx-glr-single-img")
    sizes = [_png_size(page.parent / img["src"]) for img in images]
    assert sizes == [_default_figure_px(), house]
    assert house != _default_figure_px()


def test_a_claim_that_does_not_hold_fails_a_strict_build(tmp_path):
    result = build_mini_site(tmp_path, CLAIMS_CODE, GPUGUIDE_STRICT_CLAIMS="1")
    assert result.returncode != 0
    assert failing_examples(result.stderr) == {"plot_only"}
    assert "Claim did not hold here: the sum of 2 and 2 is 5; measured 4" in (
        result.stdout + result.stderr
    )


def test_a_claim_that_does_not_hold_is_shown_in_place_and_listed(tmp_path):
    result = build_mini_site(tmp_path, CLAIMS_CODE, GPUGUIDE_STRICT_CLAIMS="0")
    assert result.returncode == 0, result.stderr[-3000:]
    page = tmp_path / "html" / "auto_examples" / "01_only" / "plot_only.html"
    soup = bs4.BeautifulSoup(page.read_text(), "html.parser")
    output = "\n".join(p.get_text() for p in soup.select("div.sphx-glr-script-out pre"))
    assert "Claim held: the sum of 2 and 2 is 4 (measured 4)" in output
    assert "Claim did not hold here: the sum of 2 and 2 is 5; measured 4" in output
    assert "Claim not checked here: graphs help (needs CUDA" in output
    assert "the page goes on" in output  # a failed claim does not stop the page
    # The page's Recorded results section has the claims table, this build's column.
    cells = [
        td.get_text(" ", strip=True) for td in soup.select("table.gpuguide-recorded td")
    ]
    assert "the sum of 2 and 2 is 5" in cells
    assert "did not hold: 4" in cells


def test_the_build_log_counts_the_claims_and_lists_those_that_did_not_hold():
    from claims_page import claims_summary

    from gpuguide.results import Claim

    claims = {
        "plot_a": (Claim("x is 4", "held", "4"), Claim("y is 5", "failed", "4")),
        "plot_b": (Claim("graphs help", "n/a", "needs CUDA"),),
    }
    assert claims_summary(claims) == [
        "gpuguide: claims of the 2 page(s) run: 1 held, 1 did not hold, 1 not checked here",
        "    did not hold: plot_a: y is 5; measured 4",
    ]
    assert claims_summary({}) == []


def test_the_claims_table_sets_this_build_beside_each_recording():
    import dataclasses

    from claims_page import claims_table
    from conftest import CPU_RECORD, H100_RECORD

    from gpuguide.results import Claim
    from gpuguide_tools.results_files import PageRecord, PageRun, ResultsFile

    run = PageRun(
        date="2026-11-01",
        torch="2.11.0",
        source="none",
        helpers="none",
        commit="abc1234",
    )
    h100 = ResultsFile(
        H100_RECORD, pages_run={"plot_a": PageRecord(run)},
        claims={"plot_a": (Claim("graphs help", "held", "1.40x (1.30-1.50x)"),)},
    )  # fmt: skip
    live = ResultsFile(
        dataclasses.replace(CPU_RECORD),
        claims={"plot_a": (Claim("x is 4", "held", "4"), Claim("graphs help", "n/a", "needs CUDA"))},
    )  # fmt: skip
    table = claims_table("plot_a", live, [h100])
    assert table.header == (
        "claim",
        f"this build ({CPU_RECORD.short_name})",
        "H100 SXM5 [rec]",
    )
    assert table.rows == (
        ("x is 4", "held: 4", "-"),
        (
            "graphs help",
            "not checked: needs CUDA",
            "held: 1.40x (1.30-1.50x) [abc1234]",
        ),
    )
    assert claims_table("plot_b", live, [h100]) is None
    # A build that did not run the page: the recordings only.
    assert claims_table("plot_a", None, [h100]).header == ("claim", "H100 SXM5 [rec]")
