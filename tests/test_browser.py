"""The built site in a real browser: Debian's chromium, driven by Playwright.

The site (conftest's ``site`` fixture) is served on 127.0.0.1 and every page is
opened once at 1,400 x 1,000 px: no console errors, no failed requests, no request
to another origin (the site must work with no network), no broken images, and a
title on every page. Then the site's search, screenshots of two pages, the cards of
the landing page and where each example page shows its provenance.

The browser is the system's ``chromium`` (``.ci/run`` installs it); Playwright never
downloads one. Without chromium or Playwright the tests skip, unless
``GPUGUIDE_REQUIRE_CHROMIUM=1``, when they fail.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Route

# The first test to use the site pays for its build (conftest's ``site``; about
# 100 s at small sizes on 2 cores), hence the longer limit.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

#: The viewport: a laptop screen. The provenance line must show within it.
WIDTH, HEIGHT = 1400, 1000

#: The example page screenshotted beside the landing page.
EXAMPLE_PAGE = "auto_examples/05_dtypes/plot_dtype_throughput.html"

#: Waits, in milliseconds.
LOAD_MS = 30_000
SEARCH_MS = 20_000

#: Waits until every image has loaded or failed (lazy ones are made eager first).
SETTLE_IMAGES = """async () => {
    const images = Array.from(document.images);
    for (const img of images) img.loading = "eager";
    await Promise.all(images.map(img => img.complete ? null : new Promise(done => {
        img.addEventListener("load", done, {once: true});
        img.addEventListener("error", done, {once: true});
        setTimeout(done, 10000);
    })));
}"""

#: The images that did not load: their src.
BROKEN_IMAGES = """() => Array.from(document.images)
    .filter(img => img.getAttribute("src") && (!img.complete || img.naturalWidth === 0))
    .map(img => img.getAttribute("src"))"""

#: The top of the provenance block in the page (px), or null if the page has none.
PAGE_TOP_Y = """() => {
    const top = document.querySelector("div.gpuguide-page-top");
    return top === null ? null : top.getBoundingClientRect().top + window.scrollY;
}"""


def _missing(reason: str) -> None:
    """Skip, or fail where CI asked for the browser to be there."""
    if os.environ.get("GPUGUIDE_REQUIRE_CHROMIUM") == "1":
        pytest.fail(f"{reason} (GPUGUIDE_REQUIRE_CHROMIUM=1)")
    pytest.skip(reason)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path is not None:
            return path
    _missing(
        "no chromium binary on PATH: install Debian's chromium "
        "(apt-get install chromium; .ci/run does this) to run the browser tests"
    )
    raise AssertionError  # unreachable: _missing skips or fails


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless system chromium (no browser download)."""
    executable = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (it is in the 'test' dependency group)")
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=executable, headless=True, args=args
        )
        yield browser
        browser.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: tuple[Path, object]) -> Iterator[tuple[Path, str]]:
    """The built site served on 127.0.0.1, on a free port: (folder, base URL)."""
    out = site[0]
    if not (out / "index.html").is_file():
        pytest.fail(f"the site build made no index.html: {site[1]}")
    handler = functools.partial(_QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield out, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture(scope="module")
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    yield ctx
    ctx.close()


@dataclass
class Visit:
    """What one page did in the browser."""

    problems: list[str] = field(default_factory=list)
    title: str = ""
    page_top_y: float | None = None


def _pages(out: Path) -> list[str]:
    """Every HTML page of the site, as paths relative to its root."""
    skip = {"_static", "_sources", "_images", "_downloads"}
    return sorted(
        p.relative_to(out).as_posix()
        for p in out.rglob("*.html")
        if not skip & set(p.relative_to(out).parts[:-1])
    )


#: How many pages the browser loads at once (each in its own tab).
TABS = 8


def _start(context: BrowserContext, base: str, path: str) -> tuple[Page, Visit]:
    """Start opening one page, recording every problem it shows from its first
    request on; :func:`_finish` waits for it."""
    visit = Visit()
    origin = urlsplit(base)[:2]
    page = context.new_page()

    def other_origin(route: Route) -> None:
        url = route.request.url
        visit.problems.append(f"request to another origin (no network): {url}")
        route.abort()

    def is_local(url: str) -> bool:
        return urlsplit(url)[:2] == origin

    page.route(
        lambda url: urlsplit(url).scheme in {"http", "https"} and not is_local(url),
        other_origin,
    )
    page.on(
        "console",
        lambda m: (
            m.type == "error" and visit.problems.append(f"console error: {m.text}")
        ),
    )
    page.on("pageerror", lambda e: visit.problems.append(f"uncaught exception: {e}"))
    page.on(
        "requestfailed",
        lambda r: (
            is_local(r.url)
            and visit.problems.append(f"request failed ({r.failure}): {r.url}")
        ),
    )
    page.on(
        "response",
        lambda r: (
            is_local(r.url)
            and r.status >= 400
            and visit.problems.append(f"HTTP {r.status}: {r.url}")
        ),
    )
    page.goto(base + path, wait_until="commit", timeout=LOAD_MS)
    return page, visit


def _finish(page: Page, visit: Visit) -> Visit:
    """Wait for a started page to load and settle; note what it shows."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.wait_for_load_state("load", timeout=LOAD_MS)
    page.evaluate(SETTLE_IMAGES)
    try:
        page.wait_for_load_state("networkidle", timeout=LOAD_MS)
    except PlaywrightTimeout:  # a page that never settles is a finding
        visit.problems.append("still loading after 30 s")
    visit.problems += [f"broken image: {src}" for src in page.evaluate(BROKEN_IMAGES)]
    visit.title = page.title().strip()
    if not visit.title:
        visit.problems.append("empty <title>")
    visit.page_top_y = page.evaluate(PAGE_TOP_Y)
    return visit


def _open(context: BrowserContext, base: str, path: str) -> tuple[Page, Visit]:
    """Open one page, recording every problem it shows; the page stays open."""
    page, visit = _start(context, base, path)
    return page, _finish(page, visit)


@pytest.fixture(scope="module")
def visits(context: BrowserContext, served: tuple[Path, str]) -> dict[str, Visit]:
    """Every page of the site, opened once, :data:`TABS` at a time (the browser
    loads them side by side while the test waits for the first)."""
    out, base = served
    paths = _pages(out)
    result = {}
    for at in range(0, len(paths), TABS):
        started = [
            (path, *_start(context, base, path)) for path in paths[at : at + TABS]
        ]
        for path, page, visit in started:
            result[path] = _finish(page, visit)
            page.close()
    return result


def _is_example(path: str) -> bool:
    parts = path.split("/")
    return (
        len(parts) == 3 and parts[0] == "auto_examples" and parts[2].startswith("plot_")
    )


def test_every_page_loads_with_no_error_failed_request_or_broken_image(visits):
    """Every page of the site opened in chromium (about 40 s on two cores, the
    browser's start and about 100 pages eight at a time; and, for the first
    test of the site, the wait for its build): slow."""
    assert len(visits) >= 60, f"only {len(visits)} pages: {sorted(visits)}"
    problems = [
        f"{path}: {problem}" for path, v in visits.items() for problem in v.problems
    ]
    assert not problems, f"{len(problems)} problems on the site:\n" + "\n".join(
        problems
    )


def test_every_example_page_shows_its_provenance_within_the_first_screen(visits):
    examples = {path: v for path, v in visits.items() if _is_example(path)}
    assert len(examples) >= 13, sorted(examples)
    late = {
        path: v.page_top_y
        for path, v in examples.items()
        if v.page_top_y is None or v.page_top_y > HEIGHT
    }
    assert not late, (
        f"provenance (div.gpuguide-page-top) missing (None) or below {HEIGHT} px "
        f"at {WIDTH} px wide: {late}"
    )


#: One card per chapter: every folder of examples with a gallery header.
CHAPTERS = len(
    list((Path(__file__).parent.parent / "examples").glob("*/GALLERY_HEADER.rst"))
)


def test_the_landing_page_has_a_card_per_chapter_with_a_loaded_thumbnail(
    context, served
):
    _, base = served
    page, _ = _open(context, base, "index.html")
    cards = page.evaluate(
        """() => Array.from(document.querySelectorAll("div.gpuguide-card")).map(card => {
            const img = card.querySelector("img");
            return img === null ? "no image" :
                (img.complete && img.naturalWidth > 0 ? "ok" : img.getAttribute("src"));
        })"""
    )
    page.close()
    assert len(cards) == CHAPTERS >= 15, cards
    assert cards == ["ok"] * CHAPTERS, f"cards without a loaded image: {cards}"


def test_the_search_finds_the_compile_chapter(context, served):
    out, base = served
    chapter = [p for p in _pages(out) if p.startswith("auto_examples/09_compile/")]
    expected = {p for p in chapter if _is_example(p)}
    assert expected, "no torch.compile chapter in auto_examples/09_compile"
    page, visit = _open(context, base, "search.html?q=compile")
    # The summary ("Search finished, found N pages...") is written once the
    # results are all listed.
    page.wait_for_function(
        """() => {
            const summary = document.querySelector("#search-results .search-summary");
            return summary !== null && summary.textContent.trim() !== ""
                && document.querySelectorAll("ul.search li").length > 0;
        }""",
        timeout=SEARCH_MS,
    )
    hrefs = page.evaluate(
        """() => Array.from(document.querySelectorAll("ul.search li a"))
            .map(a => new URL(a.href).pathname)"""
    )
    page.close()
    assert not visit.problems, visit.problems
    found = {href.lstrip("/") for href in hrefs}
    assert expected <= found, (
        f"the search for 'compile' misses {sorted(expected - found)}; "
        f"it lists {sorted(found)}"
    )


@pytest.mark.parametrize("path", ["index.html", EXAMPLE_PAGE])
def test_screenshots_are_written_and_not_blank(context, served, tmp_path_factory, path):
    from PIL import Image, ImageStat

    _, base = served
    folder = tmp_path_factory.mktemp("browser-artifacts")
    page, _ = _open(context, base, path)
    name = path.replace("/", "_").removesuffix(".html") + ".png"
    shot = folder / name
    page.screenshot(path=str(shot))
    page.close()
    extra = os.environ.get("GPUGUIDE_TEST_ARTIFACTS")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        shutil.copy2(shot, Path(extra) / name)
    with Image.open(shot) as image:
        assert image.size == (WIDTH, HEIGHT)
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 16)
        spread = sum(ImageStat.Stat(rgb.convert("L")).stddev)
    assert colours is None or len(colours) > 32, f"{shot}: {len(colours)} colours"
    assert spread > 10, f"{shot}: pixel standard deviation {spread:.1f}"
