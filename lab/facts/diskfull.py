"""Disk full: one line naming the folder, no half-written file left, nothing already written lost.

Writers that may meet a full disk (a pass's predictions, the report, the archive, the journal)
write to a temporary name and rename it into place, remove the temporary on failure, and
raise :class:`DiskFull` naming the folder. The campaign resumes once space is freed: the
interrupted pass stays as a row and its slot runs again (lab.orchestration.orchestrator).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

from lab.facts.errors import FailureKind, PassFailure

PARTIAL = ".partial"


class DiskFull(PassFailure, RuntimeError):
    """No space left where the product writes; the message is one line with the folder and the fix."""

    kind = FailureKind.DISK_FULL

    def __init__(self, folder: str | Path, what: str = "writing"):
        self.folder = Path(folder)
        super().__init__(f"no space left on device in {self.folder} ({what}); free space there and run the "
                         "same command again (what was already written is kept)")


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC / EDQUOT from the OS, or SQLite's "database or disk is full"."""
    if isinstance(exc, DiskFull):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc)


def atomic_write_text(path: Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` through ``path.partial`` + rename: the old file stays whole
    until the new one is complete. Raises DiskFull (temporary removed) when the disk is full."""
    path = Path(path)
    tmp = path.with_name(path.name + PARTIAL)
    try:
        with open(tmp, "w", encoding=encoding, newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if is_disk_full(exc):
            raise DiskFull(path.parent, f"writing {path.name}") from None
        raise
    return path


def swap_folder(new: Path, final: Path) -> Path:
    """Put the completed folder ``new`` in place of ``final`` (the old one removed after)."""
    old = final.with_name(final.name + ".old")
    if old.exists():
        shutil.rmtree(old)
    if final.exists():
        final.rename(old)
    new.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return final


@contextlib.contextmanager
def staged_files(out: Path, prefix: str, creating: str, writing: str, refuse):
    """Yield a temporary folder inside ``out`` (created with its parents); once the body has
    written every file there, rename each into ``out``, so a failure anywhere leaves the files
    that were there whole. ``creating``/``writing``: DiskFull's wording for a full disk at each
    step; ``refuse(exc)``: the caller's one-line error when ``out`` cannot be created."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=out))
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFull(out, creating) from None
        raise refuse(exc) from None
    try:
        yield tmp
        for f in sorted(tmp.iterdir()):
            f.replace(out / f.name)
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFull(out, writing) from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
