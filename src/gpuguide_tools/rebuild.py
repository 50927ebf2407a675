"""Do two builds of the same commit say the same thing? Their verdicts and claims, side by side.

usage: python -m gpuguide_tools.rebuild SITE_A SITE_B

Each SITE is a built site (``docs/_build/html``) or its ``docs/auto_examples``
folder (the ``.rst`` files sphinx-gallery writes as each page ends). The tool
reads every page's printed output and pairs

* its verdicts, the sentences :func:`gpuguide.compare` prints ("a is 1.2x faster
  than b", "a is 1.2x slower than b", "no measurable difference between a and
  b"), by page, the pair compared and the occurrence on the page;
* its claims' outcomes (``Claim held``, ``Claim did not hold here``, ``Claim not
  checked here``), by page and text.

It prints the verdicts that are opposite (one build faster, the other slower:
the rule of ``docs/measuring.md`` promises none), those that changed between a
verdict and "no measurable difference", the claims whose outcome changed, and
a summary line; it exits with 1 when a verdict is opposite.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BuildDiff", "claims", "diff", "main", "page_outputs", "verdicts"]

_DIRECTED = re.compile(
    r"(?P<a>[^:]+?) is [\d.,]+x (?P<verdict>faster|slower) than (?P<b>.+?) \("
)
_NONE = re.compile(
    r"no measurable difference between (?P<a>.+?) and (?P<b>.+?)(?::| \()"
)
_CLAIM = re.compile(
    r"Claim (?P<outcome>held|did not hold here|not checked here): (?P<text>.+?)"
    r"(?: \(measured |; measured | \()"
)
_OUTCOMES = {"held": "held", "did not hold here": "failed", "not checked here": "n/a"}


def verdicts(page: str, text: str) -> dict[tuple[str, str, str, int], int]:
    """The verdicts printed on a page, by ``(page, a, b, occurrence)`` with ``a``
    and ``b`` the pair in sorted order: +1 when ``a`` is faster, -1 when slower,
    0 for no measurable difference."""
    found: dict[tuple[str, str, str, int], int] = {}
    seen: dict[tuple[str, str], int] = {}
    for line in text.splitlines():
        for match in _DIRECTED.finditer(line):
            a, b = match["a"].strip(), match["b"].strip()
            sign = 1 if match["verdict"] == "faster" else -1
            _add(found, seen, page, a, b, sign)
        for match in _NONE.finditer(line):
            _add(found, seen, page, match["a"].strip(), match["b"].strip(), 0)
    return found


def _add(
    found: dict[tuple[str, str, str, int], int],
    seen: dict[tuple[str, str], int],
    page: str,
    a: str,
    b: str,
    sign: int,
) -> None:
    pair = (a, b) if a <= b else (b, a)
    sign = sign if a <= b else -sign
    k = seen.get(pair, 0)
    seen[pair] = k + 1
    found[page, pair[0], pair[1], k] = sign


def claims(page: str, text: str) -> dict[tuple[str, str], str]:
    """The claims' outcomes printed on a page, by ``(page, text)``."""
    return {
        (page, m["text"]): _OUTCOMES[m["outcome"]]
        for line in text.splitlines()
        if (m := _CLAIM.search(line))
    }


def page_outputs(site: Path) -> dict[str, str]:
    """Each example page's printed output, by page name, from a built site or
    from sphinx-gallery's ``.rst`` files."""
    html = sorted(site.glob("auto_examples/*/plot_*.html"))
    if html:
        from bs4 import BeautifulSoup  # type: ignore[import-not-found,unused-ignore]

        out = {}
        for page in html:
            soup = BeautifulSoup(page.read_text(errors="replace"), "html.parser")
            blocks = soup.select("div.sphx-glr-script-out pre")
            out[page.stem] = "\n".join(b.get_text() for b in blocks)
        return out
    rst = sorted(site.glob("*/plot_*.rst")) or sorted(
        site.glob("auto_examples/*/plot_*.rst")
    )
    return {page.stem: _rst_output(page.read_text(errors="replace")) for page in rst}


def _rst_output(source: str) -> str:
    lines, out, i = source.splitlines(), [], 0
    while i < len(lines):
        if lines[i].strip() == ".. rst-class:: sphx-glr-script-out":
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(".. code-block::"):
                i += 1
            i += 1
            while i < len(lines) and (
                not lines[i].strip() or lines[i].startswith("    ")
            ):
                out.append(lines[i][4:])
                i += 1
        else:
            i += 1
    return "\n".join(out)


@dataclass(frozen=True)
class BuildDiff:
    """What two builds' verdicts and claims have in common and where they differ."""

    verdicts: int
    opposite: tuple[str, ...]
    changed: tuple[str, ...]
    claims: int
    claims_changed: tuple[str, ...]

    def lines(self) -> list[str]:
        """The report: each opposite verdict, each change, then the summary."""
        out = [f"OPPOSITE: {line}" for line in self.opposite]
        out += [f"changed: {line}" for line in self.changed]
        out += [f"claim changed: {line}" for line in self.claims_changed]
        share = 100 * len(self.changed) / self.verdicts if self.verdicts else 0.0
        out.append(
            f"{self.verdicts} verdict(s) in both builds: {len(self.opposite)} opposite, "
            f"{len(self.changed)} ({share:.0f}%) changed between a verdict and no "
            f"measurable difference; {self.claims} claim(s) in both, "
            f"{len(self.claims_changed)} with another outcome"
        )
        return out


_WORDS = {1: "faster", -1: "slower", 0: "no measurable difference"}


def diff(a: Mapping[str, str], b: Mapping[str, str]) -> BuildDiff:
    """Compare two builds' page outputs (page name -> printed text)."""
    va, vb = _all(verdicts, a), _all(verdicts, b)
    ca, cb = _all(claims, a), _all(claims, b)
    opposite, changed = [], []
    for key in sorted(va.keys() & vb.keys()):
        x, y = va[key], vb[key]
        what = f"{key[0]}: {key[1]} vs {key[2]}: {_WORDS[x]} / {_WORDS[y]}"
        if x * y < 0:
            opposite.append(what)
        elif x != y:
            changed.append(what)
    claims_changed = [
        f"{page}: {text}: {ca[page, text]} / {cb[page, text]}"
        for page, text in sorted(ca.keys() & cb.keys())
        if ca[page, text] != cb[page, text]
    ]
    return BuildDiff(
        verdicts=len(va.keys() & vb.keys()), opposite=tuple(opposite),
        changed=tuple(changed), claims=len(ca.keys() & cb.keys()),
        claims_changed=tuple(claims_changed),
    )  # fmt: skip


def _all(
    read: Callable[[str, str], Mapping[Any, Any]], outputs: Mapping[str, str]
) -> dict[Any, Any]:
    found: dict[Any, Any] = {}
    for page, text in outputs.items():
        found.update(read(page, text))
    return found


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gpuguide_tools.rebuild",
        description="Compare the verdicts and claims of two builds of one commit.",
    )
    parser.add_argument("site_a", type=Path)
    parser.add_argument("site_b", type=Path)
    args = parser.parse_args(None if argv is None else list(argv))
    outputs = []
    for site in (args.site_a, args.site_b):
        found = page_outputs(site)
        if not found:
            parser.error(f"{site}: no example pages (a built site or auto_examples)")
        outputs.append(found)
    result = diff(*outputs)
    for line in result.lines():
        print(line)
    return 1 if result.opposite else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
