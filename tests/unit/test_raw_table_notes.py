"""A one-card custom row's unobservable count is not called a difference between cards
(lab.report.raw_table.unreadable_count_note; fixmsg item 6)."""

from __future__ import annotations

from lab.passes.observed import NOT_OBSERVABLE
from lab.report.raw_table import unreadable_count_note


def test_an_unobservable_count_names_no_cards():
    note = unreadable_count_note("max_tokens", NOT_OBSERVABLE)
    assert "cards" not in note and "not observable" in note and "max_tokens" in note


def test_counts_that_differ_between_cards_keep_their_note():
    assert unreadable_count_note("max_tokens", "card 0: 60; card 1: 64") == (
        "observed max_tokens differs between cards: card 0: 60; card 1: 64")
