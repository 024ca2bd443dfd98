"""verify re-derives the norms an embedding pass recorded where its stored vectors allow it
(lab.evidence.rederive.check_vector_norms): the user's code's vectors are stored as returned, so a
forged ``norm`` or vectors scaled off unit norm under ``normalize = true`` are named (trial D1: both
verified OK before)."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import numpy as np

from lab.evidence.members import TaskTable
from lab.evidence.rederive import check_vector_norms


def scan_of(vectors: np.ndarray, norms: list[float]) -> SimpleNamespace:
    buf = io.BytesIO()
    np.save(buf, vectors.astype(np.float16), allow_pickle=False)
    lines = "".join(json.dumps({"id": f"i{k}", "row": k, "norm": n}) + "\n" for k, n in enumerate(norms))
    return SimpleNamespace(kept={"passes/p/predictions.jsonl": lines.encode(), "passes/p/vectors.npy": buf.getvalue()})


def problems_of(scan, task) -> list[str]:
    out: list[str] = []
    check_vector_norms("p", scan, "passes/p/predictions.jsonl", "passes/p/vectors.npy", task, out)
    return out


def test_the_users_vectors_norms_are_rederived_and_the_unit_rule_rechecked():
    unit = np.array([[0.6, 0.8], [1.0, 0.0], [0.0, 1.0]])
    entry = TaskTable(kind="embedding", entry="e.py:E")
    assert problems_of(scan_of(unit, [1.0, 1.0, 1.0]), entry) == []
    forged = problems_of(scan_of(unit, [1.0, 3.0, 3.0]), entry)
    assert forged == ["pass p: id i1 records norm 3, its row of vectors.npy has norm 1"], forged
    scaled = problems_of(scan_of(unit * 3.0, [3.0, 3.0, 3.0]), entry)
    assert len(scaled) == 1 and scaled[0].startswith("pass p: normalize = true, but 3 of 3 stored vectors"), scaled
    assert problems_of(scan_of(unit * 3.0, [3.0, 3.0, 3.0]), TaskTable(kind="embedding", entry="e.py:E",
                                                                      normalize=False)) == []


def test_the_labs_own_normalised_vectors_keep_a_norm_verify_cannot_rederive():
    unit = np.array([[0.6, 0.8], [1.0, 0.0]])
    assert problems_of(scan_of(unit, [7.5, 6.2]), TaskTable(kind="embedding")) == []  # norm before normalising
    raw = problems_of(scan_of(unit * 2.0, [2.0, 9.0]), TaskTable(kind="embedding", normalize=False))
    assert raw == ["pass p: id i1 records norm 9, its row of vectors.npy has norm 2"], raw
