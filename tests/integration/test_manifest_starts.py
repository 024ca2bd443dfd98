"""A campaign started twice with other launcher options keeps both in its manifest (the
"launcher" field alone was overwritten by the last start)."""
from __future__ import annotations

import json

import pytest
from conftest import cut_corpus, write_campaign

from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock
from lab.report.build import build_report

pytestmark = pytest.mark.slow


def test_each_start_keeps_its_launcher_and_host(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), values=(1,))
    lock(load_protocol(f))
    first = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert first.run() == "finished"
    limit = 64 * 2**30
    second = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher(address_space_limit_bytes=limit))
    second.run()  # nothing left to run: a start all the same, recorded
    build_report(second.dir)
    m = json.loads((second.dir / "report" / "manifest.json").read_text())
    starts = m["launchers_by_start"]
    assert [s["address_space_limit_bytes"] for s in starts] == [None, limit]
    assert all(s["recorded_at"] for s in starts)
    assert m["launcher"]["address_space_limit_bytes"] == limit  # the last start's, as before
    assert "(2 start(s) recorded)" in m["environment_recorded"]
