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
from pathlib import Path

from lab.engines.serving_figures import LiveFigures, live_of
from lab.facts.errors import clip
from lab.inputs.variants import variant_short
from lab.orchestration.journal import Journal
from lab.orchestration.status import CampaignState, campaign_status, running_eta_text
from lab.passes.events import FAILED, EventKind, PassStatus, parse_event

__all__ = ["FAILED", "LIVE_FAILURES", "SHOWN_EVENTS", "CampaignState", "EventKind", "JournalFeed", "PassStatus",
           "campaign_status", "event_line", "log_tail", "readable", "running_eta_text", "served_line", "served_text",
           "variant_short"]

SHOWN_EVENTS = (EventKind.START, EventKind.END, EventKind.OOM, EventKind.ERROR, EventKind.INTERRUPTED,
                EventKind.LEFTOVER, EventKind.PHASE)
"""Journal events listed in the campaign's event view (progress, result and card are not)."""
LIVE_FAILURES = (EventKind.OOM, EventKind.ERROR)
"""Events that tell a pass failed before its row is finished."""


def readable(line: str) -> str | None:
    """A log line for people: event lines shortened (progress dropped), others as they are."""
    ev = parse_event(line)
    if ev is None:
        return line
    kind = ev.get("event")
    if kind == EventKind.PROGRESS:
        return None
    if kind == EventKind.PHASE:
        d = ev.get("duration_s")
        return f"phase {ev.get('phase', '')} {ev.get('state', '')}" + (f" {d:.2f} s" if d is not None else "")
    if kind == EventKind.RESULT:
        return f"result: {ev.get('status', '')}, {ev.get('items_completed', '')} items"
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


def event_line(ev: dict) -> str:
    """One readable line for a journal event (UTC time, pass, kind, the useful fields)."""
    p = ev["payload"]
    when = time.strftime("%H:%M:%S", time.gmtime(ev["t"]))
    kind = ev["kind"]
    if kind == EventKind.PHASE:
        extra = f"{p.get('phase', '')} {p.get('state', '')}"
        if p.get("duration_s") is not None:
            extra += f" {p['duration_s']:.2f} s"
    elif kind == EventKind.OOM:
        extra = f"OUT OF MEMORY after {p.get('items_done', '?')} items: {clip(str(p.get('message', '')), 80)}"
    elif kind == EventKind.ERROR:
        extra = f"ERROR after {p.get('items_done', '?')} items: {clip(str(p.get('message', '')), 80)}"
    elif kind == EventKind.END:
        extra = f"{p.get('status')} ({p.get('items_completed')} items)"
        if p.get("notes"):
            extra += " " + clip("; ".join(p["notes"]), 80)
    elif kind == EventKind.START:
        extra = f"{p.get('variant', '')} attempt {p.get('attempt', 1)}"
    else:
        extra = clip(", ".join(f"{k}={v}" for k, v in p.items()), 80)
    return f"{when} {ev['pass_id'] or '-'} {kind}: {extra}"


class JournalFeed:
    """State of one campaign folder's journal as seen by the UI (one instance per folder)."""

    def __init__(self, campaign_dir: Path, max_events: int = 200):
        self.dir = Path(campaign_dir)
        self.journal = Journal.open_read_only(self.dir / "journal.sqlite")  # a reader: no DDL, no file created
        self.last_event_id = 0
        self.live_failures: dict[str, dict] = {}
        self.live_served: dict[str, LiveFigures] = {}
        self.events: list[str] = []
        self.max_events = max_events
        self.reported: set[str] = set()

    def close(self) -> None:
        self.journal.close()

    def read(self, selected_pass: str | None) -> dict:
        """{status, plan, live_failures, live_served, events, log_tail, new_failures}.

        ``live_served``: {pass_id: the LiveFigures of its last progress event that carried them}
        (a server pass's answers so far, lab.engines.serving_figures; see served_text).

        ``new_failures``: [(pass_id, kind, items_done, detail)] not reported before, from
        oom/error events and from finished rows with status oom/error/killed.
        """
        new: list[tuple] = []
        for ev in self.journal.events_since(self.last_event_id):
            self.last_event_id = ev["id"]
            kind, pid, p = ev["kind"], ev["pass_id"], ev["payload"]
            if kind in SHOWN_EVENTS:
                self.events.append(event_line(ev))
            if kind == EventKind.PROGRESS and (served := live_of(p.get("served"))) is not None:
                self.live_served[pid] = served
            if kind in LIVE_FAILURES:
                info = {"kind": kind, "items_done": p.get("items_done"), "message": str(p.get("message", ""))}
                self.live_failures[pid] = info
                if pid not in self.reported:
                    self.reported.add(pid)
                    new.append((pid, kind, info["items_done"], info["message"]))
        self.events = self.events[-self.max_events:]
        status = campaign_status(self.dir, self.journal)
        for a in status["attempts"]:
            if a.status in FAILED and a.pass_id not in self.reported:
                self.reported.add(a.pass_id)
                new.append((a.pass_id, a.status, a.items_completed, a.notes or ""))
        attempts = status["attempts"]
        sel = selected_pass or next((a.pass_id for a in attempts if a.status == PassStatus.RUNNING),
                                    attempts[-1].pass_id if attempts else "")
        tail = log_tail(self.dir / "passes" / sel / "log.txt") if sel else ""
        return {"status": status, "plan": self.journal.plan(), "live_failures": dict(self.live_failures),
                "live_served": dict(self.live_served),
                "events": list(self.events[-50:]), "log_tail": (sel, tail), "new_failures": new}
