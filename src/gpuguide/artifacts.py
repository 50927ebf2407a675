"""Files an example writes for its readers to download: traces, snapshots.

An example writes the file to :func:`artifact_path` (the current directory, or
``GPUGUIDE_ARTIFACT_DIR`` in the docs build) and ends a cell with
:func:`download_link`, which the built page shows as a link.
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
    """Where to write a file readers can download: ``name`` (a plain file name,
    unique across the guide) in the artifact folder, which exists."""
    if not _NAME.match(name):
        msg = f"name must be a plain file name, got {name!r}"
        raise ValueError(msg)
    folder = Path(os.environ.get(ARTIFACT_DIR_ENV) or ".")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


@dataclass(frozen=True)
class _DownloadLink:
    """A file an example wrote, shown as a download link that says ``text``."""

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
    """Offer a file an example wrote for download: end a cell with the result, and
    the page shows a link that says ``text`` (``"memory snapshot (pickle)"``)."""
    path = Path(path)
    if not path.is_file():
        msg = f"path must be a file an example wrote, got {path} (no such file)"
        raise FileNotFoundError(msg)
    return _DownloadLink(path=path, text=text)
