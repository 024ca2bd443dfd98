"""Progress events of a pass: one JSON object per line on stdout, and exit codes.

Event kinds: ``phase`` (name, state start/end, duration_s), ``progress`` (done, total,
items_per_s), ``oom`` (items_done, message), ``error`` (message), ``result`` (the pass
result). Launchers (local process or container) turn stdout lines into journal events
the same way, so a UI cannot tell them apart.

``PassStatus`` is the one definition of a pass's status words (journal rows, raw table,
result.json, UI); a ``StrEnum``, so JSON and SQLite hold the same plain strings as before.
"""

from __future__ import annotations

import json
import sys
import time
from enum import StrEnum


class PassStatus(StrEnum):
    """Status of one pass attempt (SPEC 2: every attempt is a pass, failures included)."""

    RUNNING = "running"          # started, no end recorded yet
    OK = "ok"                    # all items predicted (validation is a separate verdict)
    OOM = "oom"                  # the device ran out of memory (the pass said so, exit 3)
    ERROR = "error"              # any other failure: crash, bad spec, no result written
    KILLED = "killed"            # killed for host memory (OOM killer / container limit)
    INTERRUPTED = "interrupted"  # stopped by the user or by a dead orchestrator; slot run again


FAILED = frozenset({PassStatus.OOM, PassStatus.ERROR, PassStatus.KILLED})
"""Failures the protocol counts against a variant (SPEC 3.6)."""
FINISHED = FAILED | {PassStatus.OK}
"""An attempt with one of these fills its schedule slot (an interrupted one does not)."""

EXIT_OK = 0
EXIT_BAD_SPEC = 2
EXIT_OOM = 3
EXIT_ERROR = 4
EXIT_NAMES = {EXIT_OK: PassStatus.OK, EXIT_BAD_SPEC: PassStatus.ERROR, EXIT_OOM: PassStatus.OOM,
              EXIT_ERROR: PassStatus.ERROR}
EVENT_KEY = "iteralab"  # every event line carries {"iteralab": 1, ...}


def parse_event(line: str) -> dict | None:
    """The event carried by one stdout line, or None for any other output."""
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and obj.get(EVENT_KEY) == 1 else None


class EventWriter:
    """Writes events to ``stream``; ``progress`` is rate-limited to one line per ``min_interval_s``."""

    def __init__(self, stream=None, min_interval_s: float = 0.25):
        self.stream = stream or sys.stdout
        self.min_interval_s = min_interval_s
        self._last_progress = 0.0

    def emit(self, event: str, **fields) -> None:
        obj = {EVENT_KEY: 1, "event": event, "t": round(time.time(), 3), **fields}
        self.stream.write(json.dumps(obj, default=str) + "\n")
        self.stream.flush()

    def progress(self, done: int, total: int, items_per_s: float, force: bool = False) -> None:
        now = time.perf_counter()
        if force or done >= total or now - self._last_progress >= self.min_interval_s:
            self._last_progress = now
            self.emit("progress", done=done, total=total, items_per_s=round(items_per_s, 3))
