"""``python -m gpuguide``: the check-up (:mod:`gpuguide_tools.checkup`)."""

from gpuguide_tools.checkup import main

if __name__ == "__main__":
    raise SystemExit(main())
