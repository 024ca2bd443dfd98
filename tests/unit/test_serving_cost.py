"""The serving part of the decision (issue 36): the highest declared rate that holds the objective per
server configuration, the lots a declared peak needs and the cost per million requests at the declared
average traffic, from the package price (lab.cost.sizing, lab.report.decision_note)."""

from __future__ import annotations

import pytest

from lab.cost.sizing import served_requests, serving_lots
from lab.inputs.scenario import ScenarioSection
from lab.report.decision_note import decision_note
from lab.report.summary import VariantSummary

PRICING = {"gpu": "rtx-4090", "days": 7, "lots": 1, "catalog_path": None}
CAMPAIGN = {"name": "serve", "question": "Which rental holds my traffic?", "deliverables": 1}


@pytest.mark.parametrize("peak, per_card, cards, lots", [(20, 4, 1, 5), (20, 4, 2, 3), (4, 4, 1, 1), (0.5, 4, 1, 1),
                                                        (12.0000000001, 4, 1, 3), (12.1, 4, 1, 4)])
def test_lots_for_a_peak_are_the_ceiling_of_peak_over_what_a_lot_holds(peak, per_card, cards, lots):
    assert serving_lots(peak, per_card, cards) == lots


def test_a_rate_that_is_not_positive_is_refused():
    with pytest.raises(ValueError):
        serving_lots(10, 0, 1)
    assert served_requests(2.0, 168) == 2.0 * 168 * 3600


def summary(rate, holds=1, successes=1, accepted=1, label="served, fp32, max 128, vllm"):
    suffix = f", {rate:g} req/s" if rate is not None else ""
    return VariantSummary(variant_id=f"v-{rate}", label=label + suffix, durations_s=(10.0,), median_s=10.0,
                          successes=successes, accepted_passes=accepted, quality_verdict="accepted",
                          request_rate=rate, served_holds=holds if rate is not None else 0,
                          items_total=24, output_tokens=120)


def decision(records, scenario):
    note = decision_note(records, CAMPAIGN, PRICING, scenario=scenario)
    return note[note.index("## Decision"):]


def test_the_highest_holding_rate_is_sized_and_priced_at_the_declared_traffic():
    records = [summary(None, label="batch 8, fp32, longest, max 128"), summary(1.0), summary(2.0), summary(4.0),
               summary(8.0, holds=0)]
    text = decision(records, ScenarioSection(kind="server", ttft_s=1.0, peak_rate=20.0, average_rate=5.0))
    assert "**Chosen: batch 8, fp32, longest, max 128**" in text  # the offline ranking: offline only
    assert "- served, fp32, max 128, vllm: **4 req/s** (1 of 1 pass(es) held it" in text
    assert "rates tried: 1, 2, 4, 8 req/s" in text
    # 20 req/s over 4 req/s per card, 1 card per lot: 5 lots of the 7-day package at 110.00 USD per lot
    assert "Peak 20 req/s: 5 lot(s) of 1 NVIDIA GeForce RTX 4090 card(s)" in text and "550.00 USD" in text
    # 550 USD over 5 req/s x 168 h: 3,024,000 requests; 120 output tokens over 24 requests: 5 per request
    assert "3,024,000 requests" in text and "181.88 USD per million requests" in text, text
    assert "36.38 USD per million output tokens" in text, text


def test_no_rate_that_holds_and_no_declared_traffic_are_said():
    text = decision([summary(None, label="batch 8"), summary(1.0, holds=0)], ScenarioSection(kind="server", ttft_s=1.0))
    assert "no declared rate holds it (rates tried: 1 req/s)" in text
    text = decision([summary(None, label="batch 8"), summary(1.0)], ScenarioSection(kind="server", ttft_s=1.0))
    assert "declare [scenario] peak_rate (and average_rate) to size the lots" in text


def test_an_offline_campaign_has_no_serving_part():
    assert "Serving" not in decision([summary(None, label="batch 8")], None)


def test_the_holding_rate_states_its_spread_over_its_passes():
    """The worst pass beside the median (VariantSummary.served_*_max / _min), as summarize keeps them."""
    from dataclasses import replace

    from lab.report.summary import summarize

    rows = [{"variant_id": "v-4", "variant_label": "served, fp32, max 128, vllm, 4 req/s", "pass_id": f"p{k}",
             "status": "ok", "measured_s": 50.0, "request_rate": 4.0, "served_objective_holds": True,
             "served_achieved_rate": rate, "served_ttft_p99_s": ttft, "served_tpot_p99_s": None,
             "served_e2el_p99_s": 0.5}
            for k, (rate, ttft) in enumerate([(3.9, 0.040), (4.0, 0.046), (4.1, 0.035)])]
    rows.append({**rows[0], "pass_id": "p9", "status": "skipped", "measured_s": None})
    [v] = summarize(rows)
    assert (v.successes, v.failures, v.served_skipped) == (3, 0, 1)
    assert (v.served_achieved_rate_min, v.served_ttft_p99_s_max, v.served_tpot_p99_s_max) == (3.9, 0.046, None)
    held = replace(summary(4.0, holds=3, successes=3, accepted=3), served_ttft_p99_s_median=0.040,
                   served_ttft_p99_s_max=0.046, served_achieved_rate_median=4.0, served_achieved_rate_min=3.9)
    text = decision([summary(None, label="batch 8"), held], ScenarioSection(kind="server", ttft_s=1.0))
    assert ("(3 of 3 pass(es) held it and were accepted; rates tried: 4 req/s); spread over its 3 passes ok: p99 TTFT "
            "median 0.040 s, worst 0.046 s; achieved rate median 4, lowest 3.9 req/s") in text, text


def test_rates_a_search_never_ran_are_named_apart_from_the_rates_tried():
    from dataclasses import replace

    from lab.report.summary import server_configs

    never = replace(summary(4.0, holds=0, successes=0, accepted=0), served_skipped=2)
    once = replace(summary(2.0, holds=1, successes=1, accepted=1), served_skipped=1)  # ran in one repetition
    records = [summary(None, label="batch 8"), summary(1.0), once, never]
    [config] = server_configs(records, lambda v: v)
    assert config.skipped == (4.0,) and config.holding is records[1]  # 2 req/s was skipped once: it does not hold
    assert config.tried() == "1, 2 (skipped in 1 repetition(s)) req/s; 4 req/s skipped by the rate search"
    text = decision(records, ScenarioSection(kind="server", ttft_s=1.0, search=True))
    assert "rates tried: 1, 2 (skipped in 1 repetition(s)) req/s; 4 req/s skipped by the rate search)" in text, text


def test_a_rate_the_search_never_ran_is_excluded_as_not_run_not_as_a_failure():
    """A new user's trial: a fully skipped rate read 'rejected: pass status skipped; 59 missing
    id(s)...', 'Memory: infeasible' and 'failures: no successful pass (0 failed)'."""
    from lab.report.long_items import campaign_feasibility
    from lab.report.pass_row import pass_rows
    from lab.report.summary import SKIPPED_VERDICT, summarize

    skipped = [{"variant_id": "v-8", "variant_label": "served, fp32, max 128, vllm, 8 req/s", "pass_id": f"p{k}",
                "status": "skipped", "measured_s": None, "request_rate": 8.0, "items_total": 59,
                "items_completed": 0, "coverage": None} for k in range(2)]
    ran_then_skipped = [{**skipped[0], "variant_id": "v-4", "status": "ok", "measured_s": 30.0, "items_completed": 59,
                         "coverage": {"long": {"expected": 5, "observed": 5}}}, {**skipped[1], "variant_id": "v-4"}]
    feasibility = campaign_feasibility(pass_rows(skipped + ran_then_skipped))
    assert feasibility["v-8"].feasible and feasibility["v-4"].feasible, feasibility
    never, once = summarize(skipped, feasibility), summarize(ran_then_skipped, feasibility)
    assert never[0].quality_verdict == SKIPPED_VERDICT and never[0].failures == 0 and never[0].feasible
    assert once[0].quality_verdict != SKIPPED_VERDICT and once[0].served_skipped == 1
    text = decision_note([summary(None, label="batch 8"), never[0]], CAMPAIGN, PRICING,
                         scenario=ScenarioSection(kind="server", ttft_s=1.0))
    assert f"search: {SKIPPED_VERDICT}" in text and "failures: no successful pass" not in text, text
    assert "Memory: infeasible" not in text and "quality: not run" not in text, text
