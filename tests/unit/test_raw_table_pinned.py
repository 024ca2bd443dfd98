"""The raw table's CSV is pinned byte for byte on one fixed journal.

The journal below holds one attempt of each kind the raw table tells apart (a single-card pass
with every figure, a compiled pass, a vLLM generation pass, a two-card pass whose cards differ
and one left no record, an embedding pass, a failure, an interrupted pass with only its launch
record, a running pass). ``fixtures/raw_table_pinned.csv`` was written from it by the raw table
as it read journal dicts (main 65e3fc7, before ``Journal.attempts`` returned typed records), so
a change of reading that moves one cell or one note fails here. A deliberate change of a column
or a note rewrites the file: ``python tests/unit/test_raw_table_pinned.py`` (and says so in its
commit).
"""

from __future__ import annotations

import sys
from pathlib import Path

from lab.inputs.variants import Variant
from lab.orchestration.journal import Journal
from lab.report.raw_table import raw_rows, write_raw_table

PINNED = Path(__file__).parent / "fixtures" / "raw_table_pinned.csv"
T0, T1 = "2026-01-01T00:00:00+00:00", "2026-01-01T00:01:00+00:00"
PEAKS = {"peak_allocated_bytes": 1000, "peak_reserved_bytes": 2048, "process_peak_rss_bytes": 300_000_000,
         "device_used_bytes": None, "reasons": {"device_used_bytes": "NVML not available"}}
CONDITIONS = {"cpu_time_s": 4.5, "cpu_share": 0.9, "cpu_affinity": 2, "cpu_quota": None, "cpus_available": 2,
              "load_1m_start": 1.5, "load_1m_end": 2.0, "steal_share": 0.0, "starved": False,
              "starved_reason": "", "gpu_start": {"sm_clock_mhz": 1800, "throttle_reasons": []},
              "gpu_end": {"sm_clock_mhz": 1500, "sm_clock_max_mhz": 1980, "throttle_reasons": ["hw_slowdown"],
                          "throttled": True}, "reasons": {"cpu_quota": "no cgroup quota"},
              "limits": {"values": {"memory_max_bytes": 4 * 2**30, "pids_max": None, "rlimit_nofile": 1024,
                                    "shm_bytes": 64 * 2**20},
                         "sources": {"memory_max_bytes": "cgroup v2 memory.max at /sys/fs/cgroup",
                                     "pids_max": "not in a limit (cgroup v2 pids.max: none set)"}}}
OBSERVED = {"dtype": "float32", "device": "cuda:0", "attention": "sdpa", "threads": 2, "threads_declared": 2,
            "compile": False, "quantization": "none", "float32_matmul_precision": "highest",
            "tf32_matmul_declared": False, "tf32_matmul": False, "tf32_cudnn": False, "padding": "longest",
            "max_tokens": 200, "bucketing": False, "batch_size": 8, "window_items": 40}
PHASES = {"startup": 1.0, "model_load": 2.0, "warmup": 0.5, "measured": 4.0, "probe": 0.2, "evaluation": 0.1,
          "writing": 0.05}


def _validation(accepted: bool, metric: float | None, reasons: list[str], **extra) -> dict:
    return {"expected_ids": 40, "observed_ids": 40, "duplicate_ids": 0, "missing_ids": 0, "extra_ids": 0,
            "ids_match": True, "format_ok": True,
            "coverage": {b: {"expected": 10, "observed": 10} for b in ("short", "medium", "long")},
            "coverage_ok": True, "metric_name": "accuracy", "metric": metric,
            "metric_by_bucket": {"short": 0.9, "medium": 0.8, "long": 0.7}, "threshold": 0.55,
            "threshold_ok": accepted, "reference_metric": 0.85, "gap_to_reference": 0.0,
            "agreement_with_reference": 0.97, "tolerance": 0.02, "tolerance_ok": accepted,
            "corpus_accepted": accepted, "reasons": reasons, "examples": {}, "reference_pass": "p001", **extra}


def _result(pid: str, v: Variant, status: str = "ok", **figures) -> dict:
    return {"pass_id": pid, "campaign": "pinned", "variant": v.to_json(), "start_time": T0, "end_time": T1,
            "status": status, "error": "", "phases_s": PHASES, "items_total": 40, "items_completed": 40,
            "predictions_path": "predictions.jsonl", "exit_code": 0, "items_per_s": 10.0, "device": "cuda:0",
            "backend": "cuda", "environment": {"OMP_NUM_THREADS": "2"}, "observed": OBSERVED,
            "conditions": CONDITIONS, "peaks": PEAKS, "n_truncated": 3, "real_tokens": 4000,
            "padded_tokens": 5200, "truncated_by_bucket": {"long": {"fraction": 0.3}},
            "devices": [{"rank": 0, "device": "cuda:0", "name": "NVIDIA H200", "uuid": "GPU-1",
                         "hostname": "h"}], **figures}


def _attempts() -> list[tuple[Variant, dict | None, dict | None, str, str]]:
    """(variant, result (None: none written), validation, status, notes) per attempt."""
    plain, compiled = Variant(batch_size=8, device="cuda", name="plain"), Variant(batch_size=4, compile=True)
    vllm = Variant(batch_size=8, engine="vllm", max_num_seqs=16)
    cards = Variant(batch_size=2, cards=2, device="cpu")
    return [
        (plain, _result("p001", plain, model_flop=1e12, achieved_flop_per_s=2.5e11, ceiling_flop_per_s=1e13,
                        utilization=0.025), _validation(True, 0.86, []), "ok", ""),
        (compiled, _result("p002", compiled, phases_s={**PHASES, "compile": 30.0}, compile_shapes=[[4, "dynamic"]],
                           compile_frames=2, recompiles_warmup=1, recompiles_measured=1, graph_breaks_measured=0,
                           observed={k: v for k, v in OBSERVED.items() if not k.startswith("tf32")}
                           | {"threads_split": "2 threads = 1 per worker"}),
         _validation(True, 0.85, []), "ok", ""),
        (vllm, _result("p003", vllm, phases_s={**PHASES, "engine_start": 20.0}, input_tokens=900,
                       output_tokens=400, observed={**OBSERVED, "engine": "vllm", "max_num_seqs": 16,
                                                    "max_num_batched_tokens": 4096, "max_running": 6},
                       engine_memory={"reserved_bytes": 10**9, "fraction": 0.1, "of": "device memory",
                                      "num_kv_blocks": 512, "engine_rss_bytes": {"123": 5 * 10**8},
                                      "reasons": {"kv_cache_bytes": "not reported by this vLLM"}}),
         _validation(True, 0.5, [], second_metric_name="token_f1", second_metric=0.7,
                     agreement_rule="share of ids with the same normalised output"), "ok", ""),
        (cards, _result("p004", cards, observed={**OBSERVED, "threads": "card 0: 1; card 1: 2", "dtype":
                                                 "card 0: float32; card 1: bfloat16"}, cards_missing=[1],
                        per_card=[{"card": 0, "device": "cpu", "peaks": PEAKS}], probe_error="probe: no FLOP counter"),
         _validation(False, 0.4, ["accuracy 0.4000 below threshold 0.55", "second reason"]), "ok", "a note"),
        (plain, _result("p005", plain), _validation(True, 0.9, [], agreement_worst=0.991,
                                                                          agreement_worst_id="doc-7"), "ok", ""),
        (compiled, _result("p006", compiled, status="oom", phases_s={"startup": 1.0, "model_load": 2.0},
                           failure_kind="oom", error="CUDA out of memory", observed=None, conditions=None,
                           peaks=None, environment=None, devices=None),
         _validation(False, None, ["pass status oom"]), "oom", "oom at batch 4"),
        (plain, None, None, "interrupted", "interrupted: stop requested"),
        (plain, None, None, "running", ""),
    ]


def pinned_csv(campaign_dir: Path) -> str:
    """The raw table's CSV text for the fixed journal, built in ``campaign_dir``."""
    j = Journal(campaign_dir / "journal.sqlite")
    try:
        for seq, (v, result, validation, status, notes) in enumerate(_attempts(), start=1):
            pid = f"p{seq:03d}"
            j.start_attempt(pid, seq, 1, 1, seq, v, T0, "local", 40)
            if status == "running":
                continue
            written = {k: x for k, x in (result or {}).items() if x is not None}  # as result.json leaves them out
            launch = {"exit_code": 0 if status == "ok" else 4, "note": notes}
            j.finish_attempt(pid, status, T1, launch["exit_code"], 40 if status == "ok" else 12,
                             {**written, "launch": launch}, notes)
            if validation is not None:
                j.set_validation(pid, validation)
        pdir = campaign_dir / "passes" / "p001"
        pdir.mkdir(parents=True)
        (pdir / "predictions.jsonl").write_text('{"id": "a", "pred": "x"}\n')
        (campaign_dir / "passes" / "p002").mkdir()
        (campaign_dir / "passes" / "p002" / "predictions.jsonl").symlink_to(pdir / "predictions.jsonl")
        rows = raw_rows(j.attempts(), "pinned", 3, campaign_dir)
    finally:
        j.close()
    return write_raw_table(rows, campaign_dir / "raw_table.csv").read_text(encoding="utf-8")


def test_the_raw_table_csv_is_byte_identical_on_the_pinned_journal(tmp_path):
    text = pinned_csv(tmp_path)
    assert text.count("\n") > 8 and "p008" in text  # one header and one row per attempt at least
    assert text == PINNED.read_text(encoding="utf-8")


if __name__ == "__main__":  # rewrite the pinned file (a deliberate change of the table)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        PINNED.write_text(pinned_csv(Path(d)), encoding="utf-8")
    sys.stdout.write(f"wrote {PINNED}\n")
