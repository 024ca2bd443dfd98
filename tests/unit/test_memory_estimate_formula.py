"""The estimate's formula, by hand, on the demo model's shape (no model loaded)."""
from __future__ import annotations

import pytest

from lab.memory.estimate import EncoderShape, activation_bytes_per_item, bytes_per_element, estimate

MINILM = EncoderShape(hidden_size=384, num_attention_heads=12, intermediate_size=1536,
                      num_hidden_layers=6, n_params=22_720_916, attention="sdpa")


def test_weights_are_parameters_times_bytes_per_element():
    assert estimate(MINILM, "fp32", 1, 128).weights_bytes == 22_720_916 * 4
    assert estimate(MINILM, "bf16", 1, 128).weights_bytes == 22_720_916 * 2
    assert estimate(MINILM, "fp16", 1, 128).weights_bytes == 22_720_916 * 2


def test_activation_term_by_hand_sdpa_and_eager():
    s, b, h, a, i = 512, 8, 384, 12, 1536
    sdpa = estimate(MINILM, "fp32", b, s)
    # 16*s*b*h elements of fp32 (5h attention + h + 2i MLP + 2h layer norms, i = 4h) + boolean mask b*s^2
    assert sdpa.activation_bytes == 4 * (s * b * (5 * h + (h + 2 * i) + 2 * h)) + b * s * s
    assert sdpa.activation_bytes == 4 * 16 * s * b * h + b * s * s
    assert sdpa.total_bytes == sdpa.weights_bytes + sdpa.activation_bytes
    eager = estimate(EncoderShape(h, a, i, 6, MINILM.n_params, "eager"), "fp32", b, s)
    assert eager.activation_bytes == 4 * (16 * s * b * h + 2 * a * s * s * b) + 4 * b * s * s
    assert eager.activation_bytes > 3 * sdpa.activation_bytes      # the s^2 scores dominate at 512 tokens


def test_linear_in_batch_and_halved_in_16_bit():
    one = activation_bytes_per_item(MINILM, "fp32", 256)
    assert estimate(MINILM, "fp32", 8, 256).activation_bytes == 8 * one
    # 16-bit halves the element term; the 1-byte boolean mask does not change
    mask = 256 * 256
    assert activation_bytes_per_item(MINILM, "bf16", 256) - mask == (one - mask) // 2


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="int4"):
        bytes_per_element("int4")
    with pytest.raises(ValueError, match=">= 1"):
        estimate(MINILM, "fp32", 0, 128)
