"""What the pages are made of, and what some of them must print.

Each page executes once per test run, in the session's site build
(``tests/test_docs_build.py``): its test there,
``test_example_page_has_figures_output_and_provenance[<page>]``, reads what
the page printed and applies :data:`PAGE_CHECKS`. How a reader runs one
downloaded script (``python plot_x.py``, in a fresh environment) is tested in
``tests/test_downloads.py``. On a GPU the docs build is the pages' test: no
test marked ``gpu`` runs a page again (checked below), so ``pytest -m gpu``
holds only the CUDA units (timer, memory, NVML, CUDA graphs, NCCL).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from conftest import EXAMPLES

TESTS = Path(__file__).resolve().parent


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


def _cell_ends(source):
    """The last statement of each ``# %%`` cell of an example's source."""
    for cell in re.split(r"^# %%.*$", source, flags=re.MULTILINE):
        body = ast.parse(cell).body
        if body:
            yield body[-1]


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_no_cell_ends_with_a_recorded_value(script):
    # sphinx-gallery and Jupyter print a cell's last value: Result(page=...).
    ends = [
        ast.unparse(end)[:80]
        for end in _cell_ends(script.read_text())
        if isinstance(end, ast.Expr)
        and isinstance(end.value, ast.Call)
        and ast.unparse(end.value.func).split(".")[-1] == "record"
    ]
    assert not ends, ends


# -- what some pages print, checked on the site build's output (test_docs_build) -----

_PREFIXES = {"": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BYTES = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def _rates(pattern: str, out: str) -> dict[str, float]:
    """``{group 1: the FLOP/s of group 2}`` for each line of ``out`` that matches
    ``pattern``, whose second group is a rate as printed (``"67.4 GFLOP/s"``)."""
    found = {}
    for match in re.finditer(pattern, out, re.MULTILINE):
        number, prefix = re.fullmatch(r"([\d.]+) ([kMGTP]?)FLOP/s", match[2]).groups()
        found[match[1]] = float(number) * _PREFIXES[prefix]
    return found


def _bytes(text: str) -> float:
    number, unit = text.split()
    return float(number) * _BYTES[unit]


def check_dtype_throughput(out: str) -> None:
    """Each dtype's "best matmul" is the best rate of its page: at least its
    largest square's (the search includes the squares, with MAMF's statistic)."""
    rate = r"([\d.]+ [kMGTP]?FLOP/s)"
    squares = _rates(rf"^(\w+) square matmul: {rate}", out)
    best = _rates(rf"^best matmul \(dtype=(\w+)\): {rate}", out)
    assert squares, out
    assert best.keys() == squares.keys(), out
    below = {k: (best[k], squares[k]) for k in best if best[k] < squares[k]}
    assert not below, f"a best below its own square (best, square): {below}"


def check_kept_losses(out: str) -> None:
    """The growth is per step, one name for both loops; a kept ``loss.detach()``
    adds exactly one output-sized storage per step, the eval loop more."""
    growth = {
        m[1]: _bytes(m[2])
        for m in re.finditer(
            r"^memory growth per step \(loop=(.+)\): ([\d.]+ \w?i?B)$", out, re.M
        )
    }
    assert set(growth) == {"eval: append(loss)", "train: append(loss.detach())"}, out
    output = re.search(r"as much as the model's output \(([\d.]+ \w?i?B)\)", out)
    assert output is not None, out
    assert growth["train: append(loss.detach())"] == _bytes(output[1])
    assert growth["eval: append(loss)"] > growth["train: append(loss.detach())"]
    # Resident memory's drift, where printed, says how much of it the first step took.
    drift = re.search(
        r"resident memory grew ([\d.]+) MiB over (\d+) steps, ([\d.]+) MiB of it in "
        r"the first step",
        out,
    )
    if "resident memory grew" in out:
        assert drift is not None, out


def check_transfer_bandwidth(out: str) -> None:
    """A copy's bandwidth depends on its size: the figure names it, at most 64 MiB."""
    named = re.findall(r"^copy, host-to-host \(copy=([\d.]+ \w?i?B)\): ", out, re.M)
    assert len(named) == 1, out
    assert 4096 <= _bytes(named[0]) <= 2**26


#: Checks of one page's printed output, by page.
PAGE_CHECKS = {
    "plot_dtype_throughput": check_dtype_throughput,
    "plot_kept_losses": check_kept_losses,
    "plot_transfer_bandwidth": check_transfer_bandwidth,
}


def test_the_page_checks_name_pages_that_exist():
    assert set(PAGE_CHECKS) <= {script.stem for script in EXAMPLES}


def test_the_dtype_check_fails_on_a_best_below_a_square():
    good = (
        "fp64 square matmul: 67.4 GFLOP/s (66.6-68.1), 100% of the fp64 peak\n"
        "best matmul (dtype=fp64): 69.4 GFLOP/s (69.0-69.8), 100% of the fp64 peak\n"
    )
    check_dtype_throughput(good)
    # The H100's recording from before the squares joined the search.
    bad = (
        "fp64 square matmul: 61.3 TFLOP/s (61.1-61.4), 91% of the fp64 peak\n"
        "best matmul (dtype=fp64): 59.1 TFLOP/s (59.0-59.1), 88% of the fp64 peak\n"
    )
    with pytest.raises(AssertionError, match="best below its own square"):
        check_dtype_throughput(bad)


# -- pytest -m gpu runs no page --------------------------------------------------


def _marks_gpu(decorators: list[ast.expr]) -> bool:
    """Whether ``decorators`` (or a ``pytestmark``) include ``pytest.mark.gpu``."""
    return any(
        isinstance(part, ast.Attribute)
        and part.attr == "gpu"
        and ast.unparse(part.value).endswith("mark")
        for node in decorators
        for part in ast.walk(node)
    )


def _runs_pages(node: ast.AST) -> str | None:
    """What in ``node`` (a test and its decorators) reaches the example pages: the
    list of pages, a path into ``examples/``, a page's name, ``runpy``, or the
    ``site`` fixture (the whole site built, every page executed); else None."""
    docstring = None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
        if "site" in names:
            return "the site fixture"
        if ast.get_docstring(node) is not None:
            docstring = node.body[0].value  # type: ignore[attr-defined]
    for part in ast.walk(node):
        if part is docstring:
            continue
        if isinstance(part, ast.Name) and part.id in {"EXAMPLES", "runpy", "run_path"}:
            return part.id
        if isinstance(part, ast.Attribute) and part.attr in {"run_path", "EXAMPLES"}:
            return part.attr
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text = part.value
            if "examples" in text or re.search(r"\bplot_\w+", text):
                return repr(text)
    return None


def gpu_tests_that_run_pages(source: str) -> dict[str, str]:
    """The tests in a test module's ``source`` marked ``gpu`` (each, or the whole
    module by ``pytestmark``) that reach an example page, with what reaches it.

    A helper of the module that a gpu test calls counts as part of the test.
    """
    tree = ast.parse(source)
    helpers = {
        node.name: node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    module_gpu = any(
        isinstance(node, ast.Assign)
        and any(ast.unparse(t) == "pytestmark" for t in node.targets)
        and _marks_gpu([node.value])
        for node in tree.body
    )
    found = {}
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not node.name.startswith("test") or not (
            module_gpu or _marks_gpu(node.decorator_list)
        ):
            continue
        reached, seen, todo = None, set(), [node]
        while todo and reached is None:
            current = todo.pop()
            seen.add(current.name)
            reached = _runs_pages(current)
            calls = {
                part.func.id
                for part in ast.walk(current)
                if isinstance(part, ast.Call) and isinstance(part.func, ast.Name)
            }
            todo += [helpers[c] for c in calls if c in helpers and c not in seen]
        if reached is not None:
            found[node.name] = reached
    return found


@pytest.mark.parametrize(
    "module", sorted(TESTS.glob("test_*.py")), ids=lambda p: p.stem
)
def test_no_gpu_test_runs_an_example_page(module):
    assert gpu_tests_that_run_pages(module.read_text()) == {}


def test_the_gpu_check_sees_a_page_run_again_on_cuda():
    # The test this module had: every page as a script again on CUDA (4-7 min).
    old = """
import pytest
from conftest import EXAMPLES


def _run(script, tmp_path, **extra_env):
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_cuda(script, tmp_path):
    assert _run(script, tmp_path, GPUGUIDE_DEVICE="cuda").returncode == 0
"""
    assert gpu_tests_that_run_pages(old) == {"test_example_runs_on_cuda": "EXAMPLES"}
    helper = """
import pytest


def _first_page():
    return ROOT / "examples" / "01_basics" / "plot_cpu_vs_gpu.py"


pytestmark = pytest.mark.gpu


def test_one_page(tmp_path):
    subprocess.run([sys.executable, str(_first_page())], cwd=tmp_path)


def test_the_site(site):
    assert site
"""
    assert gpu_tests_that_run_pages(helper) == {
        "test_one_page": "'plot_cpu_vs_gpu.py'",
        "test_the_site": "the site fixture",
    }
    # A gpu test of a unit, and a CPU test of the pages, are fine.
    fine = """
import pytest
from conftest import EXAMPLES


@pytest.mark.gpu
def test_timer():
    assert benchmark(torch.mm, args=(a, a)).method == "cuda-events"


@pytest.mark.parametrize("script", EXAMPLES)
def test_page(script):
    run(script)
"""
    assert gpu_tests_that_run_pages(fine) == {}
