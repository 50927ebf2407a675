"""``python -m gpuguide``: the check-up (:mod:`gpuguide_tools.checkup`);
``python -m gpuguide --version`` prints the versions of gpuguide, torch and CUDA."""

from gpuguide_tools.checkup import main

if __name__ == "__main__":
    raise SystemExit(main())
