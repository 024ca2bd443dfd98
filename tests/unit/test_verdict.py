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


def test_a_summary_with_the_verdict_cut_from_the_notes_is_named_by_verify(tmp_path):
    """The wording a lab before the typed verdict gave a rejected variant ("rejected: " and the
    notes after "validation: ", cut at 120 characters) is not what this format's summary holds:
    archive verify names it (written by the same lab), and lists it as worded otherwise, never
    silently accepted."""
    from lab.evidence.table_checks import _compare_variants

    attempts = _journal(tmp_path)
    rows = raw_rows(attempts, "c", 1, tmp_path)
    derived = [s.to_json() for s in campaign_summary(rows, attempts)]
    cut = "rejected: " + rows[1]["notes"].split("validation: ")[-1][:120]
    assert "| empty memory cells" in cut and cut != derived[1]["quality_verdict"]
    claimed = [dict(d) for d in derived]
    claimed[1]["quality_verdict"] = cut
    problems: list[str] = []
    _compare_variants("report/summary.json", claimed, derived, problems)
    assert len(problems) == 1 and problems[0].startswith(f"variant {rows[1]['variant_id']}: quality_verdict "), problems
    worded: list[str] = []
    _compare_variants("report/summary.json", claimed, derived, problems, worded)
    assert len(problems) == 1 and worded == [f"variant {rows[1]['variant_id']} quality_verdict (report/summary.json)"]


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


QUALITY_FIELDS = ("metric_name", "threshold", "agreement_median", "agreement_worst", "agreement_worst_id",
                  "agreement_rule", "second_metric_name", "second_metric_median", "agreement_max_differing",
                  "agreement_min_cosine", "agreement_ids", "agreement_differing_most", "agreement_passes_checked",
                  "agreement_passes_beyond")


def test_a_summary_without_the_quality_fields_is_named_field_by_field(tmp_path):
    """This format's summary.json holds every quality field: one left out is a problem naming it
    and its variant, as one present but different is."""
    from lab.evidence.table_checks import _compare_variants

    attempts = _journal(tmp_path)
    derived = [s.to_json() for s in campaign_summary(raw_rows(attempts, "c", 1, tmp_path), attempts)]
    assert all(k in d for d in derived for k in QUALITY_FIELDS)
    without = [{k: x for k, x in d.items() if k not in QUALITY_FIELDS} for d in derived]
    problems: list[str] = []
    _compare_variants("report/summary.json", without, derived, problems)
    named = {(p.split(":")[0], p.split(": ")[1].split(" ")[0]) for p in problems}
    assert len(problems) == len(derived) * len(QUALITY_FIELDS), problems
    assert named == {(f"variant {d['variant_id']}", k) for d in derived for k in QUALITY_FIELDS}, named
    problems.clear()
    forged = [dict(d) for d in derived]
    forged[0]["agreement_median"] = 0.5  # present but different: a problem
    _compare_variants("report/summary.json", forged, derived, problems)
    assert len(problems) == 1 and "agreement_median" in problems[0]
