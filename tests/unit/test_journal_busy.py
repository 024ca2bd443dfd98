"""Issue 23 part 4: a journal held by another process (``BEGIN EXCLUSIVE``) longer than the
stated wait ends in one line naming the journal, never ``sqlite3.OperationalError: database
is locked`` and a traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from lab.orchestration.journal import Journal

REPO = Path(__file__).resolve().parents[2]


def test_a_journal_held_exclusive_past_the_wait_is_one_line(tmp_path):
    d = tmp_path / "campaign"
    d.mkdir()
    Journal(d / "journal.sqlite").close()  # a campaign folder: one holding journal.sqlite
    holder = sqlite3.connect(str(d / "journal.sqlite"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # as a sqlite3 shell or a script would, and keeps it
    try:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "lab.cli", "campaign", "pause", str(d)], capture_output=True,
                           text=True, cwd=REPO, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(REPO), "ITERALAB_JOURNAL_BUSY_S": "0.5"})
        waited = time.monotonic() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert f"{d / 'journal.sqlite'}: another process has held the journal locked for more than 0.5 s" in lines[0]
    assert waited >= 0.5
