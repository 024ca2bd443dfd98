"""Vectorised validation: same definitions as the protocol's (and scikit-learn's), exact
line numbers across parse blocks, bounded reading. Synthetic corpora: no model needed."""

from __future__ import annotations

import json
import random

import pytest

from lab.orchestration import validate
from lab.orchestration.validate import accuracy, macro_f1, read_prediction_columns, validate_pass

QUALITY = {"metric": "macro_f1", "threshold": 0.0, "tolerance": 1.0}
LABELS = {"a", "b", "c", "d"}


def _loop_macro_f1(gold, pred):
    """The protocol's definition written out item by item (the pre-vectorised code)."""
    f1s = []
    for c in sorted(set(gold) | set(pred)):
        tp = sum(g == c and p == c for g, p in zip(gold, pred, strict=True))
        fp = sum(g != c and p == c for g, p in zip(gold, pred, strict=True))
        fn = sum(g == c and p != c for g, p in zip(gold, pred, strict=True))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s)


@pytest.mark.parametrize("seed", range(5))
def test_metrics_match_the_item_by_item_definition_and_sklearn(seed):
    from sklearn.metrics import accuracy_score, f1_score

    rnd = random.Random(seed)
    classes = ["a", "b", "c", "d", "e"][: rnd.randint(2, 5)]
    gold = [rnd.choice(classes) for _ in range(300)]
    pred = [rnd.choice(classes + ["z"]) for _ in range(300)]  # "z": predicted, never gold
    assert macro_f1(gold, pred) == pytest.approx(_loop_macro_f1(gold, pred), abs=1e-12)
    assert macro_f1(gold, pred) == pytest.approx(f1_score(gold, pred, average="macro", zero_division=0), abs=1e-12)
    assert accuracy(gold, pred) == pytest.approx(accuracy_score(gold, pred), abs=1e-12)


def _write(tmp_path, corpus, lines):
    p = tmp_path / "predictions.jsonl"
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


def _corpus(n):
    buckets = ("short", "medium", "long")
    return [{"id": f"i{k}", "label": "abcd"[k % 4], "bucket": buckets[k % 3]} for k in range(n)]


def _line(item_id, pred, prob=0.5):
    return json.dumps({"id": item_id, "pred": pred, "prob": prob})


def test_bad_line_in_a_later_block_is_named_by_its_file_line(tmp_path, monkeypatch):
    monkeypatch.setattr(validate, "CHUNK_BYTES", 64)
    corpus = _corpus(10)
    lines = [_line(r["id"], r["label"]) for r in corpus]
    lines[6] = _line("i6", "not-a-label")
    lines[8] = lines[8] + " " + _line("i9", "a")  # two objects on one line
    v = validate_pass(corpus, _write(tmp_path, corpus, lines), QUALITY, LABELS)
    assert v.examples["format"][:2] == ["line 7: 'pred' 'not-a-label' is not a known label",
                                        "line 9: not a UTF-8 JSON object"]
    assert not v.format_ok and v.metric is None and not v.corpus_accepted
    assert v.missing_ids == 1 and v.examples["missing"] == ["i8"]


def test_blocks_give_the_same_verdict_as_one_block(tmp_path, monkeypatch):
    corpus = _corpus(50)
    rnd = random.Random(3)
    lines = [_line(r["id"], rnd.choice("abcd"), rnd.random()) for r in corpus]
    lines = lines[25:] + lines[:25] + [lines[3]]  # shuffled order and one duplicate
    path = _write(tmp_path, corpus, lines)
    whole = validate_pass(corpus, path, QUALITY, LABELS)
    monkeypatch.setattr(validate, "CHUNK_BYTES", 200)
    blocks = validate_pass(corpus, path, QUALITY, LABELS)
    assert whole == blocks
    assert whole.duplicate_ids == 1 and whole.examples["duplicates"] == ["i3"]


def test_metric_per_bucket_and_agreement_in_corpus_order(tmp_path):
    corpus = _corpus(12)
    preds = {r["id"]: (r["label"] if r["bucket"] != "long" else "a") for r in corpus}
    lines = [_line(i, p) for i, p in reversed(list(preds.items()))]
    reference = {r["id"]: r["label"] for r in corpus}
    v = validate_pass(corpus, _write(tmp_path, corpus, lines), {**QUALITY, "metric": "accuracy"},
                      LABELS, reference, 1.0)
    assert v.ids_match and v.format_ok and v.coverage_ok
    assert v.metric_by_bucket["short"] == 1.0 and v.metric_by_bucket["medium"] == 1.0
    long_gold = [r["label"] for r in corpus if r["bucket"] == "long"]
    assert v.metric_by_bucket["long"] == round(sum(g == "a" for g in long_gold) / 4, 6)
    assert v.agreement_with_reference == round((12 - sum(g != "a" for g in long_gold)) / 12, 6)


def test_reader_keeps_ids_and_integer_codes_only(tmp_path):
    corpus = _corpus(9)
    path = _write(tmp_path, corpus, [_line(r["id"], r["label"]) for r in corpus])
    cols = read_prediction_columns(path, LABELS)
    assert cols.ids == [r["id"] for r in corpus] and cols.pred.dtype.itemsize == 4
    assert [cols.classes[c] for c in cols.pred] == [r["label"] for r in corpus]
    assert cols.errors == [] and cols.n_lines == 9


def test_linked_predictions_file_is_refused_not_followed(tmp_path):
    corpus = _corpus(6)
    target = _write(tmp_path, corpus, [_line(r["id"], r["label"]) for r in corpus])
    link = tmp_path / "linked.jsonl"
    link.symlink_to(target)
    v = validate_pass(corpus, link, QUALITY, LABELS)
    assert v.examples["format"] == ["predictions file is a symbolic link: not followed"]
    assert v.observed_ids == 0 and v.metric is None and not v.corpus_accepted
    direct = validate_pass(corpus, target, QUALITY, LABELS)  # the same file, read directly
    assert direct.ids_match and direct.format_ok and direct.metric == 1.0


@pytest.mark.parametrize("metric", ["accuracy", "macro_f1"])
def test_archive_rederivation_agrees_with_validation_per_bucket(tmp_path, metric):
    """archive verify recomputes each row's metric and per-bucket metrics from the predictions
    and the gold labels (lab.evidence.rederive, label lists); validation computed them from
    class codes: both must give the same figures, including a class only predicted."""
    from lab.evidence.rederive import _check_metric
    from lab.report.raw_row import raw_row

    corpus = _corpus(90)
    rnd = random.Random(7)
    preds = {r["id"]: rnd.choice("abcde") for r in corpus}  # "e" is predicted, never gold
    labels = LABELS | {"e"}
    v = validate_pass(corpus, _write(tmp_path, corpus, [_line(i, p) for i, p in reversed(preds.items())]),
                      {**QUALITY, "metric": metric}, labels)
    assert v.ids_match and v.metric is not None and len(v.metric_by_bucket) == 3
    cells = {"pass_id": "p1", "metric_name": metric, "metric": str(v.metric), "ids_match": "True",
             "format_ok": "True", **{f"metric_{b}": str(x) for b, x in v.metric_by_bucket.items()}}
    gold = {r["id"]: (r["label"], r["bucket"]) for r in corpus}
    problems: list[str] = []
    assert _check_metric("p1", raw_row(cells), preds, gold, problems) == v.metric
    assert problems == []
    cells["metric_long"] = str(round(v.metric_by_bucket["long"] + 0.01, 6))  # a figure that lies is caught
    _check_metric("p1", raw_row(cells), preds, gold, problems)
    assert len(problems) == 1 and "metric_long" in problems[0]


def _ids_case(seed):
    """(corpus ids, observed ids): shuffled, with duplicates, unknown ids and omissions."""
    rnd = random.Random(seed)
    expected = [f"test/c{k % 7}/{k}" for k in range(rnd.randint(1, 300))]
    ids = [i for i in expected if rnd.random() > 0.1]
    ids += rnd.sample(ids, min(len(ids), 3)) + [f"unknown/{k}" for k in range(rnd.randint(0, 4))]
    rnd.shuffle(ids)
    return expected, ids


@pytest.mark.parametrize("seed", range(8))
def test_align_ids_matches_a_dict_of_positions(seed):
    expected, ids = _ids_case(seed)
    want = [expected.index(i) if i in expected else -1 for i in ids]
    assert validate.align_ids(expected, ids).tolist() == want
    assert validate.align_ids(expected, list(expected)).tolist() == list(range(len(expected)))


@pytest.mark.parametrize("seed", range(4))
def test_align_ids_never_pairs_different_ids_whose_hashes_collide(seed, monkeypatch):
    expected, ids = _ids_case(seed)
    want = [expected.index(i) if i in expected else -1 for i in ids]
    # unique on the corpus, but every unknown id collides with a corpus id: only the string
    # comparison can tell them apart
    table = {s: k for k, s in enumerate(expected)}
    monkeypatch.setattr(validate, "_id_hash", lambda s: table.get(s, len(s) % len(expected)))
    assert validate.align_ids(expected, ids).tolist() == want
    # colliding corpus ids: the dict of positions decides
    monkeypatch.setattr(validate, "_id_hash", len)
    assert validate.align_ids(expected, ids).tolist() == want


def test_align_ids_refuses_a_corpus_with_duplicate_ids():
    with pytest.raises(ValueError, match="corpus ids are not unique"):
        validate.align_ids(["a", "b", "a"], ["b", "a"])


def test_line_longer_than_a_block_and_last_line_without_newline(tmp_path, monkeypatch):
    monkeypatch.setattr(validate, "CHUNK_BYTES", 16)
    corpus = _corpus(5)
    lines = [_line(r["id"], r["label"], 0.25) for r in corpus]
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(("\r\n".join(lines)).encode())  # CRLF, no final newline
    cols = read_prediction_columns(path, LABELS)
    assert cols.ids == [r["id"] for r in corpus] and cols.errors == [] and cols.n_lines == 5
    path.write_bytes(("\n".join(lines[:2]) + "\n\n" + "\n".join(lines[2:]) + "\n").encode())
    cols = read_prediction_columns(path, LABELS)
    assert cols.errors == ["line 3: not a UTF-8 JSON object"] and len(cols.ids) == 5 and cols.n_lines == 6


def test_agreement_with_a_reference_in_another_order_lacking_an_item(tmp_path):
    corpus = _corpus(40)
    rnd = random.Random(11)
    preds = {r["id"]: rnd.choice("abcd") for r in corpus}
    reference = {r["id"]: rnd.choice("abcd") for r in corpus}
    reference = dict(rnd.sample(sorted(reference.items()), len(reference)))  # another order
    del reference["i7"]
    reference["not-in-corpus"] = "a"
    v = validate_pass(corpus, _write(tmp_path, corpus, [_line(i, p) for i, p in preds.items()]),
                      QUALITY, LABELS, reference, 0.5)
    same = sum(reference.get(i) == p for i, p in preds.items())
    assert v.agreement_with_reference == round(same / 40, 6)


TRICKY_LINES = [
    b'{"id": "i1", "pred": "b", "prob": 0.5, "extra": "\xff"}',  # bad UTF-8 in a key the reader ignores
    b'{"id": "i1", "pred": "b", "prob": 0.5, "extra": "\\ud800"}',  # lone surrogate: json reads it
    b'{"id": "i1", "pred": "b", "prob": true}',
    b'{"id": "i1", "pred": "b", "prob": 1}',
    b'{"id": "i1", "pred": "b", "prob": NaN}',
    b'{"id": "i1", "pred": "b", "prob": 1e400}',
    b'{"id": "i1", "pred": "c", "prob": 0.5, "pred": "b"}',  # duplicate key: the last one counts
    b'{"id": "i1", "pred": 3, "prob": 0.5, "pred": "b"}',
    b'{"id": "i1", "pred": "b", "prob": 0.5, "extra": [1, {"x": NaN}]}',
    b'\xef\xbb\xbf{"id": "i1", "pred": "b", "prob": 0.5}',
    b'{"id": "i1", "pred": "b", "prob": 0.5}\r',
    b'{"id": "i1", "pred": "b", "prob": 0.5}   ',
    b'{"id": "i\t1", "pred": "b", "prob": 0.5}',
    b'{"id": "i1", "pred": null, "prob": 0.5}',
    b'{"id": "i1", "pred": "b", "prob": 0.5}, {"id": "i9", "pred": "b", "prob": 0.5}',
    b'[{"id": "i1", "pred": "b", "prob": 0.5}]',
    b'{"id": 1, "pred": "b", "prob": 0.5}',
    b'{"id": "i1", "pred": "z", "prob": 0.5}',
    b'',
]


@pytest.mark.parametrize("tricky", TRICKY_LINES)
def test_block_reading_equals_line_by_line_reading(tmp_path, monkeypatch, tricky):
    """The one-call block parser accepts a line only when json.loads, line by line, reads the
    same record without error: columns and messages are those of the line-by-line reading."""
    corpus = _corpus(4)
    lines = [_line(r["id"], r["label"]).encode() for r in corpus]
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(b"\n".join(lines[:1] + [tricky] + lines[2:]) + b"\n")
    fast = read_prediction_columns(path, LABELS)
    monkeypatch.setattr(validate, "_fast_columns", lambda *a: None)
    slow = read_prediction_columns(path, LABELS)
    assert (fast.ids, fast.pred.tolist(), fast.classes, fast.errors, fast.n_lines) == \
        (slow.ids, slow.pred.tolist(), slow.classes, slow.errors, slow.n_lines)


@pytest.mark.parametrize("prob", [b"true", b"false", b'"0.5"', b"NaN", b"1.5", b"-0.1"])
def test_a_prob_that_is_not_a_number_in_0_1_is_a_format_error(tmp_path, prob):
    """JSON true/false are not probabilities (Python counts bools as ints: refused by name)."""
    corpus = _corpus(4)
    lines = [_line(r["id"], r["label"]).encode() for r in corpus]
    lines[1] = b'{"id": "i1", "pred": "b", "prob": ' + prob + b"}"
    path = tmp_path / "predictions.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    cols = read_prediction_columns(path, LABELS)
    assert len(cols.errors) == 1 and "'prob'" in cols.errors[0] and "line 2" in cols.errors[0], cols.errors
