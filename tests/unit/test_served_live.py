"""A server pass's answers so far, as progress (issue 36: the Runs screen shows live latency
percentiles and the achieved rate): the worker's live lines, the figures made of them, the
progress event that carries them, the journal feed that keeps the last one per pass, and the Runs
table's cells. None of it is a figure of the pass: those come from the tool's result."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from lab.engines.serving_figures import LiveFigures, live_figures, plain
from lab.engines.vllm_load import RECORD_NAME, LiveOutcomes, LoadRun, LoadSettings, Prompt
from lab.passes.events import EventKind, EventWriter
from lab.passes.records import Attempt
from lab.service.live import LiveFailure, served_text
from tui.widgets.pass_table import COLUMNS, pass_rows

OUTCOMES = [{"ok": True, "ttft_s": 0.02, "e2el_s": 0.1, "t_s": 0.5},
            {"ok": True, "ttft_s": 0.05, "e2el_s": 0.2, "t_s": 1.0},
            {"ok": False, "ttft_s": 0.0, "e2el_s": 0.0, "t_s": 1.2},
            {"ok": True, "ttft_s": 0.30, "e2el_s": 0.6, "t_s": 1.5}]


def test_live_figures_are_the_answered_requests_percentiles_and_rate_so_far():
    f = live_figures(OUTCOMES)
    ttft = [0.02, 0.05, 0.30]
    assert (f.answered, f.failed) == (3, 1)
    assert f.ttft_p50_s == pytest.approx(float(np.percentile(ttft, 50)))
    assert f.ttft_p99_s == pytest.approx(float(np.percentile(ttft, 99)))
    assert f.achieved_rate == pytest.approx(3 / 1.5)  # answered / the last answer's time from the origin
    assert live_figures(OUTCOMES[:1]) == LiveFigures(answered=1, failed=0, achieved_rate=None,
                                                    ttft_p50_s=0.02, ttft_p99_s=0.02)
    assert live_figures([]) == LiveFigures(answered=0, failed=0, achieved_rate=None, ttft_p50_s=None,
                                           ttft_p99_s=None)


def test_the_live_file_is_read_a_whole_line_at_a_time(tmp_path):
    run = LoadRun(prompts=(Prompt(id="a", prompt="x", max_tokens=4),), out_dir=tmp_path,
                  settings=LoadSettings(rate=1.0, seed=0, burstiness=1.0, max_concurrency=None, warmups=0,
                                        stop=(), objective=None))
    live = LiveOutcomes(run)
    assert live.read() == []  # nothing written yet
    path = tmp_path / (RECORD_NAME + ".live")
    lines = [json.dumps(o) + "\n" for o in OUTCOMES]
    path.write_text(lines[0] + lines[1][:10])  # the worker is writing the second line
    assert live.read() == OUTCOMES[:1]
    with open(path, "a") as fh:
        fh.write(lines[1][10:] + lines[2] + lines[3])
    assert live.read() == OUTCOMES
    assert live.read() == OUTCOMES  # nothing new: the same list


def test_the_progress_event_carries_the_served_figures_only_when_given():
    out = io.StringIO()
    ev = EventWriter(out)
    ev.progress(3, 10, 1.5, force=True, served=plain(live_figures(OUTCOMES)))
    ev.progress(4, 10, 1.6, force=True)
    first, second = (json.loads(x) for x in out.getvalue().splitlines())
    assert first["event"] == EventKind.PROGRESS and first["served"]["answered"] == 3
    assert first["served"]["ttft_p99_s"] == pytest.approx(live_figures(OUTCOMES).ttft_p99_s)
    assert "served" not in second


def test_a_running_server_pass_shows_its_percentiles_and_achieved_rate_in_the_runs_table():
    served = live_figures(OUTCOMES)
    running = Attempt(pass_id="p001", seq=1, attempt=1, repetition=1, position=1, variant_id="v",
                      status="running", items_completed=4, items_total=24, items_per_s=9.9)
    offline = Attempt(pass_id="p002", seq=2, attempt=1, repetition=1, position=2, variant_id="w",
                      status="running", items_completed=4, items_total=24, items_per_s=9.9)
    rows = pass_rows([running, offline], [], {}, now=0.0, live_served={"p001": served})
    status, rate = COLUMNS.index("status"), COLUMNS.index("it/s")
    assert str(rows[0].cells[status]) == served_text(served) == (
        f"p50 {served.ttft_p50_s:.3f} p99 {served.ttft_p99_s:.3f} s")
    assert rows[0].cells[rate] == f"{served.achieved_rate:.1f}"
    assert str(rows[1].cells[status]) == "running" and rows[1].cells[rate] == "9.9"
    assert served_text(live_figures([])) == "no answer yet"
    # a failure seen live wins over the figures: the row says it failed
    failed = pass_rows([running], [], {"p001": LiveFailure("error", 4, "x")}, now=0.0,
                       live_served={"p001": served})
    assert str(failed[0].cells[status]) == "ERROR @4"


def test_the_journal_feed_keeps_each_passs_last_served_figures(tmp_path):
    from lab.orchestration.journal import Journal
    from lab.service.live import JournalFeed

    j = Journal(tmp_path / "journal.sqlite")
    first, later = plain(live_figures(OUTCOMES[:2])), plain(live_figures(OUTCOMES))
    j.add_event("p001", EventKind.PROGRESS, {"done": 2, "total": 24, "items_per_s": 1.0, "served": first})
    j.add_event("p002", EventKind.PROGRESS, {"done": 2, "total": 24, "items_per_s": 1.0})  # an offline pass
    j.add_event("p003", EventKind.PROGRESS, {"done": 2, "total": 24, "items_per_s": 1.0, "served": {"x": 1}})
    feed = JournalFeed(tmp_path)
    assert feed.read(None).live_served == {"p001": live_figures(OUTCOMES[:2])}  # p003's is not figures
    j.add_event("p001", EventKind.PROGRESS, {"done": 4, "total": 24, "items_per_s": 1.0, "served": later})
    assert feed.read(None).live_served == {"p001": live_figures(OUTCOMES)}
    feed.close()
    j.close()


def test_the_status_pane_line_names_the_answers_rate_and_percentiles_so_far():
    from lab.service.live import served_line

    f = live_figures(OUTCOMES)
    assert served_line(f) == (f"served 3 answered, 1 failed, 2.00 req/s, TTFT p50 {f.ttft_p50_s:.3f} s "
                              f"p99 {f.ttft_p99_s:.3f} s")
    assert served_line(live_figures([])) == "served 0 answered"
