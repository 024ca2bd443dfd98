"""The campaign's state: a SQLite journal in the campaign folder.

One row per attempted pass (``attempts``), the events each pass streamed (``events``),
and control flags (``control``: pause/stop requests, the orchestrator's pid and
heartbeat). The orchestrator writes; UIs read it and write only control flags, so a UI
can quit and re-attach while the campaign goes on.

Readers that write nothing (status, report, views, ``archive verify``) open it with
:meth:`Journal.read_only`: SQLite's ``mode=ro``, no DDL, no WAL pragma, nothing created. The
schema is ``SCHEMA``, written once here; its version is SQLite's ``user_version``
(``SCHEMA_VERSION``; 0 is a journal written before the version was recorded, the same schema).
A journal of a newer version is refused with one line (``JournalVersion``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec

from lab.facts.errors import LabError, UserError
from lab.inputs.variants import Variant, VariantError, record_type
from lab.orchestration.schedule import PlannedPass
from lab.passes.events import EventKind, PassStatus
from lab.passes.records import Attempt, Validation, decode_result

SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
  pass_id TEXT PRIMARY KEY, seq INTEGER, attempt INTEGER, repetition INTEGER, position INTEGER,
  variant_id TEXT, variant_json TEXT, status TEXT, start_time TEXT, end_time TEXT,
  exit_code INTEGER, items_completed INTEGER, items_total INTEGER, items_per_s REAL,
  result_json TEXT, validation_json TEXT, launcher TEXT, notes TEXT, updated REAL
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, pass_id TEXT, t REAL, kind TEXT, payload TEXT
);
CREATE TABLE IF NOT EXISTS control (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS plan (seq INTEGER PRIMARY KEY, repetition INTEGER, position INTEGER,
  variant_id TEXT, variant_json TEXT);
"""

SCHEMA_VERSION = 1
"""The journal schema's version (``PRAGMA user_version``); raise it with any change to ``SCHEMA``."""
JSON_COLUMNS = ("variant_json", "result_json", "validation_json")
"""The attempts' columns holding JSON; ``Journal.attempts`` decodes them as ``variant``, ``result``,
``validation``."""


def plan_record(row: dict) -> PlannedPass:
    """One plan row (``Journal.plan``) as a PlannedPass, its variant decoded from ``variant_json``
    as :func:`attempt_record` decodes an attempt's. Raises msgspec.DecodeError /
    msgspec.ValidationError for a damaged row."""
    record: Any = msgspec.json.decode(row["variant_json"], type=record_type())
    try:
        variant = Variant.from_record(record, rules=False)
    except VariantError as exc:
        raise msgspec.ValidationError(f"{exc} - at `variant_json`") from None
    return PlannedPass(int(row["seq"]), int(row["repetition"]), int(row["position"]), variant)


def attempt_record(row: dict) -> Attempt:
    """One attempts row (``Journal.attempt_rows``: the JSON columns as text) as an Attempt, each
    JSON column decoded straight into its type (no dict in between): the variant into its record
    (``lab.inputs.variants.record_type``: unknown keys refused) and then a ``Variant`` (its types,
    ranges and ``variant_id`` checked; its stored ``label`` kept as ``variant_label``), the result
    as a PassResult (None when the column holds only the launch record, or nothing), the
    validation as a Validation. Raises msgspec.DecodeError (not JSON) / msgspec.ValidationError
    (naming the field, or the Variant's refusal) for a damaged row."""
    text, variant, validation = row["result_json"], row["variant_json"], row["validation_json"]
    stored = msgspec.json.decode(text, type=dict[str, Any]) if text else {}  # its keys: a record beside the launch?
    record: Any = msgspec.json.decode(variant, type=record_type()) if variant else None
    try:
        declared = Variant.from_record(record, rules=False) if record is not None else None  # evidence
    except VariantError as exc:  # a damaged row, as msgspec names one
        raise msgspec.ValidationError(f"{exc} - at `variant_json`") from None
    label = record.label if record is not None and record.label is not msgspec.UNSET else None
    return msgspec.convert({  # the plain columns checked strictly too (SQLite keeps any type in any column)
        **{k: row[k] for k in row if k not in JSON_COLUMNS}, "launch": stored.get("launch"),
        "variant": declared, "variant_label": label,
        "result": decode_result(text) if set(stored) - {"launch"} else None,
        "validation": msgspec.json.decode(validation, type=Validation) if validation else None}, Attempt)


class JournalVersion(UserError, RuntimeError):
    """A journal written by a newer lab (its schema version is beyond ``SCHEMA_VERSION``)."""

    def __init__(self, path: Path, version: int):
        super().__init__(f"{path}: journal schema version {version}, this lab reads up to {SCHEMA_VERSION}; "
                         "open it with the lab version that wrote it (or a newer one)")

BUSY_WAIT_S = 120.0
"""How long a journal statement waits for another process's lock (e.g. a ``BEGIN EXCLUSIVE``
held by a UI or a sqlite3 shell) before JournalBusy; ``ITERALAB_JOURNAL_BUSY_S`` overrides it."""


def busy_wait_s() -> float:
    """The busy wait in seconds: $ITERALAB_JOURNAL_BUSY_S when a positive number, else BUSY_WAIT_S."""
    try:
        value = float(os.environ.get("ITERALAB_JOURNAL_BUSY_S") or BUSY_WAIT_S)
    except ValueError:
        value = BUSY_WAIT_S
    return value if value > 0 else BUSY_WAIT_S


class JournalBusy(LabError, RuntimeError):
    """Another process held the journal locked longer than the busy wait; one line with the fix."""

    def __init__(self, path: Path, wait_s: float):
        self.path = Path(path)
        super().__init__(f"{self.path}: another process has held the journal locked for more than {wait_s:g} s "
                         "(a sqlite3 shell or a script inside a transaction?); end that transaction and run the "
                         "same command again (ITERALAB_JOURNAL_BUSY_S sets the wait)")


def _busy(exc: sqlite3.OperationalError) -> bool:
    return "database is locked" in str(exc) or "database table is locked" in str(exc)


class _Connection(sqlite3.Connection):
    """A connection whose statements raise JournalBusy (one line) instead of a bare
    ``OperationalError: database is locked`` once the busy wait is over."""

    journal_path: Path
    wait_s: float

    def _unless_busy(self, call, *args, **kw):
        try:
            return call(*args, **kw)
        except sqlite3.OperationalError as exc:
            if _busy(exc):
                raise JournalBusy(self.journal_path, self.wait_s) from None
            raise

    def execute(self, *args, **kw):
        return self._unless_busy(super().execute, *args, **kw)

    def executemany(self, *args, **kw):
        return self._unless_busy(super().executemany, *args, **kw)

    def executescript(self, *args, **kw):
        return self._unless_busy(super().executescript, *args, **kw)


class Journal:
    """SQLite journal at ``path``. Safe for one writer process and many readers (WAL).
    A statement blocked by another process's lock waits ``busy_wait_s()`` seconds, then
    raises JournalBusy (one line)."""

    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        wait_s = busy_wait_s()
        target = f"file:{self.path}?mode=ro" if read_only else str(self.path)
        self.db = sqlite3.connect(target, timeout=wait_s, check_same_thread=False, uri=read_only,
                                  isolation_level=None, factory=_Connection)
        self.db.journal_path, self.db.wait_s = self.path, wait_s
        self.db.row_factory = sqlite3.Row
        version = self.db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            self.db.close()
            raise JournalVersion(self.path, version)
        if read_only:
            return
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA busy_timeout={int(wait_s * 1000)}")
        self.db.executescript(SCHEMA)
        if version != SCHEMA_VERSION:
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    @classmethod
    def open_read_only(cls, path: str | Path) -> "Journal":
        """The journal at ``path`` for reading only (``mode=ro``: no DDL, no pragma, no file
        created). Raises sqlite3.OperationalError when there is no readable journal there,
        JournalVersion for a newer schema."""
        return cls(path, read_only=True)

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    # ---- plan ------------------------------------------------------------------------
    def set_plan(self, planned) -> None:
        """Record the schedule once (a list of PlannedPass); later calls keep the first."""
        with self.tx() as db:
            if db.execute("SELECT COUNT(*) FROM plan").fetchone()[0]:
                return
            db.executemany("INSERT INTO plan VALUES (?,?,?,?,?)",
                           [(p.seq, p.repetition, p.position, p.variant.variant_id,
                             json.dumps(p.variant.to_json())) for p in planned])

    def plan(self) -> list[dict]:
        return [dict(r) for r in self.db.execute("SELECT * FROM plan ORDER BY seq")]

    def planned(self) -> list[PlannedPass]:
        """The plan as typed slots (:func:`plan_record`), in order."""
        return [plan_record(r) for r in self.plan()]

    # ---- attempts --------------------------------------------------------------------
    def start_attempt(self, pass_id: str, seq: int, attempt: int, repetition: int, position: int,
                      variant: Variant, start_time: str, launcher: str, items_total: int) -> None:
        """Record a started attempt (status running). ``variant`` is serialised here, once
        (``Variant.to_json``: its fields, ``variant_id`` and ``label``), into ``variant_json``."""
        if not isinstance(variant, Variant):
            raise TypeError(f"start_attempt takes a lab.inputs.variants.Variant, got {type(variant).__name__}")
        with self.tx() as db:
            db.execute("INSERT INTO attempts (pass_id, seq, attempt, repetition, position, variant_id,"
                       " variant_json, status, start_time, items_completed, items_total, launcher,"
                       " notes, updated) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (pass_id, seq, attempt, repetition, position, variant.variant_id,
                        json.dumps(variant.to_json()), PassStatus.RUNNING.value, start_time, 0, items_total,
                        launcher, "", time.time()))

    def update_progress(self, pass_id: str, done: int, items_per_s: float | None) -> None:
        self.db.execute("UPDATE attempts SET items_completed=?, items_per_s=?, updated=? WHERE pass_id=?",
                        (done, items_per_s, time.time(), pass_id))

    def finish_attempt(self, pass_id: str, status: str, end_time: str, exit_code: int | None,
                       items_completed: int, result: dict | None, notes: str) -> None:
        self.db.execute("UPDATE attempts SET status=?, end_time=?, exit_code=?, items_completed=?,"
                        " result_json=?, notes=?, updated=? WHERE pass_id=?",
                        (str(status), end_time, exit_code, items_completed,
                         json.dumps(result) if result is not None else None, notes, time.time(), pass_id))

    def set_validation(self, pass_id: str, validation: dict | None) -> None:
        self.db.execute("UPDATE attempts SET validation_json=? WHERE pass_id=?",
                        (json.dumps(validation) if validation is not None else None, pass_id))

    def attempt_rows(self) -> list[dict]:
        """All attempts in schedule order, as stored (JSON columns as text)."""
        return [dict(r) for r in self.db.execute("SELECT * FROM attempts ORDER BY seq, attempt")]

    def attempts(self) -> list[Attempt]:
        """All attempts in schedule order as typed records (lab.passes.records.Attempt), each
        decoded strictly from its row (``attempt_record``). Raises msgspec.DecodeError for a JSON
        column that is not JSON, msgspec.ValidationError for one that is not its record."""
        return [attempt_record(row) for row in self.attempt_rows()]

    def mark_running_interrupted(self, note: str) -> list[str]:
        """Attempts left 'running' by a dead orchestrator become 'interrupted' rows (kept)."""
        with self.tx() as db:
            ids = [r[0] for r in db.execute("SELECT pass_id FROM attempts WHERE status=?",
                                            (PassStatus.RUNNING.value,))]
            db.execute("UPDATE attempts SET status=?, notes=? WHERE status=?",
                       (PassStatus.INTERRUPTED.value, note, PassStatus.RUNNING.value))
        return ids

    def interrupt(self, pass_ids: list[str], note: str) -> None:
        """Attempts ``pass_ids`` become 'interrupted' rows (kept, never accepted; their slots run
        again), ``note`` added to their notes: e.g. an input changed under them."""
        with self.tx() as db:
            for pid in pass_ids:
                db.execute("UPDATE attempts SET status=?, notes=trim(coalesce(notes, '') || '; ' || ?, '; ') "
                           "WHERE pass_id=?", (PassStatus.INTERRUPTED.value, note, pid))

    # ---- events ----------------------------------------------------------------------
    def add_event(self, pass_id: str, kind: EventKind | str, payload: dict) -> None:
        """Record one event (``kind``: an EventKind; a pass line's own ``event`` is recorded as
        written, so a kind this version does not know is kept, not dropped)."""
        self.db.execute("INSERT INTO events (pass_id, t, kind, payload) VALUES (?,?,?,?)",
                        (pass_id, time.time(), str(kind), json.dumps(payload, default=str)))

    def events_since(self, last_id: int = 0, limit: int = 10000) -> list[dict]:
        """Events with id > ``last_id`` in order, at most ``limit``: dicts with ``id``, ``pass_id``,
        ``t`` (unix time s), ``kind`` (plain str; compare with EventKind) and ``payload`` (decoded)."""
        rows = self.db.execute("SELECT * FROM events WHERE id > ? ORDER BY id LIMIT ?", (last_id, limit))
        return [{**dict(r), "payload": json.loads(r["payload"])} for r in rows]

    # ---- control ---------------------------------------------------------------------
    def set_control(self, key: str, value) -> None:
        self.db.execute("INSERT INTO control VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                        (key, json.dumps(value)))

    def get_control(self, key: str, default=None):
        r = self.db.execute("SELECT value FROM control WHERE key=?", (key,)).fetchone()
        return json.loads(r[0]) if r else default
