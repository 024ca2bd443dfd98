"""Decision note: per-configuration costs, exclusions, choice and motivation."""
from __future__ import annotations

import pytest

from lab.cost.forfaits import PricingError
from lab.report.decision_note import decision_note
from lab.report.summary import VariantSummary

CAMPAIGN = {"name": "20ng demo", "question": "Which configuration classifies all 1000 items "
            "with macro-F1 >= 0.55 before Friday, for the lowest committed budget?",
            "deadline": "2026-10-02T18:00+02:00", "deliverables": 1}
PRICING = {"catalog_path": None, "gpu": "rtx-4090", "days": 7, "lots": 2,
           "window_start": "2026-09-28T09:00", "window_end": "2026-10-02T09:00",
           "tz": "Europe/Rome"}


def spread(median: float) -> list[float]:
    """Five durations around ``median`` (s), within 2 %."""
    return [round(median * f, 3) for f in (0.99, 1.0, 0.98, 1.02, 1.01)]


def variant(vid, label, **kw):
    base = dict(variant_id=vid, label=label, series=1,
                durations_s=[12.1, 12.3, 12.0, 12.4, 12.2], median_s=12.2, min_s=12.0,
                max_s=12.4, successes=5, failures=0, accepted_passes=5,
                quality_verdict="accepted", feasible=True, infeasible_reason="",
                does_not_distinguish=False)
    return VariantSummary(**{**base, **kw})


def section(note: str, label: str) -> str:
    start = note.index(f"### {label} (")
    end = note.find("\n### ", start + 1)
    return note[start:end if end != -1 else note.index("## Excluded")]


def test_five_accepted_repetitions_are_one_corpus_costing_the_whole_budget():
    note = decision_note([variant("v1", "batch 8, fp32")], CAMPAIGN, PRICING)
    s = section(note, "batch 8, fp32")
    assert "- Accepted deliverables: 1 of 1" in s
    assert "- Cost per validated corpus: 220.00 USD" in s  # 220 / 1, never 220 / 5
    assert "44.00" not in note
    assert "committed budget 220.00 USD (catalog version 2026-09-24)" in s
    assert "x 2 lot(s) of 1 card(s) = 2 GPUs; 110.00 USD per lot" in s
    assert "= 96 h (real elapsed time)" in s
    assert "Raw durations, measured window, passes ok (s): 12.100, 12.300, 12.000, 12.400, " \
           "12.200" in s
    assert "**Chosen: batch 8, fp32** (`v1`)" in note


def test_rejected_quality_gives_undefined_cost_and_an_exclusion():
    note = decision_note([
        variant("ok", "batch 8, fp32"),
        variant("bad", "batch 8, int8", accepted_passes=0,
                quality_verdict="rejected: metric 0.41 < threshold 0.55")], CAMPAIGN, PRICING)
    s = section(note, "batch 8, int8")
    assert "- Cost per validated corpus: undefined: no accepted corpus" in s
    assert "- Accepted deliverables: 0 of 1" in s
    assert "- **batch 8, int8** (`bad`): quality: rejected: metric 0.41 < threshold 0.55" in note


def test_memory_failures_deadline_and_price_exclusions():
    summary = [
        variant("oom", "batch 64, fp32", feasible=False, infeasible_reason="OOM at 23.5 GiB "
                "reserved", successes=0, failures=5, durations_s=[], median_s=None, min_s=None,
                max_s=None, accepted_passes=0, quality_verdict="no pass completed"),
        variant("late", "batch 1, fp32"),
        variant("h100", "batch 8, fp32 on H100"),
        variant("ok", "batch 8, fp32")]
    note = decision_note(summary, CAMPAIGN, PRICING, variant_pricing={
        "late": {"window_end": "2026-10-03T09:00"}, "h100": {"gpu": "h100"}})
    excluded = note[note.index("## Excluded"):note.index("## Decision")]
    assert ("memory: OOM at 23.5 GiB reserved; failures: no successful pass (5 failed)"
            in excluded)
    assert ("deadline: the campaign window ends 2026-10-03T09:00:00+02:00, after the deadline "
            "2026-10-02T18:00:00+02:00") in excluded
    assert "price: h100 7-day package: not in catalog; committed budget unknown" in excluded
    assert "Median / min / max: not measured / not measured / not measured" in note
    h100 = section(note, "batch 8, fp32 on H100")
    assert "- Package committed: h100 7-day package: not in catalog" in h100
    assert "USD" not in h100  # a missing price is never a number
    assert "**Chosen: batch 8, fp32** (`ok`)" in note


def test_lowest_committed_budget_wins_over_a_faster_configuration():
    summary = [variant("b200", "batch 8 on B200", median_s=5.0, durations_s=spread(5.0)),
               variant("rtx", "batch 8 on RTX 4090", median_s=12.2)]
    note = decision_note(summary, CAMPAIGN, PRICING, variant_pricing={"b200": {"gpu": "b200", "lots": 1}})
    assert "committed budget 2071.00 USD" in section(note, "batch 8 on B200")
    assert "x 1 lot(s) of 2 card(s) = 2 GPUs; 2071.00 USD per lot" in note  # cards once
    decision = note[note.index("## Decision"):]
    assert "**Chosen: batch 8 on RTX 4090** (`rtx`)" in decision
    assert "lowest committed budget (220.00 USD; next: batch 8 on B200 at 2071.00 USD)" in decision
    assert "the fastest eligible one, batch 8 on B200 (median 5.000 s)" in decision
    assert "before the deadline 2026-10-02T18:00:00+02:00" in decision


def test_same_budget_then_fewer_failures_then_lower_median():
    summary = [variant("b8", "batch 8", median_s=10.0, durations_s=spread(10.0)[:4], failures=1, successes=4),
               variant("b4", "batch 4", median_s=14.0, durations_s=spread(14.0)),
               variant("b1", "batch 1", median_s=30.0, durations_s=spread(30.0))]
    note = decision_note(summary, CAMPAIGN, PRICING)
    assert "**Chosen: batch 4** (`b4`)" in note
    assert "same committed budget and failures as batch 1; lower median " \
           "(14.000 s vs 30.000 s)" in note
    assert "do not distinguish" not in note  # disjoint ranges: the median gap is evidence
    note2 = decision_note([variant("b8", "batch 8", failures=1, successes=4, median_s=10.0),
                           variant("b4", "batch 4", failures=0, median_s=14.0)],
                          CAMPAIGN, PRICING)
    assert "**Chosen: batch 4** (`b4`)" in note2


def test_does_not_distinguish_is_stated_when_the_median_decides():
    summary = [variant("b4", "batch 4", median_s=12.1, does_not_distinguish=True),
               variant("b8", "batch 8", median_s=12.2, does_not_distinguish=True)]
    note = decision_note(summary, CAMPAIGN, PRICING)
    assert "the series does not distinguish them" in section(note, "batch 4")
    assert "the median tie-break is not evidence of a faster configuration" in note


def test_one_pass_each_is_too_few_passes_never_a_spread_comparable_to_the_gap():
    """Issue 35 item 7: with n = 1 there is no spread; the note says the sizes decide."""
    from lab.report.distinguish import compare_durations
    from lab.report.summary import VariantPair

    one = compare_durations([12.1], [15.0])
    pair = VariantPair("b8", one)
    summary = [variant("b4", "batch 4", durations_s=[12.1], median_s=12.1, min_s=12.1, max_s=12.1,
                       does_not_distinguish=True, pairs=[pair]),
               variant("b8", "batch 8", durations_s=[15.0], median_s=15.0, min_s=15.0, max_s=15.0,
                       does_not_distinguish=True)]
    text = section(decision_note(summary, CAMPAIGN, PRICING), "batch 4")
    assert "Too few passes to tell the variants apart (durations_s holds 1)" in text, text
    assert "comparable to the gap" not in text
    # with enough passes whose ranges overlap, the spread is what keeps them apart
    many = compare_durations(spread(12.2), spread(12.25))
    summary[0] = variant("b4", "batch 4", does_not_distinguish=True,
                         pairs=[VariantPair("b8", many)])
    assert "comparable to the gap between medians" in section(decision_note(summary, CAMPAIGN, PRICING), "batch 4")


def test_truncation_names_what_cut_the_text():
    """Issue 35 item 7: a generation campaign's text cut by [task] max_text_tokens 64 was blamed
    on the variant's max_length 128."""
    v = [variant("b1", "batch 1", truncated_short=0.0, truncated_medium=0.2, truncated_long=0.9, max_length=128)]
    cut = section(decision_note(v, {**CAMPAIGN, "text_cut": "[task] max_text_tokens 64"}, PRICING), "batch 1")
    assert "- Items whose text was cut to [task] max_text_tokens 64: short 0%, medium 20%, long 90%" in cut, cut
    assert "max_length 128" not in cut
    plain = section(decision_note(v, CAMPAIGN, PRICING), "batch 1")
    assert "- Items truncated at max_length 128: short 0%, medium 20%, long 90%" in plain, plain


def test_a_median_compared_across_series_follows_the_same_pair_rule():
    """Two variants of different series carry no stored pair: the motivation's median
    comparison is still checked by lab.report.distinguish (overlapping 5 vs 5, p > 0.05)."""
    close = [variant("b8", "batch 8", series=1, median_s=12.2),
             variant("bk", "batch 8, bucketing", series=2, median_s=12.3,
                     durations_s=[12.0, 12.5, 12.3, 12.2, 12.4])]
    note = decision_note(close, CAMPAIGN, PRICING)
    assert "lower median (12.200 s vs 12.300 s)" in note
    assert "but the measurements do not distinguish these durations" in note
    apart = [variant("bk", "batch 8, bucketing", series=2, median_s=5.0, durations_s=spread(5.0)),
             variant("b8", "batch 8", series=1, median_s=12.2)]
    note = decision_note(apart, CAMPAIGN, PRICING)
    assert "**Chosen: batch 8, bucketing** (`bk`)" in note
    assert "do not distinguish" not in note


def test_the_fastest_eligible_one_is_only_called_faster_when_distinguished():
    summary = [variant("b200", "batch 8 on B200", median_s=12.1, durations_s=[12.1, 12.0, 12.5, 11.9, 12.3]),
               variant("rtx", "batch 8 on RTX 4090", median_s=12.2)]
    note = decision_note(summary, CAMPAIGN, PRICING, variant_pricing={"b200": {"gpu": "b200", "lots": 1}})
    decision = note[note.index("## Decision"):]
    assert "**Chosen: batch 8 on RTX 4090** (`rtx`)" in decision
    assert "the fastest eligible one, batch 8 on B200 (median 12.100 s)" in decision
    assert ("the measurements do not distinguish batch 8 on B200's durations from "
            "batch 8 on RTX 4090's, so it is not shown to be faster") in decision
    summary[0] = variant("b200", "batch 8 on B200", median_s=5.0, durations_s=spread(5.0))
    note = decision_note(summary, CAMPAIGN, PRICING, variant_pricing={"b200": {"gpu": "b200", "lots": 1}})
    assert "not shown to be faster" not in note


def test_dst_week_exceeds_7_days_and_is_excluded_on_calendar():
    pricing = {**PRICING, "window_start": "2026-10-23T09:00", "window_end": "2026-10-30T09:00"}
    note = decision_note([variant("v1", "batch 8")], {**CAMPAIGN, "deadline": None}, pricing)
    assert "= 169 h (real elapsed time)" in note
    assert ("calendar: the 7-day package (168 h) does not cover the 169 h campaign window; "
            "1 extra period(s) would be needed (220.00 USD), not assumed") in note
    assert "No configuration is eligible" in note


def test_no_eligible_configuration_says_the_exclusion_counts_compare_prints():
    """The campaign's decision.md counts its exclusions per kind with the function behind
    `iteralab compare`'s line (lab.report.exclusions.exclusion_counts), from the same entries
    its "Excluded configurations" list shows."""
    from types import SimpleNamespace

    from lab.report.exclusions import exclusion_counts

    rejected = dict(accepted_passes=0, quality_verdict="rejected: nn_accuracy 0.3500 < threshold 0.5")
    note = decision_note([variant("b1", "batch 1", **rejected), variant("b8", "batch 8", **rejected)],
                         CAMPAIGN, PRICING)
    decision = note[note.index("## Decision"):]
    assert "No configuration is eligible (2 of 2 excluded: quality 2; see the exclusions above)" in decision
    both = decision_note([variant("b1", "batch 1", **rejected),
                          variant("b8", "batch 8", **rejected, feasible=False,
                                  infeasible_reason="peak 30 GiB > 24 GiB"),
                          variant("b4", "batch 4", feasible=False, infeasible_reason="peak 25 GiB > 24 GiB")],
                         CAMPAIGN, PRICING)
    listed = both[both.index("## Excluded configurations"):both.index("## Not run")]
    entries = [line.split("`): ", 1)[1].split("; ") for line in listed.splitlines() if line.startswith("- **")]
    assert len(entries) == 3
    counts = exclusion_counts([SimpleNamespace(exclusions=tuple(e)) for e in entries])
    assert counts == "3 of 3 excluded: quality 2, memory 2"
    assert f"No configuration is eligible ({counts}; see the exclusions above)" in both


def test_no_window_means_deadline_not_checked():
    pricing = {**PRICING, "window_start": None, "window_end": None}
    note = decision_note([variant("v1", "batch 8")], CAMPAIGN, pricing)
    assert "- Campaign window: not given" in note
    assert "deadline not checked: no campaign window given" in note


def test_several_deliverables_count_the_validated_one_only():
    note = decision_note([variant("v1", "batch 8")], {**CAMPAIGN, "deliverables": 3}, PRICING)
    assert "- Accepted deliverables: 1 of 3" in note
    assert "- Cost per validated corpus: 220.00 USD" in note
    assert "the other 2 are not validated yet" in note


@pytest.mark.parametrize("campaign,pricing,pattern", [
    ({**CAMPAIGN, "deliverables": 0}, PRICING, "deliverables must be an integer >= 1"),
    (CAMPAIGN, {**PRICING, "days": 5}, "days '5' not offered"),
    (CAMPAIGN, {**PRICING, "lots": 0}, "--lots must be an integer >= 1"),
    (CAMPAIGN, {**PRICING, "window_end": "2026-09-27T09:00"}, "is not after window start"),
    ({**CAMPAIGN, "deadline": "friday"}, PRICING, "deadline 'friday' is not an ISO date-time"),
])
def test_bad_pricing_input_raises(campaign, pricing, pattern):
    with pytest.raises(PricingError, match=pattern):
        decision_note([variant("v1", "batch 8")], campaign, pricing)


def test_no_cost_section_says_no_package_declared_never_a_default_gpu():
    pricing = {**PRICING, "gpu": None, "days": None}
    note = decision_note([variant("v1", "batch 8, fp32")], CAMPAIGN, pricing)
    assert "no package declared (the campaign file has no [cost] section)" in note
    assert "rtx-4090" not in note and "RTX 4090" not in note and "USD" not in note
    excluded = note.split("## Excluded configurations", 1)[1].split("## Decision", 1)[0]
    assert "batch 8" not in excluded  # a missing package is not the configuration's failure
    decision = note.split("## Decision", 1)[1]
    assert "No package declared" in decision and "batch 8, fp32" in decision and "Chosen" not in decision


def test_utilization_line_never_writes_three_medians_as_a_quotient():
    """113.14 / 308.6 is 36.7 %, while the median of the passes' own ratios was 37.6 %: the line
    gives the three medians side by side and never as 'X of Y = Z'."""
    v = variant("v1", "batch 1, fp32", achieved_flop_per_s_median=113.14e9,
                ceiling_flop_per_s_median=308.6e9, utilization_median=0.376)
    text = v.utilization_text()
    assert "=" not in text and " of a " not in text
    assert "achieved 113.14 GFLOP/s, matmul ceiling 308.6 GFLOP/s, ratio 37.6 % (medians of passes ok)" in text


def test_small_text_defects_of_the_note_are_gone():
    """Issue 22 part 3: a window that ends at the deadline says so once; an accepted verdict
    that counts its passes is not counted again; the utilization line names its medians once."""
    at_deadline = {**PRICING, "window_end": "2026-10-02T18:00"}  # Rome: the deadline's instant
    note = decision_note([variant("v1", "batch 8, fp32", quality_verdict="accepted (2 of 2 passes)",
                                  accepted_passes=2, achieved_flop_per_s_median=113.14e9,
                                  ceiling_flop_per_s_median=308.6e9, utilization_median=0.376)],
                         CAMPAIGN, at_deadline)
    assert "its campaign window ends at the deadline, 2026-10-02T18:00:00+02:00" in note
    assert "before the deadline 2026-10-02T18:00:00+02:00" not in note
    assert "- Quality verdict: accepted (2 of 2 passes)\n" in note and "accepted pass(es))" not in note
    assert note.count("(medians of passes ok)") == 1
    rejected = decision_note([variant("v1", "batch 8, fp32", accepted_passes=0,
                                      quality_verdict="rejected: metric 0.41 < threshold 0.55")],
                             CAMPAIGN, PRICING)
    assert "- Quality verdict: rejected: metric 0.41 < threshold 0.55 (0 accepted pass(es))" in rejected
