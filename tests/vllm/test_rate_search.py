"""A rate search on the real product (issue 36; lab.orchestration.search): the demo classifier
served at 2, 4 and 8 req/s with [scenario] search = true, two repetitions, an end-to-end bound no
CPU server meets (0.1 ms). Each repetition climbs: the lowest rate runs, does not hold, and the
two rates above it are skipped rows naming it; the offline reference runs in both. Nothing holds;
the archive verifies, its skips re-derived. Which rate holds on a CPU is noise; which rates a
failing one skips is the rule, tested here without depending on it (tests/unit/test_search_rule.py
covers a rate that holds below one that fails).

Time: two offline passes on 40 items and two server passes (one server start and one generator
start each, about a minute of CPU each on the 2-core machine). Skipped, saying why, where the vLLM
venv is absent or stale (`make vllm-env`). Figures are printed: run with ``-s``."""

from __future__ import annotations

import csv

import pytest
from conftest import run_reported
from test_server_pooled import RATE, pooled_campaign

from lab.engines import vllm_env

pytestmark = pytest.mark.skipif(not vllm_env.is_ready(), reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (CI does) to run the rate search test"))

LADDER = (2.0, 4.0, 8.0)


def test_a_search_skips_the_rates_above_one_that_fails_in_each_repetition_and_verifies(tmp_path, model_dir):
    from lab.evidence.archive import verify
    from lab.report.summary import read_summary
    from lab.service.campaigns import make_archive

    f = pooled_campaign(tmp_path, model_dir, "classification")
    text = f.read_text().replace(f"values = [{RATE}]", f"values = {list(LADDER)}", 1)
    text = text.replace("repetitions = 1", "repetitions = 2", 1).replace("e2el_s = 0.5", "e2el_s = 0.0001", 1)
    f.write_text(text + "search = true\n")  # [scenario] is the file's last table
    orch = run_reported(f)
    attempts = orch.journal.attempts()
    by = {(a.repetition, a.variant.request_rate): a for a in attempts}
    assert len(attempts) == 2 * (1 + len(LADDER)) and len(by) == len(attempts), [a.pass_id for a in attempts]
    for rep in (1, 2):
        assert by[(rep, None)].status == "ok"  # the offline reference, never skipped
        low = by[(rep, 2.0)]
        assert low.status == "ok" and low.result.serving["verdict"]["holds"] is False, low.notes
        assert low.validation is not None and low.validation.corpus_accepted  # the same answers, too slow
        for rate in (4.0, 8.0):
            skipped = by[(rep, rate)]
            assert skipped.status == "skipped" and skipped.result is None
            assert (f"2 req/s (pass {low.pass_id}) did not hold the objective in repetition {rep}"
                    in skipped.notes), skipped.notes
            assert skipped.seq > low.seq  # climbed: the lower rate ran first in its repetition
            assert not (orch.dir / "passes" / skipped.pass_id).exists()  # not run: no pass folder
    rows = list(csv.DictReader(open(orch.dir / "report" / "raw_table.csv", encoding="utf-8")))
    assert sorted(r["status"] for r in rows) == ["ok"] * 4 + ["skipped"] * 4
    summary = {v.request_rate: v for v in read_summary(orch.dir / "report" / "summary.json")}
    assert summary[4.0].served_skipped == summary[8.0].served_skipped == 2
    assert summary[4.0].failures == 0 and summary[2.0].served_skipped == 0
    assert not any(v.holds_objective for v in summary.values())
    note = (orch.dir / "report" / "decision_note.md").read_text()
    assert "no declared rate holds it (rates tried: 2 req/s; 4, 8 req/s skipped by the rate search)" in note
    archive = make_archive(orch.dir)
    result = verify(archive)
    assert result.ok, result.problems
    print(f"\n[rate search] {len(rows)} rows: " + ", ".join(f"r{a.repetition} {a.variant.request_rate or 'offline'}: "
                                                          f"{a.status}" for a in attempts))
