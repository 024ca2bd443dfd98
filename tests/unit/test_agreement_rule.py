"""The agreement rule decides (issue 31, part 1): beside the threshold, every pass is compared id by
id with the reference pass, and a pass whose share of differing ids is beyond the locked
[quality] max_differing (embeddings: ids below min_cosine) is rejected with its figures, whatever
its metric. Synthetic predictions, no model loaded."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_agreement_metric import write_vectors

from lab.facts.constants import AGREEMENT_MAX_DIFFERING_VECTORS, AGREEMENT_MIN_COSINE
from lab.orchestration.agreement import AgreementRule
from lab.orchestration.config import ConfigError, QualitySection, parse_config
from lab.orchestration.validate import validate_embedding_pass, validate_generation_pass, validate_pass

LABELS = ("alt.atheism", "sci.space", "rec.autos")
Q = {"metric": "accuracy", "threshold": 0.5, "tolerance": 1.0, "reference_variant": "batch/batch_size=1"}


def corpus_of(n: int = 17) -> list[dict]:
    return [{"id": f"i{k:02d}", "label": LABELS[k % 3], "bucket": ("short", "medium", "long")[k % 3]}
            for k in range(n)]


def write_labels(path, corpus, preds):
    path.write_text("".join(json.dumps({"id": r["id"], "pred": p, "prob": 0.9}) + "\n"
                            for r, p in zip(corpus, preds, strict=True)))
    return path


def test_four_of_seventeen_labels_differing_reject_a_pass_whose_metric_is_within_the_tolerance(tmp_path):
    """The issue's figures: 4 of 17 labels differ from batch 1 and the pass was accepted (its
    accuracy within a wide tolerance); now the rule rejects it, naming the figures."""
    corpus = corpus_of()
    reference = {r["id"]: r["label"] for r in corpus}
    preds = [r["label"] for r in corpus]
    for k in (1, 5, 9, 13):
        preds[k] = LABELS[(k + 1) % 3]
    path = write_labels(tmp_path / "p.jsonl", corpus, preds)
    v = validate_pass(corpus, path, Q, set(LABELS), reference=reference, reference_metric=1.0)
    assert v.threshold_ok and v.tolerance_ok  # 13/17 = 0.76 >= 0.5; the gap 0.24 within tolerance 1.0
    assert not v.corpus_accepted and v.failed_checks() == ["agreement"]
    assert (v.agreement_ids, v.agreement_differing, v.agreement_ok) == (17, 4, False)
    assert v.agreement_max_differing == 0.05 and v.agreement_min_cosine is None
    assert "not the same ML result: 4 of 17 labels differ from batch/batch_size=1, allowed 0.05 (share 0.2353)" \
        in v.reasons, v.reasons
    assert v.verdict_short() == "rejected: agreement"


def test_a_pass_within_the_rule_is_accepted_and_its_figures_kept(tmp_path):
    corpus = corpus_of(40)
    reference = {r["id"]: r["label"] for r in corpus}
    preds = [r["label"] for r in corpus]
    preds[3] = LABELS[1]  # one near-tie flipped: 1 of 40 = 0.025 <= 0.05
    path = write_labels(tmp_path / "p.jsonl", corpus, preds)
    v = validate_pass(corpus, path, Q, set(LABELS), reference=reference, reference_metric=1.0)
    assert v.corpus_accepted, v.reasons
    assert (v.agreement_ids, v.agreement_differing, v.agreement_ok) == (40, 1, True)


def test_the_locked_max_differing_is_the_rule_and_the_reference_pass_agrees_with_itself(tmp_path):
    corpus = corpus_of()
    reference = {r["id"]: r["label"] for r in corpus}
    preds = [r["label"] for r in corpus]
    preds[0] = preds[1] = LABELS[2] if preds[0] != LABELS[2] else LABELS[0]
    path = write_labels(tmp_path / "p.jsonl", corpus, preds)
    loose = validate_pass(corpus, path, {**Q, "max_differing": 0.2}, set(LABELS), reference=reference,
                          reference_metric=1.0)
    assert loose.agreement_ok and loose.agreement_max_differing == 0.2
    strict = validate_pass(corpus, path, {**Q, "max_differing": 0.0}, set(LABELS), reference=reference,
                           reference_metric=1.0)
    assert not strict.agreement_ok and not strict.corpus_accepted
    own = write_labels(tmp_path / "ref.jsonl", corpus, [r["label"] for r in corpus])
    v = validate_pass(corpus, own, {**Q, "max_differing": 0.0}, set(LABELS), reference=reference,
                      reference_metric=1.0)
    assert v.agreement_ok and v.agreement_differing == 0 and v.corpus_accepted


def test_no_reference_pass_yet_leaves_the_rule_not_checked(tmp_path):
    corpus = corpus_of()
    path = write_labels(tmp_path / "p.jsonl", corpus, [r["label"] for r in corpus])
    v = validate_pass(corpus, path, Q, set(LABELS))
    assert v.agreement_ok is None and v.agreement_ids is None and "agreement" not in v.failed_checks()


def test_a_custom_tasks_labels_are_judged_by_the_same_rule(tmp_path):
    corpus = corpus_of()
    reference = {r["id"]: r["label"] for r in corpus}
    preds = [r["label"] for r in corpus]
    preds[2] = "something else"
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "pred": p, "prob": None}) + "\n"
                            for r, p in zip(corpus, preds, strict=True)))
    v = validate_pass(corpus, path, Q, None, reference=reference, reference_metric=1.0, prob_required=False,
                      kind="custom")
    assert v.agreement_differing == 1 and not v.agreement_ok  # 1 of 17 = 0.059 > 0.05
    assert any(r.startswith("not the same ML result: 1 of 17 labels differ") for r in v.reasons)


def test_embedding_every_vector_must_reach_the_cosine_floor(tmp_path):
    """nn_accuracy alone cannot see one vector moved: the cosine floor (0.999, every id) does."""
    corpus = corpus_of(12)
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(12, 16)).astype(np.float32)
    close = reference + rng.normal(scale=1e-4, size=reference.shape).astype(np.float32)
    q = {**Q, "metric": "nn_accuracy", "threshold": 0.0}
    v = validate_embedding_pass(corpus, write_vectors(tmp_path / "a", corpus, close), q, reference=reference,
                                reference_metric=0.0)
    assert v.agreement_ok and v.agreement_differing == 0 and v.agreement_min_cosine == AGREEMENT_MIN_COSINE
    assert v.agreement_max_differing == AGREEMENT_MAX_DIFFERING_VECTORS == 0.0
    moved = close.copy()
    moved[7] = reference[7] + 0.2 * rng.normal(size=16)  # one vector at cosine well below 0.999
    v = validate_embedding_pass(corpus, write_vectors(tmp_path / "b", corpus, moved), q, reference=reference,
                                reference_metric=0.0)
    assert not v.corpus_accepted and v.agreement_differing == 1 and v.agreement_worst_id == "i07"
    reason = next(r for r in v.reasons if r.startswith("not the same ML result"))
    assert reason.startswith("not the same ML result: 1 of 12 vectors below cosine 0.999 with batch/batch_size=1 "
                             "(lowest 0.") and "at id i07), allowed 0 (share" in reason
    allowed = validate_embedding_pass(corpus, write_vectors(tmp_path / "c", corpus, moved),
                                      {**q, "max_differing": 0.1}, reference=reference, reference_metric=0.0)
    assert allowed.agreement_ok and allowed.corpus_accepted  # 1 of 12 = 0.083 <= 0.1: a share below the floor
    lower = validate_embedding_pass(corpus, write_vectors(tmp_path / "d", corpus, moved),
                                    {**q, "min_cosine": 0.5}, reference=reference, reference_metric=0.0)
    assert lower.agreement_ok  # a lower floor declared: the moved vector reaches it


def test_generation_outputs_differing_after_the_normalisation_count(tmp_path):
    corpus = corpus_of(20)
    reference = {r["id"]: r["label"] for r in corpus}
    outputs = [r["label"].upper() for r in corpus]  # equal once lowered
    outputs[4] = "comp.graphics"
    outputs[8] = "misc.forsale"
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "output": o, "input_tokens": 3, "output_tokens": 2,
                                        "stopped_by": "eos"}) + "\n" for r, o in zip(corpus, outputs, strict=True)))
    q = {**Q, "metric": "exact_match", "threshold": 0.0}
    v = validate_generation_pass(corpus, path, q, "lowercase_space", reference=reference, reference_metric=1.0)
    assert (v.agreement_ids, v.agreement_differing, v.agreement_ok) == (20, 2, False)  # 0.1 > 0.05
    assert any(r.startswith("not the same ML result: 2 of 20 outputs differ from batch/batch_size=1")
               for r in v.reasons)
    assert validate_generation_pass(corpus, path, {**q, "max_differing": 0.1}, "lowercase_space",
                                    reference=reference, reference_metric=1.0).corpus_accepted


def test_the_agreement_metric_states_the_rule_its_threshold_gives():
    """[quality] metric = "agreement" with threshold 0.9: the default rule is the threshold's own
    (at most 0.1 differ; embeddings: every vector at cosine >= 0.9), never a stricter second rule."""
    q = {"metric": "agreement", "threshold": 0.9, "tolerance": 0.01}
    assert AgreementRule.of(q, "classification") == AgreementRule("classification", 0.1, None)
    assert AgreementRule.of(q, "embedding") == AgreementRule("embedding", 0.0, 0.9)
    assert AgreementRule.of({**q, "max_differing": 0.02}, "generation").max_differing == 0.02
    assert AgreementRule.of({"metric": "accuracy", "threshold": 0.9}, "custom") == AgreementRule("custom", 0.05)


CAMPAIGN = """
[campaign]
name = "t"
question = "q?"
[corpus]
path = "c.jsonl"
[model]
path = "m"
[quality]
metric = "{metric}"
threshold = 0.5
tolerance = 0.01
reference_variant = "batch/batch_size=1"
{extra}
[timing]
warmup_items = 1
warmup_passes = 1
{task}
[[series]]
name = "batch"
factor = "batch_size"
values = [1, 8]
"""


def parsed(extra: str, metric: str = "accuracy", task: str = ""):
    import tomllib

    return parse_config(tomllib.loads(CAMPAIGN.format(metric=metric, extra=extra, task=task)))


def test_the_campaign_file_declares_the_rule_and_bad_values_are_refused_in_one_line():
    q = parsed("max_differing = 0.02").quality
    assert q.max_differing == 0.02 and q.min_cosine is None
    assert parsed("", "nn_accuracy", '[task]\nkind = "embedding"').quality.max_differing is None  # the default
    assert parsed("min_cosine = 0.99", "nn_accuracy", '[task]\nkind = "embedding"').quality.min_cosine == 0.99
    with pytest.raises(ConfigError, match=r"^\[quality\] max_differing = 5 is outside \[0, 1\]; it is the largest"):
        parsed("max_differing = 5")
    with pytest.raises(ConfigError, match=r"^\[quality\] min_cosine = 1.5 is outside \(0, 1\]"):
        parsed("min_cosine = 1.5", "nn_accuracy", '[task]\nkind = "embedding"')
    with pytest.raises(ConfigError, match=r'^\[quality\] min_cosine applies to kind = "embedding" only'):
        parsed("min_cosine = 0.99")
    with pytest.raises(ConfigError, match=r"max_differing = \"5%\" has the wrong type; expected a number"):
        parsed('max_differing = "5%"')
    assert QualitySection("accuracy", 0.5, 0.01, "b").max_differing is None


def test_two_hosts_vectors_are_judged_per_id_by_cosine_in_the_first_hosts_order():
    """judge_vectors (compare's offline variants and served embeddings alike): ids aligned by name,
    one id turned away counts as a flip, ids one host lacks are counted, never judged."""
    from lab.orchestration.agreement import judge_vectors

    rule = AgreementRule.of({}, "embedding")
    rng = np.random.default_rng(0)
    va = rng.normal(size=(4, 8)).astype(np.float32)
    b_ids = ("d", "c", "b", "x")
    vb = np.stack([va[3], va[2], -va[1], rng.normal(size=8).astype(np.float32)])
    m = judge_vectors((("a", "b", "c", "d"), va), (b_ids, vb), rule)
    assert (m.check.ids, m.check.differing, m.only_a, m.only_b) == (3, 1, 1, 1)
    assert m.check.lowest_id == "b" and m.check.lowest_cosine == pytest.approx(-1.0, abs=1e-6)
    assert m.cosine_median == pytest.approx(1.0, abs=1e-6) and not m.same
    same = judge_vectors((("a", "b"), va[:2]), (("b", "a"), va[[1, 0]]), rule)
    assert same.same and same.check.differing == 0
    empty = judge_vectors((("a",), va[:1]), (("z",), va[:1]), rule)
    assert empty.check.ids == 0 and not empty.check.ok and empty.cosine_median is None
