"""report() of a size in bytes: binary units on the page, bytes in the record."""

from __future__ import annotations

import gpuguide
from gpuguide import results


def test_report_prints_bytes_in_binary_units_and_records_bytes(monkeypatch, capsys):
    monkeypatch.delenv(results.RECORD_ENV, raising=False)
    monkeypatch.setattr(results, "default_page", lambda: "plot_bytes_test")
    results.clear()
    try:
        kept = gpuguide.report("kept for backward", 18 * 2**20, unit="B", size="4x64")
        assert capsys.readouterr().out == "kept for backward: 18.0 MiB\n"
        assert (kept.value, kept.unit, kept.size) == (18 * 2**20, "B", "4x64")
        gpuguide.report("returned", 512, unit="B")
        assert capsys.readouterr().out == "returned: 512 B\n"
    finally:
        results.clear()
