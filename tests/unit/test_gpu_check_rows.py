"""scripts/gpu_check.py's peak-order check, on the rows of its first run on a lent H200
(2026-12-04): allocated <= reserved <= device used holds on the rows whose window ended; an oom row's
device used is read after the failure and is left out, not counted as a failure."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def load():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_order_is_checked_on_ended_windows_and_a_broken_one_counts():
    gpu_check = load()
    ok = {"status": "ok", "peak_allocated_bytes": 130351616, "peak_reserved_bytes": 146800640,
          "device_used_bytes": 1511915520}
    oom = {"status": "oom", "peak_allocated_bytes": 104022407168, "peak_reserved_bytes": 139355750400,
           "device_used_bytes": 110427504640}
    assert gpu_check.peak_order([ok, oom]) == (1, 0)
    broken = {**ok, "device_used_bytes": 100}
    assert gpu_check.peak_order([ok, broken, oom]) == (2, 1)
    assert gpu_check.peak_order([{**ok, "device_used_bytes": None}]) == (0, 0)


def test_the_server_series_campaign_loads_with_an_offline_reference_and_its_rates(tmp_path):
    from lab.orchestration.protocol import load_protocol

    gpu_check = load()
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "a", "text": "x", "label": "sci.space", "bucket": "short"}\n')
    f = tmp_path / "s.toml"
    f.write_text(gpu_check.server_campaign_text("s", corpus))
    proto = load_protocol(f)
    assert proto.config.scenario.server
    assert proto.reference.request_rate is None and proto.reference.device == "cuda"
    assert [v.request_rate for v in proto.variants if v.request_rate] == list(gpu_check.SERVER_RATES)


def test_the_server_series_verdict_names_a_wrong_row_and_tolerates_a_late_generator():
    gpu_check = load()
    ref = {"status": "ok", "corpus_accepted": True, "request_rate": None, "variant_label": "batch 8"}
    fast = {"status": "ok", "corpus_accepted": True, "request_rate": 8.0, "variant_label": "8 req/s",
            "served_ttft_p99_s": 0.02}
    late = {"status": "not_honoured", "request_rate": 32.0, "variant_label": "32 req/s",
            "notes": "declared value not honoured: request_rate: the load generator released requests late"}
    assert gpu_check.server_problems([ref, fast, late]) == []
    wrong = {**fast, "request_rate": 32.0, "corpus_accepted": False, "variant_label": "32 req/s"}
    assert gpu_check.server_problems([ref, fast, wrong]) == ["server series: 32 req/s not accepted"]
    died = {**late, "status": "error", "notes": "3 of 200 requests not answered"}
    assert gpu_check.server_problems([ref, fast, died]) == [
        "server series: 32 req/s error: 3 of 200 requests not answered"]
    assert gpu_check.server_problems([ref, fast])[0].startswith("server series: 1 server row(s) of 2")
