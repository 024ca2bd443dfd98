"""Validation of one pass: ids, format, coverage, metric, reference, verdict.

A file existing is not a result (seed: "Un file creato non è ancora un risultato
accettato"). A pass is accepted only if observed ids equal expected ids exactly (no
duplicates, omissions or extras), every line is well formed, every length bucket is
covered, the metric meets the absolute threshold, and the drop below the reference
variant's metric stays within the tolerance (SPEC 3.2). Wrong predictions are kept:
they are part of the metric.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lab.corpus import BUCKETS


@dataclass(frozen=True)
class Validation:
    """The checks of one pass. Counts are items; metrics are fractions in [0, 1].

    Empty figures (None) carry their reason in ``reasons``.
    """

    expected_ids: int
    observed_ids: int
    duplicate_ids: int
    missing_ids: int
    extra_ids: int
    ids_match: bool
    format_ok: bool
    coverage: dict
    coverage_ok: bool
    metric_name: str
    metric: float | None
    metric_by_bucket: dict
    threshold: float
    threshold_ok: bool | None
    reference_metric: float | None
    gap_to_reference: float | None
    agreement_with_reference: float | None
    tolerance: float
    tolerance_ok: bool | None
    corpus_accepted: bool
    reasons: list = field(default_factory=list)
    examples: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def read_predictions(path: Path, labels: set[str] | None) -> tuple[list[dict], list[str]]:
    """Parse a predictions JSONL. Returns (records, format errors as 'line N: problem')."""
    recs, errors = [], []
    if path.is_symlink():
        return [], ["predictions file is a symbolic link: not followed"]
    if not path.is_file():
        return [], ["no predictions file"]
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                obj = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                errors.append(f"line {n}: not a UTF-8 JSON object")
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
                errors.append(f"line {n}: missing string 'id'")
                continue
            if not isinstance(obj.get("pred"), str) or (labels and obj["pred"] not in labels):
                errors.append(f"line {n}: 'pred' {obj.get('pred')!r} is not a known label")
            p = obj.get("prob")
            if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
                errors.append(f"line {n}: 'prob' {p!r} not a probability in [0, 1]")
            recs.append(obj)
    return recs, errors


def accuracy(gold: list[str], pred: list[str]) -> float:
    return sum(g == p for g, p in zip(gold, pred, strict=True)) / len(gold)


def macro_f1(gold: list[str], pred: list[str]) -> float:
    """Unweighted mean of per-class F1 over the classes present in gold or predictions."""
    classes = sorted(set(gold) | set(pred))
    f1s = []
    for c in classes:
        tp = sum(g == c and p == c for g, p in zip(gold, pred, strict=True))
        fp = sum(g != c and p == c for g, p in zip(gold, pred, strict=True))
        fn = sum(g == c and p != c for g, p in zip(gold, pred, strict=True))
        f1s.append(0.0 if tp == 0 else 2 * tp / (2 * tp + fp + fn))
    return sum(f1s) / len(f1s)


METRICS = {"accuracy": accuracy, "macro_f1": macro_f1}


def validate_pass(corpus: list[dict], predictions_path: Path, quality: dict,
                  labels: set[str] | None = None,
                  reference: dict[str, str] | None = None,
                  reference_metric: float | None = None) -> Validation:
    """Validate a pass's predictions against the corpus and the locked quality rules.

    ``corpus``: items with id, label, bucket. ``quality``: metric, threshold, tolerance.
    ``reference``: {id: pred} of the reference pass (None while it has not run);
    ``reference_metric``: its metric. Never raises for bad predictions: they fail checks.
    """
    recs, fmt_errors = read_predictions(Path(predictions_path), labels)
    expected = [r["id"] for r in corpus]
    exp_set = set(expected)
    counts = Counter(r["id"] for r in recs)
    dups = sorted(i for i, c in counts.items() if c > 1)
    missing = sorted(exp_set - set(counts))
    extras = sorted(set(counts) - exp_set)
    ids_match = not dups and not missing and not extras and len(recs) == len(expected)
    pred: dict[str, Any] = {r["id"]: r.get("pred") for r in recs}
    coverage = {}
    for b in BUCKETS:
        ids_b = [r["id"] for r in corpus if r.get("bucket") == b]
        coverage[b] = {"expected": len(ids_b), "observed": sum(1 for i in ids_b if i in pred)}
    coverage_ok = all(c["observed"] == c["expected"] for c in coverage.values())
    reasons: list[str] = []
    if dups:
        reasons.append(f"{len(dups)} duplicate id(s)")
    if missing:
        reasons.append(f"{len(missing)} missing id(s)")
    if extras:
        reasons.append(f"{len(extras)} unexpected id(s)")
    if fmt_errors:
        reasons.append(f"format: {len(fmt_errors)} bad line(s), first {fmt_errors[0]}")
    if not coverage_ok:
        short = [b for b, c in coverage.items() if c["observed"] < c["expected"]]
        reasons.append("bucket(s) not covered: " + ", ".join(short))
    name = quality["metric"]
    fn = METRICS[name]
    metric = None
    by_bucket: dict = {}
    thr, tol = float(quality["threshold"]), float(quality["tolerance"])
    threshold_ok = tolerance_ok = None
    gap = agreement = None
    if ids_match and not fmt_errors:
        gold = [r["label"] for r in corpus]
        metric = round(fn(gold, [pred[i] for i in expected]), 6)
        for b in BUCKETS:
            sub = [r for r in corpus if r.get("bucket") == b]
            if sub:
                by_bucket[b] = round(fn([r["label"] for r in sub], [pred[r["id"]] for r in sub]), 6)
        threshold_ok = metric >= thr
        if not threshold_ok:
            reasons.append(f"{name} {metric:.4f} < threshold {thr}")
        if reference is not None and reference_metric is not None:
            gap = round(metric - reference_metric, 6)
            agreement = round(sum(pred[i] == reference.get(i) for i in expected) / len(expected), 6)
            tolerance_ok = gap >= -tol - 1e-12
            if not tolerance_ok:
                reasons.append(f"{name} {-gap:.4f} below the reference, tolerance {tol}")
        else:
            reasons.append("reference variant has no validated pass yet: gap not computed")
    else:
        reasons.append("metric not computed: ids or format do not match the corpus")
    accepted = bool(ids_match and not fmt_errors and coverage_ok and threshold_ok and tolerance_ok)
    return Validation(
        expected_ids=len(expected), observed_ids=len(recs), duplicate_ids=len(dups),
        missing_ids=len(missing), extra_ids=len(extras), ids_match=ids_match,
        format_ok=not fmt_errors, coverage=coverage, coverage_ok=coverage_ok, metric_name=name,
        metric=metric, metric_by_bucket=by_bucket, threshold=thr, threshold_ok=threshold_ok,
        reference_metric=reference_metric, gap_to_reference=gap,
        agreement_with_reference=agreement, tolerance=tol, tolerance_ok=tolerance_ok,
        corpus_accepted=accepted, reasons=reasons,
        examples={"duplicates": dups[:5], "missing": missing[:5], "extras": extras[:5],
                  "format": fmt_errors[:5]})
