"""The docs build's hooks: examples independent of each other, files copied.

A local Sphinx extension module, not part of the gpuguide package: it is build
policy (warnings fail the build) that a reader who installs the helpers does
not need. ``docs/conf.py`` puts this folder on ``sys.path`` and names the hooks.

sphinx-gallery runs every example in one Python process, so a flag one example
sets (TF32, a default dtype, a thread count, a compiled-graph cache) would leak
into the next page's measurements. :func:`reset_torch_state` is registered in
``docs/conf.py`` as a ``reset_modules`` hook that runs before and after every
example. Before an example it also turns warnings into errors, so a warning
that an example does not catch on purpose fails the build; warnings that torch
attributes to its own modules are ignored (:mod:`gpuguide.quiet`).
"""

from __future__ import annotations

import random
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from gpuguide.quiet import ignore_torch_internal_warnings

__all__ = ["SEED", "ChapterOrder", "copy_artifacts", "reset_torch_state"]

#: The seed every example starts from.
SEED = 0

# Warnings that are not about the example's code and must not fail the build.
_ALLOWED_WARNINGS: tuple[tuple[type[Warning], str], ...] = (
    # matplotlib's non-interactive Agg backend complains about plt.show().
    (
        UserWarning,
        r"(?s).*(non-GUI backend|is non-interactive, and thus cannot be shown)",
    ),
)

# Objects that carry the TF32 switches of torch >= 2.9 (``fp32_precision``).
_PRECISION_PATHS = (
    "backends",
    "backends.cuda.matmul",
    "backends.cudnn",
    "backends.cudnn.conv",
    "backends.cudnn.rnn",
    "backends.mkldnn",
    "backends.mkldnn.matmul",
    "backends.mkldnn.conv",
    "backends.mkldnn.rnn",
)

_state: dict[str, Any] = {}


def _resolve(path: str) -> Any:
    obj: Any = torch
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _precision_objects() -> dict[str, Any]:
    found = {}
    for path in _PRECISION_PATHS:
        obj = _resolve(path)
        if obj is not None and hasattr(obj, "fp32_precision"):
            found[path] = obj
    return found


def _snapshot_defaults() -> None:
    """Record the process's defaults the first time the hook runs."""
    if _state:
        return
    _state["num_threads"] = torch.get_num_threads()
    _state["fp32_precision"] = {
        path: obj.fp32_precision for path, obj in _precision_objects().items()
    }


def _reset_precision() -> None:
    # The new per-backend switches first, back to the process's own defaults,
    # then the legacy ones: torch refuses to read a TF32 flag whose two APIs
    # disagree, so both must end in the same, default, state (no TF32 for
    # matmuls, TF32 allowed for cuDNN convolutions).
    objects = _precision_objects()
    for path, value in _state["fp32_precision"].items():
        objects[path].fp32_precision = value
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = True


def _reset_cuda() -> None:
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    for index in range(torch.cuda.device_count()):
        torch.cuda.reset_peak_memory_stats(index)
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = True
    torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = True


def _errors_for_warnings() -> None:
    warnings.simplefilter("error")
    for category, message in _ALLOWED_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=category)
    # Torch's warnings about its own code are not the example's doing.
    ignore_torch_internal_warnings()


def reset_torch_state(
    gallery_conf: dict[str, Any] | None = None,
    fname: str | None = None,
    when: str = "before",
) -> None:
    """Put torch's global state back to its defaults around one example.

    Resets the TF32 and matmul-precision flags, the default dtype and device,
    the intra-op thread count, cuDNN's autotuner and determinism switches, the
    random seeds (Python, NumPy, torch on every device), dynamo's caches, and
    CUDA's cached blocks and peak-memory statistics.

    Parameters
    ----------
    gallery_conf : dict, optional
        sphinx-gallery's configuration (unused; part of the hook's signature).
    fname : str, optional
        The example's file name (unused).
    when : {"before", "after"}
        ``"before"`` also turns warnings into errors for the example;
        ``"after"`` restores the warning filters that were in force before.

    Notes
    -----
    Register it in ``conf.py`` with ``"reset_modules_order": "both"`` and its
    fully qualified name, ``"gallery_hooks.reset_torch_state"``.
    """
    if when not in ("before", "after"):
        msg = f"when must be 'before' or 'after', got {when!r}"
        raise ValueError(msg)
    _snapshot_defaults()

    _reset_precision()
    torch.set_default_dtype(torch.float32)
    torch.set_default_device(None)
    torch.set_num_threads(_state["num_threads"])
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = False
    torch.use_deterministic_algorithms(False)
    if "torch._dynamo" in sys.modules:  # imported only by examples that compile
        torch._dynamo.reset()
    _reset_cuda()

    random.seed(SEED)
    np.random.seed(SEED)  # noqa: NPY002 - the legacy global RNG is what examples share
    torch.manual_seed(SEED)

    saved = _state.pop("warnings", None)
    if saved is not None:  # close the previous example's filters first
        saved.__exit__(None, None, None)
    if when == "before":
        saved = warnings.catch_warnings()
        saved.__enter__()
        _state["warnings"] = saved
        _errors_for_warnings()


class ChapterOrder:
    """Order a chapter's examples as its ``order.txt`` lists them.

    sphinx-gallery's ``within_subsection_order`` hook: it is built with the
    chapter's folder and then used as a sort key on file names. Files that
    ``order.txt`` (one file name a line, ``#`` comments allowed) does not list
    come after the listed ones, alphabetically.
    """

    def __init__(self, src_dir: str | Path) -> None:
        self.src_dir = Path(src_dir)
        listing = self.src_dir / "order.txt"
        names: list[str] = []
        if listing.is_file():
            for line in listing.read_text().splitlines():
                line = line.split("#", 1)[0].strip()
                if line:
                    names.append(line)
        self.order = {name: rank for rank, name in enumerate(names)}

    def __call__(self, filename: str) -> tuple[int, str]:
        return (self.order.get(Path(filename).name, len(self.order)), filename)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} for {self.src_dir}>"


def copy_artifacts(source: str | Path, target: str | Path) -> list[Path]:
    """Copy the files examples wrote for download into the built site.

    Parameters
    ----------
    source : path
        The directory examples wrote to (``GPUGUIDE_ARTIFACT_DIR``). It may not
        exist: then nothing is copied.
    target : path
        Where the pages' links point to, e.g. ``<html>/_artifacts``.

    Returns
    -------
    list of pathlib.Path
        The files copied, sorted.
    """
    source, target = Path(source), Path(target)
    if not source.is_dir():
        return []
    copied = []
    for path in sorted(p for p in source.iterdir() if p.is_file()):
        target.mkdir(parents=True, exist_ok=True)
        copied.append(Path(shutil.copy2(path, target / path.name)))
    return copied
