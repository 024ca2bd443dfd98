"""Validation of one pass: ids, format, coverage, metric, reference, verdict.

A file existing is not a result (seed: "Un file creato non è ancora un risultato
accettato"). A pass is accepted only if observed ids equal expected ids exactly (no
duplicates, omissions or extras), every line is well formed, every length bucket is
covered, the metric meets the absolute threshold, and the drop below the reference
variant's metric stays within the tolerance (SPEC 3.2). Wrong predictions are kept:
they are part of the metric.
"""

from __future__ import annotations

import itertools
import json
import operator
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

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


_GET_ID, _GET_PRED, _GET_PROB = (operator.itemgetter(k) for k in ("id", "pred", "prob"))
CHUNK_LINES = 65_536  # lines parsed per block: memory stays bounded whatever the corpus size


@dataclass
class PredictionColumns:
    """A predictions file as columns (row i = line i of the records kept).

    ``ids``: the id strings (the only per-item Python objects kept); ``pred``: int32 codes
    into ``classes`` (the label strings); ``n_lines``: lines read. Records without a string
    id are not kept (they are format errors); records with a bad pred or prob are kept
    (their id counts) and reported as format errors.
    """

    ids: list
    pred: np.ndarray
    classes: list
    errors: list
    n_lines: int


def _line_errors(n: int, obj, labels: set | None) -> tuple[bool, list[str]]:
    """(keep the record, format errors) for one parsed line; ``n`` is its 1-based number."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        return False, [f"line {n}: missing string 'id'"]
    errs = []
    if not isinstance(obj.get("pred"), str) or (labels and obj["pred"] not in labels):
        errs.append(f"line {n}: 'pred' {obj.get('pred')!r} is not a known label")
    p = obj.get("prob")
    if not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        errs.append(f"line {n}: 'prob' {p!r} not a probability in [0, 1]")
    return True, errs


def _parse_block(block: list[bytes]) -> list | None:
    """All lines of ``block`` parsed by one C-level json call, or None when any line is not
    one well-formed UTF-8 JSON object (the caller then parses line by line for diagnostics)."""
    try:
        objs = json.loads(b"[" + b",".join(block) + b"]")
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    if len(objs) != len(block) or set(map(type, objs)) != {dict}:
        return None  # e.g. a line holding two objects, or a bare value
    return objs


def read_prediction_columns(path: Path, labels: set[str] | None) -> PredictionColumns:
    """Parse a predictions JSONL into columns, in blocks of CHUNK_LINES lines.

    Each line must be a UTF-8 JSON object with a string ``id``, a ``pred`` among ``labels``
    (any string when labels is None) and a ``prob`` in [0, 1]. Errors read 'line N: problem'.
    Fast path: one ``json.loads`` per block; a block with any bad line is re-read line by
    line, so the messages are exact. Memory: ids + 4 bytes per item + one block of objects.
    """
    code: dict[str, int] = {c: i for i, c in enumerate(sorted(labels))} if labels else {}
    ids: list = []
    codes: list[np.ndarray] = []
    errors: list[str] = []
    n_lines = 0
    if path.is_symlink():  # a link a pass wrote into its folder is never followed
        return PredictionColumns([], np.zeros(0, np.int32), list(code),
                                 ["predictions file is a symbolic link: not followed"], 0)
    if not path.is_file():
        return PredictionColumns([], np.zeros(0, np.int32), list(code), ["no predictions file"], 0)

    with open(path, "rb") as fh:
        while True:
            block = [line.rstrip(b"\r\n") for line in itertools.islice(fh, CHUNK_LINES)]
            if not block:
                break
            objs = _parse_block(block)
            if objs is not None:
                try:
                    b_ids = list(map(_GET_ID, objs))
                    b_pred = list(map(_GET_PRED, objs))
                    b_prob = list(map(_GET_PROB, objs))
                except KeyError:
                    b_ids = b_pred = b_prob = []
                ok = (len(b_ids) == len(block) and set(map(type, b_ids)) == {str}
                      and set(map(type, b_pred)) == {str}
                      and (not labels or set(b_pred) <= labels)
                      and set(map(type, b_prob)) <= {float, int})
                if ok:
                    prob = np.asarray(b_prob, dtype=np.float64)
                    ok = bool(((prob >= 0.0) & (prob <= 1.0)).all())
                if ok:
                    ids.extend(b_ids)
                    codes.append(_codes(b_pred, code))
                    n_lines += len(block)
                    continue
            b_ids, b_pred = [], []
            for k, raw in enumerate(block):
                n = n_lines + k + 1
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    errors.append(f"line {n}: not a UTF-8 JSON object")
                    continue
                keep, errs = _line_errors(n, obj, labels)
                errors.extend(errs)
                if keep:
                    b_ids.append(obj["id"])
                    b_pred.append(obj["pred"] if isinstance(obj.get("pred"), str) else None)
            ids.extend(b_ids)
            codes.append(_codes(b_pred, code))  # None (a non-string pred) gets a code too
            n_lines += len(block)
    pred = np.concatenate(codes) if codes else np.zeros(0, np.int32)
    return PredictionColumns(ids, pred, list(code), errors, n_lines)


def _codes(values: list, code: dict) -> np.ndarray:
    """int32 codes of labels (shape (len(values),)), extending ``code`` with labels not seen
    yet (in sorted order, so codes are deterministic)."""
    for v in sorted(set(values) - code.keys(), key=str):
        code[v] = len(code)
    return np.array(list(map(code.__getitem__, values)), dtype=np.int32)


def accuracy_codes(gold: np.ndarray, pred: np.ndarray) -> float:
    """Fraction of items whose predicted class code equals the gold one (shape (n,), n >= 1)."""
    return float(np.count_nonzero(gold == pred)) / len(gold)


def macro_f1_codes(gold: np.ndarray, pred: np.ndarray) -> float:
    """Unweighted mean over the classes present in gold or predictions of per-class F1.

    F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c) = 2 TP_c / (gold_c + pred_c), 0 when TP_c = 0;
    the same definition as scikit-learn's ``f1_score(average="macro", zero_division=0)``
    with its default labels (the union of both). Inputs: int codes of shape (n,), n >= 1.
    """
    k = int(max(gold.max(), pred.max())) + 1
    tp = np.bincount(gold[gold == pred], minlength=k)
    support = np.bincount(gold, minlength=k) + np.bincount(pred, minlength=k)
    present = support > 0
    return float(np.mean(2.0 * tp[present] / support[present]))


def accuracy(gold: list[str], pred: list[str]) -> float:
    """Accuracy of two equal-length label lists (see accuracy_codes)."""
    code: dict[str, int] = {}
    return accuracy_codes(_codes(gold, code), _codes(pred, code))


def macro_f1(gold: list[str], pred: list[str]) -> float:
    """Macro-F1 of two equal-length label lists (see macro_f1_codes)."""
    code: dict[str, int] = {}
    return macro_f1_codes(_codes(gold, code), _codes(pred, code))


# name -> metric of two equal-length label lists (archive verify re-derives with these)
METRICS = {"accuracy": accuracy, "macro_f1": macro_f1}
# name -> the same metric on class-code arrays (validate_pass)
METRICS_CODES = {"accuracy": accuracy_codes, "macro_f1": macro_f1_codes}


def _first(values, limit: int = 5) -> list[str]:
    return sorted(values)[:limit]


def validate_pass(corpus: list[dict], predictions_path: Path, quality: dict,
                  labels: set[str] | None = None,
                  reference: dict[str, str] | None = None,
                  reference_metric: float | None = None) -> Validation:
    """Validate a pass's predictions against the corpus and the locked quality rules.

    ``corpus``: items with id, label, bucket (ids unique). ``quality``: metric, threshold,
    tolerance. ``reference``: {id: pred} of the reference pass (None while it has not run);
    ``reference_metric``: its metric. Never raises for bad predictions: they fail checks.
    Vectorised: ids are matched through one dict of corpus positions, metrics come from class-code counts
    (numpy), so 1,000,000 predictions validate in about a second and memory holds the ids,
    the labels and a few integer arrays (measured by scripts/bench_validation.py).
    """
    cols = read_prediction_columns(Path(predictions_path), labels)
    fmt_errors = cols.errors
    expected = [r["id"] for r in corpus]
    n = len(expected)
    if cols.ids == expected:  # the runner writes corpus order: one C-level list comparison
        pos = np.arange(n, dtype=np.int64)
    else:
        position = {item_id: k for k, item_id in enumerate(expected)}
        if len(position) != n:
            raise ValueError("corpus ids are not unique; read the corpus with lab.corpus.read_corpus")
        pos = np.array(list(map(position.get, cols.ids, itertools.repeat(-1))), dtype=np.int64)
        del position
    known = pos >= 0
    counts = np.bincount(pos[known], minlength=n)
    extra_counts = Counter(i for i, k in zip(cols.ids, known, strict=True) if not k) if not known.all() else Counter()
    dups = sorted({expected[k] for k in np.flatnonzero(counts > 1)}
                  | {i for i, c in extra_counts.items() if c > 1})
    missing_mask = counts == 0
    missing = [expected[k] for k in np.flatnonzero(missing_mask)]
    extras = list(extra_counts)
    ids_match = not dups and not missing and not extras and len(cols.ids) == n
    buckets = np.array([r.get("bucket") for r in corpus], dtype=object)
    coverage = {}
    for b in BUCKETS:
        in_b = buckets == b
        coverage[b] = {"expected": int(in_b.sum()), "observed": int((in_b & ~missing_mask).sum())}
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
    fn = METRICS_CODES[name]
    metric = None
    by_bucket: dict = {}
    thr, tol = float(quality["threshold"]), float(quality["tolerance"])
    threshold_ok = tolerance_ok = None
    gap = agreement = None
    if ids_match and not fmt_errors and n:
        code = {c: i for i, c in enumerate(cols.classes)}
        pred = np.empty(n, dtype=np.int32)
        pred[pos] = cols.pred  # corpus order (ids match: pos is a permutation)
        gold = _codes([r["label"] for r in corpus], code)
        metric = round(fn(gold, pred), 6)
        for b in BUCKETS:
            in_b = buckets == b
            if in_b.any():
                by_bucket[b] = round(fn(gold[in_b], pred[in_b]), 6)
        threshold_ok = metric >= thr
        if not threshold_ok:
            reasons.append(f"{name} {metric:.4f} < threshold {thr}")
        if reference is not None and reference_metric is not None:
            gap = round(metric - reference_metric, 6)
            ref = _codes(list(map(reference.get, expected)), code)  # None: no reference
            agreement = round(float(np.count_nonzero(ref == pred)) / n, 6)
            tolerance_ok = gap >= -tol - 1e-12
            if not tolerance_ok:
                reasons.append(f"{name} {-gap:.4f} below the reference, tolerance {tol}")
        else:
            reasons.append("reference variant has no validated pass yet: gap not computed")
    else:
        reasons.append("metric not computed: ids or format do not match the corpus")
    accepted = bool(ids_match and not fmt_errors and coverage_ok and threshold_ok and tolerance_ok)
    return Validation(
        expected_ids=n, observed_ids=len(cols.ids), duplicate_ids=len(dups),
        missing_ids=len(missing), extra_ids=len(extras), ids_match=ids_match,
        format_ok=not fmt_errors, coverage=coverage, coverage_ok=coverage_ok, metric_name=name,
        metric=metric, metric_by_bucket=by_bucket, threshold=thr, threshold_ok=threshold_ok,
        reference_metric=reference_metric, gap_to_reference=gap,
        agreement_with_reference=agreement, tolerance=tol, tolerance_ok=tolerance_ok,
        corpus_accepted=accepted, reasons=reasons,
        examples={"duplicates": dups[:5], "missing": _first(missing), "extras": _first(extras),
                  "format": fmt_errors[:5]})
