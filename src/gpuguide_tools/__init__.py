"""Programs beside the gpuguide helpers, shipped in the same wheel.

A page imports :mod:`gpuguide`; these are run from the command line, and no
module of :mod:`gpuguide` imports them (``python -m gpuguide`` excepted, which
runs the check-up):

- :mod:`gpuguide_tools.checkup`: ``python -m gpuguide`` (or
  ``gpuguide-checkup``), a one-screen check-up of this machine against the
  recorded devices;
- :mod:`gpuguide_tools.recorder`: ``nox -s record`` (``python -m
  gpuguide_tools.recorder``), every page run on this device, its figures
  written into the device's results file; the docs build that records
  (``nox -s docs -- --record``) finishes its file the same way.
"""
