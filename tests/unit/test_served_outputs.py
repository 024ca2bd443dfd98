"""archive verify's check that a server pass's kept answers are its predictions
(lab.evidence.served._check_outputs), for each kind a server serves: a generation pass's texts, a
classification pass's top probability and one label per class index, an embedding pass's vectors
(float16 rows of vectors.npy). Built from records in memory: no model, no archive."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import numpy as np

from lab.engines.serving_figures import ServedRequest
from lab.evidence.served import _check_outputs

PRED = "passes/p1/predictions.jsonl"


def rec(i: str, text: str = "", answer=None, error: str = "") -> ServedRequest:
    return ServedRequest(id=i, sent_s=0.0, ttft_s=0.1, e2el_s=0.1, itl_s=(), output_text=text, output_tokens=0,
                         input_tokens=5, error=error, answer=None if answer is None else tuple(answer))


def problems_of(recs, lines, **members) -> list[str]:
    scan = SimpleNamespace(kept={PRED: "".join(json.dumps(x) + "\n" for x in lines).encode(), **members})
    out: list[str] = []
    _check_outputs("p1", recs, scan, PRED, out)
    return out


def test_generation_texts_must_be_the_served_ones():
    recs = [rec("a", "x"), rec("b", "y")]
    assert problems_of(recs, [{"id": "a", "output": "x"}, {"id": "b", "output": "y"}]) == []
    bad = problems_of(recs, [{"id": "a", "output": "x"}, {"id": "b", "output": "z"}])
    assert len(bad) == 1 and "1 prediction(s) are not the served output of their request (first: id b)" in bad[0]


def test_a_classification_answer_gives_its_prediction_probability_and_one_label_per_class():
    recs = [rec("a", answer=[0.1, 0.7, 0.2]), rec("b", answer=[0.6, 0.3, 0.1]), rec("c", answer=[0.2, 0.5, 0.3])]
    good = [{"id": "a", "pred": "sci", "prob": 0.7}, {"id": "b", "pred": "rec", "prob": 0.6},
            {"id": "c", "pred": "sci", "prob": 0.5}]
    assert problems_of(recs, good) == []
    forged_prob = [dict(good[0], prob=0.9), *good[1:]]
    assert "first: id a" in problems_of(recs, forged_prob)[0]
    relabelled = [*good[:2], dict(good[2], pred="rec")]  # class 1 is "sci" for id a, "rec" for id c
    assert "first: id c" in problems_of(recs, relabelled)[0]
    unanswered = [rec("a", answer=[0.1, 0.7, 0.2]), rec("b", error="HTTP 500"), recs[2]]
    assert "first: id b" in problems_of(unanswered, good)[0]


def test_an_embedding_answer_is_its_row_of_vectors_npy():
    answers = np.array([[0.1, 0.2], [0.3, 0.4]], np.float32)
    recs = [rec("a", answer=answers[0]), rec("b", answer=answers[1])]
    lines = [{"id": "a", "row": 0}, {"id": "b", "row": 1}]

    def npy(arr) -> bytes:
        buf = io.BytesIO()
        np.save(buf, arr.astype(np.float16), allow_pickle=False)
        return buf.getvalue()

    assert problems_of(recs, lines, **{"passes/p1/vectors.npy": npy(answers)}) == []
    swapped = problems_of(recs, lines, **{"passes/p1/vectors.npy": npy(answers[::-1])})
    assert len(swapped) == 1 and "2 prediction(s)" in swapped[0]
