"""Records and facts defined once: pass statuses, the variant summary, pricing defaults,
file digests, image pins, where runs live."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from lab.facts.constants import DEFAULT_LOTS
from lab.facts.files import REPO_ROOT, sha256_bytes, sha256_file
from lab.facts.host import IMAGE_KEYS, read_pins
from lab.passes.events import EXIT_NAMES, FAILED, FINISHED, PassStatus
from lab.report.decision_note import decision_pricing
from lab.report.summary import VariantSummary, read_summary, summarize, write_summary
from lab.service.campaigns import runs_root


def test_pass_statuses_are_the_plain_strings_stored_in_json_and_sqlite():
    assert [s.value for s in PassStatus] == ["running", "ok", "oom", "error", "killed", "interrupted",
                                               "skipped"]
    assert json.dumps({"status": PassStatus.OOM}) == '{"status": "oom"}'
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (status TEXT)")
    db.execute("INSERT INTO t VALUES (?)", (str(PassStatus.KILLED),))
    assert db.execute("SELECT status FROM t").fetchone()[0] == "killed" == PassStatus.KILLED
    # an interrupted attempt does not fill its slot (it runs again on resume); a failure does
    assert PassStatus.INTERRUPTED not in FINISHED and PassStatus.RUNNING not in FINISHED
    assert {"oom", "error", "killed"} == FAILED and FAILED | {"ok"} == FINISHED
    assert set(EXIT_NAMES.values()) <= set(PassStatus)


def row(vid, status, measured_s=None, series="batch", accepted=None):
    return {"variant_id": vid, "variant_label": f"label {vid}", "variant_name": f"{series}/batch_size={vid}",
            "series": series, "batch_size": int(vid), "precision": "fp32", "bucketing": False,
            "status": status, "measured_s": measured_s, "items_per_s": 10.0 if measured_s else None,
            "metric": 0.6 if status == "ok" else None, "corpus_accepted": accepted, "notes": "",
            "process_peak_rss_bytes": 1000, "peak_allocated_bytes": None, "peak_reserved_bytes": None}


def test_summary_records_round_trip_and_flag_indistinct_variants(tmp_path):
    rows = [row("1", "ok", 10.0, accepted=True), row("1", "ok", 12.0, accepted=True),
            row("8", "ok", 11.0, accepted=True), row("8", "oom")]
    s = summarize(rows)
    assert [v.variant_id for v in s] == ["1", "8"] and all(isinstance(v, VariantSummary) for v in s)
    one, eight = s
    assert one.durations_s == (10.0, 12.0) and one.median_s == 11.0 and one.successes == 2
    assert eight.failures == 1 and eight.failure_kinds == ("oom",) and eight.short_name == "batch_size=8"
    # gap between medians (0) <= spread (2 s): the series does not distinguish them
    assert one.does_not_distinguish and one.does_not_distinguish_from == ("8",)
    with pytest.raises(AttributeError):
        one.median_s = 1.0  # type: ignore[misc]
    write_summary(s, tmp_path / "summary.csv")
    assert read_summary(tmp_path / "summary.json") == s
    assert (tmp_path / "summary.csv").read_text().splitlines()[0].startswith("variant_id,label,")


def test_summary_record_refuses_unknown_keys():
    with pytest.raises(ValueError, match="unknown key"):
        VariantSummary.from_json({"variant_id": "v", "label": "l", "medain_s": 1.0})


def test_pricing_invents_no_package_and_observed_window_fills_only_a_missing_one():
    p = decision_pricing({"gpu": "", "days": None, "lots": " "})
    assert (p["gpu"], p["days"], p["lots"]) == (None, None, DEFAULT_LOTS)  # no [cost]: nothing priced
    assert p["catalog_path"] is None and p["window_start"] is None
    seen = ("2026-11-30T09:00:00+00:00", "2026-11-30T10:00:00+00:00")
    assert decision_pricing({}, seen)["window_start"] == seen[0]
    given = decision_pricing({"window_start": "2026-12-01T09:00", "window_end": "2026-12-02T09:00"}, seen)
    assert (given["window_start"], given["window_end"]) == ("2026-12-01T09:00", "2026-12-02T09:00")


def test_file_digest_matches_hashlib_across_chunks(tmp_path):
    data = bytes(range(256)) * 9000  # > 2 MiB: several 1 MiB chunks
    f = tmp_path / "blob"
    f.write_bytes(data)
    assert sha256_file(f) == hashlib.sha256(data).hexdigest() == sha256_bytes(data)


def test_image_pins_are_read_from_the_one_pins_file(tmp_path):
    assert (REPO_ROOT / "lab").is_dir() and (REPO_ROOT / "images" / "pins.env").is_file()
    pins = read_pins()
    assert all(pins.get(k) for k in IMAGE_KEYS.values())
    f = tmp_path / "pins.env"
    f.write_text("# comment\n\nCPU_IMAGE = iteralab/cpu:1\nX=a=b\n")
    assert read_pins(f) == {"CPU_IMAGE": "iteralab/cpu:1", "X": "a=b"}


def test_runs_root_follows_the_environment_at_call_time(monkeypatch, tmp_path):
    monkeypatch.delenv("ITERALAB_RUNS", raising=False)
    assert runs_root() == REPO_ROOT / "runs"
    monkeypatch.setenv("ITERALAB_RUNS", str(tmp_path))
    assert runs_root() == tmp_path
