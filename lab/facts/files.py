"""One helper per file fact: where the repository is, and sha256 digests.

Stdlib only (the pass runner imports it inside containers). The only module that calls
``hashlib.sha256`` (tests/unit/test_one_helper_per_fact.py): bytes (``sha256_bytes``), a file
by path (``sha256_file``), text lines as written (``sha256_lines``), and a stream as it is
read by another consumer (``HashingReader``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
"""The repository (bundle) root: the folder holding lab/, tui/, images/, demo/."""


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_lines(lines: Iterable[str]) -> str:
    """Hex sha256 of the UTF-8 bytes of ``lines`` joined as they are (each keeps its own
    newline), hashed one line at a time: equal to ``sha256_file`` of a file written from them
    with ``newline=""`` or ``"\n"``, without holding a joined copy."""
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode("utf-8"))
    return h.hexdigest()


LAB_SOURCE_SUFFIXES = (".py", ".csv", ".toml")
"""What a pass image copies of lab/ and runs: the files ``lab_sources_sha256`` covers."""


def lab_sources_sha256(root: Path = REPO_ROOT) -> str:
    """Hex sha256 of the lab's sources under ``root/lab`` (files ending in LAB_SOURCE_SUFFIXES,
    ``__pycache__`` excluded): each file's path relative to ``root`` and its sha256, one line
    each, in byte order of the paths. A pass image is labelled with it when built
    (``iteralab.lab-sha256``; scripts/build_image.sh, scripts/ci_docker.sh), so a launcher can
    tell an image built from another version of the lab (lab.launchers.docker). Command line:
    ``python3 -m lab.facts.files`` prints it for the repository it runs in (standard library only)."""
    lines = []
    for path in sorted((root / "lab").rglob("*"), key=lambda p: p.relative_to(root).as_posix().encode()):
        if path.is_file() and path.suffix in LAB_SOURCE_SUFFIXES and "__pycache__" not in path.parts:
            lines.append(f"{path.relative_to(root).as_posix()} {sha256_file(path)}\n")
    return sha256_lines(lines)


class HashingReader:
    """Read-only file-like over an open binary file ``fh`` that hashes exactly the bytes it
    hands out (to a tar writer, a spool...), so a stream is hashed in the same single read.
    ``hexdigest()``: hex sha256 of every byte read so far."""

    def __init__(self, fh):
        self.fh = fh
        self._h = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self._h.update(data)
        return data

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks. Raises OSError when unreadable."""
    with open(path, "rb") as fh:
        reader = HashingReader(fh)
        while reader.read(1 << 20):
            pass
    return reader.hexdigest()


if __name__ == "__main__":
    print(lab_sources_sha256())


def tail_text(path: str | Path, max_bytes: int = 65536) -> str:
    """The last ``max_bytes`` bytes of the file at ``path`` as text (UTF-8, undecodable bytes
    replaced; the first line may be cut); '' when it cannot be read. A log that keeps growing
    is read as far as it was when opened."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes).decode("utf-8", "replace")
    except OSError:
        return ""
