"""Progress events of a pass: one JSON object per line on the pass's event channel, and exit codes.

The event channel is the stdout the pass process was started with (a pipe to the local
launcher, the container's stdout stream to the Docker launcher), taken over by
:func:`open_event_channel` before any of the user's code runs: the process's file descriptor 1
and ``sys.stdout`` then write to its stderr (the pass log). What the user's code prints, from
Python, C or a child process it starts, reaches the log, never the channel, so it cannot forge
an event (a line in this format printed by an entry is only a log line); the channel's
descriptor is not inherited by child processes, so a daemon the user's code leaves behind
cannot hold it open.

``EventKind`` is the one definition of the event kinds: those a pass writes on stdout and
those the orchestrator adds to the journal. Launchers (local process or container) turn
stdout lines into journal events the same way, so a UI cannot tell them apart.

``PassStatus`` is the one definition of a pass's status words (journal rows, raw table,
result.json, UI). Both are ``StrEnum``s, so JSON and SQLite hold the same plain strings as
before and old journals and archives still read.
"""

from __future__ import annotations

import json
import os
import sys
import time
from enum import StrEnum
from typing import TextIO


class PassStatus(StrEnum):
    """Status of one pass attempt (SPEC 2: every attempt is a pass, failures included)."""

    RUNNING = "running"          # started, no end recorded yet
    OK = "ok"                    # all items predicted (validation is a separate verdict)
    OOM = "oom"                  # the device ran out of memory (the pass said so, exit 3)
    ERROR = "error"              # any other failure: crash, bad spec, no result written
    KILLED = "killed"            # killed for host memory (OOM killer / container limit)
    INTERRUPTED = "interrupted"  # stopped by the user or by a dead orchestrator; slot run again
    SKIPPED = "skipped"          # not run: a rate search stopped below it (lab.orchestration.search)


class EventKind(StrEnum):
    """Kind of one event: ``"event"`` of a stdout event line, ``kind`` of a journal event row.

    Written by a pass on stdout (``EventWriter``; the orchestrator stores the whole line as
    the journal row's payload, with ``iteralab``, ``event`` and ``t``; every line of a card
    of a multi-card pass also carries ``rank`` and ``cards``):

    - ``PHASE``: lab.passes.runner / worker / multicard. ``phase`` (model_load, compile,
      warmup, measured, probe, launch...), ``state`` ("start" or "end"), ``duration_s`` on
      "end"; some starts add ``device`` or (launch) ``cards``, ``nproc_per_node``, ``nnodes``.
    - ``PROGRESS``: ``EventWriter.progress``. ``done``, ``total`` (items), ``items_per_s``; a
      server pass adds ``served`` while its requests are answered (answered, failed,
      achieved_rate, ttft_p50_s, ttft_p99_s: lab.engines.serving_figures.LiveFigures).
    - ``OOM``: runner / worker, the device ran out of memory. ``items_done``, ``kind`` ("oom"),
      ``message``.
    - ``ERROR``: runner / worker / multicard, any other failure. ``items_done``, ``message``,
      ``kind`` (a lab.facts.errors.FailureKind: what the orchestrator reads, e.g. "disk_full"; the
      multicard launcher's own refusals carry none).
    - ``RESULT``: runner / multicard, the pass ended. ``status``, ``items_completed``,
      ``measured_s``.
    - ``CARD``: lab.passes.worker, one card of a multi-card pass ended. ``status``,
      ``items_completed``, ``items_total``, ``measured_s``, ``device``.

    Written only to the journal by lab.orchestration.orchestrator (``Journal.add_event``):

    - ``START``: an attempt started. ``variant`` (label), ``attempt`` (1-based).
    - ``END``: an attempt's row was finished. ``status`` (a PassStatus), ``items_completed``,
      ``notes`` (list of str).
    - ``INTERRUPTED``: an attempt a dead orchestrator left running, marked interrupted when
      the campaign runs again. ``pass_id``.
    - ``LEFTOVER``: a container of an interrupted run, stopped and removed before the next
      pass (Docker launcher's ``stop_leftovers``), ``container`` (dict); or a process of a pass
      killed because nothing watched it or it outlived its pass (the local launcher's
      ``end_leftovers``), ``process`` (pid, name, cmd; pass_id when found at a start). ``note``.
    """

    PHASE = "phase"
    PROGRESS = "progress"
    OOM = "oom"
    ERROR = "error"
    RESULT = "result"
    CARD = "card"
    START = "start"
    END = "end"
    INTERRUPTED = "interrupted"
    LEFTOVER = "leftover"


FAILED = frozenset({PassStatus.OOM, PassStatus.ERROR, PassStatus.KILLED})
"""Failures the protocol counts against a variant (SPEC 3.6)."""
FINISHED = FAILED | {PassStatus.OK}
"""An attempt that ran and ended: ok or one of FAILED (an interrupted one did not end)."""
FILLS_SLOT = FINISHED | {PassStatus.SKIPPED}
"""An attempt with one of these fills its schedule slot (an interrupted one does not; a slot a rate
search skipped is filled by its SKIPPED row, lab.orchestration.search)."""

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


def open_event_channel() -> TextIO:
    """Take this process's stdout as its event channel and return it (line-buffered text);
    from then on file descriptor 1 and ``sys.stdout`` write to stderr.

    Called once by every pass process that runs the user's code (lab.passes.runner, each
    card's lab.passes.worker), before the pass spec is read. The channel's descriptor is a
    non-inheritable duplicate (Python's ``os.dup``): child processes get descriptor 1 = stderr."""
    sys.stdout.flush()
    fd = os.dup(1)
    os.dup2(2, 1)  # fd 1 (print, C printf, children) now writes to the log
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8", errors="replace")


class EventWriter:
    """Writes events to ``stream`` (default: ``sys.stdout``; a pass process gives it its event
    channel, :func:`open_event_channel`); ``progress`` is rate-limited to one line per
    ``min_interval_s``."""

    def __init__(self, stream=None, min_interval_s: float = 0.25):
        self.stream = stream or sys.stdout
        self.min_interval_s = min_interval_s
        self._last_progress = 0.0

    def emit(self, event: EventKind, **fields) -> None:
        """Write one event line: ``{"iteralab": 1, "event": event, "t": unix time s, **fields}``."""
        obj = {EVENT_KEY: 1, "event": str(event), "t": round(time.time(), 3), **fields}
        self.stream.write(json.dumps(obj, default=str) + "\n")
        self.stream.flush()

    def forward(self, raw: bytes) -> None:
        """Pass one whole event line of another pass process through unchanged (a multi-card
        pass's workers, lab.passes.multicard)."""
        self.stream.buffer.write(raw)
        self.stream.flush()

    def progress(self, done: int, total: int, items_per_s: float, force: bool = False,
                 served: dict | None = None) -> None:
        """A PROGRESS event, at most every ``min_interval_s`` unless ``force`` or the last item;
        ``served``: a server pass's figures so far (lab.engines.serving_figures.LiveFigures as
        plain values), carried as the event's ``served``."""
        now = time.perf_counter()
        if force or done >= total or now - self._last_progress >= self.min_interval_s:
            self._last_progress = now
            extra = {} if served is None else {"served": served}
            self.emit(EventKind.PROGRESS, done=done, total=total, items_per_s=round(items_per_s, 3), **extra)
