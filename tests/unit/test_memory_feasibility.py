"""Feasibility before cost: largest batch under a budget, and the campaign rule on raw-table rows."""
from __future__ import annotations

import pytest

from lab.memory.estimate import EncoderShape, activation_bytes_per_item
from lab.memory.feasibility import batch_fits, device_budget_bytes
from lab.report.long_items import Feasibility, campaign_feasibility
from lab.report.pass_row import pass_rows

MINILM = EncoderShape(384, 12, 1536, 6, 22_720_916, "sdpa")
GIB = 2**30


def feasibility(rows):
    """campaign_feasibility of hand-made raw-table rows, typed as summary.campaign_summary types them."""
    return campaign_feasibility(pass_rows(rows))


def row(vid, status, long_obs=100, done=1000, coverage=True):
    cov = {"short": {"expected": 600, "observed": 600}, "medium": {"expected": 300, "observed": 300},
           "long": {"expected": 100, "observed": long_obs}} if coverage else None
    return {"variant_id": vid, "status": status, "items_completed": done, "items_total": 1000, "coverage": cov}


def test_oom_in_some_passes_makes_the_variant_infeasible_with_the_reason_in_words():
    passes = [row("b8", "ok"), row("b8", "oom", long_obs=37, done=937), row("b8", "ok"),
              row("b8", "oom", long_obs=52, done=952), row("b8", "ok")]
    v = feasibility(passes)["b8"]
    assert v == Feasibility(False, "OOM in 2 of 5 passes; long items completed 37/100")


def test_complete_passes_are_feasible():
    v = feasibility([row("b1", "ok")] * 5)["b1"]
    assert v.feasible is True and "5 pass(es) judged" in v.reason


def test_interrupted_passes_alone_do_not_make_a_variant_infeasible():
    out = feasibility([row("b4", "ok"), row("b4", "interrupted", long_obs=3, done=40),
                                row("x", "interrupted", long_obs=0, done=10)])
    assert out["b4"].feasible is True and "1 interrupted pass(es) not counted" in out["b4"].reason
    assert out["x"].feasible is True and "no pass judged yet" in out["x"].reason


def test_long_bucket_incomplete_without_oom_is_infeasible():
    out = feasibility([row("b8", "ok"), row("b8", "killed", long_obs=80, done=980)])
    assert out["b8"].feasible is False
    assert out["b8"].reason == "long items incomplete in 1 of 2 passes without OOM; long items completed 80/100"


def test_killed_pass_without_coverage_cannot_show_its_long_items():
    v = feasibility([row("b8", "killed", done=500, coverage=False)])["b8"]
    assert v.feasible is False and "not shown complete" in v.reason


@pytest.mark.parametrize("coverage", [True, False])
def test_an_error_before_the_long_items_is_no_memory_evidence(coverage):
    """An exception in the user's predict (status "error") stops a pass before its long items:
    the variant is not infeasible for memory (its failure verdict excludes it), and says why."""
    v = feasibility([row("b8", "error", long_obs=0, done=12, coverage=coverage)])["b8"]
    assert v.feasible is True
    assert v.reason == ("no pass judged yet (feasibility not shown, not refuted); 1 pass(es) failed with an error "
                           "that is not a memory failure before the long items: no memory evidence (a failure verdict)")
    # beside a pass that completed, the complete one is the evidence, the error is named
    v = feasibility([row("b8", "ok"), row("b8", "error", long_obs=0, done=12, coverage=coverage)])["b8"]
    assert v.feasible is True and v.reason.startswith("1 pass(es) judged, none ran out of memory")
    assert "1 pass(es) failed with an error that is not a memory failure" in v.reason
    # an OOM in another pass still decides
    v = feasibility([row("b8", "oom", long_obs=10, done=910), row("b8", "error", long_obs=0, done=12)])["b8"]
    assert v.feasible is False and v.reason.startswith("OOM in 1 of 2 passes")


def test_crash_after_the_long_items_is_a_validation_matter_not_feasibility():
    v = feasibility([row("b8", "error", long_obs=100, done=999)])["b8"]
    assert v.feasible is True and "crash(es) after the long items" in v.reason


def test_largest_batch_per_bucket_under_a_budget_with_the_margin_stated():
    fits = batch_fits(MINILM, "fp32", {"short": 63, "medium": 255, "long": 14603}, 24 * GIB,
                      max_length=512, variant_batch_size=8, margin_fraction=0.10)
    usable = int(24 * GIB * 0.9)
    long = fits["long"]
    assert long.seq_len_tokens == 512                   # capped at the variant's max_length
    assert long.usable_bytes == usable and long.margin_fraction == 0.10
    per = activation_bytes_per_item(MINILM, "fp32", 512)
    assert long.max_batch_size == (usable - 4 * MINILM.n_params) // per
    assert long.weights_bytes + long.max_batch_size * per <= usable
    assert usable < long.weights_bytes + (long.max_batch_size + 1) * per
    assert fits["short"].max_batch_size > fits["medium"].max_batch_size > long.max_batch_size
    assert all(f.variant_fits for f in fits.values())


def test_budget_smaller_than_the_weights_fits_nothing():
    fits = batch_fits(MINILM, "fp32", {"long": 512}, 80 * 2**20, variant_batch_size=1)
    assert fits["long"].max_batch_size == 0 and fits["long"].variant_fits is False
    with pytest.raises(ValueError):
        batch_fits(MINILM, "fp32", {"long": 512}, 0)


def test_no_gpu_budget_on_cpu_says_why():
    budget, why = device_budget_bytes("cpu")
    assert budget is None and "--budget-bytes" in why
