"""Torch's warnings about its own code never fail a run; others still do."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
from conftest import ROOT

from gpuguide import quiet


def _warn_from(module: str) -> None:
    warnings.warn_explicit(
        "`torch.jit.script_method` is deprecated.",
        DeprecationWarning,
        filename=f"{module.replace('.', '/')}.py",
        lineno=19,
        module=module,
    )


@pytest.mark.parametrize(
    "module", ["torch", "torch.utils.mkldnn", "torch._inductor.compile_fx"]
)
def test_torch_internal_warnings_are_ignored_under_error(module):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.ignore_torch_internal_warnings()
        _warn_from(module)  # raises if the filter did not win


@pytest.mark.parametrize("module", ["__main__", "torchvision.ops", "plot_fusion"])
def test_other_warnings_still_fail(module):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.ignore_torch_internal_warnings()
        with pytest.raises(DeprecationWarning, match="deprecated"):
            _warn_from(module)


def test_the_filter_is_added_once():
    with warnings.catch_warnings():
        warnings.resetwarnings()
        quiet.ignore_torch_internal_warnings()
        quiet.ignore_torch_internal_warnings()
        assert len(warnings.filters) == 1
        action, _, category, module, _ = warnings.filters[0]
        assert (action, category) == ("ignore", Warning)
        assert module.pattern == quiet._TORCH_MODULES


def test_a_block_that_records_still_sees_torch_warnings():
    quiet.ignore_torch_internal_warnings()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn_from("torch.utils.mkldnn")
    assert [str(w.message) for w in caught] == [
        "`torch.jit.script_method` is deprecated."
    ]


@pytest.mark.parametrize(
    ("module", "internal"),
    [("torch", True), ("torch.cuda", True), ("torchvision", False), ("x.torch", False)],
)
def test_only_torchs_own_modules_are_ignored(module, internal):
    quiet.ignore_torch_internal_warnings()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quiet.ignore_torch_internal_warnings()
        if internal:
            _warn_from(module)  # ignored: no error
        else:
            with pytest.raises(DeprecationWarning):
                _warn_from(module)


def test_warning_text_drops_the_cpp_location_and_joins_lines():
    text = (
        "Synchronization debug mode is a prototype feature\n and does not"
        " detect all (Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)"
    )
    assert warning_text_of(text) == (
        "Synchronization debug mode is a prototype feature and does not detect all"
    )


def warning_text_of(text):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn(text, UserWarning, stacklevel=1)
    return quiet.warning_text(caught[0])


def test_warning_text_of_a_plain_string_or_warning():
    assert quiet.warning_text("a  b") == "a b"
    assert (
        quiet.warning_text(UserWarning("x (Triggered internally at y.cpp:1.)")) == "x"
    )


def test_importing_gpuguide_protects_a_script_run_with_w_error(tmp_path):
    script = tmp_path / "page.py"
    script.write_text(
        "import warnings\n"
        "import gpuguide\n"
        "warnings.warn_explicit('old', DeprecationWarning, 'm.py', 1,"
        " module='torch.utils.mkldnn')\n"
        "warnings.warn_explicit('mine', DeprecationWarning, 'p.py', 1, module='page')\n"
    )
    env = {"PYTHONPATH": str(ROOT / "src")}
    result = subprocess.run(
        [sys.executable, "-W", "error", str(script)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    # The torch warning passed; the page's own one still fails the run.
    assert result.returncode == 1
    assert "DeprecationWarning: mine" in result.stderr
    assert "old" not in result.stderr
