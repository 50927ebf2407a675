"""Files an example writes for its readers to download: traces, snapshots.

A profiler trace opens in Perfetto, a CUDA memory snapshot in PyTorch's memory
viewer: an example writes such a file to :func:`artifact_path` and ends a cell
with :func:`download_link`, which the built page shows as a download link. Run as
a script, files land in the current directory; the docs build sets
``GPUGUIDE_ARTIFACT_DIR`` (where to write) and ``GPUGUIDE_ARTIFACT_URL`` (the
link prefix) and copies the files into the site.
"""

from __future__ import annotations

import html
import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpuguide.env import ARTIFACT_DIR_ENV, ARTIFACT_URL_ENV
from gpuguide.units import format_bytes

__all__ = ["artifact_path", "download_link"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def artifact_path(name: str) -> Path:
    """Where an example should write a file readers can download (the folder exists).

    ``name`` is a plain file name unique across the guide
    (``"memory_snapshot.pickle"``): ``$GPUGUIDE_ARTIFACT_DIR/name`` in the docs
    build, ``./name`` otherwise.
    """
    if not _NAME.match(name):
        msg = f"name must be a plain file name, got {name!r}"
        raise ValueError(msg)
    folder = Path(os.environ.get(ARTIFACT_DIR_ENV) or ".")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


@dataclass(frozen=True)
class _DownloadLink:
    """A file an example wrote at ``path``, shown as a download link that says
    ``text`` (``"profiler trace (JSON, open in Perfetto)"``)."""

    path: Path
    text: str

    def __str__(self) -> str:
        return f"{self.text}: {self.path} ({format_bytes(self.path.stat().st_size)})"

    def __repr__(self) -> str:
        return f"DownloadLink({str(self)!r})"

    def _repr_html_(self) -> str:
        href = self.path.as_posix()
        if prefix := os.environ.get(ARTIFACT_URL_ENV):  # the docs build's
            href = f"{prefix.rstrip('/')}/{self.path.name}"
        return (
            f'<p class="gpuguide-download"><a href="{html.escape(href)}" '
            f'download="{html.escape(self.path.name)}">Download the '
            f"{html.escape(self.text)}</a> "
            f"({format_bytes(self.path.stat().st_size)})</p>"
        )


def download_link(path: str | os.PathLike[str], text: str) -> _DownloadLink:
    """Offer a file an example wrote (at :func:`artifact_path`) for download.

    End a cell with the result: the page shows a link that says what the file
    is (``text``, e.g. ``"memory snapshot (pickle)"``); ``print`` shows the path.
    """
    path = Path(path)
    if not path.is_file():
        msg = f"path must be a file an example wrote, got {path} (no such file)"
        raise FileNotFoundError(msg)
    return _DownloadLink(path=path, text=text)
