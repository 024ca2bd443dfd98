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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Iterator

import msgspec
import numpy as np

from lab.facts.errors import UserError
from lab.facts.numbers import beside
from lab.inputs.corpus import BUCKETS
from lab.orchestration.agreement import AgreementRule
from lab.passes.records import Validation

_GET_ID, _GET_LABEL = operator.itemgetter("id"), operator.itemgetter("label")
CHUNK_BYTES = 4 << 20  # bytes read per block (whole lines): memory stays bounded whatever the corpus size


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


def _line_errors(n: int, obj, labels: set | None, prob_required: bool = True) -> tuple[bool, list[str]]:
    """(keep the record, format errors) for one parsed line; ``n`` is its 1-based number."""
    if not isinstance(obj, dict) or not isinstance(obj.get("id"), str):
        return False, [f"line {n}: missing string 'id'"]
    errs = []
    if not isinstance(obj.get("pred"), str) or (labels and obj["pred"] not in labels):
        errs.append(f"line {n}: 'pred' {obj.get('pred')!r} is not a known label")
    p = obj.get("prob")
    if p is None and not prob_required:  # custom code returns labels only: prob null
        return True, errs
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        errs.append(f"line {n}: 'prob' {p!r} not a probability in [0, 1]")
    return True, errs


def _blocks(fh) -> Iterator[bytes]:
    """Blocks of whole lines of the binary file ``fh``, about CHUNK_BYTES each, without their
    last newline (a block of k lines holds k - 1 newlines; a last line without newline counts)."""
    rest = b""
    while True:
        data = fh.read(CHUNK_BYTES)
        if not data:
            if rest:
                yield rest
            return
        data = rest + data if rest else data
        cut = data.rfind(b"\n")
        if cut < 0:  # a line longer than a block: read on
            rest = data
            continue
        yield data[:cut]
        rest = data[cut + 1:]


class _Record(msgspec.Struct):
    """One well-formed prediction line (other keys are ignored, as the line-by-line reading does)."""

    id: str
    pred: str
    prob: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]


class _LabelRecord(msgspec.Struct):
    """A custom pass's line: its prob may be null (the user's code returns labels only)."""

    id: str
    pred: str
    prob: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None


_BLOCK_DECODER = msgspec.json.Decoder(list[_Record])
_LABEL_DECODER = msgspec.json.Decoder(list[_LabelRecord])
_GET_ID_ATTR, _GET_PRED_ATTR = operator.attrgetter("id"), operator.attrgetter("pred")


def _fast_columns(block: bytes, n_lines: int, labels: set | None,
                  prob_required: bool = True) -> tuple[list, list] | None:
    """(ids, preds) of the ``n_lines`` lines of ``block`` when every line is one well-formed
    record (UTF-8 JSON object, string id, pred among ``labels``, prob a number in [0, 1]),
    parsed by one msgspec call; else None (the caller re-reads the block line by line for
    exact messages). Only strict JSON passes here, so whatever passes reads the same with
    ``json.loads``."""
    try:
        text = block.decode("utf-8")  # msgspec skips unknown keys without checking their UTF-8
        objs = (_BLOCK_DECODER if prob_required else _LABEL_DECODER).decode("[" + text.replace("\n", ",") + "]")
    except (msgspec.DecodeError, ValueError, RecursionError):
        return None  # a blank line (",,"), a bad one, or a record of the wrong shape
    if len(objs) != n_lines:
        return None  # e.g. a line holding two objects
    b_ids, b_pred = list(map(_GET_ID_ATTR, objs)), list(map(_GET_PRED_ATTR, objs))
    if labels and not set(b_pred) <= labels:
        return None
    return b_ids, b_pred


def read_prediction_columns(path: Path, labels: set[str] | None, prob_required: bool = True) -> PredictionColumns:
    """Parse a predictions JSONL into columns, in blocks of about CHUNK_BYTES.

    Each line must be a UTF-8 JSON object with a string ``id``, a ``pred`` among ``labels``
    (any string when labels is None) and a ``prob`` in [0, 1]. Errors read 'line N: problem'.
    Fast path: one msgspec decode per block; a block with any bad line is re-read line by
    line with ``json.loads``, so the messages are exact. Memory: ids + 4 bytes per item + one block of objects.
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
        for block in _blocks(fh):
            k_lines = block.count(b"\n") + 1
            fast = _fast_columns(block, k_lines, labels, prob_required)
            if fast is not None:
                ids.extend(fast[0])
                codes.append(_codes(fast[1], code))
                n_lines += k_lines
                continue
            b_ids, b_pred = [], []
            for k, raw in enumerate(block.split(b"\n")):
                n = n_lines + k + 1
                try:
                    obj = json.loads(raw.rstrip(b"\r").decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    errors.append(f"line {n}: not a UTF-8 JSON object")
                    continue
                keep, errs = _line_errors(n, obj, labels, prob_required)
                errors.extend(errs)
                if keep:
                    b_ids.append(obj["id"])
                    b_pred.append(obj["pred"] if isinstance(obj.get("pred"), str) else None)
            ids.extend(b_ids)
            codes.append(_codes(b_pred, code))  # None (a non-string pred) gets a code too
            n_lines += k_lines
    pred = np.concatenate(codes) if codes else np.zeros(0, np.int32)
    return PredictionColumns(ids, pred, list(code), errors, n_lines)


def _codes(values: list, code: dict) -> np.ndarray:
    """int32 codes of labels (shape (len(values),)), extending ``code`` with labels not seen
    yet (in sorted order, so codes are deterministic)."""
    for v in sorted(set(values) - code.keys(), key=str):
        code[v] = len(code)
    return np.fromiter(map(code.__getitem__, values), np.int32, len(values))


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


class UserMetricFailed(UserError):
    """The user's metric function raised or returned something that is not a finite number."""


def user_metric_scores(metric_fn, pairs: list[tuple[list[str], list[str]]]) -> list[float]:
    """The user's metric over each (predictions, references) pair of label lists: by its
    ``scores(pairs)`` when it has one (lab.passes.tasks.custom.IsolatedMetric: every pair in one
    process of its own, with a time bound), else by calling it here for each pair (a function
    given in-process). Raises UserMetricFailed (one line)."""
    from lab.passes.tasks.custom import user_metric_value

    try:
        scores = getattr(metric_fn, "scores", None)
        if scores is not None:
            return list(scores(pairs))
        return [user_metric_value(metric_fn, p, r) for p, r in pairs]
    except ValueError as exc:
        raise UserMetricFailed(str(exc)) from None


def _first(values, limit: int = 5) -> list[str]:
    return sorted(values)[:limit]


def _positions_by_dict(expected: list[str], ids: list[str]) -> np.ndarray:
    """Corpus position of each observed id (-1: not in the corpus), through one dict."""
    position = {item_id: k for k, item_id in enumerate(expected)}
    if len(position) != len(expected):
        raise ValueError("corpus ids are not unique; read the corpus with lab.inputs.corpus.read_corpus")
    return np.fromiter(map(position.get, ids, itertools.repeat(-1)), np.int64, len(ids))


_id_hash = hash  # 64-bit string hash used to sort ids (a test swaps in a colliding one)


def align_ids(expected: list[str], ids: list[str]) -> np.ndarray:
    """Corpus position of each observed id, shape (len(ids),) int64, -1 for an id not in
    ``expected`` (the corpus ids, unique: ValueError otherwise).

    Any order: the ids' 64-bit string hashes are sorted (numpy) and matched by binary search
    of the sorted observed hashes, then every match is confirmed by comparing the strings
    themselves, so a hash collision can never pair two different ids. The rare corpus whose
    hashes are not all distinct goes through a dict of positions instead. Extra memory:
    a few int64 arrays of the corpus size, no per-item Python object.
    """
    n = len(expected)
    if ids == expected:  # the runner writes corpus order: one C-level list comparison
        return np.arange(n, dtype=np.int64)
    if not n or not ids:
        return np.full(len(ids), -1, np.int64)
    e_hash = np.fromiter(map(_id_hash, expected), np.int64, n)
    e_order = np.argsort(e_hash)
    e_sorted = e_hash[e_order]
    del e_hash
    if bool((e_sorted[1:] == e_sorted[:-1]).any()):  # duplicate ids or a true collision
        return _positions_by_dict(expected, ids)
    o_hash = np.fromiter(map(_id_hash, ids), np.int64, len(ids))
    o_order = np.argsort(o_hash)
    slot = np.empty(len(ids), np.int64)
    slot[o_order] = np.searchsorted(e_sorted, o_hash[o_order])  # sorted needles: cache-friendly
    del o_order
    np.minimum(slot, n - 1, out=slot)
    hit = e_sorted[slot] == o_hash
    pos = e_order[slot]
    del slot, o_hash, e_order, e_sorted
    # the strings themselves, compared element-wise by numpy (object arrays: 8 bytes per item)
    same = np.array(expected, dtype=object)[pos] == np.array(ids, dtype=object)
    pos[~(hit & same)] = -1  # hashes differ, or equal hashes of different strings
    return pos


def _reference_codes(reference: dict[str, str], expected: list[str], code: dict) -> np.ndarray:
    """The reference pass's class codes in corpus order, shape (len(expected),) int32; an item
    the reference lacks gets the code of None (never equal to a prediction's)."""
    ref_pos = align_ids(expected, list(reference))  # a reference read from a runner's file: corpus order
    ref = np.full(len(expected), _codes([None], code)[0], np.int32)
    known = ref_pos >= 0
    ref[ref_pos[known]] = _codes(list(reference.values()), code)[known]
    return ref


@dataclass
class IdChecks:
    """The id and coverage checks of one predictions file against the corpus (any task kind).

    ``positions``: corpus position of each observed id (-1: not in the corpus), shape (observed,);
    ``buckets``: each corpus item's bucket code (-1: none), shape (n,). ``reasons`` holds one
    line per failed check (ids, format, coverage), in that order."""

    expected: list
    n: int
    positions: np.ndarray
    buckets: np.ndarray
    duplicates: list
    missing: list
    extras: list
    ids_match: bool
    coverage: dict
    coverage_ok: bool
    reasons: list


def check_ids(corpus: list[dict], observed: list[str], fmt_errors: list[str]) -> IdChecks:
    """Ids exact (no duplicate, omission or extra) and every length bucket covered, for the
    observed ids ``observed`` of a predictions file whose format errors are ``fmt_errors``."""
    expected = list(map(_GET_ID, corpus))
    n = len(expected)
    pos = align_ids(expected, observed)
    known = pos >= 0
    counts = np.bincount(pos[known], minlength=n)
    extra_counts = Counter(i for i, k in zip(observed, known, strict=True) if not k) if not known.all() else Counter()
    dups = sorted({expected[k] for k in np.flatnonzero(counts > 1)}
                  | {i for i, c in extra_counts.items() if c > 1})
    missing_mask = counts == 0
    missing = [expected[k] for k in np.flatnonzero(missing_mask)]
    extras = list(extra_counts)
    ids_match = not dups and not missing and not extras and len(observed) == n
    bucket_code: dict = {b: k for k, b in enumerate(BUCKETS)}
    item_buckets = map(dict.get, corpus, itertools.repeat("bucket"))
    buckets = np.fromiter(map(bucket_code.get, item_buckets, itertools.repeat(-1)), np.int8, n)  # -1: none known
    in_bucket = buckets >= 0
    per_bucket = np.bincount(buckets[in_bucket], minlength=len(BUCKETS))
    seen = np.bincount(buckets[in_bucket & ~missing_mask], minlength=len(BUCKETS))
    coverage = {b: {"expected": int(per_bucket[k]), "observed": int(seen[k])} for k, b in enumerate(BUCKETS)}
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
    return IdChecks(expected, n, pos, buckets, dups, missing, extras, ids_match, coverage, coverage_ok, reasons)


# ---- agreement with the reference variant as the judged metric ([quality] metric = "agreement") ----

LABEL_AGREEMENT_RULE = "share of ids with the reference variant's label"
EMBEDDING_AGREEMENT_RULE = "per-id cosine with the reference variant's vectors: median; worst id apart"
EMBEDDING_JUDGED_RULE = ("per-id cosine with the reference variant's vectors: the lowest id's is judged (every id "
                         "must reach the threshold), the median beside it")


def generation_agreement_rule(normalisation: str) -> str:
    """What a generation pass's agreement measures (its ``agreement_rule``)."""
    return f"share of ids whose output equals the reference variant's after {normalisation}"


@dataclass(frozen=True)
class AgreementFigures:
    """A pass's per-id agreement with the reference pass, summarised (rounded to 6 decimals):
    ``value`` is the judged figure and ``by_bucket`` the same per bucket ({bucket: value}, buckets
    that hold items); ``typical`` the figure reported as ``agreement_with_reference``; for
    embeddings the lowest per-id cosine and its id (``worst``, ``worst_id``; None otherwise);
    ``differing``: labels and outputs, the ids that differ from the reference's."""

    value: float
    by_bucket: dict
    typical: float
    worst: float | None
    worst_id: str | None
    differing: tuple


def agreement_figures(per_id: np.ndarray, buckets: np.ndarray, ids: list[str], cosine: bool) -> AgreementFigures:
    """Summarise ``per_id`` (shape (n,), n >= 1, corpus order: 1.0/0.0 for an equal/different
    label or output, the cosine for an embedding, ``cosine``) by the rule of its kind. Labels and
    outputs: the share of equal ids, judged and reported. Embeddings: the lowest id's cosine is
    judged (overall and per bucket: a median would hide a third of the vectors turned around),
    the median is reported, the worst id named. ``buckets``: each item's bucket code (index into
    BUCKETS, -1: none). The one rule validation and ``archive verify`` (lab.evidence.rederive)
    both apply."""
    stat = np.min if cosine else np.mean
    by_bucket = {b: round(float(stat(per_id[buckets == k])), 6) for k, b in enumerate(BUCKETS)
                 if (buckets == k).any()}
    low = int(np.argmin(per_id))
    typical = float(np.median(per_id)) if cosine else float(np.mean(per_id))
    return AgreementFigures(round(float(stat(per_id)), 6), by_bucket, round(typical, 6),
                            round(float(per_id[low]), 6) if cosine else None, ids[low] if cosine else None,
                            () if cosine else tuple(sorted(ids[k] for k in np.flatnonzero(per_id < 1.0))))


def judged_by_agreement(quality: dict) -> bool:
    """Whether the locked [quality] judges passes by their agreement with the reference variant."""
    from lab.facts.constants import AGREEMENT

    return quality["metric"] == AGREEMENT


NO_REFERENCE_YET = "reference variant has no valid pass yet: agreement not computed"
NO_REFERENCE_GAP_YET = "reference variant has no validated pass yet: gap not computed"
NO_REFERENCE_LEFT = ("the reference variant has no valid pass: {what} not computed; fix what fails it, or name "
                     "another [quality] reference_variant (a new protocol version)")


def no_reference_left(reasons: list[str]) -> list[str]:
    """``reasons`` of a pass validated when the campaign has ended without a reference pass: the
    "not computed yet" of NO_REFERENCE_YET / NO_REFERENCE_GAP_YET become the end of it, with the fix
    (NO_REFERENCE_LEFT); the other reasons unchanged."""
    final = {NO_REFERENCE_YET: NO_REFERENCE_LEFT.format(what="agreement"),
             NO_REFERENCE_GAP_YET: NO_REFERENCE_LEFT.format(what="gap to it")}
    return [final.get(r, r) for r in reasons]


def agreement_judged_fields(fig: AgreementFigures | None, quality: dict, reasons: list[str], rule: str) -> dict:
    """The judged fields of a Validation whose metric is the agreement (``fig``; None while the
    reference variant has no valid pass, a reason is appended): the metric and its buckets are the
    agreement, judged against the threshold alone (the tolerance bounds a gap to the reference's
    metric, and the reference's agreement with itself is 1 by definition: no gap is computed)."""
    thr, tol = float(quality["threshold"]), float(quality["tolerance"])
    fields = dict(metric_name=quality["metric"], threshold=thr, tolerance=tol, reference_metric=None,
                  gap_to_reference=None, agreement_rule=rule)
    if fig is None:
        reasons.append(NO_REFERENCE_YET)
        return {**fields, "metric": None, "metric_by_bucket": {}, "threshold_ok": None, "tolerance_ok": None,
                "agreement_with_reference": None}
    ok = fig.value >= thr
    if not ok:
        reasons.append(f"{quality['metric']} {beside(fig.value, thr, 4)} < threshold {thr}")
    return {**fields, "metric": fig.value, "metric_by_bucket": fig.by_bucket, "threshold_ok": ok, "tolerance_ok": True,
            "agreement_with_reference": fig.typical, "agreement_worst": fig.worst, "agreement_worst_id": fig.worst_id}


def agreement_rule_fields(per_id: np.ndarray, ids: list[str], quality: dict, kind: str, reasons: list[str]) -> dict:
    """The agreement rule (lab.orchestration.agreement) applied to one pass: ``per_id`` in corpus
    order (1.0/0.0 for an equal/different label or output, the cosine for an embedding), ``ids``
    the corpus ids, the rule the locked [quality] table ``quality`` gives a task of ``kind``. Returns
    the Validation's ``agreement_*`` fields; a pass beyond the rule gets its reason in ``reasons``
    ("not the same ML result: 4 of 17 labels differ from batch/batch_size=1, allowed 0.05 ...")."""
    check = AgreementRule.of(quality, kind).judge(per_id, ids)
    if not check.ok:
        reasons.append(check.reason(quality.get("reference_variant") or "the reference pass"))
    return check.fields()


def validate_pass(corpus: list[dict], predictions_path: Path, quality: dict,
                  labels: set[str] | None = None,
                  reference: dict[str, str] | None = None,
                  reference_metric: float | None = None, prob_required: bool = True,
                  metric_fn=None, kind: str = "classification") -> Validation:
    """Validate a pass's predictions against the corpus and the locked quality rules.

    Beside the threshold, every pass compared with a reference pass is judged by the agreement
    rule of ``kind`` ("classification" or "custom": the share of ids whose label differs from the
    reference's, agreement_rule_fields); beyond it, the pass is rejected.

    With [quality] metric = "agreement" (judged_by_agreement) the judged metric is the share of
    ids whose label equals the reference pass's, per bucket too, against the threshold alone.
    ``prob_required`` False (a custom task): a line's ``prob`` may be null. ``metric_fn``: the
    user's own metric ([quality] metric = "file.py:function", lab.passes.tasks.custom.load_function),
    called as ``metric_fn(predictions, references)`` with label lists in corpus order and
    judged in its declared ``quality["direction"]``; an exception or a non-finite value leaves
    the metric empty with the reason.
    ``corpus``: items with id, label, bucket (ids unique: ValueError otherwise). ``quality``:
    metric, threshold, tolerance. ``reference``: {id: pred} of the reference pass (None
    while it has not run); ``reference_metric``: its metric. Never raises for bad
    predictions: they fail checks. Vectorised: ids are matched in any order by
    ``align_ids`` (sorted hashes, confirmed string by string), metrics come from class-code
    counts (numpy), so 1,000,000 predictions validate in under 3 s in corpus or shuffled
    order and memory holds the ids, the labels and a few integer arrays (measured by
    scripts/bench_validation.py).
    """
    cols = read_prediction_columns(Path(predictions_path), labels, prob_required)
    fmt_errors = cols.errors
    ids = check_ids(corpus, cols.ids, fmt_errors)
    expected, n, pos, buckets = ids.expected, ids.n, ids.positions, ids.buckets
    ids_match, coverage, coverage_ok, reasons = ids.ids_match, ids.coverage, ids.coverage_ok, ids.reasons
    dups, missing, extras = ids.duplicates, ids.missing, ids.extras
    name = quality["metric"]
    higher = quality.get("direction") in (None, "higher")
    metric = None
    by_bucket: dict = {}
    thr, tol = float(quality["threshold"]), float(quality["tolerance"])
    threshold_ok = tolerance_ok = None
    gap = agreement = None
    rule: dict = {}
    if judged_by_agreement(quality):
        if not (ids_match and not fmt_errors and n):
            reasons.append("metric not computed: ids or format do not match the corpus")
            return _judged(ids, len(cols.ids), fmt_errors, reasons=reasons, **_unjudged(quality, LABEL_AGREEMENT_RULE))
        code = {c: i for i, c in enumerate(cols.classes)}
        pred = np.empty(n, dtype=np.int32)
        pred[pos] = cols.pred
        per_id = None if reference is None else (_reference_codes(reference, expected, code) == pred).astype(np.float64)
        fig = None if per_id is None else agreement_figures(per_id, buckets, expected, False)
        differing = {"differing_from_reference": list(fig.differing[:5]) if fig else []}
        judged = agreement_judged_fields(fig, quality, reasons, LABEL_AGREEMENT_RULE)
        rule = {} if per_id is None else agreement_rule_fields(per_id, expected, quality, kind, reasons)
        return _judged(ids, len(cols.ids), fmt_errors, differing, reasons=reasons, **judged, **rule)
    if ids_match and not fmt_errors and n:
        code = {c: i for i, c in enumerate(cols.classes)}
        pred = np.empty(n, dtype=np.int32)
        pred[pos] = cols.pred  # corpus order (ids match: pos is a permutation)
        gold = _codes(list(map(_GET_LABEL, corpus)), code)
        subsets = [(None, slice(None))] + [(b, m) for b, m in ((b, buckets == k) for k, b in enumerate(BUCKETS))
                                           if m.any()]  # the whole corpus, then each bucket it has
        if metric_fn is None:
            values = [METRICS_CODES[name](gold[m], pred[m]) for _, m in subsets]
        else:  # the user's function: every subset in one call, label lists in corpus order
            names = {i: c for c, i in code.items()}
            try:
                values = user_metric_scores(metric_fn, [([names[int(i)] for i in pred[m]],
                                                         [names[int(i)] for i in gold[m]]) for _, m in subsets])
            except UserMetricFailed as exc:
                values = []
                reasons.append(str(exc))
        if values:
            metric = round(values[0], 6)
            by_bucket = {b: round(v, 6) for (b, _), v in zip(subsets[1:], values[1:], strict=True)}
    agree_with: np.ndarray | None = None
    if reference is not None and ids_match and not fmt_errors and n:
        agree_with = (_reference_codes(reference, expected, code) == pred).astype(np.float64)
    if metric is not None:
        threshold_ok = metric >= thr if higher else metric <= thr
        if not threshold_ok:
            reasons.append(f"{name} {beside(metric, thr, 4)} {'<' if higher else '>'} threshold {thr}")
        if reference is not None and reference_metric is not None:
            gap = round(metric - reference_metric, 6)
            assert agree_with is not None  # a metric: ids and format match
            agreement = round(float(agree_with.mean()), 6)
            tolerance_ok = gap >= -tol - 1e-12 if higher else gap <= tol + 1e-12
            if not tolerance_ok:
                reasons.append(f"{name} {beside(abs(gap), tol, 4)} {'below' if higher else 'above'} "
                               "the reference, "
                               f"tolerance {tol}")
        else:
            reasons.append(NO_REFERENCE_GAP_YET)
    elif not (ids_match and not fmt_errors and n):
        reasons.append("metric not computed: ids or format do not match the corpus")
    if agree_with is not None:
        rule = agreement_rule_fields(agree_with, expected, quality, kind, reasons)
    accepted = bool(ids_match and not fmt_errors and coverage_ok and threshold_ok and tolerance_ok
                    and rule.get("agreement_ok") is not False)
    return Validation(
        expected_ids=n, observed_ids=len(cols.ids), duplicate_ids=len(dups),
        missing_ids=len(missing), extra_ids=len(extras), ids_match=ids_match,
        format_ok=not fmt_errors, coverage=coverage, coverage_ok=coverage_ok, metric_name=name,
        metric=metric, metric_by_bucket=by_bucket, threshold=thr, threshold_ok=threshold_ok,
        reference_metric=reference_metric, gap_to_reference=gap,
        agreement_with_reference=agreement, tolerance=tol, tolerance_ok=tolerance_ok,
        corpus_accepted=accepted, reasons=reasons,
        examples={"duplicates": dups[:5], "missing": _first(missing), "extras": _first(extras),
                  "format": fmt_errors[:5]}, **rule)


# ---- embedding passes (lab.passes.tasks.embedding writes them) -------------------------------------

class _VectorRecord(msgspec.Struct):
    """One embedding prediction line: its id and its row in vectors.npy (other keys ignored)."""

    id: str
    row: int


_VECTOR_LINE = msgspec.json.Decoder(_VectorRecord)


def _within_tolerance(name: str, gap: float, tol: float, reasons: list[str]) -> bool:
    """Whether a higher-is-better metric's ``gap`` to the reference (metric - reference) is within
    ``tol`` below it; a reason is appended to ``reasons`` when not."""
    ok = gap >= -tol - 1e-12
    if not ok:
        reasons.append(f"{name} {beside(-gap, tol, 4)} below the reference, tolerance {tol}")
    return ok


def _judged(c: IdChecks, observed: int, fmt_errors: list[str], examples: dict | None = None,
            **fields) -> Validation:
    """The Validation of an embedding or generation pass: the id checks ``c`` (``observed`` ids
    read, ``fmt_errors``) and the judged ``fields`` (metric, threshold, reference, ...); the
    corpus is accepted when ids, format, coverage, threshold, tolerance and the agreement rule (when
    checked: ``agreement_ok`` in ``fields``) all hold."""
    accepted = bool(c.ids_match and not fmt_errors and c.coverage_ok and fields["threshold_ok"]
                    and fields["tolerance_ok"] and fields.get("agreement_ok") is not False)
    return Validation(
        expected_ids=c.n, observed_ids=observed, duplicate_ids=len(c.duplicates), missing_ids=len(c.missing),
        extra_ids=len(c.extras), ids_match=c.ids_match, format_ok=not fmt_errors, coverage=c.coverage,
        coverage_ok=c.coverage_ok, corpus_accepted=accepted,
        examples={"duplicates": c.duplicates[:5], "missing": _first(c.missing), "extras": _first(c.extras),
                  "format": fmt_errors[:5], **(examples or {})}, **fields)


def _unjudged(quality: dict, rule: str) -> dict:
    """The judged fields of a pass whose metric could not be computed (ids or format wrong)."""
    return dict(metric_name=quality["metric"], metric=None, metric_by_bucket={}, threshold=float(quality["threshold"]),
                threshold_ok=None, reference_metric=None, gap_to_reference=None, agreement_with_reference=None,
                tolerance=float(quality["tolerance"]), tolerance_ok=None, agreement_rule=rule)


def read_embedding(predictions_path: Path) -> tuple[list[str], np.ndarray | None, list[str]]:
    """(ids, vectors, format errors) of an embedding pass: ``predictions.jsonl`` lines
    ``{"id", "row", ...}`` where line k has row k, and ``vectors.npy`` beside it, a float16
    array of shape (lines, width) with finite values (lab.passes.tasks.embedding). ``vectors`` is
    None when the file is absent or unreadable (an error says why)."""
    from lab.passes.tasks.embedding import VECTORS_FILE
    from lab.passes.tasks.embedding_metrics import load_vectors

    path = Path(predictions_path)
    if path.is_symlink() or not path.is_file():
        return [], None, ["no predictions file" if not path.is_symlink() else "predictions file is a symbolic link"]
    ids: list[str] = []
    errors: list[str] = []
    lines = path.read_bytes().splitlines()
    for n, raw in enumerate(lines, start=1):
        try:
            rec = _VECTOR_LINE.decode(raw)
        except (msgspec.DecodeError, ValueError):
            errors.append(f"line {n}: not a JSON object with string 'id' and integer 'row'")
            continue
        if rec.row != n - 1:
            errors.append(f"line {n}: 'row' {rec.row} is not its line's row {n - 1} in {VECTORS_FILE}")
        ids.append(rec.id)
    vec_path = path.parent / VECTORS_FILE
    if vec_path.is_symlink() or not vec_path.is_file():
        return ids, None, errors + [f"no {VECTORS_FILE} beside the predictions"]
    try:
        vectors = load_vectors(vec_path.read_bytes())
    except ValueError as exc:
        return ids, None, errors + [f"{VECTORS_FILE}: {exc}"]
    if len(vectors) != len(lines):
        errors.append(f"{VECTORS_FILE} holds {len(vectors)} vectors for {len(lines)} prediction lines")
    elif not np.isfinite(vectors).all():
        errors.append(f"{VECTORS_FILE}: non-finite values")
    return ids, vectors, errors


def corpus_vectors(corpus: list[dict], predictions_path: Path) -> np.ndarray | None:
    """An embedding pass's vectors in corpus order (float32, (n, width)), or None when its ids
    or format do not match the corpus (the reference is taken only from a complete pass)."""
    ids, vectors, errors = read_embedding(predictions_path)
    checks = check_ids(corpus, ids, errors)
    if errors or not checks.ids_match or vectors is None:
        return None
    out = np.empty((checks.n, vectors.shape[1]), np.float32)
    out[checks.positions] = vectors
    return out


def validate_embedding_pass(corpus: list[dict], predictions_path: Path, quality: dict,
                            reference: np.ndarray | None = None,
                            reference_metric: float | None = None) -> Validation:
    """Validate an embedding pass: ids exact, format (lines and vectors.npy, read_embedding),
    bucket coverage, the label-based retrieval metric from the vectors alone
    (lab.passes.tasks.embedding_metrics.nn_accuracy, overall and per bucket) against the threshold,
    its gap to the reference variant's within the tolerance, and the per-id cosine agreement
    with the reference's vectors (``reference``: corpus order, (n, width); the median is
    ``agreement_with_reference``, the worst id is named). With [quality] metric = "agreement"
    (judged_by_agreement) the lowest id's cosine is the judged metric, per bucket too, against the
    threshold alone, the median beside it (agreement_figures, agreement_judged_fields). Never
    raises for bad predictions."""
    from lab.passes.tasks.embedding_metrics import cosine_agreement, nn_accuracy

    ids, vectors, fmt_errors = read_embedding(Path(predictions_path))
    c = check_ids(corpus, ids, fmt_errors)
    reasons = list(c.reasons)
    name = quality["metric"]
    thr, tol = float(quality["threshold"]), float(quality["tolerance"])
    metric = gap = agreement = worst = None
    worst_id = None
    threshold_ok = tolerance_ok = None
    by_bucket: dict = {}
    rule: dict = {}
    labels = [r.get("label") for r in corpus]
    if judged_by_agreement(quality):
        if not (c.ids_match and not fmt_errors and vectors is not None and c.n):
            reasons.append("metric not computed: ids or format do not match the corpus")
            return _judged(c, len(ids), fmt_errors, reasons=reasons, **_unjudged(quality, EMBEDDING_JUDGED_RULE))
        ordered = np.empty((c.n, vectors.shape[1]), np.float32)
        ordered[c.positions] = vectors
        cos = None if reference is None else cosine_agreement(ordered, reference)
        fig = None if cos is None else agreement_figures(cos, c.buckets, c.expected, True)
        judged = agreement_judged_fields(fig, quality, reasons, EMBEDDING_JUDGED_RULE)
        rule = {} if cos is None else agreement_rule_fields(cos, c.expected, quality, "embedding", reasons)
        return _judged(c, len(ids), fmt_errors, reasons=reasons, **judged, **rule)
    if c.ids_match and not fmt_errors and vectors is not None and c.n:
        ordered = np.empty((c.n, vectors.shape[1]), np.float32)
        ordered[c.positions] = vectors
        if any(lab is None for lab in labels):
            reasons.append(f"{name} not computed: the corpus has items without a label")
        else:
            value = nn_accuracy(ordered, labels)
            metric = None if value is None else round(value, 6)
            for k, b in enumerate(BUCKETS):
                in_b = c.buckets == k
                if in_b.any():
                    v = nn_accuracy(ordered, labels, in_b)
                    by_bucket[b] = None if v is None else round(v, 6)
        if metric is not None:
            threshold_ok = metric >= thr
            if not threshold_ok:
                reasons.append(f"{name} {beside(metric, thr, 4)} < threshold {thr}")
        cos = None if reference is None else cosine_agreement(ordered, reference)
        if cos is not None and reference_metric is not None and metric is not None:
            gap = round(metric - reference_metric, 6)
            agreement, worst = round(float(np.median(cos)), 6), round(float(cos.min()), 6)
            worst_id = c.expected[int(np.argmin(cos))]
            tolerance_ok = _within_tolerance(name, gap, tol, reasons)
        elif metric is not None:
            reasons.append(NO_REFERENCE_GAP_YET)
        if cos is not None:
            rule = agreement_rule_fields(cos, c.expected, quality, "embedding", reasons)
    else:
        reasons.append("metric not computed: ids or format do not match the corpus")
    return _judged(c, len(ids), fmt_errors, metric_name=name, metric=metric, metric_by_bucket=by_bucket, threshold=thr,
                   threshold_ok=threshold_ok, reference_metric=reference_metric, gap_to_reference=gap,
                   agreement_with_reference=agreement, tolerance=tol, tolerance_ok=tolerance_ok, reasons=reasons,
                   agreement_worst=worst, agreement_worst_id=worst_id, agreement_rule=EMBEDDING_AGREEMENT_RULE, **rule)


# ---- generation passes (lab.passes.tasks.generation writes them) -----------------------------------

class _GeneratedRecord(msgspec.Struct):
    """One generation prediction line (lab.passes.tasks.generation; other keys ignored)."""

    id: str
    output: str
    input_tokens: Annotated[int, msgspec.Meta(ge=1)]
    output_tokens: Annotated[int, msgspec.Meta(ge=0)]
    stopped_by: str


_GENERATED_LINE = msgspec.json.Decoder(_GeneratedRecord)


def read_generation(predictions_path: Path) -> tuple[list[str], list[str], list[str]]:
    """(ids, outputs, format errors) of a generation pass's ``predictions.jsonl``: each line
    ``{"id", "output", "input_tokens" >= 1, "output_tokens" >= 0, "stopped_by"}`` with
    ``stopped_by`` among lab.passes.tasks.generation_core.STOPPED_BY. Errors read 'line N: problem'."""
    from lab.passes.tasks.generation_core import STOPPED_BY

    path = Path(predictions_path)
    if path.is_symlink() or not path.is_file():
        return [], [], ["no predictions file" if not path.is_symlink() else "predictions file is a symbolic link"]
    ids: list[str] = []
    outputs: list[str] = []
    errors: list[str] = []
    for n, raw in enumerate(path.read_bytes().splitlines(), start=1):
        try:
            rec = _GENERATED_LINE.decode(raw)
        except (msgspec.DecodeError, ValueError):
            errors.append(f"line {n}: not a JSON object with string 'id' and 'output' and token counts")
            continue
        if rec.stopped_by not in STOPPED_BY:
            errors.append(f"line {n}: 'stopped_by' {rec.stopped_by!r} is not one of {', '.join(STOPPED_BY)}")
        ids.append(rec.id)
        outputs.append(rec.output)
    return ids, outputs, errors


def corpus_outputs(corpus: list[dict], predictions_path: Path) -> dict[str, str] | None:
    """A generation pass's {id: output}, or None when its ids or format do not match the corpus
    (the reference is taken only from a complete pass)."""
    ids, outputs, errors = read_generation(predictions_path)
    if errors or not check_ids(corpus, ids, errors).ids_match:
        return None
    return dict(zip(ids, outputs, strict=True))


def validate_generation_pass(corpus: list[dict], predictions_path: Path, quality: dict, normalisation: str,
                             reference: dict[str, str] | None = None,
                             reference_metric: float | None = None) -> Validation:
    """Validate a generation pass: ids exact, format (read_generation), bucket coverage, the
    metric ``quality["metric"]`` against the reference answers (each item's label: the demo's
    newsgroup name) after ``normalisation`` (lab.passes.tasks.text_metrics.generation_metric,
    overall and per bucket) against the threshold, the other generation metric reported beside
    it (``second_metric``), the gap to the reference variant's metric within the tolerance,
    and the per-id agreement with the reference variant's outputs (``reference``: {id: output};
    the share of ids with equal outputs after normalisation, text_metrics.agreement; the first
    differing ids in ``examples``). With [quality] metric = "agreement" (judged_by_agreement:
    the one metric a corpus without labels accepts at lock) that share is the judged metric itself,
    per bucket too, against the threshold alone. Never raises for bad predictions."""
    from lab.orchestration.config import GENERATION_METRICS
    from lab.passes.tasks.text_metrics import agreement as output_agreement
    from lab.passes.tasks.text_metrics import generation_metric, output_equality

    ids, outputs, fmt_errors = read_generation(Path(predictions_path))
    c = check_ids(corpus, ids, fmt_errors)
    reasons = list(c.reasons)
    name = quality["metric"]
    second_name = next(m for m in GENERATION_METRICS if m != name)
    thr, tol = float(quality["threshold"]), float(quality["tolerance"])
    metric = second = gap = agreement = None
    threshold_ok = tolerance_ok = None
    by_bucket: dict = {}
    differing: tuple[str, ...] = ()
    checked: dict = {}
    if judged_by_agreement(quality):
        rule = generation_agreement_rule(normalisation)
        if not (c.ids_match and not fmt_errors and c.n):
            reasons.append("metric not computed: ids or format do not match the corpus")
            return _judged(c, len(ids), fmt_errors, reasons=reasons, **_unjudged(quality, rule))
        same = None if reference is None else output_equality(dict(zip(ids, outputs, strict=True)), reference,
                                                              c.expected, normalisation)
        fig = None if same is None else agreement_figures(same, c.buckets, c.expected, False)
        judged = agreement_judged_fields(fig, quality, reasons, rule)
        checked = {} if same is None else agreement_rule_fields(same, c.expected, quality, "generation", reasons)
        return _judged(c, len(ids), fmt_errors, {"differing_from_reference": list(fig.differing[:5]) if fig else []},
                       reasons=reasons, **judged, **checked)
    if c.ids_match and not fmt_errors and c.n:
        by_id = dict(zip(ids, outputs, strict=True))
        ordered = [by_id[i] for i in c.expected]
        labels = [r.get("label") for r in corpus]
        if any(lab is None for lab in labels):
            reasons.append(f"{name} not computed: the corpus has items without a label (reference answer)")
        else:
            refs = [str(lab) for lab in labels]
            metric = round(generation_metric(name, ordered, refs, normalisation), 6)
            second = round(generation_metric(second_name, ordered, refs, normalisation), 6)
            for k, b in enumerate(BUCKETS):
                sub = np.flatnonzero(c.buckets == k)
                if len(sub):
                    by_bucket[b] = round(generation_metric(name, [ordered[i] for i in sub],
                                                           [refs[i] for i in sub], normalisation), 6)
            threshold_ok = metric >= thr
            if not threshold_ok:
                reasons.append(f"{name} {beside(metric, thr, 4)} < threshold {thr}")
        if reference is not None and reference_metric is not None and metric is not None:
            gap = round(metric - reference_metric, 6)
            agree = output_agreement(by_id, reference, normalisation)
            agreement, differing = round(agree.share, 6), agree.differing_ids
            tolerance_ok = _within_tolerance(name, gap, tol, reasons)
        elif metric is not None:
            reasons.append(NO_REFERENCE_GAP_YET)
        if reference is not None:
            checked = agreement_rule_fields(output_equality(by_id, reference, c.expected, normalisation),
                                            c.expected, quality, "generation", reasons)
    else:
        reasons.append("metric not computed: ids or format do not match the corpus")
    return _judged(c, len(ids), fmt_errors, {"differing_from_reference": list(differing[:5])}, metric_name=name,
                   metric=metric, metric_by_bucket=by_bucket, threshold=thr, threshold_ok=threshold_ok,
                   reference_metric=reference_metric, gap_to_reference=gap, agreement_with_reference=agreement,
                   tolerance=tol, tolerance_ok=tolerance_ok, reasons=reasons,
                   agreement_rule=generation_agreement_rule(normalisation),
                   second_metric_name=second_name if metric is not None else None, second_metric=second, **checked)
