"""A journal whose plan names a variant id the protocol no longer gives (a lab version that
derives ids differently planned it, or the journal was edited) stops the campaign before any
pass, in one line naming the id and the fix, never a KeyError traceback (issue 9, trial of
docs/architecture.md). Real CLI process, real demo model, real SQLite journal, tiny corpus."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest
from conftest import REPO, cut_corpus, write_campaign

from lab.facts.host import iteralab_command

OLD_ID = "v-0000000000"  # what another id derivation would have planned


def planned_with_an_unknown_id(tmp_path, model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 1, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="planids", values=(1, 4))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.journal.close()
    db = sqlite3.connect(orch.dir / "journal.sqlite")
    with db:  # the plan row of slot 2, as a lab deriving ids otherwise would have written it
        db.execute("UPDATE plan SET variant_id=? WHERE seq=2", (OLD_ID,))
    db.close()
    return f, orch.dir


def attempts(campaign_dir) -> int:
    db = sqlite3.connect(campaign_dir / "journal.sqlite")
    try:
        return db.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]
    finally:
        db.close()


def test_cli_campaign_run_refuses_a_plan_with_an_unknown_variant_id(model_dir, tmp_path):
    f, d = planned_with_an_unknown_id(tmp_path, model_dir)
    r = subprocess.run([sys.executable, "-m", "lab.cli", "campaign", "run", str(f), "--launcher", "local"],
                       cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                       env={**os.environ, "PYTHONPATH": str(REPO), "ITERALAB_RUNS": str(tmp_path / "runs")})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "KeyError" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    shown = iteralab_command(str(REPO / "lab" / "cli.py"))  # what the child (python -m lab.cli) names
    assert OLD_ID in lines[0] and "(slot 2)" in lines[0] and f"`{shown} protocol lock" in lines[0]
    assert attempts(d) == 0 and not any((d / "passes").iterdir())  # nothing ran, nothing was written


def test_the_orchestrator_and_the_service_layer_raise_protocol_error(model_dir, tmp_path, monkeypatch):
    from lab.facts.errors import ProtocolError
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, locked_version
    from lab.service.campaigns import spawn_detached

    f, d = planned_with_an_unknown_id(tmp_path, model_dir)
    monkeypatch.setenv("ITERALAB_RUNS", str(tmp_path / "runs"))
    with pytest.raises(ProtocolError, match=OLD_ID):  # the UI's start: USER_ERRORS, one line
        spawn_detached(f, "local", None)
    proto = load_protocol(f)
    orch = Orchestrator(d, proto, LocalLauncher(), locked_version(proto))  # built without prepare
    with pytest.raises(ProtocolError, match=OLD_ID) as e:
        orch.run()
    assert "\n" not in str(e.value)
    assert attempts(d) == 0
