"""Re-derivation of a server pass's figures for ``archive verify`` (issue 36).

A server pass (lab.passes.tasks.server_job) writes every request's record to ``served.jsonl``
and its figures to result.json's ``serving``; this re-derives them from the records
(lab.engines.serving_figures: the same definitions) and the objective its ``pass.json`` locked,
and names each figure that differs: the latency percentiles, achieved rate, goodput, output
tokens/s, the generator's lag, the good count and the verdict. The served answers must be the
pass's predictions, id for id (texts; a classification answer's top probability and one label
per class index; an embedding's vector as its row of vectors.npy): the agreement and metric
checks read the predictions, and a record set that says otherwise is not that pass's. Every
problem is one line naming the pass.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgspec

from lab.facts.errors import LabError

REL_TOL = 1e-9  # the figures are written unrounded: a re-derived one equals the written one to float noise


class PredictionLine(msgspec.Struct):
    """One line of a pass's ``predictions.jsonl``, the fields verify reads (others ignored): the
    corpus item's ``id``, a classification pass's ``pred`` (label) and ``prob``, a generation pass's
    ``output`` (text), an embedding pass's ``row`` (its row in vectors.npy, from 0) and ``norm`` (the
    L2 norm the pass recorded for it; lab.passes.tasks.embedding)."""

    id: str
    output: str | None = None
    pred: str | None = None
    prob: float | None = None
    row: int | None = None
    norm: float | None = None


def check_served(pid: str, serving, pred_rel: str, scan, problems: list[str]) -> None:
    """Append to ``problems`` each figure of ``serving`` (result.json's, as parsed) that the pass's
    ``served.jsonl`` and ``pass.json`` objective do not give, and each served output that is not its
    prediction in ``pred_rel``. Nothing for ``serving`` None (an offline pass)."""
    if serving is None:
        return
    from lab.engines.serving_figures import Bound, Objective, ServedRequest, figures, plain, verdict
    from lab.inputs.scenario import scenario_of
    from lab.passes.spec import PassSpec
    from lab.passes.tasks.server_job import ServingRecord  # here: an offline archive's verify needs no numpy

    try:
        written = msgspec.json.decode(json.dumps(serving), type=ServingRecord)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        problems.append(f"pass {pid}: result.json's serving is not a server pass's record ({exc})")
        return
    rel = f"passes/{pid}/{written.served_file}"
    if rel not in scan.kept:
        problems.append(f"pass {pid}: {rel} missing: its serving figures cannot be re-derived")
        return
    try:
        recs = [msgspec.json.decode(line, type=ServedRequest) for line in scan.kept[rel].splitlines() if line.strip()]
        spec = PassSpec.decode(scan.kept[f"passes/{pid}/pass.json"])
        scenario = scenario_of(spec.extra)
    except (KeyError, ValueError, TypeError, LabError, msgspec.ValidationError, msgspec.DecodeError) as exc:
        problems.append(f"pass {pid}: {rel} or its pass.json cannot be read as a server pass's ({exc})")
        return
    objective = Objective(bounds=tuple(Bound(*b) for b in scenario.bounds()), share=scenario.share)
    try:
        mine = figures(recs, written.figures.duration_s, spec.variant.request_rate, objective)
    except (ValueError, TypeError) as exc:
        problems.append(f"pass {pid}: its serving figures cannot be re-derived from {rel} ({exc})")
        return
    for name, a, b in _differing(plain(written.figures), plain(mine)):
        problems.append(f"pass {pid}: serving {name} {a} in result.json, {b} re-derived from {rel}")
    holds = verdict(recs, objective).holds
    if written.verdict.holds != holds:
        problems.append(f"pass {pid}: serving verdict holds = {written.verdict.holds} in result.json, {holds} "
                        f"re-derived from {rel} and the objective in pass.json")
    _check_outputs(pid, recs, scan, pred_rel, problems)


def _differing(written, mine, at: str = ""):
    """(dotted name, written, re-derived) of each leaf of ``mine`` that ``written`` does not hold
    (numbers within REL_TOL)."""
    if isinstance(mine, dict):
        if not isinstance(written, dict):
            yield at or "figures", written, "a table"
            return
        for k, v in mine.items():
            yield from _differing(written.get(k), v, f"{at}.{k}" if at else k)
        return
    if isinstance(mine, (int, float)) and isinstance(written, (int, float)) and not isinstance(mine, bool):
        if not math.isclose(float(mine), float(written), rel_tol=REL_TOL, abs_tol=1e-12):
            yield at, written, mine
    elif mine != written:
        yield at, written, mine


def _check_outputs(pid: str, recs, scan, pred_rel: str, problems: list[str]) -> None:
    """Each prediction of ``pred_rel`` against its request's record: a generation pass's output is
    the served text; a classification pass's probability is the largest of the kept answer's
    (rounded as the prediction line rounds it) and one class index is one label throughout the
    pass; an embedding pass's row of vectors.npy is the kept vector (stored as float16)."""
    if pred_rel not in scan.kept:
        return  # its absence is said by the predictions checks
    try:
        preds = [msgspec.json.decode(x, type=PredictionLine) for x in scan.kept[pred_rel].splitlines() if x.strip()]
    except (msgspec.ValidationError, msgspec.DecodeError):
        return  # said by the format checks
    answered = {r.id: r for r in recs if r.answered}
    if any(r.answer is not None for r in answered.values()):
        differ = _pooled_differ(preds, answered, scan, pred_rel)
    else:
        differ = [p.id for p in preds if p.id not in answered or answered[p.id].output_text != p.output]
    if differ:
        problems.append(f"pass {pid}: {len(differ)} prediction(s) are not the served output of their request "
                        f"(first: id {differ[0]}): served.jsonl and the predictions are not one pass's")


def _pooled_differ(preds, answered, scan, pred_rel: str) -> list[str]:
    """The ids whose prediction is not their kept pooled answer (see _check_outputs)."""
    import numpy as np

    from lab.passes.tasks.embedding import vectors_name
    from lab.passes.tasks.embedding_metrics import load_vectors

    if any(p.row is not None for p in preds):  # an embedding pass
        vec_rel = pred_rel.rsplit("/", 1)[0] + "/" + vectors_name(Path(pred_rel))
        try:
            vectors = load_vectors(scan.kept[vec_rel])
        except (KeyError, ValueError):
            return []  # said by the vectors checks
        return [p.id for p in preds if p.id not in answered or p.row is None or not 0 <= p.row < len(vectors)
                or not np.array_equal(vectors[p.row], np.asarray(answered[p.id].answer, np.float32)
                                      .astype(vectors.dtype))]
    label_of: dict[int, str] = {}
    out = []
    for p in preds:
        r = answered.get(p.id)
        if r is None or r.answer is None or p.prob is None:
            out.append(p.id)
            continue
        top = int(np.argmax(r.answer))
        if label_of.setdefault(top, p.pred or "") != p.pred or round(float(r.answer[top]), 6) != p.prob:
            out.append(p.id)
    return out
