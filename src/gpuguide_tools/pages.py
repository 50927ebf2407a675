"""The guide's pages as a recording sees them: their code, their GPU budget, their staleness.

- :func:`page_code`: digests of a page's source and of the helper modules it
  imports (found by reading the imports, transitively), which a results file
  keeps beside each page's figures (:class:`gpuguide_tools.results_files.PageRun`), so the
  site can say whether a device's figures come from the page's current code.
- :func:`chapter_pages`: a chapter's pages in order with their GPU budgets, from
  its ``order.txt`` (``plot_cpu_vs_gpu.py  gpu 12 s``).
- :func:`stale_pages`: the pages whose recording on a device is missing, failed
  or made by other code, most stale first (``nox -s docs -- --record --stale``).

Usage::

    python -m gpuguide_tools.pages --examples examples --results docs/results --stale
    python -m gpuguide_tools.pages --examples examples --budgets
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import gpuguide
from gpuguide_tools.results_files import ResultsFile

__all__ = [
    "GPU_BUDGET_S",
    "GPU_PAGE_LIMIT_S",
    "GPU_PROCESS_PAGE_LIMIT_S",
    "PageCode",
    "Stale",
    "budget_problems",
    "chapter_pages",
    "digest",
    "gpu_budgets",
    "helper_modules",
    "main",
    "page_code",
    "stale_pages",
]

#: The GPU seconds a cold full build may spend executing every page (an H100): 240 s
#: for the first 39 pages, 320 s since the pages on utilization, MFU, diagnosis and
#: hidden memory (estimates, none yet run on a GPU). ``gpu-check`` waits 540 s for the
#: whole build; a CPU build spends about 60 s outside its pages (261 s in all, 196 s
#: of pages, at c4183fb).
GPU_BUDGET_S = 320.0
#: The most one page may declare ...
GPU_PAGE_LIMIT_S = 25.0
#: ... except a page that starts fresh processes to time cold starts.
GPU_PROCESS_PAGE_LIMIT_S = 60.0
#: The pages allowed :data:`GPU_PROCESS_PAGE_LIMIT_S`.
PROCESS_PAGES = frozenset({"plot_compile_cold_start"})

#: The helpers the pages import: ``src/gpuguide`` in a checkout, or an installed copy.
HELPERS_DIR = Path(gpuguide.__file__).resolve().parent
_PACKAGE = "gpuguide"
_MODULE_NAME = re.compile(r"\bgpuguide(?:\.[a-z_][a-z0-9_]*)+")
_ORDER_LINE = re.compile(
    r"^(?P<name>plot_\w+\.py)(?:\s+gpu\s+(?P<seconds>\d+(?:\.\d+)?)\s*s)?$"
)


def digest(files: Iterable[tuple[str, bytes]]) -> str:
    """``"3 file(s), sha256 3f2a9c0d1e4b"`` of (name, content) pairs, or ``"none"``."""
    pairs = sorted(files)
    if not pairs:
        return "none"
    hashed = hashlib.sha256()
    for name, content in pairs:
        hashed.update(name.encode() + b"\0" + content + b"\0")
    return f"{len(pairs)} file(s), sha256 {hashed.hexdigest()[:12]}"


def _module_file(name: str, root: Path) -> Path | None:
    """The file of module ``gpuguide.x.y`` under ``root`` (the package folder)."""
    parts = name.split(".")[1:]
    base = root.joinpath(*parts) if parts else root
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported(tree: ast.AST, module: str) -> set[str]:
    """The gpuguide modules a parsed file names: imports (relative ones resolved
    against ``module``), ``from gpuguide.x import y`` (``y`` may be a module),
    and a string that is a module's name (a fork server's preloads)."""
    names: set[str] = set()
    package = module if module.count(".") == 0 else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _MODULE_NAME.fullmatch(node.value)  # a module named, not a docstring
        ):
            names.add(node.value)
    return {n for n in names if n == _PACKAGE or n.startswith(f"{_PACKAGE}.")}


def helper_modules(script: str | Path, root: str | Path = HELPERS_DIR) -> list[Path]:
    """The helper files a page runs: the gpuguide modules it imports, the
    modules those import, and the packages they belong to, sorted."""
    root = Path(root)
    todo = list(_imported(ast.parse(Path(script).read_bytes()), "__main__"))
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for depth in range(1, len(parts) + 1):  # the packages on the way run too
            prefix = ".".join(parts[:depth])
            path = _module_file(prefix, root)
            if path is None or prefix in seen:
                continue
            seen[prefix] = path
            module = prefix if path.name != "__init__.py" else f"{prefix}.__init__"
            todo.extend(_imported(ast.parse(path.read_bytes()), module))
    return sorted(set(seen.values()))


@dataclass(frozen=True)
class PageCode:
    """Digests of what a page runs: its ``source`` and the ``helpers`` it imports."""

    source: str
    helpers: str


def page_code(script: str | Path, root: str | Path = HELPERS_DIR) -> PageCode:
    """The digests of ``script`` and of the helper modules it runs (paths
    relative to the helpers' folder, so a copy elsewhere digests the same)."""
    script, root = Path(script), Path(root)
    helpers = [
        (path.relative_to(root).as_posix(), path.read_bytes())
        for path in helper_modules(script, root)
    ]
    return PageCode(digest([(script.name, script.read_bytes())]), digest(helpers))


def chapter_pages(folder: str | Path) -> list[tuple[str, float | None]]:
    """A chapter's pages as its ``order.txt`` lists them, with their GPU seconds.

    Each line names a page and may give its budget: ``plot_ddp.py  gpu 12 s``;
    ``#`` starts a comment. Raises ``ValueError`` naming the file and line for
    a line that is neither.
    """
    listing = Path(folder) / "order.txt"
    if not listing.is_file():
        return []
    pages: list[tuple[str, float | None]] = []
    for number, line in enumerate(listing.read_text().splitlines(), 1):
        text = " ".join(line.split("#", 1)[0].split())
        if not text:
            continue
        found = _ORDER_LINE.match(text)
        if found is None:
            msg = (
                f"{listing}, line {number}: expected 'plot_name.py' or "
                f"'plot_name.py  gpu SECONDS s', got {line.strip()!r}"
            )
            raise ValueError(msg)
        seconds = found["seconds"]
        pages.append((found["name"], None if seconds is None else float(seconds)))
    return pages


def gpu_budgets(examples: str | Path) -> dict[str, float | None]:
    """Every page's GPU seconds by page name (None: not declared), chapter by chapter."""
    budgets: dict[str, float | None] = {}
    for chapter in sorted(p for p in Path(examples).iterdir() if p.is_dir()):
        declared = dict(chapter_pages(chapter))
        for script in sorted(chapter.glob("plot_*.py")):
            budgets[script.stem] = declared.get(script.name)
    return budgets


def budget_problems(budgets: Mapping[str, float | None]) -> list[str]:
    """What breaks the GPU budget: a page without one, a page over its limit, a
    sum over :data:`GPU_BUDGET_S`. Empty when the budgets hold."""
    problems = [
        f"{page} declares no GPU seconds" for page, s in budgets.items() if s is None
    ]
    for page, seconds in budgets.items():
        limit = GPU_PROCESS_PAGE_LIMIT_S if page in PROCESS_PAGES else GPU_PAGE_LIMIT_S
        if seconds is not None and seconds > limit:
            problems.append(f"{page} declares {seconds:g} s, over its {limit:g} s")
    total = sum(s for s in budgets.values() if s is not None)
    if total > GPU_BUDGET_S:
        problems.append(
            f"the pages declare {total:g} s in all, over {GPU_BUDGET_S:g} s"
        )
    return problems


@dataclass(frozen=True)
class Stale:
    """A page whose recording on a device is out of date, and why."""

    page: str
    reason: str
    rank: tuple[int, str]

    def __str__(self) -> str:
        return f"{self.page}: {self.reason}"


def _when(date: str) -> datetime:
    when = datetime.fromisoformat(date[:-1] + "+00:00" if date.endswith("Z") else date)
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def stale_pages(
    scripts: Sequence[Path],
    recording: ResultsFile | None,
    root: str | Path = HELPERS_DIR,
) -> list[Stale]:
    """The pages of ``scripts`` whose recording in ``recording`` is out of date,
    most stale first: missing (never recorded), failed at their latest run, then
    recorded from other code, oldest first. Pages recorded from their current
    code are left out."""
    stale: list[Stale] = []
    for script in scripts:
        page = script.stem
        record = recording.page_record(page) if recording is not None else None
        if record is None or record.recorded is None:
            has = recording is not None and recording.for_page(page)
            why = "recorded before pages named their code" if has else "not recorded"
            stale.append(Stale(page, why, (0, "")))
            continue
        run = record.recorded
        if record.failed is not None:
            failed = record.failed
            why = (
                f"failed at its latest run ({failed.date[:10]}, {failed.commit_label})"
            )
            stale.append(Stale(page, why, (0, failed.date)))
            continue
        code = page_code(script, root)
        if not run.same_code(code.source, code.helpers):
            what = "the page" if run.source != code.source else "the helpers it uses"
            why = f"recorded at {run.commit_label} ({run.date[:10]}); {what} changed since"
            stale.append(Stale(page, why, (1, _when(run.date).isoformat())))
    return sorted(stale, key=lambda s: s.rank)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m gpuguide_tools.pages",
        description="The guide's pages: stale recordings, GPU budgets.",
    )
    parser.add_argument("--examples", type=Path, default=Path("examples"))
    parser.add_argument("--results", type=Path, default=Path("docs/results"))
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--stale",
        action="store_true",
        help="this device's stale pages, most stale first",
    )
    what.add_argument("--budgets", action="store_true", help="each page's GPU seconds")
    args = parser.parse_args(argv)
    if args.budgets:
        budgets = gpu_budgets(args.examples)
        for page, seconds in budgets.items():
            print(f"{page}\t{'-' if seconds is None else f'{seconds:g}'}")
        problems = budget_problems(budgets)
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1 if problems else 0
    from gpuguide.results import current_device
    from gpuguide_tools.results_files import file_name, load

    target = args.results / file_name(current_device())
    recording = load(target) if target.exists() else None
    scripts = sorted(args.examples.glob("*/plot_*.py"))
    for stale in stale_pages(scripts, recording):
        print(f"{stale.page}\t{stale.reason}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
