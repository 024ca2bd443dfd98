"""Re-derivation for ``archive verify``: the journal against the raw table, each row's
predictions sha256 against the file and its ``result.json``, each row's metric recomputed from
its predictions and the archived gold labels; for a multi-card pass, its cards' records and
predictions against its merged predictions. Works on the members one forward pass over the
archive kept (lab.evidence.verify); every problem is one line naming the pass.
"""

from __future__ import annotations

import json
import sqlite3

import msgspec

from lab.evidence.format import JOURNAL, ArchiveError, skipped_missing
from lab.evidence.members import GoldLine, PlanSlot, RecordFiles, TaskTable, as_record, parse_record, plan_slots
from lab.evidence.served import PredictionLine, check_served
from lab.facts.constants import AGREEMENT
from lab.facts.errors import LabError
from lab.kinds import KINDS, task_kind
from lab.kinds.kind import RECORD_FIELDS, TEXT, VECTOR, TaskKind
from lab.orchestration.config import EMBEDDING_METRICS, GENERATION_METRICS
from lab.orchestration.journal import Journal, JournalVersion, attempt_record
from lab.passes.events import FILLS_SLOT, PassStatus
from lab.passes.records import Attempt
from lab.report.raw_row import RawRow

GOLD_LABELS = "report/gold_labels.jsonl"
BUCKETS = ("short", "medium", "long")
TOLERANCE = 1e-6  # metrics are stored rounded to 6 decimals


def member_text(scan, rel: str) -> str:
    try:
        return scan.kept[rel].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArchiveError(f"{rel}: not UTF-8 (byte {exc.start}); the archive was altered or damaged") from None


def member_object(scan, rel: str) -> dict | None:
    """The member ``rel`` parsed as a JSON object, or None when it is not one."""
    try:
        value = json.loads(member_text(scan, rel))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


JournalRead = tuple[list[Attempt], list[PlanSlot], set[str]]
"""What read_journal gives: the typed attempts, the plan's slots, the pass ids of damaged attempt rows."""


def read_journal(scan, problems: list[str]) -> JournalRead | None:
    """(typed attempts, plan rows, pass ids whose attempt row is damaged) of the archived journal,
    read without writing to it; each row decoded on its own (lab.orchestration.journal.attempt_record),
    a damaged one named in ``problems``. None (with a problem) when there is no readable journal."""
    if scan.journal is None:
        problems.append(f"{JOURNAL} missing: the journal's attempts cannot be compared with the raw table")
        return None
    try:
        j = Journal.open_read_only(scan.journal)
        try:
            rows, plan = j.attempt_rows(), j.plan()
        finally:
            j.close()
    except JournalVersion as exc:
        problems.append(f"{JOURNAL}: {exc}")
        return None
    except sqlite3.Error as exc:
        problems.append(f"{JOURNAL}: not a readable campaign journal ({exc}); empty or damaged")
        return None
    attempts, damaged = [], set()
    for row in rows:
        try:
            attempts.append(attempt_record(row))
        except msgspec.DecodeError as exc:  # not JSON, or not the record (ValidationError)
            damaged.add(row["pass_id"])
            problems.append(f"pass {row['pass_id']}: its attempt in the journal is not a pass record "
                            f"({type(exc).__name__}: {exc})")
    return attempts, plan_slots(plan), damaged


def compare_journal(attempts: list[Attempt], plan: list[PlanSlot], damaged: set[str], rows: list[RawRow],
                    partial: bool, problems: list[str]) -> None:
    """The journal's attempts against the raw table's rows (lab.report.raw_row): one row per attempt,
    the same status, items completed, acceptance and metric; unless ``partial``, no attempt left
    running and every planned slot finished. ``damaged``: pass ids read_journal already named."""
    by_row = {r.pass_id: r for r in rows}
    by_att = {a.pass_id: a for a in attempts}
    for pid in sorted(set(by_att) - set(by_row), key=str):
        problems.append(f"pass {pid}: in the journal but not in the raw table")
    for pid in sorted(set(by_row) - set(by_att) - damaged, key=str):
        problems.append(f"pass {pid}: in the raw table but not in the journal")
    for pid in sorted(set(by_row) & set(by_att), key=str):
        a, r = by_att[pid], by_row[pid]
        if a.status != r.status:
            problems.append(f"pass {pid}: status {r.status!r} in the raw table, {a.status!r} in the journal")
        if a.items_completed != r.items_completed:
            problems.append(f"pass {pid}: {_shown(r.items_completed, '')} items completed in the raw table, "
                            f"{a.items_completed} in the journal")
        accepted = a.validation is not None and a.validation.corpus_accepted
        metric = a.validation.metric if a.validation is not None else None
        if accepted != (False if r.corpus_accepted is None else r.corpus_accepted):
            problems.append(f"pass {pid}: corpus_accepted {_shown(r.corpus_accepted)} in the raw table, "
                            f"{accepted} in the journal")
        if not _same_metric(metric, r.metric):
            problems.append(f"pass {pid}: metric {_shown(r.metric)} in the raw table, {metric} in the journal")
    problems.extend(_search_skips(plan, attempts))
    if partial:
        return
    done = {a.seq for a in attempts if a.status in FILLS_SLOT}
    for a in attempts:
        if a.status == PassStatus.RUNNING:
            problems.append(f"pass {a.pass_id}: still 'running' in the journal of an archive not marked partial")
    missing = [p.seq for p in plan if p.seq not in done]
    if missing:
        problems.append(f"{len(missing)} planned slot(s) without a finished attempt (first seq {missing[0]}) in an "
                        "archive not marked partial")


def _search_skips(plan: list[PlanSlot], attempts: list[Attempt]) -> list[str]:
    """Every SKIPPED row re-derived by the rate search's rule (lab.orchestration.search) from the
    plan and the attempts: one problem per skip the rule does not give."""
    from lab.orchestration.journal import plan_record
    from lab.orchestration.search import unjustified_skips

    if not any(a.status == PassStatus.SKIPPED for a in attempts):
        return []
    try:
        planned = [plan_record({"seq": p.seq, "repetition": p.repetition, "position": p.position,
                                "variant_json": p.variant_json}) for p in plan]
    except msgspec.DecodeError as exc:  # not JSON, or not the record (ValidationError)
        return [f"the journal's plan is not a plan of variants ({type(exc).__name__}: {exc}); its skipped "
                "slots cannot be re-derived"]
    return unjustified_skips(planned, attempts)


def _shown(cell, empty: str = "empty") -> str:
    """A raw-table cell (lab.report.raw_row) as a problem line quotes it: as the table holds it,
    ``empty`` for an empty cell."""
    return empty if cell is None or cell == "" else str(cell)


def _number(v) -> float | str | None:
    if v in (None, ""):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)  # not a number: never equal to a recomputed metric


def _same_metric(a, b) -> bool:
    a, b = _number(a), _number(b)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= TOLERANCE
    return a is None and b is None


def predictions_by_id(scan, rel: str) -> dict[str, str] | None:
    """{id: pred} of a predictions file; None when a line is not a JSON object with id and
    pred, or an id repeats."""
    out: dict[str, str] = {}
    for line in member_text(scan, rel).splitlines():
        try:
            rec = prediction_line(line)
        except (json.JSONDecodeError, msgspec.ValidationError):
            return None
        if rec.pred is None or rec.id in out:
            return None
        out[rec.id] = rec.pred
    return out


def prediction_line(line: str) -> PredictionLine:
    """One predictions.jsonl line, parsed once (as validation's json reads it) into its record;
    json.JSONDecodeError when it is no JSON, msgspec.ValidationError when it is no object with a
    string id or a field has the wrong type."""
    return msgspec.convert(json.loads(line), PredictionLine)


def read_gold(scan, problems: list[str]) -> dict[str, tuple[str | None, str]] | None:
    """{id: (label, bucket)} of the archived corpus in its order (label None: a corpus without
    labels); None, with a problem, when the file is missing or a line is malformed."""
    if GOLD_LABELS not in scan.kept:
        problems.append(f"{GOLD_LABELS} missing: metrics cannot be recomputed from the predictions")
        return None
    gold = {}
    for n, line in enumerate(member_text(scan, GOLD_LABELS).splitlines(), start=1):
        try:
            rec = msgspec.convert(json.loads(line), GoldLine)
            gold[rec.id] = (rec.label, rec.bucket or "")
        except (json.JSONDecodeError, msgspec.ValidationError):
            problems.append(f"{GOLD_LABELS} line {n}: not a JSON object with string id and label (null: a corpus "
                            "without labels)")
            return None
    return gold


def _check_metric(pid: str, row: RawRow, preds: dict[str, str], gold: dict, problems: list[str],
                  user_scores: dict | None = None) -> float | None:
    """Compare the row's metric columns with the ones recomputed (a user's own metric: from
    ``user_scores``, user_metric_scores); returns the recomputed metric."""
    from lab.orchestration.validate import METRICS

    claimed = row.metric
    if set(preds) != set(gold):
        if claimed is not None:
            problems.append(f"pass {pid}: metric {claimed} given, but its predictions do not cover exactly the "
                            "corpus's ids")
        return None
    if claimed is None and not (row.ids_match is True and row.format_ok is True):
        return None  # no metric claimed for predictions the validation refused
    name = row.metric_name or ""
    fn = METRICS.get(name)
    if fn is None and ":" in name:
        if user_scores is None:  # not re-derived without the user's opt-in: said once by verify_archive
            raise MetricNotRederived(name)
        return _compare_columns(pid, row, user_scores.get(pid, {}), problems)
    if fn is None:
        if claimed is not None:
            problems.append(f"pass {pid}: unknown metric name {row.metric_name!r}")
        return None
    ids = sorted(gold)
    values = {col: round(fn([gold[i][0] for i in sub], [preds[i] for i in sub]), 6) if sub else None
              for col, sub in metric_subsets(ids, gold)}
    return _compare_columns(pid, row, values, problems)


def metric_subsets(ids: list[str], gold: dict) -> list[tuple[str, list[str]]]:
    """(raw-table column, ids in ``ids``' order) for the metric and each bucket's metric."""
    return [("metric", ids)] + [(f"metric_{b}", [i for i in ids if gold[i][1] == b]) for b in BUCKETS]


def _compare_columns(pid: str, row: RawRow, values: dict, problems: list[str],
                     source: str = "its predictions and the gold labels") -> float | None:
    """Each metric column of ``row`` (its cells as the table holds them) against its recomputed
    value in ``values`` ({column: value or None}), a mismatch named with what it was recomputed
    from (``source``); returns the overall metric recomputed (``values``' "metric")."""
    cells = row.cells
    for col, value in values.items():
        if col in cells and not _same_metric(value, cells[col]):
            problems.append(f"pass {pid}: {col} {cells[col] or 'empty'} in the raw table, {value} recomputed "
                            f"from {source}")
    return values.get("metric")


def check_acceptance(row: RawRow, recomputed: float | None, threshold: float | None, problems: list[str],
                     higher: bool = True, metric_rederived: bool = True) -> None:
    """A row marked accepted must be an ok pass whose recomputed metric meets the locked threshold
    (``higher``: the [quality] direction, higher is better; else lower is). ``metric_rederived``
    False (a user's metric without the opt-in): status and threshold only."""
    if not row.accepted:
        return
    pid = row.pass_id
    if row.status != PassStatus.OK:
        problems.append(f"pass {pid}: marked accepted with status {row.status!r}")
    if threshold is not None and not _same_metric(row.threshold, threshold):
        problems.append(f"pass {pid}: threshold {_shown(row.threshold)} in the raw table, {threshold} in the "
                        "locked campaign file")
    if not metric_rederived:
        return
    if recomputed is None:
        problems.append(f"pass {pid}: marked accepted, but no metric can be recomputed from its predictions")
    elif threshold is not None and (recomputed < threshold if higher else recomputed > threshold):
        problems.append(f"pass {pid}: marked accepted, but its recomputed metric {recomputed} is "
                        f"{'below' if higher else 'above'} the locked threshold {threshold}")


def check_cards(pid: str, scan, per_card: list, pred_rel: str, problems: list[str], vectors: bool = False) -> None:
    """A multi-card pass (lab.passes.multicard): each card's record and predictions are in the
    archive, each card's predictions match the sha256 its record gives, and the pass's
    predictions file is exactly the merge of its cards' lines (as a multiset of lines); an
    embedding pass (``vectors``): its lines and vectors against its cards' lines and vector
    shards (lab.evidence.card_vectors.check_card_vectors)."""
    merged: list[str] = []
    found: list[tuple] = []  # (rank, record, lines) of each card whose files are here
    for c in per_card:
        entry = as_record(c, RecordFiles)
        rank = entry.card if entry is not None else None
        rec_rel, card_pred = f"passes/{pid}/cards/card{rank}.json", f"passes/{pid}/cards/card{rank}.predictions.jsonl"
        if rec_rel not in scan.kept:
            problems.append(skipped_missing(f"pass {pid}", f"card {rank}'s check", rec_rel))
            continue
        rec = parse_record(member_text(scan, rec_rel), RecordFiles)
        if rec is None:
            problems.append(f"pass {pid}: {rec_rel} is not a JSON object")
            continue
        if rec.predictions_sha256 and scan.sha.get(card_pred) != rec.predictions_sha256:
            problems.append(f"pass {pid}: card {rank}'s predictions sha256 differs from the one its record gives")
        if card_pred in scan.kept:
            merged += member_text(scan, card_pred).splitlines()
            found.append((rank, rec, member_text(scan, card_pred).splitlines()))
    if vectors:
        from lab.evidence.card_vectors import check_card_vectors

        if len(found) == len(per_card):  # else a card's files are missing, said above
            check_card_vectors(pid, scan, found, pred_rel, member_text(scan, pred_rel).splitlines(), problems)
    elif sorted(merged) != sorted(member_text(scan, pred_rel).splitlines()):
        problems.append(f"pass {pid}: its predictions are not the merge of its cards' predictions "
                        "(cards/card<r>.predictions.jsonl)")


class MemberMissing(LabError):
    """A member a pass's metric is recomputed from is not in the archive: its check was skipped
    (said once, by ``skipped_missing``), so acceptance is checked on status and threshold only,
    never flagged as "no metric can be recomputed" a second time for the same cause."""


class MetricNotRederived(LabError):
    """A pass's metric is the user's own function and verify was given no metric file (the opt-in):
    not a problem of the archive, but a figure verify did not re-derive (Verification.not_rederived)."""

    def __init__(self, metric: str) -> None:
        super().__init__(metric)
        self.metric = metric


def check_row(row: RawRow, scan, gold: dict | None, threshold: float | None, problems: list[str],
              user_scores: dict | None = None, higher: bool = True, not_rederived: dict | None = None,
              references: dict | None = None) -> None:
    """Check one raw-table row against its files (see the module docstring). ``threshold``: the
    locked campaign file's quality threshold (None when it cannot be read); ``higher``: its
    direction; ``user_scores``: a user's own metric recomputed (user_metric_scores), or None;
    ``references``: {pass id: its Validation} from the archived journal: the agreement with the
    reference pass it names is recomputed from both passes' files (check_agreement), judged or
    reported; None when the journal is unreadable."""
    pid = row.pass_id
    result_rel = f"passes/{pid}/result.json"
    if result_rel in scan.kept:
        result = parse_record(member_text(scan, result_rel), RecordFiles)
        if result is None:
            problems.append(f"pass {pid}: result.json is not a JSON object")
            result = RecordFiles()
        pred_rel = f"passes/{pid}/{result.predictions_path or 'predictions.jsonl'}"
        recorded, vectors = result.predictions_sha256, result.vectors_sha256
        if recorded and scan.sha.get(pred_rel) != recorded:
            problems.append(f"pass {pid}: predictions sha256 differs from the one its result.json recorded")
        if vectors:  # an embedding pass (lab.passes.tasks.embedding)
            vec_rel = f"passes/{pid}/{result.vectors_path or 'vectors.npy'}"
            if vec_rel not in scan.sha:
                problems.append(skipped_missing(f"pass {pid}", "vectors sha256 check", vec_rel))
            elif scan.sha[vec_rel] != vectors:
                problems.append(f"pass {pid}: vectors sha256 differs from the one its result.json recorded")
            elif pred_rel in scan.kept:
                check_vector_norms(pid, scan, pred_rel, vec_rel, locked_task(scan), problems)
        per_card = result.per_card
        if isinstance(per_card, list) and pred_rel in scan.kept:
            check_cards(pid, scan, per_card, pred_rel, problems, bool(vectors))
        # a server pass: its figures re-derived from its request records (lab.evidence.served)
        check_served(pid, result.serving, pred_rel, scan, problems)
    try:
        recomputed = _row_metric(row, scan, gold, problems, user_scores, references)
    except (MetricNotRederived, MemberMissing) as exc:  # its acceptance's metric part is not checked
        # either, and said so (a user's metric: Verification.not_rederived; a missing member: skipped)
        if isinstance(exc, MetricNotRederived) and not_rederived is not None:
            not_rederived.setdefault(exc.metric, []).append(pid)
        if gold is not None:
            check_acceptance(row, None, threshold, problems, higher, metric_rederived=False)
        return
    if gold is not None:
        check_acceptance(row, recomputed, threshold, problems, higher)
    if gold is not None and references is not None and row.metric_name != AGREEMENT \
            and pid in references and row.predictions_path in scan.kept:
        try:  # a reported figure beside a label metric (the judged one is checked in _row_metric)
            check_agreement(pid, row, scan, gold, problems, references[pid])
        except MemberMissing:
            pass  # said once, by check_agreement


def _row_metric(row: RawRow, scan, gold: dict | None, problems: list[str], user_scores: dict | None,
                references: dict | None = None) -> float | None:
    pid, p, digest = row.pass_id, row.predictions_path, row.predictions_sha256
    if not p:
        if row.metric is not None:
            problems.append(f"pass {pid}: a metric without a predictions file")
        return None
    if p not in scan.sha:
        problems.append(skipped_missing(f"pass {pid}", "predictions sha256 and metric check", p))
        raise MemberMissing(p)
    if scan.sha[p] != digest:
        problems.append(f"row {pid}: predictions sha256 differs from the raw table")
    if gold is None or p not in scan.kept:
        return None
    if row.metric_name == AGREEMENT:
        return check_agreement(pid, row, scan, gold, problems, (references or {}).get(pid))
    if row.metric_name in EMBEDDING_METRICS:
        return _check_embedding_metric(pid, row, scan, p, gold, problems)
    if row.metric_name in GENERATION_METRICS:
        return _check_generation_metric(pid, row, scan, p, gold, problems)
    preds = predictions_by_id(scan, p)
    if preds is None:
        if row.metric is not None:
            problems.append(f"pass {pid}: metric {row.metric} given, but its predictions file is malformed")
        return None
    return _check_metric(pid, row, preds, gold, problems, user_scores)


def _check_embedding_metric(pid: str, row: RawRow, scan, pred_rel: str, gold: dict,
                            problems: list[str]) -> float | None:
    """An embedding pass's metric recomputed from its archived vectors (vectors.npy beside its
    predictions, rows as the predictions' lines say) and the gold labels, with the rule
    validation used (lab.passes.tasks.embedding_metrics.nn_accuracy), overall and per bucket."""
    import numpy as np

    from lab.passes.tasks.embedding_metrics import load_vectors, nn_accuracy

    claimed = row.metric
    vec_rel = pred_rel.rsplit("/", 1)[0] + "/vectors.npy"
    ids: list[str] = []
    try:
        for line in member_text(scan, pred_rel).splitlines():
            rec = prediction_line(line)
            if rec.row != len(ids):
                raise ValueError
            ids.append(rec.id)
        if vec_rel not in scan.kept:  # its absence is said once, as missing (verify, check_row)
            problems.append(skipped_missing(f"pass {pid}", "metric check", vec_rel))
            raise MemberMissing(vec_rel)
        vectors = load_vectors(scan.kept[vec_rel])
    except (json.JSONDecodeError, ValueError, msgspec.ValidationError):
        ids, vectors = [], None
    if vectors is None or len(vectors) != len(ids) or len(set(ids)) != len(ids):
        if claimed is not None:
            problems.append(f"pass {pid}: metric {claimed} given, but its predictions or vectors.npy are malformed")
        return None
    if set(ids) != set(gold):
        if claimed is not None:
            problems.append(f"pass {pid}: metric {claimed} given, but its predictions do not cover exactly the "
                            "corpus's ids")
        return None
    at = {item_id: k for k, item_id in enumerate(ids)}
    order = [at[item_id] for item_id in gold]  # the gold file's order, the corpus's: ties break as in validation
    ordered = vectors[order]
    labels = [gold[ids[k]][0] for k in order]
    buckets = np.array([gold[ids[k]][1] for k in order], dtype=object)
    recomputed = None
    for col, subset in [("metric", None)] + [(f"metric_{b}", buckets == b) for b in BUCKETS]:
        value = (None if subset is not None and not subset.any()
                 else nn_accuracy(ordered, labels, subset))
        value = None if value is None else round(value, 6)
        recomputed = value if col == "metric" else recomputed
        _compare_columns(pid, row, {col: value}, problems, "its vectors and the gold labels")
    return recomputed


NORM_DIGITS = 0.005
"""Relative difference allowed between a line's ``norm`` and its stored row's: the row is float16
(about 3 significant digits), the norm was taken before storage."""


def check_vector_norms(pid: str, scan, pred_rel: str, vec_rel: str, task: TaskTable | None,
                       problems: list[str]) -> None:
    """An embedding pass's recorded norms against its stored vectors, where the stored row is the
    vector whose norm a line records: the user's code's vectors (stored as returned) and the lab's
    pooling under ``normalize = false`` (the lab's normalised vectors keep the norm before
    normalisation: not re-derivable). Each line's ``norm`` must be its row's L2 norm (within
    NORM_DIGITS); for the user's code under ``normalize = true`` every row must also be of unit norm
    within lab.passes.tasks.embedding.NORM_TOLERANCE, the rule the pass was held to. Appends one
    problem per rule broken (the first line that breaks it named); nothing when the files do not
    parse (the sha256 and metric checks name those)."""
    import numpy as np

    from lab.passes.tasks.embedding import NORM_TOLERANCE
    from lab.passes.tasks.embedding_metrics import load_vectors

    entry = task is not None and bool(task.entry)
    normalize = task is None or task.normalize is not False
    if not entry and normalize:
        return
    try:
        lines = [prediction_line(line) for line in member_text(scan, pred_rel).splitlines()]
        vectors = load_vectors(scan.kept[vec_rel]).astype(np.float64)
    except (json.JSONDecodeError, ValueError, msgspec.ValidationError):
        return
    norms = np.linalg.norm(vectors, axis=1)
    for rec in lines:
        if rec.row is None or not 0 <= rec.row < len(norms) or rec.norm is None:
            continue
        stored = float(norms[rec.row])
        if abs(rec.norm - stored) > NORM_DIGITS * max(1.0, stored):
            name = vec_rel.rsplit("/", 1)[-1]
            problems.append(f"pass {pid}: id {rec.id} records norm {rec.norm:g}, its row of {name} "
                            f"has norm {stored:.6g}")
            break
    off = np.flatnonzero(np.abs(norms - 1.0) > NORM_TOLERANCE)
    if entry and normalize and off.size:
        problems.append(f"pass {pid}: normalize = true, but {off.size} of {len(norms)} stored vectors have an L2 norm "
                        f"outside 1 +/- {NORM_TOLERANCE:g} (row {int(off[0])}: {norms[off[0]]:.4g}); the pass would "
                        "have been refused as not honoured")


def _locked_table(scan, key: str) -> dict | None:
    """The archived campaign file's ``[key]`` table ({} when it declares none); None when
    campaign.toml is missing, not TOML, or that key is not a table."""
    import tomllib

    if "campaign.toml" not in scan.kept:
        return None
    try:
        table = tomllib.loads(member_text(scan, "campaign.toml").removeprefix("\ufeff")).get(key) or {}
    except tomllib.TOMLDecodeError:
        return None
    return table if isinstance(table, dict) else None


LOCKED_TASK = ("locked", "task")
"""The key of the archived [task] table in a scan's ``derived`` cache (lab.evidence.verify)."""


def locked_task(scan) -> TaskTable | None:
    """The archived campaign file's [task] table (all None when it declares none: classification);
    None when campaign.toml is missing, not TOML, or its [task] is not a table. Parsed once per
    scan: every pass's checks ask for it (the scan's ``derived`` cache)."""
    cache = getattr(scan, "derived", {})
    if LOCKED_TASK not in cache:
        table = _locked_table(scan, "task")
        cache[LOCKED_TASK] = None if table is None else as_record(table, TaskTable)
    return cache[LOCKED_TASK]


def locked_normalisation(scan) -> str | None:
    """The archived campaign file's [task] normalisation (text_metrics.NORMALISATION when it
    names none); None when campaign.toml is missing or not TOML."""
    from lab.passes.tasks.text_metrics import NORMALISATION

    task = locked_task(scan)
    return None if task is None else task.normalisation or NORMALISATION


def check_reference_pass(attempts: list[Attempt], rows: list[RawRow], reference_variant: str | None,
                         problems: list[str]) -> None:
    """The reference pass the archived journal's validations name, for a campaign judged by
    agreement or by the agreement rule (every campaign since it; lab.orchestration.agreement):
    every pass names the same one, a pass of the locked reference variant
    (``reference_variant``: its name or id; None when the campaign file cannot be read) that is
    ok with its ids and format right (raw table ``rows``; a label metric's with its metric too, as
    lab.orchestration.orchestrator.Orchestrator.reference picks it), and no earlier such pass of that
    variant (the rule: its first valid pass). Problems name the pass."""
    refs = {a.pass_id: a.validation.reference_pass or "" for a in attempts if a.validation is not None}
    named = sorted({r for r in refs.values() if r})
    if len(named) > 1:
        problems.append(f"passes compared with {len(named)} different reference passes ({', '.join(named[:3])}); "
                        "one campaign has one reference pass")
    if not named:
        return
    from lab.inputs.variants import find_variant

    ref = named[0]
    by_pid = {r.pass_id: r for r in rows}
    variant_of = {a.pass_id: a.variant_id for a in attempts}
    locked = None if reference_variant is None else find_variant([a.variant for a in attempts], reference_variant)
    if reference_variant is not None and (locked is None or locked.variant_id != variant_of.get(ref)):
        problems.append(f"reference pass {ref} is not a pass of the locked reference variant {reference_variant}")
        return
    valid = [a for a in sorted(attempts, key=lambda a: a.seq) if variant_of[a.pass_id] == variant_of.get(ref)
             and (r := by_pid.get(a.pass_id)) is not None and _valid_reference(r)]
    if valid and valid[0].pass_id != ref:
        problems.append(f"reference pass {ref} is not the reference variant's first valid pass ({valid[0].pass_id})")
    elif not valid:
        problems.append(f"reference pass {ref} is not an ok pass with its ids and format right")


def _valid_reference(row: RawRow) -> bool:
    """A row that may be the reference pass: ok, its ids and format right, and (a label metric's)
    its metric given."""
    return (row.status == PassStatus.OK and row.ids_match is True and row.format_ok is True
            and (row.metric_name == AGREEMENT or row.metric is not None))


def _pass_predictions(scan, pid: str, kind: TaskKind, ids: list[str]):
    """Pass ``pid``'s predictions in the order of ``ids`` (the archived corpus's): an embedding's
    vectors (float32 (n, width)), else {id: label or output}; MemberMissing when a file is absent,
    ValueError when malformed or not exactly the corpus's ids."""
    import numpy as np

    from lab.passes.tasks.embedding_metrics import load_vectors

    pred_rel = f"passes/{pid}/predictions.jsonl"
    if pred_rel not in scan.kept:
        raise MemberMissing(pred_rel)
    try:
        lines = [prediction_line(line) for line in member_text(scan, pred_rel).splitlines()]
    except msgspec.ValidationError:
        raise ValueError("a line without a string id") from None
    got = [rec.id for rec in lines]
    if len(set(got)) != len(got) or set(got) != set(ids):
        raise ValueError("its predictions do not cover exactly the corpus's ids")
    if kind.record == VECTOR:
        vec_rel = f"passes/{pid}/vectors.npy"
        if vec_rel not in scan.kept:
            raise MemberMissing(vec_rel)
        vectors = load_vectors(scan.kept[vec_rel])
        if len(vectors) != len(lines) or any(rec.row != k for k, rec in enumerate(lines)):
            raise ValueError("its lines and vectors.npy rows differ")
        at = {i: k for k, i in enumerate(got)}
        return vectors[[at[i] for i in ids]].astype(np.float32)
    key = RECORD_FIELDS[kind.record]  # "pred" (a label) or "output" (a text)
    results = {rec.id: rec.output if kind.record == TEXT else rec.pred for rec in lines}
    if not all(isinstance(v, str) for v in results.values()):
        raise ValueError(f"a line without a string {key!r}")
    return results


def check_agreement(pid: str, row: RawRow, scan, gold: dict, problems: list[str], validation) -> float | None:
    """A pass's agreement with the reference pass its journal validation names, recomputed from
    both passes' archived predictions (vectors), per id by its kind's rule and summarised as
    validation does (lab.orchestration.validate.agreement_figures): the raw table's
    ``agreement_with_reference`` and, judged by agreement, its metric columns overall and per
    bucket; an embedding's worst id and cosine against the journal's. Returns the judged figure
    for the agreement metric, else None. MemberMissing (said once) when a file is absent."""
    import numpy as np

    from lab.inputs.corpus import BUCKETS as CORPUS_BUCKETS
    from lab.orchestration.validate import agreement_figures
    from lab.passes.tasks.embedding_metrics import cosine_agreement
    from lab.passes.tasks.text_metrics import NORMALISATION, output_equality

    judged = row.metric_name == AGREEMENT
    claimed = row.metric if judged else row.agreement_with_reference
    ref = getattr(validation, "reference_pass", None) or ""
    if not ref:
        if judged and claimed is not None:
            problems.append(f"pass {pid}: agreement {claimed} given, but the journal names no reference pass for it")
        return None
    if not judged and claimed is None and row.agreement_ok is None:
        return None  # no agreement reported (its ids or format did not match)
    task = locked_task(scan)
    if task is None:
        problems.append(f"pass {pid}: campaign.toml missing or not TOML: its task kind is not known, so its "
                        "agreement is not re-derived")
        return None
    kind = KINDS.get(task.kind or "") or task_kind(None)  # an unknown kind's lines read as labels
    ids = list(gold)
    try:
        cache = getattr(scan, "derived", {})  # the reference pass is read once for every pass compared with it
        if ("predictions", ref) not in cache:
            cache[("predictions", ref)] = _pass_predictions(scan, ref, kind, ids)
        mine, theirs = _pass_predictions(scan, pid, kind, ids), cache[("predictions", ref)]
    except MemberMissing as exc:
        problems.append(skipped_missing(f"pass {pid}", "agreement check", str(exc)))
        raise
    except (json.JSONDecodeError, ValueError) as exc:
        if claimed is not None:
            problems.append(f"pass {pid}: agreement {claimed} given, but it cannot be recomputed from its predictions "
                            f"and reference pass {ref}'s ({exc})")
        return None
    if kind.record == VECTOR:
        per_id = cosine_agreement(mine, theirs)
    elif kind.record == TEXT:
        per_id = output_equality(mine, theirs, ids, task.normalisation or NORMALISATION)
    else:
        per_id = np.fromiter((mine[i] == theirs[i] for i in ids), np.float64, len(ids))
    code = {b: k for k, b in enumerate(CORPUS_BUCKETS)}
    buckets = np.array([code.get(gold[i][1], -1) for i in ids], np.int8)
    fig = agreement_figures(per_id, buckets, ids, cosine=kind.by_cosine)
    values: dict[str, float | None] = {"agreement_with_reference": fig.typical}
    if judged:
        values |= {"metric": fig.value, **{f"metric_{b}": fig.by_bucket.get(b) for b in BUCKETS}}
    _compare_columns(pid, row, values, problems, f"its predictions and reference pass {ref}'s")
    worst = getattr(validation, "agreement_worst", None)
    if fig.worst is not None and worst is not None and (not _same_metric(worst, fig.worst)
                                                        or validation.agreement_worst_id != fig.worst_id):
        problems.append(f"pass {pid}: worst id {validation.agreement_worst_id} at {worst} in the journal, "
                        f"{fig.worst_id} at {fig.worst} recomputed from its vectors and reference pass {ref}'s")
    check_agreement_rule(pid, row, scan, per_id, ids, kind.name, ref, problems)
    return fig.value if judged else None


def check_agreement_rule(pid: str, row: RawRow, scan, per_id, ids: list[str], kind: str, ref: str,
                         problems: list[str]) -> None:
    """The agreement rule's verdict of a pass re-derived (lab.orchestration.agreement, the one
    definition validation applied): the rule the archived campaign file locks (its kind's default
    when it names none), applied to ``per_id`` (the pass against reference pass ``ref``, in the
    order of ``ids``); its figures and verdict against the raw table's ``agreement_*`` cells, and a
    pass marked accepted beyond the rule named. A cell left empty while the pass was compared with
    its reference is a problem (the verdict was removed); a raw table without those columns is
    named once by lab.evidence.table_checks.check_raw_table, not here for each pass."""
    from lab.orchestration.agreement import AgreementRule

    quality = _locked_table(scan, "quality")
    if quality is None or "agreement_ok" not in row.cells:
        return  # no readable campaign file (said by locked_task's caller), or no column (check_raw_table)
    try:
        rule = AgreementRule.of(quality, kind)
    except (KeyError, TypeError, ValueError):
        problems.append(f"pass {pid}: campaign.toml's [quality] gives no agreement rule; the agreement "
                        "verdict is not re-derived")
        return
    check = rule.judge(per_id, ids)
    against = f"reference pass {ref}"
    if row.agreement_ok is None:
        problems.append(f"pass {pid}: agreement rule not checked in the raw table, but it was compared with "
                        f"{against}: {check.figures(against)} recomputed, allowed {rule.max_differing:g}")
        return
    values = {"agreement_ids": check.ids, "agreement_differing": check.differing,
              "agreement_max_differing": rule.max_differing, "agreement_min_cosine": rule.min_cosine}
    _compare_columns(pid, row, values, problems, f"its predictions and {against}'s by the locked agreement rule")
    if row.agreement_ok != bool(check.ok):
        problems.append(f"pass {pid}: agreement_ok {row.agreement_ok} in the raw table, {check.ok} re-derived: "
                        f"{check.figures(against)}, allowed {rule.max_differing:g}")
    if row.accepted and not check.ok:
        problems.append(f"pass {pid}: marked accepted, but {check.reason(against)} (recomputed from its "
                        "predictions)")


def _check_generation_metric(pid: str, row: RawRow, scan, pred_rel: str, gold: dict,
                             problems: list[str]) -> float | None:
    """A generation pass's metric recomputed from its archived outputs (``output`` of each
    predictions line) against the gold labels (the reference answers), after the locked
    campaign file's normalisation, with the rule validation used
    (lab.passes.tasks.text_metrics.generation_metric), overall and per bucket."""
    from lab.passes.tasks.text_metrics import MetricInputError, generation_metric

    claimed = row.metric
    outputs: dict[str, str] = {}
    try:
        for line in member_text(scan, pred_rel).splitlines():
            rec = prediction_line(line)
            if rec.output is None or rec.id in outputs:
                raise ValueError
            outputs[rec.id] = rec.output
    except (json.JSONDecodeError, ValueError, msgspec.ValidationError):
        if claimed is not None:
            problems.append(f"pass {pid}: metric {claimed} given, but its predictions file is malformed")
        return None
    if set(outputs) != set(gold):
        if claimed is not None:
            problems.append(f"pass {pid}: metric {claimed} given, but its predictions do not cover exactly the "
                            "corpus's ids")
        return None
    norm = locked_normalisation(scan)
    if norm is None:
        problems.append(f"pass {pid}: campaign.toml missing or not TOML: the normalisation of its metric is not "
                        "known, so the metric is not re-derived")
        return None
    recomputed = None
    for col, sub in metric_subsets(sorted(gold), gold):
        try:
            value = (round(generation_metric(row.metric_name or "", [outputs[i] for i in sub],
                                             [gold[i][0] for i in sub], norm), 6) if sub else None)
        except MetricInputError as exc:
            problems.append(f"pass {pid}: its metric cannot be re-derived ({exc})")
            return None
        recomputed = value if col == "metric" else recomputed
        _compare_columns(pid, row, {col: value}, problems, "its outputs and the gold labels")
    return recomputed
