"""The Runs table's status cell of a pass that ran ok carries its validation's verdict (a user
trial read "ok" beside a pass rejected on quality): the engine's words (Attempt.verdict_short,
lab.passes.records), cut with "…" only where the table has no more room."""
from __future__ import annotations

import msgspec

from lab.passes.records import Attempt, Validation
from tui.widgets.pass_table import COLUMNS, PassTable, pass_rows

CHECKS = {"expected_ids": 4, "observed_ids": 4, "duplicate_ids": 0, "missing_ids": 0, "extra_ids": 0,
          "ids_match": True, "format_ok": True, "coverage": {}, "coverage_ok": True, "metric_name": "nn_accuracy",
          "metric_by_bucket": {}, "threshold": 0.5, "reference_metric": 0.81, "agreement_with_reference": 0.9,
          "tolerance": 0.02, "tolerance_ok": True}


def _attempt(seq: int, status: str, validation: dict | None) -> Attempt:
    return Attempt(pass_id=f"p{seq:03d}", seq=seq, attempt=1, repetition=1, position=seq, variant_id="v",
                   status=status, items_completed=4, items_total=4,
                   validation=msgspec.convert(validation, Validation) if validation is not None else None)


def test_a_rejected_pass_reads_rejected_with_its_failed_check_and_an_accepted_one_accepted():
    accepted = {**CHECKS, "metric": 0.81, "threshold_ok": True, "gap_to_reference": 0.0, "corpus_accepted": True}
    rejected = {**CHECKS, "metric": 0.35, "threshold_ok": False, "gap_to_reference": 0.0, "corpus_accepted": False,
                "reasons": ["nn_accuracy 0.3500 < threshold 0.5"]}
    attempts = [_attempt(1, "ok", accepted), _attempt(2, "ok", rejected), _attempt(3, "ok", None),
                _attempt(4, "oom", {**rejected, "reasons": ["pass status oom"]})]
    rows = pass_rows(attempts, [], {}, now=0.0)
    status = [r.cells[COLUMNS.index("status")] for r in rows]
    # not yet validated (pass 3): the status word meanwhile
    assert [str(s) for s in status] == ["accepted", "rejected: nn_accuracy", "ok", "OOM @4"]
    assert str(status[1]) == attempts[1].verdict_short and attempts[1].verdict.startswith(str(status[1]))
    assert "green" in str(status[0].style) and "red" in str(status[1].style)
    assert not rows[1].failed and rows[3].failed  # rejected is a verdict, not a failed run

    wide = PassTable.column_widths(rows)
    k = COLUMNS.index("status")
    assert wide[k] == len("rejected: nn_accuracy")
    cut = PassTable.column_widths(rows, room=sum(wide) - 7)  # 7 cells short: the status column gives them
    assert cut[k] == wide[k] - 7 and cut[:k] + cut[k + 1:] == wide[:k] + wide[k + 1:]
    assert PassTable.column_widths(rows, room=10)[k] == len("status")  # never below its label
