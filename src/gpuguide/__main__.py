"""``python -m gpuguide``: the check-up (:mod:`gpuguide_tools.checkup`);
``python -m gpuguide diagnose SCRIPT`` diagnoses a training step
(:mod:`gpuguide_tools.diagnose`); ``python -m gpuguide --version`` prints the
versions of gpuguide, torch and CUDA."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the diagnosis or, by default, the check-up."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["diagnose"]:
        from gpuguide_tools.diagnose import main as diagnose

        return diagnose(args[1:])
    from gpuguide_tools.checkup import main as checkup

    return checkup(args)


if __name__ == "__main__":
    raise SystemExit(main())
