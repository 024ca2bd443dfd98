"""compare's output-token figures per configuration (lab.compare.projection.output_token_figures):
a generation variant's output tokens scaled to the user's load and priced with the covering package
by the campaign decision note's division; the other kinds' cells empty with the reason (issue 17)."""

from __future__ import annotations

import dataclasses

from lab.compare.projection import output_token_figures
from lab.cost.forfaits import load_catalog
from lab.cost.sizing import cheapest_covering
from lab.report.decision_note import generation_costs
from lab.report.summary import VariantSummary

GENERATED = VariantSummary(variant_id="g", label="generation", output_tokens=110, items_total=20,
                           output_tokens_per_s_median=70.0)


def covering():
    """The bundle catalog's cheapest rtx-4090 package, for a load one lot processes in an hour."""
    sizing = cheapest_covering(load_catalog(), "rtx-4090", lambda lots: 1.0, None, 1)
    assert sizing is not None
    return sizing


def test_a_generation_variant_is_priced_per_item_and_per_million_output_tokens_at_the_load():
    load = 100_000
    sizing = covering()
    f = output_token_figures("generation", GENERATED, load, sizing)
    at_load = 110 * load // 20
    assert f["output_tokens"] == GENERATED.output_tokens and f["output_tokens_at_load"] == at_load
    assert (f["cost_per_item"], f["cost_per_million_output_tokens"]) == generation_costs(
        sizing.quote.committed_budget, load, at_load)
    assert "tokens_note" not in f


def test_other_kinds_and_unsized_rows_leave_the_cells_empty_and_say_why():
    for kind in ("classification", "embedding", "custom"):
        f = output_token_figures(kind, VariantSummary(variant_id="c", label="c", items_total=20), 1000,
                                 covering())
        assert f["output_tokens"] is None and "cost_per_item" not in f
        assert f["tokens_note"] == f"no output tokens: a {kind} task generates no text"
    f = output_token_figures("generation", GENERATED, 1000, None)
    assert f["output_tokens_at_load"] and "cost_per_item" not in f and "no package sized" in f["tokens_note"]
    f = output_token_figures("generation", dataclasses.replace(GENERATED, output_tokens=1), 1, covering())
    assert "cost_per_item" not in f and "nothing to divide by" in f["tokens_note"]
