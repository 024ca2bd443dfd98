"""The estimate's shape read from the real demo checkpoint (meta device) matches the loaded model."""
from __future__ import annotations

from pathlib import Path

from lab.memory.estimate import EncoderShape
from lab.service.environment_facts import EnvironmentFacts

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / ".cache/models/demo-minilm-20ng"
MINILM_PARAMS = 22_720_916


def test_shape_from_checkpoint_without_loading_weights_matches_the_loaded_model():
    assert (MODEL / "config.json").exists(), "demo model missing: run `make model`"
    from lab.passes.inference import load_model

    meta = EncoderShape.from_pretrained(str(MODEL))
    _, model = load_model(str(MODEL), "fp32", "cpu")
    assert meta.n_params == EncoderShape.from_model(model).n_params == MINILM_PARAMS
    assert (meta.hidden_size, meta.num_attention_heads, meta.intermediate_size) == (384, 12, 1536)


def test_the_plan_reads_the_reservation_for_a_vllm_variant(tmp_path, model_dir, monkeypatch):
    from conftest import cut_corpus, write_campaign

    from lab.orchestration import preflight
    from lab.service.views import build_plan

    monkeypatch.setattr(preflight, "lock_checks", lambda proto: [])  # the lock's vLLM probe is not this test's
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus)
    f.write_text(f.read_text() + '\n[[series]]\nname = "vllm"\nfactor = "vllm_memory_fraction"\nvalues = [0.2]\n'
                 'engine = "vllm"\n')
    plan = build_plan(f, EnvironmentFacts(ram_total_bytes=16 * 2**30))
    by_name = {v.name: v for v in plan.variants}
    vllm = by_name["vllm_memory_fraction=0.2"]
    assert vllm.reservation is not None
    assert vllm.reservation.reserved_bytes == -(-16 * 2**30 * 2 // 10) and vllm.reservation.fraction == 0.2
    assert vllm.fits_all is True and vllm.fits == {}
    assert all(v.reservation is None for n, v in by_name.items() if n != "vllm_memory_fraction=0.2")
