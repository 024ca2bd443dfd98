"""The quality verdict comes from the typed validation, never from the raw table's notes.

A rejected pass's raw-table notes hold its validation reasons followed by other notes (empty
memory cells, no predictions file...). The variant's verdict (decision note, Results screen,
compare's exclusions) and the attempt's verdict (status, Runs screen) must say the validation's
reasons and nothing after them.
"""

from __future__ import annotations

from lab.inputs.variants import Variant
from lab.orchestration.journal import Journal
from lab.passes.records import Attempt
from lab.report.raw_table import raw_rows
from lab.report.summary import campaign_summary

REASONS = ["macro_f1 0.4000 below threshold 0.55", "macro_f1 0.1500 below the reference, tolerance 0.02"]


def _validation(accepted: bool, metric: float, reasons: list[str]) -> dict:
    return {"expected_ids": 4, "observed_ids": 4, "duplicate_ids": 0, "missing_ids": 0, "extra_ids": 0,
            "ids_match": True, "format_ok": True,
            "coverage": {b: {"expected": 1, "observed": 1} for b in ("short", "medium", "long")},
            "coverage_ok": True, "metric_name": "macro_f1", "metric": metric, "metric_by_bucket": {},
            "threshold": 0.55, "threshold_ok": accepted, "reference_metric": 0.55, "gap_to_reference": 0.0,
            "agreement_with_reference": 1.0, "tolerance": 0.02, "tolerance_ok": accepted,
            "corpus_accepted": accepted, "reasons": reasons, "examples": {}, "reference_pass": "p001"}


def _journal(tmp_path) -> list[Attempt]:
    j = Journal(tmp_path / "journal.sqlite")
    try:
        for seq, (batch, accepted) in enumerate([(1, True), (8, False)], start=1):
            v = Variant(batch_size=batch)
            pid = f"p{seq:03d}"
            j.start_attempt(pid, seq, 1, 1, seq, v, "2026-01-01T00:00:00+00:00", "local", 4)
            # an ok pass whose figures are partly missing: its raw-table notes carry more after the reasons
            j.finish_attempt(pid, "ok", "2026-01-01T00:01:00+00:00", 0, 4,
                             {"pass_id": pid, "campaign": "c", "variant": v.to_json(), "status": "ok",
                              "start_time": "2026-01-01T00:00:00+00:00", "end_time": "2026-01-01T00:01:00+00:00",
                              "error": "", "items_total": 4, "items_completed": 4, "predictions_path":
                              "predictions.jsonl", "exit_code": 0, "phases_s": {"measured": 1.0 + seq}}, "")
            j.set_validation(pid, _validation(accepted, 0.6 if accepted else 0.4, [] if accepted else REASONS))
        return j.attempts()
    finally:
        j.close()


def test_a_rejected_variants_verdict_is_its_validation_reasons_and_nothing_after(tmp_path):
    attempts = _journal(tmp_path)
    rows = raw_rows(attempts, "c", 1, tmp_path)
    rejected = rows[1]
    assert "validation: " + "; ".join(REASONS) + " | " in rejected["notes"]  # more notes follow the reasons
    accepted_summary, rejected_summary = campaign_summary(rows, attempts)
    assert accepted_summary.quality_verdict == "accepted (1 of 1 passes)"
    assert rejected_summary.quality_verdict == "rejected: " + "; ".join(REASONS)
    # the attempt's own verdict (status, Runs screen): the same wording from the same record
    assert attempts[1].verdict == "rejected: " + "; ".join(REASONS)
    assert attempts[0].verdict == "accepted (macro_f1 0.6000)"


def test_an_archive_made_before_the_fix_keeps_verifying_with_its_older_wording(tmp_path):
    """archive verify accepts the older verdict only as the exact text the pre-fix rule cuts
    from the raw rows, and only for a variant with no accepted pass."""
    from lab.evidence.table_checks import _compare_variants, pre_fix_verdicts

    attempts = _journal(tmp_path)
    rows = raw_rows(attempts, "c", 1, tmp_path)
    derived = [s.to_json() for s in campaign_summary(rows, attempts)]
    old = pre_fix_verdicts([{**r, "corpus_accepted": str(r["corpus_accepted"])} for r in rows])
    rejected_id = rows[1]["variant_id"]
    assert list(old) == [rejected_id] and "| empty memory cells" in old[rejected_id]
    claimed = [dict(d) for d in derived]
    claimed[1]["quality_verdict"] = old[rejected_id]
    problems: list[str] = []
    _compare_variants("report/summary.json", claimed, derived, problems, old)
    assert problems == []
    claimed[1]["quality_verdict"] = "rejected: something else"
    _compare_variants("report/summary.json", claimed, derived, problems, old)
    assert len(problems) == 1 and "quality_verdict" in problems[0]


def test_the_summary_says_the_quality_behind_the_verdict(tmp_path):
    """Each configuration shows its metric against the threshold and its agreement with the
    reference variant (decision note, summary.json), from the typed validations."""
    attempts = _journal(tmp_path)
    accepted, rejected = campaign_summary(raw_rows(attempts, "c", 1, tmp_path), attempts)
    assert (accepted.metric_name, accepted.metric_median, accepted.threshold) == ("macro_f1", 0.6, 0.55)
    assert accepted.agreement_median == 1.0 and accepted.agreement_worst == 1.0
    assert accepted.quality_text() == ("quality: macro_f1 median 0.6000 (threshold 0.55); agreement with the "
                                       "reference variant (share of ids with the reference variant's label): "
                                       "median 1.0000, lowest 1.0000")
    assert "macro_f1 median 0.4000 (threshold 0.55)" in rejected.quality_text()


def test_an_archive_summary_without_the_quality_fields_still_verifies(tmp_path):
    from lab.evidence.table_checks import _compare_variants
    from lab.report.summary import QUALITY_FIELDS

    attempts = _journal(tmp_path)
    derived = [s.to_json() for s in campaign_summary(raw_rows(attempts, "c", 1, tmp_path), attempts)]
    older = [{k: x for k, x in d.items() if k not in QUALITY_FIELDS} for d in derived]
    problems: list[str] = []
    _compare_variants("report/summary.json", older, derived, problems, {})
    assert problems == []
    forged = [dict(d) for d in derived]
    forged[0]["agreement_median"] = 0.5  # present but different: a problem
    _compare_variants("report/summary.json", forged, derived, problems, {})
    assert len(problems) == 1 and "agreement_median" in problems[0]
