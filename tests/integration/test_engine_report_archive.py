"""Raw table, summary, manifest and the evidence archive of a real finished campaign."""

from __future__ import annotations

import csv
import io
import json
import tarfile

import pytest

from lab.evidence.archive import ArchiveError, extract, verify
from lab.report.raw_table import COLUMNS
from lab.service.campaigns import make_archive


def test_raw_table_one_row_per_pass_with_empty_cells_explained(small_campaign):
    rows = list(csv.DictReader(open(small_campaign.dir / "report" / "raw_table.csv")))
    assert len(rows) == 4 and list(rows[0]) == list(COLUMNS)
    assert [r["batch_size"] for r in rows] == ["1", "4", "4", "1"]  # rotated: 1-4 then 4-1
    for r in rows:
        assert r["status"] == "ok" and r["ids_match"] == "True" and r["corpus_accepted"] == "True"
        assert r["expected_ids"] == r["observed_ids"] == "10"
        assert float(r["measured_s"]) > 0 and int(r["process_peak_rss_bytes"]) > 100_000_000
        assert r["peak_allocated_bytes"] == "" and "no CUDA/ROCm device" in r["notes"]
        assert len(r["predictions_sha256"]) == 64


def test_summary_and_decision_note(small_campaign):
    summary = json.loads((small_campaign.dir / "report" / "summary.json").read_text())
    assert len(summary) == 2
    for s in summary:
        assert s["successes"] == 2 and s["failures"] == 0 and len(s["durations_s"]) == 2
        assert s["min_s"] <= s["median_s"] <= s["max_s"]
    note = (small_campaign.dir / "report" / "decision_note.md").read_text()
    assert "batch 1" in note and "batch 4" in note


def test_manifest_records_versions_and_no_secrets(small_campaign, monkeypatch):
    from lab.report.build import build_report

    monkeypatch.setenv("HF_TOKEN", "hf_secretvalue123")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "awssecret456")
    build_report(small_campaign.dir)
    text = (small_campaign.dir / "report" / "manifest.json").read_text()
    m = json.loads(text)
    assert "hf_secretvalue123" not in text and "awssecret456" not in text
    assert m["packages"]["torch"].startswith("2.13.0") and m["gpu"]["driver"] == "absent"
    assert m["corpus"]["items"] == 10 and m["campaign"]["protocol_sha256"]
    assert m["model"]["kind"] == "local" and "model.safetensors" in m["model"]["files_sha256"]
    # the environment is the one recorded when the orchestrator started, not the report's
    assert m["environment_recorded"].startswith("when the orchestrator started, ")
    assert m["report_environment"] == {} and m["environment_changes"] == []


def test_a_report_built_elsewhere_keeps_the_passes_environment(small_campaign, monkeypatch):
    """Built after the lab changed (another commit, another torch): the manifest still says
    what the passes ran on, and names the report host's differing facts apart."""
    import lab.inputs.manifest
    from lab.report.build import build_report

    real = lab.inputs.manifest.host_facts()
    moved = {**real, "lab": {**real["lab"], "commit": "f" * 40}, "packages": {**real["packages"], "torch": "9.9.9"}}
    monkeypatch.setattr(lab.inputs.manifest, "host_facts", lambda: moved)
    build_report(small_campaign.dir)
    m = json.loads((small_campaign.dir / "report" / "manifest.json").read_text())
    assert m["lab"]["commit"] == real["lab"]["commit"] != "f" * 40
    assert m["packages"]["torch"].startswith("2.13.0")
    assert m["report_environment"]["lab"]["commit"] == "f" * 40
    assert m["report_environment"]["packages"]["torch"] == "9.9.9"
    monkeypatch.undo()
    build_report(small_campaign.dir)  # leave the shared campaign's report as the others expect it


def test_archive_verifies_and_detects_tampering(small_campaign, tmp_path):
    path = make_archive(small_campaign.dir)
    v = verify(path)
    assert v.ok, v.problems
    assert v.rows_checked == 4 and v.files_checked > 10
    top = extract(path, tmp_path / "x")
    assert (top / "report" / "raw_table.csv").is_file() and (top / "SHA256SUMS").is_file()
    # change one prediction inside the archive: both checks must catch it
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(path) as src, tarfile.open(bad, "w:gz") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None
            if m.name.endswith("predictions.jsonl") and "p001" in m.name:
                data = data.replace(b'"prob": ', b'"prob": 0', 1)
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    v2 = verify(bad)
    assert not v2.ok
    assert any("p001" in p and "SHA256SUMS" in p for p in v2.problems)
    assert any("predictions sha256 differs" in p for p in v2.problems)


def test_extraction_refuses_paths_outside_the_target(tmp_path):
    evil = tmp_path / "evil.tar.gz"
    with tarfile.open(evil, "w:gz") as t:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 3
        t.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(ArchiveError, match="outside the target folder"):
        extract(evil, tmp_path / "x")
    assert not (tmp_path / "outside.txt").exists()
