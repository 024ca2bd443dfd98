"""Validation of a real pass's predictions: ids, format, coverage, metric, reference."""

from __future__ import annotations

import json

from lab.inputs.corpus import read_corpus
from lab.orchestration.orchestrator import model_labels
from lab.orchestration.validate import macro_f1, validate_pass


def _case(small_campaign, tmp_path, edit):
    orch = small_campaign
    a = next(x for x in orch.journal.attempts() if x.status == "ok")
    lines = (orch.dir / "passes" / a.pass_id / "predictions.jsonl").read_text().splitlines()
    p = tmp_path / "pred.jsonl"
    p.write_text("\n".join(edit(lines)) + "\n")
    ref, ref_metric, _ = orch.reference()
    return validate_pass(orch.corpus, p, orch.proto.quality, model_labels(orch.proto.model_ref), ref, ref_metric)


def test_real_pass_is_accepted(small_campaign, tmp_path):
    v = _case(small_campaign, tmp_path, lambda ls: ls)
    assert v.ids_match and v.format_ok and v.coverage_ok and v.corpus_accepted
    assert v.expected_ids == v.observed_ids == 10
    assert v.agreement_with_reference == 1.0 and v.gap_to_reference == 0.0


def test_duplicate_id_rejects(small_campaign, tmp_path):
    v = _case(small_campaign, tmp_path, lambda ls: ls + [ls[0]])
    assert not v.ids_match and v.duplicate_ids == 1 and v.observed_ids == 11
    assert not v.corpus_accepted and v.metric is None


def test_missing_id_rejects_and_names_the_bucket(small_campaign, tmp_path):
    v = _case(small_campaign, tmp_path, lambda ls: ls[:-1])
    assert v.missing_ids == 1 and not v.coverage_ok and not v.corpus_accepted
    assert any("bucket(s) not covered: long" in r for r in v.reasons)


def test_extra_id_rejects(small_campaign, tmp_path):
    extra = json.dumps({"id": "test/not-in-corpus/1", "pred": "sci.med", "prob": 0.5})
    v = _case(small_campaign, tmp_path, lambda ls: ls + [extra])
    assert v.extra_ids == 1 and not v.ids_match and not v.corpus_accepted


def test_bad_format_rejects(small_campaign, tmp_path):
    def edit(ls):
        rec = json.loads(ls[2])
        rec["pred"] = "not-a-label"
        return ls[:2] + [json.dumps(rec)] + ls[3:]
    v = _case(small_campaign, tmp_path, edit)
    assert not v.format_ok and not v.corpus_accepted
    assert "line 3" in v.examples["format"][0]


def test_gap_beyond_tolerance_rejects(small_campaign, tmp_path):
    corpus = {r["id"]: r for r in read_corpus(small_campaign.proto.corpus_path)}

    def wrong(ls):  # every prediction made wrong: kept, and counted in the metric
        out = []
        for line in ls:
            rec = json.loads(line)
            rec["pred"] = "misc.forsale" if corpus[rec["id"]]["label"] != "misc.forsale" else "sci.med"
            out.append(json.dumps(rec))
        return out
    v = _case(small_campaign, tmp_path, wrong)
    assert v.ids_match and v.metric == 0.0
    assert v.threshold_ok is False and v.tolerance_ok is False and not v.corpus_accepted


def test_macro_f1_by_hand():
    gold = ["a", "a", "b", "c"]
    pred = ["a", "b", "b", "b"]
    # a: tp1 fn1 -> 2/3; b: tp1 fp2 -> 0.5; c: fn1 -> 0
    assert abs(macro_f1(gold, pred) - (2 / 3 + 0.5 + 0) / 3) < 1e-12


def test_shuffled_predictions_give_the_same_validation_as_corpus_order(small_campaign, tmp_path):
    """A predictions file written in another order (another tool, a multi-card merge) is the
    same result: every figure of the validation, per-bucket metrics and agreement included."""
    import random

    in_order = _case(small_campaign, tmp_path, lambda ls: ls)
    assert in_order.corpus_accepted and len(in_order.metric_by_bucket) == 3

    def shuffled(ls):
        out = list(ls)
        random.Random(5).shuffle(out)
        assert out != ls
        return out
    assert _case(small_campaign, tmp_path, shuffled) == in_order
    assert _case(small_campaign, tmp_path, lambda ls: ls[::-1]) == in_order
    # the checks give the same counts out of order too: one duplicate, one missing id
    broken_in_order = _case(small_campaign, tmp_path, lambda ls: ls[1:] + [ls[2]])
    broken_shuffled = _case(small_campaign, tmp_path, lambda ls: shuffled(ls[1:] + [ls[2]]))
    assert broken_in_order == broken_shuffled
    assert broken_shuffled.duplicate_ids == 1 and broken_shuffled.missing_ids == 1 and not broken_shuffled.ids_match
