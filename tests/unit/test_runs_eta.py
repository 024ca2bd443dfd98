"""The Runs screen shows the same ETA as the headless progress line (issue 22): one rule,
lab.orchestration.status.etas, over the journal's live progress (items done, items/s) and the median wall
time of the finished passes."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

from lab.orchestration.orchestrator import progress_line
from lab.orchestration.status import CampaignState, running_eta_text
from lab.orchestration.status_record import CampaignStatus, OrchestratorInfo
from lab.passes.records import Attempt
from tui.screens.runs_screen import status_line

START = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def attempts() -> list[Attempt]:
    slot = {"attempt": 1, "repetition": 1, "variant_id": "v"}
    finished = Attempt(pass_id="p001", seq=1, position=1, **slot, status="ok", start_time=START.isoformat(),
                       end_time=(START + timedelta(seconds=100)).isoformat())
    running = Attempt(pass_id="p002", seq=2, position=2, **slot, status="running",
                      start_time=(START + timedelta(seconds=100)).isoformat(), end_time=None,
                      items_completed=250, items_total=1000, items_per_s=10.0)
    return [finished, running]


def test_the_runs_screen_and_the_headless_line_give_the_same_eta():
    now = (START + timedelta(seconds=125)).timestamp()
    # 750 items left at 10 items/s: 75 s; 2 passes after this one at the 100 s median: 275 s
    text = running_eta_text(attempts(), planned=4, finished=1, now=now)
    assert text == "pass ETA 1 min 15 s, campaign ETA 4 min 35 s"
    assert text in progress_line("pass 2/4 p002", 250, 1000, 10.0, 25.0, "window", 2, 100.0)
    snap = SimpleNamespace(campaign_dir=Path("runs/demo/v1-abcd1234"), status=CampaignStatus(
        dir="runs/demo/v1-abcd1234", state=CampaignState.RUNNING, planned=4, finished=1, attempts=tuple(attempts()),
        orchestrator=OrchestratorInfo(pid=42), alive=True), live_served={})
    assert text in status_line(snap, "demo", now)  # type: ignore[arg-type]
    assert running_eta_text(attempts()[:1], planned=4, finished=1, now=now) == ""  # nothing running
