"""Two builds of one commit compared: opposite verdicts, changed ones, claims."""

from __future__ import annotations

import pytest

from gpuguide_tools import rebuild

A = """\
fused is 2.00x faster than eager (1.90-2.10x)
launch: no measurable difference between graphed and eager: faster in 4 of 5 rounds (speed-up 0.98-1.20x)
eager is 1.30x slower than compiled (1.20-1.40x)
Claim held: fused beats eager (measured 2.00x (1.90-2.10x))
Claim not checked here: graphs help (needs CUDA; this run is on CPU)
"""
B = """\
eager is 1.90x slower than fused (1.80-2.00x)
launch: graphed is 1.10x faster than eager (1.06-1.15x)
eager is 1.07x faster than compiled (1.06-1.08x)
Claim did not hold here: fused beats eager; measured 1.90x (1.80-2.00x)
Claim not checked here: graphs help (needs CUDA; this run is on CPU)
"""


def test_verdicts_are_paired_by_the_pair_whichever_side_is_named_first():
    a, b = rebuild.verdicts("p", A), rebuild.verdicts("p", B)
    assert a == {
        ("p", "eager", "fused", 0): -1,
        ("p", "eager", "graphed", 0): 0,
        ("p", "compiled", "eager", 0): 1,
    }
    assert b[("p", "eager", "fused", 0)] == -1  # the same verdict, said the other way


def test_diff_finds_the_opposite_the_changed_and_the_claims():
    result = rebuild.diff({"p": A}, {"p": B})
    assert result.verdicts == 3
    assert result.opposite == ("p: compiled vs eager: faster / slower",)
    assert result.changed == ("p: eager vs graphed: no measurable difference / slower",)
    assert result.claims == 2
    assert result.claims_changed == ("p: fused beats eager: held / failed",)
    assert result.lines()[-1] == (
        "3 verdict(s) in both builds: 1 opposite, 1 (33%) changed between a verdict "
        "and no measurable difference; 2 claim(s) in both, 1 with another outcome"
    )


def test_the_cli_reads_two_gallery_folders_and_fails_on_an_opposite_verdict(
    tmp_path, capsys
):
    for name, text in (("a", A), ("b", B)):
        chapter = tmp_path / name / "01_x"
        chapter.mkdir(parents=True)
        body = "\n".join(f"    {line}" for line in text.splitlines())
        (chapter / "plot_p.rst").write_text(
            f"Title\n=====\n\n.. rst-class:: sphx-glr-script-out\n\n .. code-block:: none\n\n{body}\n\n"
        )
    assert rebuild.main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "OPPOSITE: plot_p: compiled vs eager: faster / slower" in out
    assert rebuild.main([str(tmp_path / "a"), str(tmp_path / "a")]) == 0
    with pytest.raises(SystemExit):
        rebuild.main([str(tmp_path / "a"), str(tmp_path / "nothing")])
