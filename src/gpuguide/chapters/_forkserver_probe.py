"""Imported once, by :func:`gpuguide.chapters.coldstart.run_fresh`'s fork server
(see :data:`~gpuguide.chapters.coldstart.PRELOAD`) where the children compile for a
CPU (on a GPU the server leaves it out): runs inductor's CPU probe there and keeps
its time, so that every child forked from the server inherits both and
pays the probe in none of its measurements. What the probe writes to stderr (a
CUDA build of torch on a machine without a GPU logs a line) goes nowhere: the
server shares the page's stderr, and the children's output is kept off it. A
probe that fails (no C++ compiler, say) leaves the time unset: the server must
start whatever happens (it ignores only an ImportError), and each child then
probes, or fails with its own message, on its own."""

from gpuguide.chapters import coldstart

with coldstart.quiet_stderr():
    try:
        coldstart.SERVER_PROBE_S = coldstart.probe_cpu()
    except Exception:  # see above: each child meets the error itself
        coldstart.SERVER_PROBE_S = None
