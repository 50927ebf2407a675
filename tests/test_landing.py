"""The landing page's banner and cards, and the top of every example page."""

from __future__ import annotations

from conftest import EXAMPLES, ROOT
from landing import banner_text, chapters, page_top

import gpuguide

EXAMPLE_RST = """
.. only:: html

    .. note::
        :class: sphx-glr-download-link-note

        :ref:`Go to the end <sphx_glr_download_auto_examples_05_dtypes_plot_x.py>`
        to download the full example code.

.. rst-class:: sphx-glr-example-title

.. _sphx_glr_auto_examples_05_dtypes_plot_x.py:


A title
=======

Intro text.

.. code-block:: none

    Measured on CPU X (2 cores) | torch 2.13.0 | CUDA: none | 2026-11-23 06:00 UTC
    more output
"""


def test_the_banner_names_the_device_torch_and_date():
    info = gpuguide.describe_device()
    text = banner_text()
    assert info.torch_version in text
    assert (info.name if info.type == "cpu" else info.short_name) in text
    assert text.startswith("This copy of the guide was built and measured on")


def test_every_chapter_has_a_card_with_a_first_page_and_a_sentence():
    found = chapters(ROOT / "examples")
    folders = {p.parent for p in (ROOT / "examples").glob("*/GALLERY_HEADER.rst")}
    assert len(found) == len({p.parent.name for p in EXAMPLES}) == len(folders) >= 15
    for chapter in found:
        assert (
            ROOT / "examples" / chapter["folder"] / f"{chapter['page']}.py"
        ).exists()
        assert chapter["title"].startswith("Chapter ")
        assert chapter["sentence"].endswith((".", "!", "?"))
        assert "\n" not in chapter["sentence"]


def test_the_take_away_provenance_and_actions_go_under_the_title():
    out = page_top(EXAMPLE_RST, "plot_x.py")
    box = out.index(".. page-takeaway::")
    top = out.index(".. container:: gpuguide-page-top")
    # the title, the take-away box, then provenance and actions, then the intro
    assert out.index("=======") < box < top < out.index("Intro text.")
    block = out[top : out.index("Intro text.")]
    assert ":download:`Download the script <plot_x.py>`" in block
    assert ":download:`Download the notebook <plot_x.ipynb>`" in block
    assert "`View the source <plot_x.py.txt>`__" in block
    # the provenance line, its | escaped so that reST does not read substitutions
    assert "Measured on CPU X (2 cores) \\| torch 2.13.0 \\| CUDA: none" in block
    assert block.index("Measured on") < block.index("Download the script")
    assert page_top(out, "plot_x.py") == out  # done once only
    assert ".. figure::" not in out  # a page without a figure gets none


def test_the_first_figure_follows_the_take_away_box():
    image = "/auto_examples/05_dtypes/images/sphx_glr_plot_x_001.png"
    second = image.replace("_001", "_002")
    drawn = (
        f"\n    *\n      .. image-sg:: {image}\n         :class: sphx-glr-multi-img\n"
    )
    source = EXAMPLE_RST + drawn + drawn.replace(image, second)
    out = page_top(source, "plot_x.py")
    top = out.index(".. container:: gpuguide-page-top")
    figure = out.index(f".. figure:: {image}")
    assert top < figure < out.index("Intro text.")
    assert second not in out[: figure + 200]  # the first figure only
    assert out.count(f".. image-sg:: {image}") == 1  # drawn again where its code runs
    assert "\n.. figure::" in out  # at the top level, not in the list it came from


def test_the_go_to_the_end_note_is_gone():
    assert "Go to the end" in EXAMPLE_RST
    out = page_top(EXAMPLE_RST, "plot_x.py")
    assert "Go to the end" not in out
    assert "sphx-glr-download-link-note" not in out
    assert ".. only:: html" not in out
    # what followed the note stays, as it was
    assert out.lstrip().startswith(".. rst-class:: sphx-glr-example-title")


def test_a_page_without_provenance_gets_the_take_away_and_actions_only():
    source = EXAMPLE_RST.replace("Measured on", "Something else")
    out = page_top(source, "plot_x.py")
    assert "Download the script" in out
    assert ".. page-takeaway::" in out
    assert "Measured on" not in out
    assert page_top("no title here", "plot_x.py") == "no title here"
    # a build without claims_page, which renders the take-away, gets none
    assert ".. page-takeaway::" not in page_top(source, "plot_x.py", takeaway=False)


def test_the_sources_are_copied_as_text_next_to_their_pages(tmp_path):
    from landing import copy_sources

    out = tmp_path / "html"
    (out / "auto_examples" / "05_dtypes").mkdir(parents=True)
    count = copy_sources(ROOT / "examples", out)
    copied = sorted((out / "auto_examples" / "05_dtypes").glob("*.py.txt"))
    assert (
        count
        == len(copied)
        == len(list((ROOT / "examples" / "05_dtypes").glob("plot_*.py")))
    )
    for text in copied:
        original = ROOT / "examples" / "05_dtypes" / text.name.removesuffix(".txt")
        assert text.read_bytes() == original.read_bytes()


def test_the_device_figures_name_a_gpu_s_sms_memory_and_datasheet_peaks(monkeypatch):
    import dataclasses

    import landing

    h100 = dataclasses.replace(
        gpuguide.describe_device("cpu"), type="cuda", name="NVIDIA H100 80GB HBM3",
        variant="H100 SXM5", sm_count=132, total_memory_bytes=80 * 2**30,
        compute_capability=(9, 0), cuda_version="12.8",
    )  # fmt: skip
    monkeypatch.setattr(landing, "describe_device", lambda: h100)
    rows = dict(landing.device_rows())
    assert rows["device"] == "H100 SXM5"
    assert rows["streaming multiprocessors"] == "132"
    assert rows["compute capability"] == "9.0"
    assert rows["device memory"] == "80.0 GiB"
    assert rows["peak bf16 matmul"] == gpuguide.format_value(
        gpuguide.device_peaks(h100).flops["bf16"], "FLOP/s"
    )
    assert rows["source of the peaks"] == gpuguide.device_peaks(h100).source


def test_the_provenance_a_page_prints_is_one_compact_line():
    import dataclasses
    from datetime import datetime, timezone

    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")  # the line's date
    cpu = dataclasses.replace(
        gpuguide.describe_device("cpu"), torch_version="2.13.0+cpu",
        gpuguide_version="0.1.0", gpuguide_commit="abc1234", gpuguide_dirty=False,
    )  # fmt: skip
    h100 = dataclasses.replace(
        cpu, type="cuda", name="NVIDIA H100 80GB HBM3", variant="H100 SXM5",
        sm_count=132, total_memory_bytes=80 * 2**30, compute_capability=(9, 0),
        cuda_version="12.8", driver_version="570.86.15", torch_version="2.13.0",
    )  # fmt: skip
    assert h100.provenance() == (
        "Measured on H100 SXM5 | torch 2.13.0 | CUDA 12.8 | driver 570.86.15 | "
        f"gpuguide 0.1.0 (abc1234) | {today}"
    )
    assert cpu.provenance() == (
        f"Measured on {cpu.short_name} | torch 2.13.0+cpu | gpuguide 0.1.0 (abc1234) "
        f"| {today}"
    )
    capped = dataclasses.replace(h100, memory_cap_bytes=2**30)
    line = capped.provenance()
    assert line.startswith("Measured on H100 SXM5, GPU memory capped at 1.00 GiB |")
