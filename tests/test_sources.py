"""No page, document or printed line refers to the texts the guide was written from."""

from __future__ import annotations

import pytest
from conftest import ROOT, SEED_REFERENCE

#: What a reader reads: the examples (prose, code and what they print), the
#: documents, the helpers' docstrings (the API pages) and the README.
READ = sorted(
    {
        *(ROOT / "examples").rglob("*.py"),
        *(ROOT / "examples").rglob("*.rst"),
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "docs" / "concepts").rglob("*"),
        *(ROOT / "docs" / "api").rglob("*"),
        *(ROOT / "docs" / "_ext").glob("*.py"),
        *(ROOT / "src" / "gpuguide").rglob("*.py"),
        *(ROOT / "src" / "gpuguide_tools").rglob("*.py"),
        ROOT / "README.md",
    }
)

REFERENCES = [
    "# Seed 004 says pinning helps because the pages cannot be swapped out.",
    "the rest a fixed cost per copy (seed 002 says ~10 us)",
    "H2D pinned is 6.22x faster than H2D pageable (6.06-6.27x), as the seeds say",
    "The seeds quote 16 and 32 GB/s for the link",
    "seeds/004_b4c19c74ddad12ab.txt",
    "unlike the source texts",
]

RANDOM_SEEDS = [
    "torch.manual_seed(0)",
    "Torch's global state (TF32 flags, dtype, threads, seeds, caches) is reset",
    "the random seeds (Python, NumPy, torch on every device)",
    "a generator seeded the same way for each run",
    "DDPConfig(backend='gloo', batch_size=128, seed=0)",
]


@pytest.mark.parametrize("text", REFERENCES)
def test_a_reference_to_the_seeds_is_caught(text):
    assert SEED_REFERENCE.search(text)


@pytest.mark.parametrize("text", RANDOM_SEEDS)
def test_random_seeds_are_not_references(text):
    assert SEED_REFERENCE.search(text) is None


def test_what_readers_read_does_not_refer_to_the_seeds():
    files = [path for path in READ if path.is_file()]
    assert any(path.name == "plot_transfer_bandwidth.py" for path in files)
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if SEED_REFERENCE.search(line)
    ]
    assert not found, "\n".join(found)
