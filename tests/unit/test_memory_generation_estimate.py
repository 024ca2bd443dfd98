"""The generation estimate's formula, by hand, on the demo generator's shape (no model loaded),
and the feasibility it gives."""
from __future__ import annotations

import pytest

from lab.memory.estimate import DecoderShape, EncoderShape, activation_bytes_per_item, estimate_generation
from lab.memory.feasibility import generation_fits

# lab.demo.generator's model: BertLMHeadModel, 3 layers, hidden 384, 12 heads (head size 32), vocab 4096
LAYER = EncoderShape(hidden_size=384, num_attention_heads=12, intermediate_size=1536, num_hidden_layers=3,
                     n_params=8_824_064, attention="sdpa")
GEN = DecoderShape(LAYER, num_key_value_heads=12, head_dim=32, vocab_size=4096, logits_last_only=True)


def test_kv_cache_by_hand():
    # 2 (key, value) x 3 layers x 12 heads x 32 x (128 + 16 positions) x 8 items x 4 bytes
    est = estimate_generation(GEN, "fp32", 8, 128, 16)
    assert est.kv_cache_bytes == 2 * 3 * 12 * 32 * 144 * 8 * 4 == 10_616_832
    assert est.weights_bytes == 8_824_064 * 4
    # grouped attention (4 key/value heads of 64), bf16: 2 bytes per element
    gqa = DecoderShape(LAYER, num_key_value_heads=4, head_dim=64, vocab_size=4096, logits_last_only=True)
    assert estimate_generation(gqa, "bf16", 1, 100, 28).kv_cache_bytes == 2 * 3 * 4 * 64 * 128 * 1 * 2


def test_prefill_activations_and_logits_by_hand():
    est = estimate_generation(GEN, "fp32", 8, 128, 16)
    h, i, s = 384, 1536, 128
    assert est.prefill_activation_bytes == 8 * (4 * s * (5 * h + (h + 2 * i) + 2 * h) + s * s) == 25_296_896
    assert est.prefill_activation_bytes == 8 * activation_bytes_per_item(LAYER, "fp32", 128)
    # logits_to_keep = 1: (8, 1, 4096) fp32 and the float32 copy of the last position
    assert est.logits_bytes == 8 * 4096 * (4 + 4) == 262_144
    # a model without logits_to_keep: the prefill's logits cover all 128 positions
    full = DecoderShape(LAYER, 12, 32, 4096, logits_last_only=False)
    assert estimate_generation(full, "fp16", 8, 128, 16).logits_bytes == 8 * 4096 * (128 * 2 + 4)
    assert est.activation_bytes == est.kv_cache_bytes + est.prefill_activation_bytes + est.logits_bytes
    assert est.total_bytes == est.weights_bytes + est.activation_bytes == 71_472_128


def test_linear_in_batch_and_growing_with_max_new_tokens():
    one = estimate_generation(GEN, "fp32", 1, 64, 16)
    assert estimate_generation(GEN, "fp32", 8, 64, 16).activation_bytes == 8 * one.activation_bytes
    longer = estimate_generation(GEN, "fp32", 1, 64, 48)
    assert longer.kv_cache_bytes - one.kv_cache_bytes == 2 * 3 * 12 * 32 * 32 * 4  # 32 more positions
    assert longer.prefill_activation_bytes == one.prefill_activation_bytes      # the prompt did not change


def test_generation_fits_counts_the_kv_cache():
    one = estimate_generation(GEN, "fp32", 1, 128, 16)
    budget = one.weights_bytes + 10 * one.activation_bytes  # room for exactly 10 items, no margin
    fit = generation_fits(GEN, "fp32", ["short", "long"], budget, 128, 16, variant_batch_size=10,
                          margin_fraction=0.0)
    assert [f.max_batch_size for f in fit.values()] == [10, 10] and fit["long"].variant_fits is True
    tighter = generation_fits(GEN, "fp32", ["long"], budget, 128, 64, variant_batch_size=10, margin_fraction=0.0)
    assert tighter["long"].max_batch_size < 10 and tighter["long"].variant_fits is False


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="max_new_tokens 0"):
        estimate_generation(GEN, "fp32", 1, 128, 0)
    with pytest.raises(ValueError, match="int8"):
        estimate_generation(GEN, "int8", 1, 128, 16)
    with pytest.raises(ValueError, match="budget"):
        generation_fits(GEN, "fp32", ["long"], 0, 128, 16)
