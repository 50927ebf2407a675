"""Files examples write for download, and the links that offer them."""

from __future__ import annotations

import pytest

import gpuguide
from gallery_hooks import copy_artifacts
from gpuguide.env import ARTIFACT_DIR_ENV as DIR_ENV
from gpuguide.env import ARTIFACT_URL_ENV as URL_ENV


@pytest.fixture
def no_build_env(monkeypatch, tmp_path):
    monkeypatch.delenv(DIR_ENV, raising=False)
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_path_is_in_current_directory_outside_the_build(no_build_env):
    path = gpuguide.artifact_path("trace.json")
    assert path.resolve() == no_build_env / "trace.json"


def test_path_is_under_the_build_directory(monkeypatch, tmp_path):
    monkeypatch.setenv(DIR_ENV, str(tmp_path / "a" / "b"))
    path = gpuguide.artifact_path("snap.pickle")
    assert path == tmp_path / "a" / "b" / "snap.pickle"
    assert path.parent.is_dir()


@pytest.mark.parametrize("name", ["", "../x", "a/b", ".hidden", "x y"])
def test_names_must_be_plain(name):
    with pytest.raises(ValueError, match="plain file name"):
        gpuguide.artifact_path(name)


def test_link_needs_an_existing_file(no_build_env):
    with pytest.raises(FileNotFoundError):
        gpuguide.download_link(no_build_env / "missing.json", "trace")


def test_link_text_and_html_outside_the_build(no_build_env):
    path = gpuguide.artifact_path("trace.json")
    path.write_bytes(b"x" * 2048)
    link = gpuguide.download_link(path, "profiler trace <JSON>")
    assert str(link) == f"profiler trace <JSON>: {path} (2.00 KiB)"
    assert "DownloadLink(" in repr(link)
    html = link._repr_html_()
    assert 'href="trace.json"' in html
    assert 'download="trace.json"' in html
    assert "profiler trace &lt;JSON&gt;" in html  # escaped
    assert "2.00 KiB" in html


def test_link_uses_the_build_url_prefix(monkeypatch, tmp_path):
    monkeypatch.setenv(DIR_ENV, str(tmp_path))
    monkeypatch.setenv(URL_ENV, "../../_artifacts/")
    path = gpuguide.artifact_path("snap.pickle")
    path.write_bytes(b"1")
    html = gpuguide.download_link(path, "snapshot")._repr_html_()
    assert 'href="../../_artifacts/snap.pickle"' in html


def test_copy_artifacts(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "html" / "_artifacts"
    assert copy_artifacts(src, dst) == []  # nothing written yet
    assert not dst.exists()
    src.mkdir()
    (src / "b.json").write_text("b")
    (src / "a.pickle").write_text("a")
    (src / "sub").mkdir()  # directories are not artifacts
    copied = copy_artifacts(src, dst)
    assert [p.name for p in copied] == ["a.pickle", "b.json"]
    assert (dst / "b.json").read_text() == "b"
