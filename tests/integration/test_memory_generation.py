"""Memory for generation on the demo generator. The Plan screen's feasibility
(lab.service.views.build_plan): the peak estimate holds the KV cache of max_length +
max_new_tokens positions and grows with max_new_tokens and the batch; a classification campaign
keeps the encoder estimate. scripts/memory_lab.py --task generation observes real greedy
generations against the estimate."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_task_generation import TASK, generation_campaign

from lab.memory.estimate import DecoderShape, EncoderShape, estimate_generation
from lab.orchestration import preflight
from lab.service.environment_facts import EnvironmentFacts
from lab.service.views import build_plan

FACTS = EnvironmentFacts(ram_total_bytes=16 * 2**30)


@pytest.fixture(autouse=True)
def no_lock_checks(monkeypatch):
    monkeypatch.setattr(preflight, "lock_checks", lambda proto: [])  # the lock's checks are not this test's


def peaks(plan) -> dict[int, int]:
    return {v.batch_size: v.peak_estimate_bytes["long"] for v in plan.variants}


def test_a_generation_plan_counts_the_kv_cache_and_grows_with_max_new_tokens_and_batch(tmp_path, gen_model_dir):
    shape = DecoderShape.from_pretrained(str(gen_model_dir))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    plan16 = build_plan(generation_campaign(tmp_path / "a", gen_model_dir), FACTS)
    plan64 = build_plan(generation_campaign(tmp_path / "b", gen_model_dir,
                                            task=TASK.replace("max_new_tokens = 16", "max_new_tokens = 64")), FACTS)
    assert plan16.note == "" and plan64.note == ""
    p16, p64 = peaks(plan16), peaks(plan64)
    for b in (1, 8):  # max_length 128 prompt tokens, the campaign's max_new_tokens
        est = estimate_generation(shape, "fp32", b, 128, 16)
        assert est.kv_cache_bytes == 2 * 3 * 12 * 32 * (128 + 16) * b * 4
        assert p16[b] == est.total_bytes
        assert p64[b] - p16[b] == 2 * 3 * 12 * 32 * 48 * b * 4  # only the cache grows: 48 more positions
    assert p16[8] > p16[1] and p64[1] > p16[1]
    assert all(v.fits_all is True for v in plan16.variants)


def test_a_classification_plan_keeps_the_encoder_estimate(tmp_path, model_dir):
    from conftest import cut_corpus, write_campaign

    from lab.inputs.corpus import read_corpus
    from lab.memory.estimate import estimate

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    longest: dict[str, int] = {}
    for r in read_corpus(corpus):
        longest[r["bucket"]] = max(longest.get(r["bucket"], 0), int(r["n_tokens"]))
    plan = build_plan(write_campaign(tmp_path, model_dir, corpus), FACTS)
    shape = EncoderShape.from_pretrained(str(model_dir))
    assert plan.variants and all(v.peak_estimate_bytes for v in plan.variants)
    for v in plan.variants:
        for bucket, peak in v.peak_estimate_bytes.items():
            assert peak == estimate(shape, "fp32", v.batch_size, min(longest[bucket], 128)).total_bytes


@pytest.mark.slow
def test_the_memory_lab_observes_greedy_generation_against_the_generation_estimate(tmp_path, gen_model_dir):
    repo = Path(__file__).resolve().parents[2]
    js = tmp_path / "g.json"
    p = subprocess.run([sys.executable, str(repo / "scripts/memory_lab.py"), "--task", "generation", "--device", "cpu",
                        "--model", str(gen_model_dir), "--batches", "1,2", "--lengths", "16", "--max-new-tokens", "4",
                        "--threads", "2", "--plot", str(tmp_path / "g.png"), "--json", str(js)],
                       capture_output=True, text=True, timeout=300, cwd=repo)
    assert p.returncode == 0, p.stderr
    assert "exactly 4 new tokens per item" in p.stdout
    shape = DecoderShape.from_pretrained(str(gen_model_dir))
    rows = json.loads(js.read_text())["rows"]
    assert [(r["batch_size"], r["seq_len_tokens"], r["max_new_tokens"]) for r in rows] == [(1, 16, 4), (2, 16, 4)]
    for r in rows:
        assert r["estimate"] == estimate_generation(shape, "fp32", r["batch_size"], 16, 4).to_json()
        assert r["observation"]["process_rss_rise_bytes"] > 0
        assert r["comparison"]["estimate_bytes"] == r["estimate"]["activation_bytes"]
        assert isinstance(r["comparison"]["error_fraction"], float)
