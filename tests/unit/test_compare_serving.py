"""compare of server archives (issue 36, lab.compare.serving): each host's highest holding rate sized
for the declared peak, priced from the comparison's catalog, the lowest committed budget chosen,
and the break-even traffic as peak ranges. The archives here are stand-ins carrying only what the
serving part reads (summaries, package, hardware); the real archives are compared in
tests/vllm/test_server_campaign.py. Prices come from a catalog written by the test."""

from __future__ import annotations

from decimal import Decimal
from types import SimpleNamespace

import pytest

from lab.compare.serving import ServedOffer, cheaper_by_peak, serving_comparison
from lab.cost.forfaits import load_catalog, quote
from lab.cost.hardware import Measured
from lab.inputs.scenario import ScenarioSection
from lab.inputs.variants import Variant
from lab.orchestration.agreement import AgreementRule
from lab.orchestration.config import CostSection
from lab.passes.events import PassStatus
from lab.report.summary import VariantSummary

CATALOG = ("gpu,gpu_name,cards_per_lot,days,price_per_lot,currency,catalog_version\n"
           "small,Small GPU,1,7,110.00,USD,2026-12-05\n"
           "big,Big GPU,2,7,2071.00,USD,2026-12-05\n")


def test_cheaper_by_peak_judges_each_range_between_whole_lots():
    # a: 100 per lot holding 2 req/s; b: 150 per lot holding 4 req/s
    assert cheaper_by_peak((Decimal(100), 2.0), (Decimal(150), 4.0), 16.0) == [
        (0.0, 2.0, "a"),    # one lot each: 100 < 150
        (2.0, 4.0, "b"),    # a needs 2 lots (200), b one (150)
        (4.0, 6.0, "same"),  # 300 and 300
        (6.0, 16.0, "b")]   # b's price per req/s is lower from there on
    assert cheaper_by_peak((Decimal(100), 2.0), (Decimal(100), 2.0), 5.0) == [(0.0, 5.0, "same")]
    with pytest.raises(ValueError, match="capacities and a range > 0"):
        cheaper_by_peak((Decimal(100), 0.0), (Decimal(150), 4.0), 16.0)


def server_variant(rate: float, held: int, passes: int = 3, accepted: int | None = None) -> dict:
    v = Variant(engine="vllm", request_rate=rate)
    return {"variant_id": v.variant_id, "label": v.label, "successes": passes, "served_holds": held,
            "accepted_passes": passes if accepted is None else accepted, "request_rate": rate,
            "output_tokens": 240, "items_total": 24}


def archive(name: str, gpu: str, variants: list[dict], scenario: ScenarioSection,
            predictions: dict | None = None, window_s: float = 70.0, vectors: dict | None = None) -> SimpleNamespace:
    """An archive stand-in: each variant's passes ok, accepted, of ``window_s`` measured seconds."""
    rows = [SimpleNamespace(variant_id=v["variant_id"], status=PassStatus.OK, accepted=True, measured_s=window_s)
            for v in variants for _ in range(v["successes"])]
    return SimpleNamespace(name=name, hardware=f"{gpu} host", variants=[VariantSummary.from_json(v) for v in variants],
                           gpu=gpu, raw_rows=rows,
                           cost=CostSection(gpu=gpu, days=7), measured=lambda vid: Measured(),
                           config=SimpleNamespace(scenario=scenario, timing=TIMING), predictions=predictions or {},
                           vectors=vectors or {})


TIMING = SimpleNamespace(min_window_s=60.0, min_accepted_passes=3)  # the projection rule's defaults


RULE = AgreementRule.of({"max_differing": 0.0}, "generation")  # every id the same output


SCENARIO = ScenarioSection(kind="server", ttft_s=1.0, tpot_s=0.25, peak_rate=20, average_rate=5)


def test_the_package_holding_the_peak_for_the_least_committed_budget_is_chosen(tmp_path):
    (tmp_path / "c.csv").write_text(CATALOG)
    catalog = load_catalog(str(tmp_path / "c.csv"))
    # A holds 2 req/s (4 does not hold on every pass); B holds 40 req/s per card, 2 cards per lot
    a = archive("a.tar.gz", "small", [server_variant(1, 3), server_variant(2, 3), server_variant(4, 2)], SCENARIO)
    b = archive("b.tar.gz", "big", [server_variant(10, 3), server_variant(40, 3)], SCENARIO)
    s = serving_comparison([a, b], ["A", "B"], catalog, 20, RULE, None)  # --max-lots 20: up to 40 req/s of A
    assert s is not None and s.chosen is not None
    offer_a, offer_b = s.offers
    assert offer_a.variant.request_rate == 2 and offer_a.rates == (1, 2, 4)
    assert offer_b.variant.request_rate == 40 and offer_b.capacity_per_lot == 80
    # the peak of 20 req/s: 10 lots of A (one server per card at 2 req/s), 1 lot of B
    assert offer_a.quote == quote(catalog, "small", 7, 10) and offer_b.quote == quote(catalog, "big", 7, 1)
    assert s.chosen is offer_a  # 1,100 USD against 2,071 USD
    # per million requests at the average 5 req/s over the package's 168 h
    assert offer_a.per_million_requests == Decimal("1100.00") / Decimal(str(5 * 168 * 3600.0)) * 1_000_000
    assert offer_a.per_million_output_tokens == offer_a.per_million_requests / Decimal("10.0")
    [line] = s.break_even
    # A at 110 USD per 2 req/s, B at 2,071 USD per 80 req/s: B commits less once A needs 19 lots;
    # judged up to what 20 lots of the smaller lot hold (40 req/s)
    assert line.startswith("Break-even traffic, A served, fp32, max 256, vllm against B served, "
                           "fp32, max 256, vllm: B served, fp32, max 256, vllm commits less "
                           "from a peak over 36 req/s"), line
    text = "\n".join(s.lines())
    assert "**Serving decision: host A (small host, archive a.tar.gz)" in text
    assert "10 lot(s) of Small GPU for a peak of 20 req/s, 7-day package, committed budget 1100.00 USD" in text
    assert "objective TTFT p99 <= 1 s, TPOT p99 <= 0.25 s for 90 % of requests" in text


def test_a_configuration_that_holds_no_rate_or_has_no_package_is_listed_not_chosen(tmp_path):
    (tmp_path / "c.csv").write_text(CATALOG)
    catalog = load_catalog(str(tmp_path / "c.csv"))
    never = archive("a.tar.gz", "small", [server_variant(1, 2), server_variant(2, 3, accepted=2)], SCENARIO)
    unpriced = archive("b.tar.gz", "big", [server_variant(10, 3)], SCENARIO)
    unpriced.cost = None
    s = serving_comparison([never, unpriced], ["A", "B"], catalog, 16, RULE, None)
    assert s is not None and s.chosen is None and s.break_even == ()
    assert [o.why for o in s.offers] == ["no declared rate holds the objective",
                                         "no package declared in the archive's [cost]"]
    text = "\n".join(s.lines())
    assert "**Serving decision: none.** No server configuration holds the objective" in text
    assert "no declared rate holds the objective (rates tried: 1, 2 req/s)" in text
    # without a declared peak nothing is sized, and the decision says what to declare
    quiet = ScenarioSection(kind="server", ttft_s=1.0)
    s = serving_comparison([archive("a", "small", [server_variant(2, 3)], quiet)], ["A"], catalog, 16, RULE, None)
    assert s is not None and s.offers[0].why == "no [scenario] peak_rate declared"
    assert "**Serving decision: none.** Declare [scenario] peak_rate (and average_rate)" in "\n".join(s.lines())


def test_served_outputs_that_differ_across_hosts_are_named_against_the_chosen_offer(tmp_path):
    (tmp_path / "c.csv").write_text(CATALOG)
    catalog = load_catalog(str(tmp_path / "c.csv"))
    v = server_variant(2, 3)
    outputs = {f"id{i}": f"answer {i}" for i in range(24)}
    other = {**outputs, "id3": "another answer", "id7": "  answer 7 "}  # one differs; one only by spacing
    a = archive("a.tar.gz", "small", [v], SCENARIO, {v["variant_id"]: outputs})
    b = archive("b.tar.gz", "small", [v], SCENARIO, {v["variant_id"]: other})
    s = serving_comparison([a, b], ["A", "B"], catalog, 16, RULE, "lowercase_space")
    assert s is not None and isinstance(s.chosen, ServedOffer)
    [x] = s.agreements
    assert (x.a, x.b, x.result.check.ids, x.result.check.differing, x.result.same) == ("A", "B", 24, 1, False)
    assert x.text().endswith(": A vs B: 23 of 24 ids agree: NOT the same result"), x.text()
    assert any(line.startswith(f"{s.chosen.key}'s served outputs are NOT the same result on every host")
               for line in s.break_even), s.break_even
    # the same outputs, one id missing on B: not the same result either, and said
    b.predictions = {v["variant_id"]: {k: t for k, t in outputs.items() if k != "id0"}}
    [x] = serving_comparison([a, b], ["A", "B"], catalog, 16, RULE, "lowercase_space").agreements
    assert x.result.check.ok and not x.result.same and "23 of 23 ids agree; 1 id(s) only on A" in x.text()


def test_served_embeddings_across_hosts_are_judged_by_cosine_not_as_labels(tmp_path):
    """An embedding server variant's prediction map is empty (its lines hold rows of vectors.npy):
    its answers across hosts are the vectors, judged per id by the rule's cosine floor."""
    import numpy as np

    (tmp_path / "c.csv").write_text(CATALOG)
    catalog = load_catalog(str(tmp_path / "c.csv"))
    v = server_variant(2, 3)
    ids = tuple(f"id{i}" for i in range(6))
    vecs = np.random.default_rng(1).normal(size=(6, 16)).astype(np.float32)
    rule = AgreementRule.of({}, "embedding")
    a = archive("a.tar.gz", "small", [v], SCENARIO, {v["variant_id"]: {}}, vectors={v["variant_id"]: (ids, vecs)})
    near = vecs + np.float32(1e-4)  # float noise across kernels: the same result
    b = archive("b.tar.gz", "small", [v], SCENARIO, {v["variant_id"]: {}},
                vectors={v["variant_id"]: (ids[::-1], near[::-1])})  # another order: matched by id
    [x] = serving_comparison([a, b], ["A", "B"], catalog, 16, rule, None).agreements
    assert x.result.same and x.result.check.ids == 6 and x.result.cosine_median > 0.999, x.text()
    assert ": A vs B: 6 of 6 ids agree (cosine median " in x.text() and x.text().endswith("the same result")
    turned = near.copy()
    turned[2] = -turned[2]
    b.vectors = {v["variant_id"]: (ids, turned)}
    [x] = serving_comparison([a, b], ["A", "B"], catalog, 16, rule, None).agreements
    assert (x.result.check.differing, x.result.check.lowest_id, x.result.same) == (1, "id2", False), x.text()


def test_a_holding_rate_on_passes_too_short_to_project_is_ranked_only_when_allowed(tmp_path):
    """The projection rule offline configurations meet ([timing] min_window_s, min_accepted_passes)
    applies to a holding rate: 12 s passes are listed, not ranked, unless allow_short; then their
    caveat says so."""
    (tmp_path / "c.csv").write_text(CATALOG)
    catalog = load_catalog(str(tmp_path / "c.csv"))
    short = archive("a.tar.gz", "small", [server_variant(2, 3)], SCENARIO, window_s=12.0)
    s = serving_comparison([short], ["A"], catalog, 16, RULE, None)
    assert s is not None and s.chosen is None
    [offer] = s.offers
    assert offer.too_short.startswith("too short to project: 0 accepted pass(es) of at least 60 s"), offer.too_short
    assert "; not ranked: too short to project" in offer.line() and "--allow-short ranks it" in offer.line()
    s = serving_comparison([short], ["A"], catalog, 16, RULE, None, allow_short=True)
    assert s is not None and s.chosen is not None and s.chosen.basis.too_short
    assert "too short to project" in "\n".join(s.lines()) and "not ranked" not in s.chosen.line()


def test_the_reason_for_no_serving_decision_names_short_passes_and_max_lots(tmp_path):
    (tmp_path / "c.csv").write_text(CATALOG)
    catalog = load_catalog(str(tmp_path / "c.csv"))
    short = archive("a.tar.gz", "small", [server_variant(2, 3)], SCENARIO, window_s=12.0)
    s = serving_comparison([short], ["A"], catalog, 16, RULE, None)
    assert s is not None and s.chosen is None
    assert ("**Serving decision: none.** 1 sized configuration(s) rest on passes too short to project"
            in "\n".join(s.lines()))
    # the peak of 20 req/s at 2 req/s per card needs 10 lots: over --max-lots 4, listed and not ranked
    s = serving_comparison([archive("a.tar.gz", "small", [server_variant(2, 3)], SCENARIO)], ["A"], catalog, 4,
                           RULE, None)
    assert s is not None and s.chosen is None and s.offers[0].why == "the peak needs 10 lots, over --max-lots 4"
