"""Failures are rows: a real host-memory OOM, a non-finite logit, a killed-and-resumed campaign."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest
from conftest import REPO, as_limit_above, cut_corpus, wait_until, write_campaign

from lab.launchers.local import LocalLauncher
from lab.orchestration.journal import Journal
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock
from lab.report.build import build_report
from lab.report.raw_table import raw_rows

pytestmark = pytest.mark.slow


def test_non_finite_logit_fails_the_pass(tmp_path, model_dir):
    from safetensors.torch import load_file, save_file

    broken = tmp_path / "model-nan"
    shutil.copytree(model_dir, broken)
    weights = load_file(broken / "model.safetensors")
    weights["classifier.bias"][3] = float("nan")
    save_file(weights, broken / "model.safetensors", metadata={"format": "pt"})
    f = write_campaign(tmp_path, broken, cut_corpus(tmp_path / "c.jsonl", 3, 1, 1), values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    [a] = orch.journal.attempts()
    assert a.status == "error" and a.exit_code == 4
    assert "NonFiniteLogits" in a.notes and a.items_completed == 0
    assert a.validation.corpus_accepted is False


def test_real_host_oom_leaves_a_row_with_items_completed(tmp_path, model_dir, one_malloc_arena):
    """Batch 8 on long items exceeds an address-space limit that batch 1 fits in.

    The limit is calibrated in the test from the address space (VmPeak) batch 1 needed
    without a limit (``conftest.as_limit_above``), so it holds on any machine of this kind.
    """
    corpus = cut_corpus(tmp_path / "c.jsonl", 8, 0, 16)  # 8 short first, then 16 long
    f = write_campaign(tmp_path, model_dir, corpus, values=(1, 8), max_length=512, padding="longest")
    lock(load_protocol(f))
    free = Orchestrator.prepare(f, tmp_path / "free", LocalLauncher())
    assert free.run() == "finished"
    peaks = {a.variant.batch_size: a.result.process_peak_vm_bytes for a in free.journal.attempts()}
    assert peaks[8] > peaks[1]
    limit = as_limit_above(peaks[1])
    orch = Orchestrator.prepare(f, tmp_path / "limited", LocalLauncher(address_space_limit_bytes=limit,
                                                                        timeout_s=300))
    orch.run()
    rows = {r["batch_size"]: r for r in raw_rows(orch.journal.attempts(), "t", 1, orch.dir)}
    assert rows[1]["status"] == "ok" and rows[1]["items_completed"] == 24
    b8 = rows[8]
    assert b8["status"] == "oom" and b8["exit_code"] == 3
    # the first batch (8 short items) completes; the OOM comes on a batch of long items
    assert b8["items_completed"] in (8, 16)
    assert "can't allocate memory" in b8["notes"] or "out of memory" in b8["notes"].lower()
    assert b8["corpus_accepted"] is False and b8["measured_s"] is None
    lines = (orch.dir / b8["predictions_path"]).read_text().splitlines()
    assert len(lines) == b8["items_completed"]  # predictions already made are kept
    events = [e["kind"] for e in orch.journal.events_since(0) if e["pass_id"] == b8["pass_id"]]
    assert "oom" in events
    # nothing retried with a smaller batch: exactly one attempt per planned slot
    assert len(orch.journal.attempts()) == 2
    # memory decides feasibility before cost: batch 8 is excluded from the comparison, with the reason
    summary = {s.batch_size: s for s in build_report(orch.dir)["summary"]}
    assert summary[1].feasible is True
    assert summary[8].feasible is False and "OOM in 1 of 1" in summary[8].infeasible_reason
    note = (orch.dir / "report" / "decision_note.md").read_text()
    excluded = note.split("## Excluded configurations", 1)[1].split("## Decision", 1)[0]
    assert "batch 8" in excluded and "batch 1" not in excluded


def test_killed_campaign_resumes_and_keeps_the_interrupted_row(tmp_path, model_dir):
    # 40 long items at max_length 512: a pass runs for several seconds after its first progress
    # (~5 s at batch 1, ~10 s at batch 4 on an idle 2-core machine), so a test process starved
    # for seconds between seeing the progress and the kill still catches that pass running.
    # Whichever pass is caught, the assertions below follow it (the rotated order decides
    # which variant comes first).
    corpus = cut_corpus(tmp_path / "c.jsonl", 10, 6, 40)
    f = write_campaign(tmp_path, model_dir, corpus, values=(1, 4), repetitions=1, max_length=512)
    lock(load_protocol(f))
    runs = tmp_path / "runs"
    env = {**os.environ, "ITERALAB_RUNS": str(runs)}
    orch_proc = subprocess.Popen([sys.executable, "-m", "lab.cli", "campaign", "run", str(f), "--launcher",
                                  "local"], cwd=REPO, env=env, start_new_session=True,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal_path = None

    def running():
        nonlocal journal_path
        found = list(runs.glob("t/v1-*/journal.sqlite"))
        if not found:
            return False
        journal_path = found[0]
        return any(a.status == "running" and a.items_completed > 0
                   for a in Journal(journal_path).attempts())

    def kill_all() -> None:
        """SIGKILL the orchestrator and every pass process group it started. The orchestrator is
        frozen first, so it cannot start a pass between listing its children and the kill."""
        try:
            orch = psutil.Process(orch_proc.pid)
            orch.suspend()
            children = orch.children(recursive=True)
        except psutil.Error:
            children = []
        for pid in [orch_proc.pid] + [c.pid for c in children]:  # each pass runs in its own session
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        orch_proc.wait()

    try:
        wait_until(running, 240, "a pass to report progress")
        # kill the orchestrator and its pass, as a host reboot or a lost session would
        kill_all()
        before = Journal(journal_path).attempts()
        assert [a.status for a in before][-1] == "running", before
        assert all(a.status == "ok" for a in before[:-1]), before
        caught = before[-1].seq

        orch = Orchestrator.prepare(f, runs, LocalLauncher())
        assert orch.run() == "finished"
        attempts = orch.journal.attempts()
        expected = [(seq, 1, "ok") for seq in range(1, caught)] + [(caught, 1, "interrupted"), (caught, 2, "ok")]
        expected += [(seq, 1, "ok") for seq in range(caught + 1, 3)]
        assert [(a.seq, a.attempt, a.status) for a in attempts] == expected
        interrupted = attempts[caught - 1]
        assert attempts[caught].pass_id.endswith("-a2")
        assert interrupted.items_completed > 0  # the progress made before the kill stays on its row
        report = build_report(orch.dir)
        assert report["rows"] == 3
        assert "interrupted" in [e["kind"] for e in orch.journal.events_since(0)]
        summary = {s.variant_id: s for s in report["summary"]}
        first = summary[interrupted.variant_id]
        assert first.failures == 1 and first.successes == 1
    finally:
        if orch_proc.poll() is None:
            kill_all()
