"""The hooks that isolate sphinx-gallery examples from each other."""

from __future__ import annotations

import io
import logging
import random
import re
import sys
import warnings

import numpy as np
import pytest
import torch

import gallery_hooks as _gallery
from gallery_hooks import ChapterOrder, reset_torch_state


@pytest.fixture
def restore_torch():
    """Leave torch as the test found it, whatever the test changed."""
    threads = torch.get_num_threads()
    yield
    reset_torch_state(when="after")
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("restore_torch")
def test_reset_restores_every_global_flag():
    reset_torch_state(when="after")  # records the defaults
    threads = torch.get_num_threads()

    torch.set_float32_matmul_precision("medium")
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = True
    torch.set_default_dtype(torch.float64)
    torch.set_default_device("meta")
    torch.set_num_threads(1 if threads > 1 else 2)
    torch.use_deterministic_algorithms(True)

    reset_torch_state(when="after")

    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.allow_tf32 is False  # readable: no API mix-up
    assert torch.backends.cudnn.allow_tf32 is True
    assert torch.backends.cudnn.benchmark is False
    assert torch.backends.cudnn.deterministic is False
    assert torch.are_deterministic_algorithms_enabled() is False
    assert torch.get_default_dtype() is torch.float32
    assert torch.empty(1).device.type == "cpu"
    assert torch.get_num_threads() == threads


@pytest.mark.usefixtures("restore_torch")
def test_reset_reseeds_every_generator():
    reset_torch_state(when="after")
    first = (random.random(), np.random.rand(), torch.rand(3))  # noqa: NPY002
    reset_torch_state(when="after")
    second = (random.random(), np.random.rand(), torch.rand(3))  # noqa: NPY002
    assert first[0] == second[0]
    assert first[1] == second[1]
    assert torch.equal(first[2], second[2])


@pytest.mark.usefixtures("restore_torch")
def test_reset_clears_dynamo_caches():
    pytest.importorskip("torch._dynamo")
    import torch._dynamo

    calls = []

    def backend(gm, example_inputs):
        calls.append(1)
        return gm.forward

    fn = torch.compile(lambda x: x * 2 + 1, backend=backend)
    fn(torch.ones(3))
    fn(torch.ones(3))
    assert len(calls) == 1  # cached after the first call
    reset_torch_state(when="after")
    fn(torch.ones(3))
    assert len(calls) == 2  # the cache was dropped, so it compiled again


@pytest.mark.usefixtures("restore_torch")
def test_warnings_are_errors_inside_an_example_only():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reset_torch_state(when="before")
        with pytest.raises(UserWarning, match="uncaught"):
            warnings.warn("uncaught", UserWarning, stacklevel=1)
        # Agg's complaint about plt.show() is not the example's fault.
        warnings.warn(
            "FigureCanvasAgg is non-interactive, and thus cannot be shown",
            UserWarning,
            stacklevel=1,
        )
        # An example that catches a warning on purpose still can.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.warn("on purpose", DeprecationWarning, stacklevel=1)
        assert [str(w.message) for w in caught] == ["on purpose"]
        reset_torch_state(when="after")
        warnings.warn("after the example", UserWarning, stacklevel=1)  # ignored again


def test_reset_rejects_an_unknown_phase():
    with pytest.raises(ValueError, match="before"):
        reset_torch_state(when="during")


@pytest.mark.gpu
@pytest.mark.usefixtures("restore_torch")
def test_reset_clears_cuda_peak_memory():
    x = torch.empty(64 * 2**20, dtype=torch.uint8, device="cuda")
    del x
    assert torch.cuda.max_memory_allocated() >= 64 * 2**20
    reset_torch_state(when="after")
    assert torch.cuda.max_memory_allocated() < 64 * 2**20


def test_chapter_order_follows_order_txt(tmp_path):
    (tmp_path / "order.txt").write_text(
        "# pages\nplot_b.py  gpu 3 s\nplot_a.py  # second\n"
    )
    key = ChapterOrder(tmp_path)
    names = ["plot_z.py", "plot_a.py", "plot_c.py", "plot_b.py"]
    assert sorted(names, key=key) == [
        "plot_b.py",
        "plot_a.py",
        "plot_c.py",
        "plot_z.py",
    ]
    assert "ChapterOrder" in repr(key)


def test_chapter_order_without_listing_is_alphabetical(tmp_path):
    key = ChapterOrder(tmp_path)
    assert sorted(["plot_b.py", "plot_a.py"], key=key) == ["plot_a.py", "plot_b.py"]


def test_every_chapter_lists_all_its_examples():
    from conftest import EXAMPLES

    for chapter in {path.parent for path in EXAMPLES}:
        listed = set(ChapterOrder(chapter).order)
        present = {path.name for path in chapter.glob("plot_*.py")}
        assert listed == present, f"{chapter / 'order.txt'} is out of date"


def test_state_module_keeps_one_warning_context():
    reset_torch_state(when="before")
    reset_torch_state(when="before")  # a failed example never ran its "after"
    reset_torch_state(when="after")
    assert "warnings" not in _gallery._state


class _FollowsStderr(logging.Handler):
    """As torch 2.15's ``_StderrHandler``: a plain Handler whose stream is
    whatever ``sys.stderr`` is when it emits."""

    @property
    def stream(self):
        return sys.stderr

    def emit(self, record):
        self.stream.write(self.format(record) + "\n")


@pytest.mark.parametrize(
    "make", [logging.StreamHandler, _FollowsStderr], ids=["StreamHandler", "follows"]
)
def test_torch_logs_go_to_the_build_log_not_the_page(monkeypatch, capfd, make):
    page = io.StringIO()
    logger = logging.getLogger("torch")
    # A handler that writes to the page once sys.stderr is the page: a
    # StreamHandler pointed at it, or one that follows sys.stderr (torch 2.15).
    handler = make()
    monkeypatch.setattr(logger, "handlers", [handler])
    try:
        _gallery.reset_torch_state(when="before")
        monkeypatch.setattr(sys, "stderr", page)
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(page)
        logger.warning("No CUDA runtime is found")
    finally:
        monkeypatch.undo()
        _gallery.reset_torch_state(when="after")
    assert page.getvalue() == ""
    assert "No CUDA runtime is found" in capfd.readouterr().err
    # Applied once per handler, however many examples run.
    _gallery.reset_torch_state(when="before")
    _gallery.reset_torch_state(when="before")
    _gallery.reset_torch_state(when="after")


@pytest.fixture
def page(monkeypatch):
    """The page an example prints to: ``sys.stderr`` while the hooks are in force."""
    text = io.StringIO()
    _gallery.reset_torch_state(when="before")
    monkeypatch.setattr(sys, "stderr", text)
    yield text
    monkeypatch.undo()
    _gallery.reset_torch_state(when="after")


def test_a_torch_warning_reaches_the_build_log_in_torchs_format(page, capfd):
    # torch's own handler on torch._dynamo (registered loggers have their own).
    logging.getLogger("torch._dynamo").warning("recompiling %s", "forward")
    err = capfd.readouterr().err
    assert page.getvalue() == ""
    assert re.search(r"^W\d{4} .*\] recompiling forward$", err, re.MULTILINE), err


def test_what_torch_would_not_print_reaches_no_log(page, capfd):
    logging.getLogger("torch._dynamo").info("below torch's WARNING level")
    assert page.getvalue() == ""
    assert "below torch's WARNING level" not in capfd.readouterr().err


def test_torch_structured_trace_stays_out_of_the_build_log(monkeypatch, page, capfd):
    from torch._logging._internal import LazyTraceHandler, TorchLogsFormatter

    monkeypatch.delenv("TORCH_TRACE", raising=False)
    trace = logging.getLogger("torch.__trace")
    handler = LazyTraceHandler(None)  # as torch sets it up without TORCH_TRACE
    handler.setFormatter(TorchLogsFormatter(trace=True))
    monkeypatch.setattr(trace, "handlers", [handler])
    _gallery.reset_torch_state(when="before")  # a later example's hook

    trace.debug("", extra={"metadata": {"chromium_event": {}}, "payload": "{}"})
    assert page.getvalue() == ""
    assert "chromium_event" not in capfd.readouterr().err
    # torch's handler did its job: with no trace folder it removed itself, so
    # torch builds no more trace records.
    assert trace.handlers == []


def test_a_torch_log_file_gets_its_records(monkeypatch, tmp_path, page, capfd):
    logger = logging.getLogger("torch._inductor")
    to_file = logging.FileHandler(tmp_path / "torch.log")  # as TORCH_LOGS_OUT
    monkeypatch.setattr(logger, "handlers", [to_file])
    _gallery.reset_torch_state(when="before")
    logger.warning("kernel choice failed")
    to_file.close()
    assert "kernel choice failed" in (tmp_path / "torch.log").read_text()
    assert "kernel choice failed" not in capfd.readouterr().err
    assert page.getvalue() == ""


def test_quiet_build_log_drops_myst_configuration_not_its_warnings(monkeypatch):
    name, text = _gallery.UNNEEDED_LINES[0]
    logger = logging.getLogger(name)
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    monkeypatch.setattr(logger, "handlers", [handler])
    monkeypatch.setattr(logger, "filters", [])
    monkeypatch.setattr(logger, "propagate", False)
    _gallery.quiet_build_log()
    _gallery.quiet_build_log()  # once per logger
    assert len(logger.filters) == 1

    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        logger.info("myst v5.2.0: %s(commonmark_only=False)", text.rstrip("("))
        logger.info("myst: another line")
        logger.warning("myst configuration invalid: %s(...)", text.rstrip("("))
    finally:
        logger.setLevel(level)
    assert said == ["myst: another line", f"myst configuration invalid: {text}...)"]


def test_reset_collects_the_previous_pages_globals():
    # A page's functions refer to the globals that hold its tensors: a cycle
    # that only the garbage collector frees, and it must be freed before the
    # next page sizes itself (and, on CUDA, before the cache is emptied).
    import gc
    import weakref

    class Big:
        pass

    page_globals: dict[str, object] = {"tensor": Big()}
    page_globals["globals"] = page_globals  # as a page's function holds them
    alive = weakref.ref(page_globals["tensor"])
    enabled = gc.isenabled()
    gc.disable()  # no collection but the reset's
    try:
        del page_globals
        assert alive() is not None
        reset_torch_state(when="after")
        assert alive() is None
    finally:
        if enabled:
            gc.enable()
