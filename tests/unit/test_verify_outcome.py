"""`archive verify`'s outcome lives once, on lab.evidence.format.Verification: ``outcome`` (the
word the CLI prints: OK, FAILED or INCOMPLETE) and ``incomplete`` (nothing contradicted, something
not re-derived), which the CLI's suffix and the UI's archive verdict read. No other module of
lab/ or tui/ spells the word INCOMPLETE (checked on the syntax tree)."""

from __future__ import annotations

import ast

import pytest
from conftest import engine_trees

from lab.evidence.format import Verification

DEFINITION = "lab/evidence/format.py"


@pytest.mark.parametrize(("problems", "not_rederived", "ok", "incomplete", "outcome"), [
    ([], [], True, False, "OK"),
    ([], ["metric mymetric.py:share_right is your own function"], False, True, "INCOMPLETE"),
    (["raw table row 2: throughput differs"], [], False, False, "FAILED"),
    (["raw table row 2: throughput differs"], ["metric mymetric.py:share_right"], False, False, "FAILED"),
])
def test_outcome_and_incomplete(problems, not_rederived, ok, incomplete, outcome):
    v = Verification(files_checked=3, rows_checked=2, problems=problems, not_rederived=not_rederived)
    assert (v.ok, v.incomplete, v.outcome) == (ok, incomplete, outcome)


def test_the_word_incomplete_is_spelled_only_where_verification_is_defined():
    found = [f"{rel}:{node.lineno}" for rel, _text, tree in engine_trees() if rel != DEFINITION
             for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and "INCOMPLETE" in node.value]
    assert not found, f"verify's INCOMPLETE spelled out (read Verification.incomplete / outcome): {found}"


def test_a_mismatch_line_shows_two_long_values_where_they_differ():
    from lab.evidence.table_checks import SHOWN, _shown_pair

    a = "empty input/output-token cells: not a generation pass (no text generated) | the reference pass: p001"
    b = "empty input/output-token cells: not a generation pass (no text generated) | agreement is judged against p002"
    shown_a, shown_b = _shown_pair(a, b)
    assert shown_a != shown_b and "the reference pass" in shown_a and "agreement is judged" in shown_b
    assert shown_a.startswith("...") and len(shown_a) <= SHOWN + 6
    assert _shown_pair("0.5", None) == ("0.5", "empty")  # short values whole
