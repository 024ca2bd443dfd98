"""The measured window's inference on the real demo model: padding, bucketing, accuracy."""

from __future__ import annotations

import pytest
from conftest import demo_rows

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def loaded(model_dir):
    import torch

    from lab.passes.inference import load_model

    torch.set_num_threads(2)
    return load_model(str(model_dir), "fp32", "cpu")


def run(rows, loaded, **variant):
    from lab.passes.tasks.classification import run_batches

    tok, model = loaded
    from lab.inputs.variants import Variant

    v = Variant(**{"batch_size": 1, "precision": "fp32", "padding": "longest", "max_length": 256,
                   "bucketing": False, **variant})
    return run_batches(rows, tok, model, "cpu", v)


def test_same_text_alone_and_with_heavy_padding_gives_same_label(loaded):
    rows = demo_rows()
    short = [r for r in rows if r["bucket"] == "short"][:6]
    long_item = next(r for r in rows if r["bucket"] == "long")
    alone = run(short, loaded, batch_size=1, padding="longest")
    # each short text batched with a long one and padded to max_length 512: mostly padding
    for i, item in enumerate(short):
        padded = run([item, long_item], loaded, batch_size=2, padding="max_length", max_length=512)
        assert padded.padded_tokens == 2 * 512
        assert padded.pred_index[0] == alone.pred_index[i]
        assert abs(padded.prob[0] - alone.prob[i]) < 1e-3


def test_bucketing_restores_corpus_order(loaded):
    rows = demo_rows()
    mixed = [r for r in rows if r["bucket"] == "long"][:3] + [r for r in rows if r["bucket"] == "short"][:5] \
        + [r for r in rows if r["bucket"] == "medium"][:4]
    plain = run(mixed, loaded, batch_size=4)
    bucketed = run(mixed, loaded, batch_size=4, bucketing=True)
    assert bucketed.ids == [r["id"] for r in mixed]
    assert bucketed.pred_index == plain.pred_index
    # sorting by length must really cut padding on this mixed-length input
    assert bucketed.padded_tokens < plain.padded_tokens
    assert bucketed.real_tokens == plain.real_tokens


def test_truncation_is_counted(loaded):
    rows = [r for r in demo_rows() if r["bucket"] == "long"][:4]
    res = run(rows, loaded, batch_size=2, max_length=64)
    assert res.n_truncated == 4
    assert res.padded_tokens == 4 * 64


def test_demo_model_accuracy_on_the_comparison_corpus(loaded):
    """docs/task-classification.md states the measured figure; the floor set by the issue is 0.55."""
    rows = demo_rows()
    res = run(rows, loaded, batch_size=16, bucketing=True)
    labels = loaded[1].config.id2label
    acc = sum(labels[p] == r["label"] for p, r in zip(res.pred_index, rows, strict=True)) / len(rows)
    assert len(rows) == 1000
    assert acc >= 0.55, acc


def test_bf16_runs_with_fp32_probabilities_and_close_predictions(model_dir):
    """A precision change is a declared variant judged on the same inputs (SPEC 3.8)."""
    from lab.passes.inference import load_model
    from lab.passes.tasks.classification import run_batches

    tok, model = load_model(str(model_dir), "bf16", "cpu")
    assert next(model.parameters()).dtype.is_floating_point and str(next(model.parameters()).dtype) == "torch.bfloat16"
    rows = [r for r in demo_rows() if r["bucket"] == "short"][::60][:10]
    from dataclasses import replace

    from lab.inputs.variants import Variant

    v = Variant(batch_size=4, precision="bf16", padding="longest", max_length=128, bucketing=False)
    bf16 = run_batches(rows, tok, model, "cpu", v)
    tok32, model32 = load_model(str(model_dir), "fp32", "cpu")
    fp32 = run_batches(rows, tok32, model32, "cpu", replace(v, precision="fp32"))
    assert all(isinstance(p, float) and 0.0 <= p <= 1.0 for p in bf16.prob)
    agree = sum(a == b for a, b in zip(bf16.pred_index, fp32.pred_index, strict=True)) / len(rows)
    assert agree >= 0.8, agree
