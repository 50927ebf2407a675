"""``python -m gpuguide``: the check-up (:mod:`gpuguide.checkup`)."""

from gpuguide.checkup import main

if __name__ == "__main__":
    raise SystemExit(main())
