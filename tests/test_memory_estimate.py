"""The estimate's shape read from the real demo checkpoint (meta device) matches the loaded model."""
from __future__ import annotations

from pathlib import Path

from lab.memory.estimate import EncoderShape

REPO = Path(__file__).resolve().parents[1]
MODEL = REPO / ".cache/models/demo-minilm-20ng"
MINILM_PARAMS = 22_720_916


def test_shape_from_checkpoint_without_loading_weights_matches_the_loaded_model():
    assert (MODEL / "config.json").exists(), "demo model missing: run `make model`"
    from lab.passes.inference import load_model

    meta = EncoderShape.from_pretrained(str(MODEL))
    _, model = load_model(str(MODEL), "fp32", "cpu")
    assert meta.n_params == EncoderShape.from_model(model).n_params == MINILM_PARAMS
    assert (meta.hidden_size, meta.num_attention_heads, meta.intermediate_size) == (384, 12, 1536)
