"""The live view of a campaign folder that a front end shows while it runs: the journal feed
(events since the last read, failures as they happen, status, plan, the selected pass's log
tail), the ETA line, and the status words a front end colours.

``JournalFeed`` was the UI's (tui/widgets/journal_feed.py); it has no Textual import and moved
here so that the UI reads the journal through the service layer only (the import contract
"The UI imports only ..." in pyproject.toml). The app's poller calls ``JournalFeed.read()``
every few hundred ms from a thread worker and posts the result as a ``CampaignSnapshot``. The
feed keeps the last event id (``Journal.events_since``), the failures seen in oom/error events
(known before the pass row is finished) and the last event lines. It only reads the journal.

The words are those of the engine, named here for the UI (one definition each, where they
are documented): ``PassStatus``, ``FAILED``, ``EventKind`` (lab.passes.events),
``CampaignState`` (lab.orchestration.status), and ``variant_short`` (lab.inputs.variants).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import msgspec
from msgspec import UNSET, UnsetType

from lab.engines.serving_figures import LiveFigures, live_of
from lab.facts.errors import clip
from lab.inputs.variants import variant_short
from lab.orchestration.journal import Journal
from lab.orchestration.status import CampaignState, campaign_status, running_eta_text
from lab.orchestration.status_record import CampaignStatus
from lab.passes.events import FAILED, EventKind, PassStatus, parse_event

__all__ = ["FAILED", "LIVE_FAILURES", "SHOWN_EVENTS", "CampaignState", "CampaignStatus", "EventFields", "EventKind",
           "FeedRead", "JournalEvent", "JournalFeed", "LiveFailure", "LiveFigures", "NewFailure", "PassStatus",
           "PlannedSlot",
           "campaign_status", "event_line", "log_tail", "readable", "running_eta_text", "served_line", "served_text",
           "variant_short"]

SHOWN_EVENTS = (EventKind.START, EventKind.END, EventKind.OOM, EventKind.ERROR, EventKind.INTERRUPTED,
                EventKind.LEFTOVER, EventKind.PHASE)
"""Journal events listed in the campaign's event view (progress, result and card are not)."""
LIVE_FAILURES = (EventKind.OOM, EventKind.ERROR)
"""Events that tell a pass failed before its row is finished."""


class EventFields(msgspec.Struct, frozen=True):
    """The fields of a pass's event (a stdout event line, or the payload of a journal event row)
    that the live view shows; lab.passes.events.EventKind documents which kind carries which.
    ``event`` the kind of an event line (None in a payload the orchestrator wrote); ``phase``,
    ``state`` ("start"/"end"), ``duration_s`` (s, on "end") of a phase; ``items_done``,
    ``message`` of an oom/error; ``status``, ``items_completed`` of a result/end; ``notes`` (one
    line each) of an end; ``variant`` (label), ``attempt`` (1-based) of a start; ``served`` the
    raw figures of a server pass's progress (lab.engines.serving_figures.live_of decodes them).
    A field the event does not carry is UNSET where its absence is shown differently from a null."""

    event: str | None = None
    phase: str = ""
    state: str = ""
    duration_s: float | None = None
    items_done: int | UnsetType | None = UNSET
    message: str = ""
    status: str | UnsetType | None = UNSET
    items_completed: int | UnsetType | None = UNSET
    notes: tuple[str, ...] | None = None
    variant: str = ""
    attempt: int = 1
    served: object = None

    @classmethod
    def of(cls, event: dict) -> EventFields:
        """The fields of one decoded event (other fields ignored; numbers in strings accepted,
        as the dicts were read before). Raises msgspec.ValidationError on a field of another type."""
        return msgspec.convert(event, cls, strict=False)


def _shown(value: object, absent: object) -> object:
    """``value``, or ``absent`` when the event does not carry it (UNSET)."""
    return absent if value is UNSET else value


def readable(line: str) -> str | None:
    """A log line for people: event lines shortened (progress dropped), others as they are."""
    ev = parse_event(line)
    if ev is None:
        return line
    f = EventFields.of(ev)
    kind = f.event
    if kind == EventKind.PROGRESS:
        return None
    if kind == EventKind.PHASE:
        d = f.duration_s
        return f"phase {f.phase} {f.state}" + (f" {d:.2f} s" if d is not None else "")
    if kind == EventKind.RESULT:
        return f"result: {_shown(f.status, '')}, {_shown(f.items_completed, '')} items"
    rest = {k: v for k, v in ev.items() if k not in ("iteralab", "event", "t")}
    return f"{kind}: " + ", ".join(f"{k}={v}" for k, v in rest.items())[:200]


def served_text(served: LiveFigures) -> str:
    """A running server pass's answers so far, in a few cells: its TTFT percentiles
    ("p50 0.031 p99 0.079 s"; "no answer yet" before the first), as the Runs screen shows them."""
    if served.ttft_p50_s is None or served.ttft_p99_s is None:
        return "no answer yet"
    return f"p50 {served.ttft_p50_s:.3f} p99 {served.ttft_p99_s:.3f} s"


def served_line(served: LiveFigures) -> str:
    """A running server pass's answers so far in one line of the Runs screen's status pane
    ("served 40 answered, 2.00 req/s, TTFT p50 0.041 s p99 0.060 s"; failed requests named)."""
    rate = "" if served.achieved_rate is None else f", {served.achieved_rate:.2f} req/s"
    ttft = ("" if served.ttft_p50_s is None or served.ttft_p99_s is None
            else f", TTFT p50 {served.ttft_p50_s:.3f} s p99 {served.ttft_p99_s:.3f} s")
    failed = f", {served.failed} failed" if served.failed else ""
    return f"served {served.answered} answered{failed}{rate}{ttft}"


def log_tail(path: Path, max_lines: int = 40, max_bytes: int = 65536) -> str:
    """The last ``max_lines`` readable lines of a pass log ('' when absent; see ``readable``);
    reads at most the last ``max_bytes``."""
    from lab.facts.files import tail_text

    lines = [r for r in (readable(x) for x in tail_text(path, max_bytes).splitlines()) if r is not None]
    return "\n".join(lines[-max_lines:])


class JournalEvent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One journal event row (lab.orchestration.journal.Journal.events_since): ``id`` its row id
    (increasing), ``pass_id`` the pass it is about (None for a campaign's own), ``t`` unix time
    (s), ``kind`` (compare with EventKind), ``payload`` the decoded payload as written (shown whole
    for a kind with no line of its own; ``EventFields.of`` reads its fields)."""

    id: int
    pass_id: str | None
    t: float
    kind: str
    payload: dict

    @classmethod
    def of(cls, row: dict) -> JournalEvent:
        """The record of one row as events_since returns it."""
        return msgspec.convert(row, cls)


def event_line(ev: JournalEvent) -> str:
    """One readable line for a journal event (UTC time, pass, kind, the useful fields)."""
    p = EventFields.of(ev.payload)
    when = time.strftime("%H:%M:%S", time.gmtime(ev.t))
    kind = ev.kind
    if kind == EventKind.PHASE:
        extra = f"{p.phase} {p.state}"
        if p.duration_s is not None:
            extra += f" {p.duration_s:.2f} s"
    elif kind == EventKind.OOM:
        extra = f"OUT OF MEMORY after {_shown(p.items_done, '?')} items: {clip(p.message, 80)}"
    elif kind == EventKind.ERROR:
        extra = f"ERROR after {_shown(p.items_done, '?')} items: {clip(p.message, 80)}"
    elif kind == EventKind.END:
        extra = f"{_shown(p.status, None)} ({_shown(p.items_completed, None)} items)"
        if p.notes:
            extra += " " + clip("; ".join(p.notes), 80)
    elif kind == EventKind.START:
        extra = f"{p.variant} attempt {p.attempt}"
    else:
        extra = clip(", ".join(f"{k}={v}" for k, v in ev.payload.items()), 80)
    return f"{when} {ev.pass_id or '-'} {kind}: {extra}"


class PlannedSlot(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One slot of the campaign's plan (a row of the journal's plan table, Journal.plan):
    ``seq`` its place in the schedule (1-based), ``repetition``, ``position`` within the
    repetition, ``variant_id`` and ``variant_json`` the declared variant's record as the journal
    stores it (JSON text; None in a damaged row)."""

    seq: int
    repetition: int
    position: int
    variant_id: str | None
    variant_json: str | None

    @classmethod
    def of(cls, row: dict) -> PlannedSlot:
        """The record of one row as Journal.plan returns it."""
        return msgspec.convert(row, cls)


@dataclass(frozen=True)
class LiveFailure:
    """A pass's failure as its oom/error event told it, before its row is finished: ``kind``
    the event's kind (EventKind.OOM or ERROR), ``items_done`` items done when it failed (None:
    not said), ``message`` the event's one line."""

    kind: str
    items_done: int | None
    message: str


@dataclass(frozen=True)
class NewFailure:
    """A failure not reported before (JournalFeed.read): ``pass_id``, ``kind`` (an event kind
    or a failed PassStatus), ``items_done`` (None: not said) and ``detail`` (the event's message
    or the row's notes)."""

    pass_id: str
    kind: str
    items_done: int | None
    detail: str


@dataclass(frozen=True)
class FeedRead:
    """What one JournalFeed.read saw: ``status`` the campaign's (lab.orchestration.status_record);
    ``plan`` the planned slots; ``live_failures`` {pass_id: LiveFailure};
    ``live_served`` {pass_id: the LiveFigures of its last progress event that carried them};
    ``events`` the last 50 event lines; ``log_tail`` (pass_id, text) of the selected pass's log
    (the running one, else the last, when none is selected); ``new_failures`` in the order seen."""

    status: CampaignStatus
    plan: tuple[PlannedSlot, ...]
    live_failures: Mapping[str, LiveFailure]
    live_served: Mapping[str, LiveFigures]
    events: tuple[str, ...]
    log_tail: tuple[str, str]
    new_failures: tuple[NewFailure, ...]


class JournalFeed:
    """State of one campaign folder's journal as seen by the UI (one instance per folder)."""

    def __init__(self, campaign_dir: Path, max_events: int = 200):
        self.dir = Path(campaign_dir)
        self.journal = Journal.open_read_only(self.dir / "journal.sqlite")  # a reader: no DDL, no file created
        self.last_event_id = 0
        self.live_failures: dict[str, LiveFailure] = {}
        self.live_served: dict[str, LiveFigures] = {}
        self.events: list[str] = []
        self.max_events = max_events
        self.reported: set[str] = set()

    def close(self) -> None:
        self.journal.close()

    def read(self, selected_pass: str | None) -> FeedRead:
        """The journal now (see FeedRead). ``new_failures``: failures not reported before, from
        oom/error events and from finished rows with status oom/error/killed."""
        new: list[NewFailure] = []
        for row in self.journal.events_since(self.last_event_id):
            ev = JournalEvent.of(row)
            self.last_event_id = ev.id
            kind, pid = ev.kind, ev.pass_id or ""
            if kind in SHOWN_EVENTS:
                self.events.append(event_line(ev))
            if kind == EventKind.PROGRESS or kind in LIVE_FAILURES:
                p = EventFields.of(ev.payload)
                if kind == EventKind.PROGRESS and (served := live_of(p.served)) is not None:
                    self.live_served[pid] = served
                if kind in LIVE_FAILURES:
                    items = p.items_done if isinstance(p.items_done, int) else None
                    info = LiveFailure(kind, items, p.message)
                    self.live_failures[pid] = info
                    if pid not in self.reported:
                        self.reported.add(pid)
                        new.append(NewFailure(pid, kind, info.items_done, info.message))
        self.events = self.events[-self.max_events:]
        status = CampaignStatus.of(campaign_status(self.dir, self.journal))
        for a in status.attempts:
            if a.status in FAILED and a.pass_id not in self.reported:
                self.reported.add(a.pass_id)
                new.append(NewFailure(a.pass_id, a.status, a.items_completed, a.notes or ""))
        attempts = status.attempts
        sel = selected_pass or next((a.pass_id for a in attempts if a.status == PassStatus.RUNNING),
                                    attempts[-1].pass_id if attempts else "")
        tail = log_tail(self.dir / "passes" / sel / "log.txt") if sel else ""
        return FeedRead(status=status, plan=tuple(PlannedSlot.of(r) for r in self.journal.plan()),
                        live_failures=dict(self.live_failures), live_served=dict(self.live_served),
                        events=tuple(self.events[-50:]), log_tail=(sel, tail), new_failures=tuple(new))
