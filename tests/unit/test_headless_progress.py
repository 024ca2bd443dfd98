"""Issue 22 part 2: the headless progress line (items, items/s, ETA of the pass and of the
campaign), the signals that interrupt a foreground run, and the TOML the replay writes."""

from __future__ import annotations

import os
import signal
import tomllib

import pytest

from lab.evidence.replay import dumps_campaign
from lab.orchestration.orchestrator import progress_line
from lab.service.campaigns import CampaignInterrupted, interrupt_on_signals


def test_progress_line_gives_items_rate_and_both_etas():
    line = progress_line("pass 2/6 p002", 300, 1000, 50.0, 12.0, "measured", 4, 30.0)
    assert line.startswith("pass 2/6 p002: measured, 300/1000 items, 50.0 items/s")
    assert "pass ETA 14 s" in line  # 700 items / 50 items/s
    assert "campaign ETA 2 min 14 s" in line  # 14 s + 4 passes x 30 s
    unknown = progress_line("pass 1/6 p001", 0, 1000, None, 40.0, "model_load", 5, None)
    assert "no items/s yet" in unknown and "pass ETA unknown" in unknown and "campaign ETA unknown" in unknown
    own = progress_line("pass 1/2 p001", 500, 1000, 100.0, 5.0, "measured", 1, None)
    assert "campaign ETA 15 s" in own  # 5 s left + 1 pass of this one's projected 10 s


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_interrupt_once_like_ctrl_c(sig):
    before = signal.getsignal(sig)
    with pytest.raises(CampaignInterrupted) as caught, interrupt_on_signals():
        os.kill(os.getpid(), sig)  # the handler runs in this (main) thread before the next statements
        for _ in range(1000):
            pass
    assert isinstance(caught.value, KeyboardInterrupt) and caught.value.signum == sig
    assert signal.getsignal(sig) == before  # restored on exit


def test_the_replay_toml_reads_back_as_the_same_tables():
    raw = {"campaign": {"name": "t", "question": 'Which "config"?\nline 2', "deliverables": 1},
           "timing": {"warmup_items": 2, "min_window_s": 60.0, "threads": 0},
           "defaults": {"bucketing": False, "padding": "longest"},
           "series": [{"name": "batch", "factor": "batch_size", "values": [1, 4, 8]},
                      {"name": "b", "factor": "bucketing", "values": [False, True], "batch_size": 8}]}
    assert tomllib.loads(dumps_campaign(raw)) == raw
