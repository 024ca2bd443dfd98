"""A user's own metric ([quality] metric = "file.py:function") re-derived by ``archive verify``,
only on the user's explicit opt-in (``--metric-file FILE``): the local file's sha256 must be the
one the archive's lock recorded, and the function then runs in a fresh process
(lab.passes.tasks.custom.score_in_fresh_process), never in the verifying process, on each
pass's archived predictions and gold labels, overall and per bucket, as validation called it.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.evidence.format import ArchiveError
from lab.evidence.members import LockedFacts, as_record
from lab.evidence.rederive import member_text, metric_subsets, predictions_by_id
from lab.evidence.table_checks import CAMPAIGN, PROTOCOL_VERSION
from lab.report.raw_row import RawRow


class MetricFileRefused(ArchiveError):
    """``--metric-file`` is not the file the archive's lock hashed (or the archive has no user
    metric to re-derive): one line, nothing is run."""


def user_metric_ref(scan, metric_file) -> str | None:
    """"/abs/path/file.py:function" of the user's metric file ``metric_file`` when its sha256 is
    the one the archive's lock recorded for the [quality] metric (protocol_version.json
    ``task_files_sha256["metric"]``; a lock written before that map: ``task_sha256`` when the
    metric is the protocol's only user file). None when ``metric_file`` is None. Raises
    MetricFileRefused (one line) when the file is missing, differs, or the archive's campaign
    has no [quality] metric = "file.py:function"."""
    import tomllib

    from lab.facts.files import sha256_file
    from lab.orchestration.identity import digests_fingerprint

    if metric_file is None:
        return None
    path = Path(metric_file).resolve()
    try:
        metric = tomllib.loads(member_text(scan, CAMPAIGN).removeprefix("\ufeff"))["quality"]["metric"]
        version = as_record(json.loads(member_text(scan, PROTOCOL_VERSION)), LockedFacts) or LockedFacts()
    except (KeyError, TypeError, ValueError, tomllib.TOMLDecodeError):
        raise MetricFileRefused(f"--metric-file {metric_file}: the archive's {CAMPAIGN} or {PROTOCOL_VERSION} cannot "
                                "be read, so there is no locked metric to check it against") from None
    if not isinstance(metric, str) or ":" not in metric:
        raise MetricFileRefused(f"--metric-file {metric_file}: this archive's metric is the built-in {metric!r}, "
                                "re-derived without it; leave --metric-file out")
    if not path.is_file():
        raise MetricFileRefused(f"--metric-file {metric_file}: no such file; give a local copy of {metric}'s file")
    digest = sha256_file(path)
    locked = (version.task_files_sha256 or {}).get("metric")
    same = (digest == locked if locked
            else digests_fingerprint({"metric": digest}) == version.task_sha256)
    if not same:
        raise MetricFileRefused(f"--metric-file {metric_file}: sha256 {digest} is not the locked metric file's "
                                f"({locked or 'task_sha256 ' + str(version.task_sha256)}); give the file the "
                                "campaign was locked with")
    return f"{path}:{metric.rsplit(':', 1)[1]}"


def user_metric_scores(scan, rows: list[RawRow], gold: dict | None, ref: str | None,
                       problems: list[str]) -> dict[str, dict] | None:
    """{pass id: {column: value}} of the user's metric ``ref`` (user_metric_ref) recomputed from
    each row's predictions and the gold labels, overall and per bucket, labels in the gold
    file's (the corpus's) order, as validation calls it; all rows in one fresh process
    (lab.passes.tasks.custom.score_in_fresh_process). None when ``ref`` is None; {} with a
    problem line when the function fails."""
    from lab.passes.tasks.custom import score_in_fresh_process

    if ref is None or gold is None:
        return None
    ids = list(gold)
    pairs: list[tuple[list[str], list[str]]] = []
    slots: list[tuple[str, str]] = []
    for row in rows:
        p = row.predictions_path or ""
        if (":" not in (row.metric_name or "") or p not in scan.kept
                or scan.sha.get(p) != row.predictions_sha256):
            continue
        preds = predictions_by_id(scan, p)
        if preds is None or set(preds) != set(gold):
            continue  # _check_metric says why when the row claims a metric
        for col, sub in metric_subsets(ids, gold):
            if sub:
                pairs.append(([preds[i] for i in sub], [gold[i][0] for i in sub]))
                slots.append((row.pass_id, col))
    try:
        values = score_in_fresh_process(ref, pairs) if pairs else []
    except ValueError as exc:
        problems.append(f"[quality] metric {ref.rsplit('/', 1)[-1]}: {exc}; its metrics are not re-derived")
        return {}
    out: dict[str, dict] = {}
    for (pid, col), value in zip(slots, values, strict=True):
        out.setdefault(pid, {b: None for b, _ in metric_subsets([], gold)})[col] = round(value, 6)
    return out
