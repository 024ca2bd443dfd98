"""The journal feed's event lines (lab.service.live.event_line, readable): each kind's fields read
from the typed EventFields, an absent count shown as "?", other kinds shown whole."""

from __future__ import annotations

import json

from lab.service.live import JournalEvent, event_line, readable

T = 1_700_000_000.0  # 22:13:20 UTC


def line(kind: str, payload: dict, pass_id: str | None = "p001") -> str:
    return event_line(JournalEvent.of({"id": 1, "pass_id": pass_id, "t": T, "kind": kind, "payload": payload}))


def test_each_kind_has_its_line():
    assert line("phase", {"phase": "warmup", "state": "end", "duration_s": 1.5}) == \
        "22:13:20 p001 phase: warmup end 1.50 s"
    assert line("oom", {"items_done": 3, "kind": "oom", "message": "CUDA out of memory"}) == \
        "22:13:20 p001 oom: OUT OF MEMORY after 3 items: CUDA out of memory"
    assert line("error", {"message": "boom"}) == "22:13:20 p001 error: ERROR after ? items: boom"
    assert line("end", {"status": "ok", "items_completed": 16, "notes": ["a", "b"]}) == \
        "22:13:20 p001 end: ok (16 items) a; b"
    assert line("end", {}) == "22:13:20 p001 end: None (None items)"
    assert line("start", {"variant": "fp32 b8", "attempt": 2}) == "22:13:20 p001 start: fp32 b8 attempt 2"
    assert line("interrupted", {"pass_id": "p001"}, pass_id=None) == "22:13:20 - interrupted: pass_id=p001"


def test_a_log_line_is_shortened_when_it_is_an_event():
    def ev(**fields) -> str:
        return json.dumps({"iteralab": 1, "t": T, **fields})

    assert readable("plain output") == "plain output"
    assert readable(ev(event="progress", done=1, total=2)) is None
    assert readable(ev(event="phase", phase="measured", state="start")) == "phase measured start"
    assert readable(ev(event="result", status="ok", items_completed=8)) == "result: ok, 8 items"
    assert readable(ev(event="result")) == "result: ,  items"
    assert readable(ev(event="card", status="ok", device="cuda:1")) == "card: status=ok, device=cuda:1"
