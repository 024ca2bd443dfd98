"""'Does not distinguish' per pair: non-overlapping ranges or an exact Mann-Whitney rank test,
so one slow pass cannot flag a variant against everything (issue: demo on a loaded machine,
batch 1 at 22.0-25.7 s against batch 4 at 31.5-96.1 s was flagged)."""

from __future__ import annotations

from math import comb

import pytest

from lab.report.distinguish import compare_durations, exact_mann_whitney
from lab.report.summary import summarize

BATCH1 = [22.0, 23.1, 24.4, 25.0, 25.7]
BATCH4 = [31.5, 33.0, 34.2, 35.9, 96.1]  # one noisy-neighbour pass


def test_exact_p_values_match_the_enumeration():
    u, p = exact_mann_whitney(BATCH1, BATCH4)
    assert u == 0 and p == pytest.approx(2 / comb(10, 5))  # complete separation, two-sided
    u, p = exact_mann_whitney([1, 2, 3, 4, 6], [5, 7, 8, 9, 10])  # one swap: U = 1
    assert u == 1 and p == pytest.approx(4 / 252)
    u, p = exact_mann_whitney([1, 1, 2], [1, 2, 2])  # ties as mid-ranks
    assert 0 < p <= 1
    assert exact_mann_whitney([3.0, 4.0], [1.0, 2.0])[0] == 4


def test_the_reported_case_is_distinguished_and_one_outlier_does_not_flip_it():
    assert compare_durations(BATCH1, BATCH4).distinguished
    cold = [32.0] + BATCH1[1:]  # a cold first pass, slower than batch 4's fastest
    v = compare_durations(cold, BATCH4)
    assert not v.ranges_disjoint and v.distinguished and v.p_value == pytest.approx(4 / 252)
    # the old rule (gap between medians <= larger spread) flagged both cases
    same = compare_durations([10.0, 10.4, 10.9, 11.2, 12.0], [10.2, 10.6, 10.8, 11.5, 11.9])
    assert not same.distinguished and same.p_value > 0.5
    assert not compare_durations([1.0], [2.0, 3.0]).distinguished  # too few passes


def _rows(vid, batch, durations):
    return [{"variant_id": vid, "variant_label": f"batch {batch}", "series": "batch",
             "batch_size": batch, "status": "ok", "measured_s": d, "items_per_s": 1000 / d,
             "corpus_accepted": True, "metric": 0.6} for d in durations]


def test_summary_flags_per_pair_not_against_everything():
    s = summarize(_rows("v-1", 1, BATCH1) + _rows("v-4", 4, BATCH4)
                  + _rows("v-8", 8, [23.0, 24.0, 24.9, 26.0, 27.5]))
    by = {v.variant_id: v for v in s}
    # old rule: batch 4's 64.6 s spread made every pair "not distinguished"
    assert by["v-1"].does_not_distinguish_from == ("v-8",)
    assert by["v-4"].does_not_distinguish is False
    assert {p.other for p in by["v-4"].pairs} == {"v-1", "v-8"}
    assert all(p.verdict.distinguished for p in by["v-4"].pairs)


def test_decision_note_judges_the_pair_it_tie_breaks():
    from lab.report.decision_note import decision_note

    s = summarize(_rows("v-1", 1, [10.0, 10.1, 10.2, 10.3, 10.4])
                  + _rows("v-4", 4, [11.0, 11.1, 11.2, 11.3, 11.4])
                  + _rows("v-16", 16, [9.0, 9.5, 12.5, 13.0, 14.0]))
    by = {v.variant_id: v for v in s}
    assert by["v-1"].does_not_distinguish_from == ("v-16",)  # flagged, but not against v-4
    note = decision_note(s, {"name": "t", "question": "q"},
                         {"catalog_path": None, "gpu": "rtx-4090", "days": 7, "lots": 1})
    assert "**Chosen: batch 1**" in note and "lower median (10.200 s vs 11.200 s)" in note
    assert "the median tie-break is not evidence" not in note
    s2 = summarize(_rows("v-1", 1, [10.0, 10.1, 10.2, 10.3, 10.4])
                   + _rows("v-4", 4, [10.05, 10.15, 10.25, 10.35, 10.45]))
    note2 = decision_note(s2, {"name": "t", "question": "q"},
                          {"catalog_path": None, "gpu": "rtx-4090", "days": 7, "lots": 1})
    assert "the median tie-break is not evidence" in note2


def test_small_samples_are_called_small_whatever_their_ranges():
    """Issue 19.5: with 2 passes against 2, non-overlapping ranges happen by chance one time in
    three; no pair is called distinguished below the sizes at which the exact test can reach
    0.05 (smallest p = 2 / C(n+m, n))."""
    from lab.report.distinguish import ALPHA, smallest_p

    v = compare_durations([1.0, 1.1], [2.0, 2.1])
    assert v.ranges_disjoint and not v.distinguished and v.p_value == pytest.approx(1 / 3)
    assert v.reason.startswith("not enough passes to distinguish: n = 2 and 2")
    for n in range(1, 7):
        for m in range(1, 7):
            fast, slow = [1.0 + i / 100 for i in range(n)], [2.0 + i / 100 for i in range(m)]
            verdict = compare_durations(fast, slow)
            assert verdict.distinguished == (n >= 2 and m >= 2 and smallest_p(n, m) <= ALPHA), (n, m)
    assert not compare_durations([1, 1.1, 1.2], [2, 2.1, 2.2, 2.3]).distinguished  # p >= 0.057
    assert compare_durations([1, 1.1, 1.2], [2, 2.1, 2.2, 2.3, 2.4]).distinguished  # 3 vs 5: 0.036
    assert compare_durations([1, 1.1, 1.2, 1.3], [2, 2.1, 2.2, 2.3]).distinguished  # 4 vs 4: 0.029


def test_median_pass_throughput_is_items_over_the_median_duration():
    """One definition (issue 19.5): with an even number of passes the median pass's throughput
    is items / median duration, which the projected hours use, never the mean of two rates."""
    rows = [{**r, "items_total": 1000} for r in _rows("v-1", 1, [10.0, 12.0])]
    [s] = summarize(rows)
    assert s.median_s == 11.0
    assert s.items_per_s_median == pytest.approx(1000 / 11.0)
    assert s.items_per_s_median != pytest.approx((1000 / 10 + 1000 / 12) / 2)
