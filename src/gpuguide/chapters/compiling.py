"""Plumbing for the compile and fusion pages: start the compiler, show its logs,
count the passes a call makes, time the first calls, keep the warnings.

:func:`start_compiler` pays the compiler's one-off costs before a page times
anything: importing inductor, starting its pool of compile workers (processes
that each import torch, which on a machine with few cores slows whatever runs
meanwhile) and a first, one-line compilation. It times each step and keeps the
warnings the import raises: in torch 2.13 importing inductor imports
``torch.utils.mkldnn``, which still uses the deprecated
``torch.jit.script_method``, a warning about torch's own code.

:func:`print_recompiles` turns on dynamo's recompilation log
(``TORCH_LOGS=recompiles``) for a block and prints its messages to
``sys.stdout``: torch logs to stderr, which sphinx-gallery does not put on the
page. :func:`passes` lists the kernels (or CPU operators) one call runs, from
the profiler; :func:`first_calls_s` times the first calls of a function, where
compilation happens; :func:`recording` keeps the warnings a block raises.

Examples
--------
>>> from gpuguide.chapters.compiling import start_compiler
>>> start = start_compiler("cpu")  # doctest: +SKIP
>>> print(start)  # doctest: +SKIP
compiler ready: import 2.1 s, 2 compile workers 3.2 s, first compilation 1.4 s
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpuguide.device import as_device
from gpuguide.units import format_time

if TYPE_CHECKING:
    import torch

__all__ = [
    "CompilerStart",
    "first_calls_s",
    "passes",
    "print_recompiles",
    "recording",
    "start_compiler",
]

#: Operators that only allocate, left out of a CPU call's passes.
_ALLOCATIONS = ("aten::empty", "aten::empty_strided", "aten::empty_like")

#: The logger whose records :func:`print_recompiles` prints.
_DYNAMO_LOGGER = "torch._dynamo"


@dataclass(frozen=True)
class CompilerStart:
    """What getting ``torch.compile`` ready cost, step by step.

    Parameters
    ----------
    import_s : float
        Importing inductor, in seconds (near 0 if it was imported before).
    workers : int
        Compile worker processes inductor uses (1: it compiles in-process).
    workers_s : float
        Starting the workers and waiting until they were ready, in seconds.
    first_compile_s : float
        Compiling and running ``torch.sin`` on a small tensor, in seconds.
    caught : tuple of str
        The distinct warnings raised while importing, as ``"Category: message"``.
    """

    import_s: float
    workers: int
    workers_s: float
    first_compile_s: float
    caught: tuple[str, ...] = ()

    def __str__(self) -> str:
        """One line of times, then one line per warning caught while importing."""
        lines = [
            f"compiler ready: import {format_time(self.import_s)}, "
            f"{self.workers} compile worker(s) {format_time(self.workers_s)}, "
            f"first compilation {format_time(self.first_compile_s)}",
            *(
                f"caught while importing inductor (torch's own code): {text}"
                for text in self.caught
            ),
        ]
        return "\n".join(lines)


def start_compiler(device: str | torch.device | None = None) -> CompilerStart:
    """Import inductor, start its compile workers and compile one line, timed.

    Call it before timing anything that compiles, so that these one-off costs
    land neither in a compile time nor in a steady-state time. Every warning
    raised while importing is caught and returned in
    :attr:`CompilerStart.caught`, for the page to print.

    Parameters
    ----------
    device : torch.device or str or None
        Where the first compilation runs (None picks the default device).

    Returns
    -------
    CompilerStart
        The time of each step and the warnings caught.
    """
    import torch

    dev = as_device(device)
    sync = getattr(torch, dev.type).synchronize
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch._inductor.compile_fx
        from torch._inductor import config
        from torch._inductor.async_compile import AsyncCompile
    t1 = time.perf_counter()
    AsyncCompile.warm_pool()
    AsyncCompile.wait_pool_ready()
    t2 = time.perf_counter()
    torch.compile(torch.sin)(torch.ones(8, device=dev))
    sync()
    t3 = time.perf_counter()
    torch._dynamo.reset()
    texts = dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught)
    return CompilerStart(
        import_s=t1 - t0,
        workers=int(config.compile_threads or 1),
        workers_s=t2 - t1,
        first_compile_s=t3 - t2,
        caught=tuple(texts),
    )


class _PrintHandler(logging.Handler):
    """Print each line of a record's message, indented, to the current stdout."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def emit(self, record: logging.LogRecord) -> None:
        for line in record.getMessage().splitlines():
            print(f"{self.prefix}{line.strip()}")


@contextlib.contextmanager
def print_recompiles(prefix: str = "    [dynamo] ") -> Iterator[None]:
    """Print dynamo's recompilation messages to stdout inside the block.

    Inside the block, ``torch._logging.set_logs(recompiles=True)`` is in force
    and the records of the ``torch._dynamo`` logger (the reasons for each
    recompilation, and warnings such as a hit recompile limit) are printed,
    line by line, with ``print``, instead of going to torch's handler, which
    writes to stderr. Handlers that others added to the logger stay. Afterwards
    torch's log settings and handler are reset with ``torch._logging.set_logs()``.

    Parameters
    ----------
    prefix : str
        Put before every printed line.
    """
    import torch

    dynamo_log = logging.getLogger(_DYNAMO_LOGGER)
    before = list(dynamo_log.handlers)
    torch._logging.set_logs(recompiles=True)  # replaces torch's own handler
    for handler in [h for h in dynamo_log.handlers if h not in before]:
        dynamo_log.removeHandler(handler)  # torch's, to stderr
    printer = _PrintHandler(prefix)
    dynamo_log.addHandler(printer)
    try:
        yield
    finally:
        dynamo_log.removeHandler(printer)
        torch._logging.set_logs()  # torch's default settings and handler


def _inside_aten(event: Any) -> bool:
    """Whether a profiler event was called by an ``aten::`` operator."""
    while (event := event.cpu_parent) is not None:
        if event.name.startswith("aten::"):
            return True
    return False


def passes(fn: Callable[..., Any], *args: Any, device: str | torch.device) -> list[str]:
    """The passes over memory one call ``fn(*args)`` makes, by name, from the profiler.

    On CUDA: every device event that is neither a copy, a memset nor an
    annotation, i.e. each kernel (names cut to 48 characters). On the CPU: every
    ``aten::`` operator that no other operator called, other than allocations,
    and each call into a compiled graph (named by its graph).
    """
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    on_cuda = as_device(device).type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        fn(*args)
        getattr(torch, as_device(device).type).synchronize()
    events = prof.events()
    if on_cuda:
        return [
            e.name[:48]
            for e in events
            if e.device_type == DeviceType.CUDA
            and not e.is_user_annotation
            and not e.name.startswith(("Memcpy", "Memset"))
        ]
    return [
        e.name.split(" ")[2] if "CompiledFxGraph" in e.name else e.name
        for e in events
        if "CompiledFxGraph" in e.name
        or (
            e.name.startswith("aten::")
            and e.name not in _ALLOCATIONS
            and not _inside_aten(e)
        )
    ]


def first_calls_s(
    fn: Callable[..., Any], *args: Any, device: str | torch.device, calls: int = 3
) -> float:
    """Seconds that the first ``calls`` calls of ``fn(*args)`` take together.

    Synchronized before and after, on a host clock: a first call of a compiled
    function includes its compilation, which CUDA events would not see.
    """
    import torch

    sync = getattr(torch, as_device(device).type).synchronize
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    sync()
    return time.perf_counter() - t0


@contextlib.contextmanager
def recording(
    caught: dict[str, list[warnings.WarningMessage]], phase: str
) -> Iterator[None]:
    """Catch every warning the block raises, and keep it in ``caught[phase]``.

    The docs build turns warnings into errors; a page about a deprecated API
    catches its warnings on purpose with this and prints them.
    """
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        yield
    caught.setdefault(phase, []).extend(got)
