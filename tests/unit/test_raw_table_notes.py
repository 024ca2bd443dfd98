"""The raw table's notes for empty cells: a one-card custom row's unobservable count is not called
a difference between cards, a server pass's names the server (lab.report.raw_table.unreadable_count_note);
a pooled server pass's empty TPOT cell says why (lab.report.served_cells.served_notes)."""

from __future__ import annotations

import msgspec

from lab.passes.observed import NOT_OBSERVABLE
from lab.report.raw_table import unreadable_count_note


def test_an_unobservable_count_names_no_cards():
    note = unreadable_count_note("max_tokens", NOT_OBSERVABLE)
    assert "cards" not in note and "not observable" in note and "max_tokens" in note


def test_counts_that_differ_between_cards_keep_their_note():
    assert unreadable_count_note("max_tokens", "card 0: 60; card 1: 64") == (
        "observed max_tokens differs between cards: card 0: 60; card 1: 64")


def test_a_server_passs_unobservable_count_names_the_server():
    note = unreadable_count_note("threads", NOT_OBSERVABLE, served=True)
    assert note == "observed threads: not observable, the server applies it and its endpoints do not report it"


def served_result(output_tokens: int):
    """A PassResult of a server pass whose two answered requests had ``output_tokens`` each."""
    from lab.engines.serving_figures import Bound, Objective, ServedRequest, figures, plain, verdict
    from lab.passes.tasks.server_job import ServingRecord
    from lab.report.raw_table import NO_RESULT

    recs = [ServedRequest(id=i, sent_s=0.5 * k, ttft_s=0.05, e2el_s=0.2, itl_s=(), output_text="",
                          output_tokens=output_tokens, input_tokens=9) for k, i in enumerate("ab")]
    objective = Objective(bounds=(Bound("e2el", 99, 0.5),), share=0.9)
    rec = ServingRecord(figures=figures(recs, 1.0, 2.0, objective), verdict=verdict(recs, objective), requests=2,
                        answered=2, generator_cpu_s=0.1, generator_wall_s=1.0, schedule_note="")
    return msgspec.structs.replace(NO_RESULT, serving=plain(rec))


def test_an_empty_tpot_cell_says_a_pooled_answer_comes_whole():
    from lab.report.raw_table import NO_RESULT
    from lab.report.served_cells import served_cells, served_notes

    pooled, generated = served_result(0), served_result(4)
    assert served_cells(pooled)["served_tpot_p99_s"] is None and served_cells(pooled)["served_e2el_p99_s"] == 0.2
    assert served_notes(pooled) == ["empty served_tpot_p99_s: no answered request had more than one output token "
                                    "(a pooled answer comes whole: its one latency is served_e2el_p99_s)"]
    assert served_cells(generated)["served_tpot_p99_s"] is not None and served_notes(generated) == []
    assert served_notes(NO_RESULT) == []  # an offline pass
