"""A [cost] catalog given relative to the campaign file prices the report, the archive and the
Cost screen from that file, wherever the command runs; the archive carries the catalog it
priced with (report/catalog.csv, its sha256 in the manifest).

Before: the lock resolved it next to the campaign file, the report against the campaign
folder's copy (ProtocolError: cannot read catalog .../runs/...), and the decision note and the
Cost screen against the working directory."""
from __future__ import annotations

import json

import pytest
from conftest import cut_corpus, write_campaign

from lab.cost.forfaits import DEFAULT_CATALOG
from lab.facts.files import sha256_file
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock
from lab.report.build import build_report

pytestmark = pytest.mark.slow


def test_a_relative_catalog_prices_the_report_from_the_campaign_folder(tmp_path, model_dir, monkeypatch):
    home = tmp_path / "campaign"
    home.mkdir()
    rows = open(DEFAULT_CATALOG, encoding="utf-8").read().splitlines()
    # the shipped catalog with the rtx-4090 7-day package at 123.45: the note must price with it
    own = [r.replace(",7,110.00,", ",7,123.45,") if r.startswith("rtx-4090,") else r for r in rows]
    assert own != rows
    (home / "prices").mkdir()
    (home / "prices" / "mine.csv").write_text("\n".join(own) + "\n", encoding="utf-8")
    f = write_campaign(home, model_dir, cut_corpus(home / "c.jsonl", 2, 1, 1), values=(1,))
    f.write_text(f.read_text() + '\n[cost]\ngpu = "rtx-4090"\ndays = 7\nlots = 1\ncatalog = "prices/mine.csv"\n')
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert orch.run() == "finished"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # a catalog read from the working directory would be missing here
    build_report(orch.dir)
    report = orch.dir / "report"
    note = (report / "decision_note.md").read_text()
    assert "Catalog: " + str(home / "prices" / "mine.csv") in note and "123.45 USD" in note
    m = json.loads((report / "manifest.json").read_text())
    assert m["catalog"] == {"path": str(home / "prices" / "mine.csv"),
                            "sha256": sha256_file(home / "prices" / "mine.csv"), "copy": "report/catalog.csv"}
    assert (report / "catalog.csv").read_bytes() == (home / "prices" / "mine.csv").read_bytes()

    from lab.service.views import cost_view

    view = cost_view(f, orch.dir, {})
    assert "123.45" in view.quote_text and "Catalog: " + str(home / "prices" / "mine.csv") in view.note_md
