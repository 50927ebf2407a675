"""Imported once, by :func:`gpuguide.chapters.coldstart.run_fresh`'s fork server
(see :data:`~gpuguide.chapters.coldstart.PRELOAD`): runs inductor's CPU probe there
and keeps its time, so that every child forked from the server inherits both and
pays the probe in none of its measurements."""

from gpuguide.chapters import coldstart

coldstart.SERVER_PROBE_S = coldstart.probe_cpu()
