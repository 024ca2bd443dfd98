"""A corpus without labels, judged by [quality] metric = "agreement": each pass against the
reference variant's first valid pass, per id, by the rule of its task kind (labels and outputs:
the share of equal ids; embeddings: the median per-id cosine, worst id apart). No model is loaded."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from conftest import cut_corpus, write_campaign

from lab.inputs.corpus import CorpusError, labelled, load_items
from lab.orchestration.validate import (
    agreement_figures,
    validate_embedding_pass,
    validate_generation_pass,
    validate_pass,
)

Q = {"metric": "agreement", "threshold": 0.9, "tolerance": 0.01}


def corpus_of(n: int = 10) -> list[dict]:
    return [{"id": f"i{k}", "label": None, "bucket": ("short", "medium", "long")[k % 3]} for k in range(n)]


def write_labels(path, corpus, preds):
    path.write_text("".join(json.dumps({"id": r["id"], "pred": p, "prob": 0.9}) + "\n"
                            for r, p in zip(corpus, preds, strict=True)))
    return path


def test_agreement_figures_judge_the_share_of_equal_ids_and_the_lowest_cosine():
    ids = ["a", "b", "c", "d"]
    buckets = np.array([0, 0, 1, 2], np.int8)
    eq = agreement_figures(np.array([1.0, 0.0, 1.0, 1.0]), buckets, ids, cosine=False)
    assert eq.value == eq.typical == 0.75 and eq.by_bucket == {"short": 0.5, "medium": 1.0, "long": 1.0}
    assert eq.differing == ("b",) and eq.worst is None and eq.worst_id is None
    cos = agreement_figures(np.array([0.99, 0.5, 0.98, 0.97]), buckets, ids, cosine=True)
    assert cos.value == cos.worst == 0.5 and cos.worst_id == "b" and cos.typical == 0.975  # median beside
    assert cos.by_bucket == {"short": 0.5, "medium": 0.98, "long": 0.97}


def test_label_agreement_is_judged_against_the_threshold_once_a_reference_exists(tmp_path):
    corpus = corpus_of()
    preds = ["x"] * 8 + ["y", "y"]
    path = write_labels(tmp_path / "p.jsonl", corpus, preds)
    labels = {"x", "y"}
    v = validate_pass(corpus, path, Q, labels)
    assert v.metric is None and not v.corpus_accepted and v.threshold_ok is None
    assert "reference variant has no valid pass yet: agreement not computed" in v.reasons
    v = validate_pass(corpus, path, Q, labels, reference={r["id"]: p for r, p in zip(corpus, preds, strict=True)})
    assert v.metric == v.agreement_with_reference == 1.0 and v.corpus_accepted, v.reasons  # itself
    reference = {r["id"]: "x" for r in corpus}
    v = validate_pass(corpus, path, Q, labels, reference=reference)
    assert v.metric == 0.8 and not v.corpus_accepted and v.gap_to_reference is None
    assert "agreement 0.8000 < threshold 0.9" in v.reasons and v.examples["differing_from_reference"] == ["i8", "i9"]
    assert v.metric_by_bucket == {"short": 0.75, "medium": 1.0, "long": round(2 / 3, 6)}  # i9 short, i8 long
    assert v.agreement_rule == "share of ids with the reference variant's label"
    assert validate_pass(corpus, path, {**Q, "threshold": 0.8}, labels, reference=reference).corpus_accepted
    # ids wrong: not judged at all
    path.write_text(path.read_text().replace('"i3"', '"i1"'))
    v = validate_pass(corpus, path, Q, labels, reference=reference)
    assert v.metric is None and not v.ids_match and not v.corpus_accepted


def write_vectors(folder, corpus, vectors):
    folder.mkdir(exist_ok=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps({"id": r["id"], "row": k}) + "\n"
                                                      for k, r in enumerate(corpus)))
    buf = io.BytesIO()
    np.save(buf, vectors.astype(np.float16), allow_pickle=False)
    (folder / "vectors.npy").write_bytes(buf.getvalue())
    return folder / "predictions.jsonl"


def test_embedding_agreement_judges_the_lowest_ids_cosine_with_the_median_beside(tmp_path):
    """A median would hide vectors turned around: one id at cosine -1 rejects the pass."""
    corpus = corpus_of(6)
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(6, 8)).astype(np.float32)
    close = reference + rng.normal(scale=1e-3, size=reference.shape).astype(np.float32)
    path = write_vectors(tmp_path / "p", corpus, close)
    v = validate_embedding_pass(corpus, path, Q)
    assert v.metric is None and "reference variant has no valid pass yet: agreement not computed" in v.reasons
    v = validate_embedding_pass(corpus, path, Q, reference=reference)
    assert v.metric > 0.999 and v.metric == v.agreement_worst and v.corpus_accepted, v.reasons
    assert v.agreement_with_reference >= v.metric and v.reference_metric is None
    assert v.agreement_rule.startswith("per-id cosine") and "lowest id's is judged" in v.agreement_rule
    moved = close.copy()
    moved[4] = -moved[4]  # one item's vector points the other way
    path = write_vectors(tmp_path / "q", corpus, moved)
    v = validate_embedding_pass(corpus, path, Q, reference=reference)
    assert v.agreement_with_reference > 0.999  # the median does not see it
    assert v.metric < -0.999 and v.agreement_worst_id == "i4" and not v.corpus_accepted
    assert any(r.startswith("agreement -1.0000 < threshold 0.9") for r in v.reasons), v.reasons
    assert v.metric_by_bucket["medium"] < -0.999 and v.metric_by_bucket["short"] > 0.999  # i4: 4 % 3 = medium


def test_generation_agreement_compares_outputs_after_the_normalisation(tmp_path):
    corpus = corpus_of(4)
    outputs = ["Sci.Space", "rec.autos", "talk.politics", "comp.graphics"]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "output": o, "input_tokens": 3, "output_tokens": 2,
                                        "stopped_by": "eos"}) + "\n" for r, o in zip(corpus, outputs, strict=True)))
    reference = {"i0": "sci.space", "i1": "rec.autos", "i2": "talk.religion", "i3": "comp.graphics"}
    v = validate_generation_pass(corpus, path, {**Q, "threshold": 0.75}, "lowercase_space", reference=reference)
    assert v.metric == 0.75 and v.corpus_accepted, v.reasons  # "Sci.Space" equals "sci.space" once lowered
    assert v.examples["differing_from_reference"] == ["i2"] and "after lowercase_space" in v.agreement_rule
    v = validate_generation_pass(corpus, path, {**Q, "threshold": 0.75}, "none", reference=reference)
    assert v.metric == 0.5 and not v.corpus_accepted


def test_a_corpus_mixing_labelled_and_unlabelled_items_is_refused_in_one_line():
    assert labelled([{"label": "a"}, {"label": "b"}]) is True
    assert labelled([{"label": None}, {}]) is False
    with pytest.raises(CorpusError) as e:
        labelled([{"id": "a", "label": "x"}, {"id": "b", "label": None}])
    assert "item 'b' has no label" in str(e.value) and "--no-labels" in str(e.value) and "\n" not in str(e.value)


def test_a_source_without_labels_reads_with_no_label_field_and_points_to_no_labels(tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_text('{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n')
    with pytest.raises(CorpusError) as e:
        load_items(src)
    assert "missing field 'label'" in str(e.value) and "--no-labels" in str(e.value)
    assert [it.label for it in load_items(src, label_field=None)] == [None, None]
    csv_src = tmp_path / "s.csv"
    csv_src.write_text("id,text\na,one\n")
    with pytest.raises(CorpusError) as e:
        load_items(csv_src)
    assert "no column 'label'" in str(e.value) and "--no-labels" in str(e.value)


def unlabelled_campaign(tmp_path, metric: str):
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    corpus.write_text("".join(json.dumps({**json.loads(x), "label": None}) + "\n"
                              for x in corpus.read_text().splitlines()))
    f = write_campaign(tmp_path, tmp_path / "no-model", corpus)
    f.write_text(f.read_text().replace('metric = "accuracy"', f'metric = "{metric}"'))
    return f


def test_lock_refuses_a_label_metric_on_a_corpus_without_labels_and_takes_agreement(tmp_path):
    from lab.orchestration.preflight import check_corpus
    from lab.orchestration.protocol import load_protocol

    (tmp_path / "a").mkdir()
    checks, _ = check_corpus(load_protocol(unlabelled_campaign(tmp_path / "a", "accuracy")))
    assert not checks[-1].ok and "has no labels" in checks[-1].detail and 'metric = "agreement"' in checks[-1].detail
    (tmp_path / "b").mkdir()
    checks, texts = check_corpus(load_protocol(unlabelled_campaign(tmp_path / "b", "agreement")))
    assert checks[-1].ok and checks[-1].detail == "4 items, no labels" and len(texts) == 4
