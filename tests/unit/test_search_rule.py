"""The rate search of a server scenario (lab.orchestration.search): each configuration's declared
rates climbed in ascending order within every repetition, the rates above one that did not hold
the objective skipped in that repetition, every skip re-derivable from the plan and the attempts.
Typed journal records built here, no pass run."""

from __future__ import annotations

import msgspec
import pytest
from test_scenario_section import SERVED, SERVER, server_campaign

from lab.inputs.variants import Variant
from lab.orchestration.protocol import ProtocolError, load_protocol
from lab.orchestration.schedule import pass_id_for, rotated_schedule
from lab.orchestration.search import climb, planned_passes, skip_reason, unjustified_skips
from lab.passes.events import PassStatus
from lab.passes.records import Attempt, PassResult
from lab.report.summary import VariantSummary

REF = Variant(batch_size=8)
RATES = [Variant(engine="vllm", request_rate=r) for r in (4, 1, 2)]  # declared out of order on purpose
OTHER = [Variant(engine="vllm", request_rate=r, max_num_seqs=4) for r in (1, 2)]  # a second configuration


def serving(holds: bool) -> dict:
    """A server pass's serving record as result.json holds it, whose verdict ``holds`` or not."""
    from test_serving_figures import RECORDS

    from lab.engines.serving_figures import Bound, Objective, figures, plain, verdict
    from lab.passes.tasks.server_job import ServingRecord

    objective = Objective(bounds=(Bound("ttft", 99.0, 1.0 if holds else 0.01),), share=0.5)
    return plain(ServingRecord(figures=figures(RECORDS, 2.0, 2.0, objective), verdict=verdict(RECORDS, objective),
                               requests=4, answered=3, generator_cpu_s=0.1, generator_wall_s=2.0, schedule_note=""))


def attempt(p, status: str, holds: bool | None = None, attempt_no: int = 1, notes: str = "") -> Attempt:
    """A finished attempt of planned slot ``p``, started and ended in its slot's second (slots run
    in plan order); ``holds``: its serving verdict (None: no record)."""
    result = None
    if holds is not None:
        result = PassResult(pass_id="x", campaign="c", variant={}, start_time="", end_time="", status=status,
                            error="", phases_s={}, items_total=4, items_completed=4, predictions_path="",
                            exit_code=0, serving=serving(holds))
    return Attempt(pass_id=pass_id_for(p.seq, p.repetition, p.variant.variant_id, attempt_no), seq=p.seq,
                   attempt=attempt_no, repetition=p.repetition, position=p.position, variant_id=p.variant.variant_id,
                   status=status, result=result, notes=notes, start_time=f"2026-01-01T00:00:{p.seq:02d}.000+00:00",
                   end_time=f"2026-01-01T00:00:{p.seq:02d}.500+00:00")


def test_each_ladder_climbs_within_every_repetition_in_the_slots_the_rotation_gives_it():
    variants = [REF, *RATES, *OTHER]
    rotated = rotated_schedule(variants, 3)
    plan = climb(rotated)
    assert [(p.seq, p.repetition, p.position) for p in plan] == [(p.seq, p.repetition, p.position) for p in rotated]
    for rep in (1, 2, 3):
        slots = [p for p in plan if p.repetition == rep]
        for ladder in ({v.variant_id for v in RATES}, {v.variant_id for v in OTHER}):
            rates = [p.variant.request_rate for p in slots if p.variant.variant_id in ladder]
            assert rates == sorted(rates) and len(rates) == len(ladder)
        # the offline variant keeps the slot the rotation gave it: no variant always first
        assert [p.position for p in slots if p.variant == REF] == [q.position for q in rotated
                                                                  if q.repetition == rep and q.variant == REF]
    assert {p.position for p in plan if p.variant == REF} == {1, 6, 5}
    assert planned_passes(variants, 3, search=False) == rotated  # no search: the rotated schedule itself


def test_the_rates_above_one_that_did_not_hold_are_skipped_in_its_repetition_only():
    plan = planned_passes([REF, *RATES, *OTHER], 2, search=True)
    at = {(p.repetition, p.variant.variant_id): p for p in plan}

    def slot(rep, v):
        return at[(rep, v.variant_id)]

    r1, r2, r4 = (Variant(engine="vllm", request_rate=r) for r in (1, 2, 4))
    attempts = [attempt(slot(1, r1), PassStatus.OK, True), attempt(slot(1, r2), PassStatus.OK, False)]
    why = skip_reason(plan, attempts, slot(1, r4).seq)
    assert why.startswith("not run: rate search ([scenario] search = true): 2 req/s (pass ")
    assert "did not hold the objective in repetition 1" in why
    assert skip_reason(plan, attempts, slot(1, r2).seq) == ""  # the rung below it held
    assert skip_reason(plan, attempts, slot(2, r4).seq) == ""  # another repetition climbs afresh
    assert skip_reason(plan, attempts, slot(1, OTHER[1]).seq) == ""  # another configuration: its own ladder
    assert skip_reason(plan, attempts, slot(1, REF).seq) == ""  # an offline variant is never skipped
    # a failed rung (its last finished attempt) stops the climb too; an interrupted one is not an outcome
    failed = [attempt(slot(2, r1), PassStatus.INTERRUPTED), attempt(slot(2, r1), PassStatus.OOM, attempt_no=2)]
    assert "1 req/s (pass " in skip_reason(plan, failed, slot(2, r2).seq)
    assert "failed (oom)" in skip_reason(plan, failed, slot(2, r4).seq)
    assert skip_reason(plan, failed[:1], slot(2, r2).seq) == ""
    # a rung skipped itself stops the ones above it: the reason names the first rung that did not hold
    chain = [*failed, attempt(slot(2, r2), PassStatus.SKIPPED)]
    assert "failed (oom)" in skip_reason(plan, chain, slot(2, r4).seq)


def test_verify_rederives_every_skip_and_names_one_no_rung_below_justifies():
    plan = planned_passes([REF, *RATES], 1, search=True)
    r1, r2, r4 = (next(p for p in plan if p.variant.request_rate == r) for r in (1.0, 2.0, 4.0))
    ran = [attempt(r1, PassStatus.OK, True), attempt(r2, PassStatus.OK, False)]
    why = skip_reason(plan, ran, r4.seq)
    honest = [*ran, attempt(r4, PassStatus.SKIPPED, notes=why)]
    assert unjustified_skips(plan, honest) == []
    forged = [attempt(r1, PassStatus.OK, True), attempt(r2, PassStatus.OK, True), attempt(r4, PassStatus.SKIPPED)]
    [problem] = unjustified_skips(plan, forged)
    assert problem.startswith(f"pass {forged[2].pass_id}: skipped by the rate search, but no lower rate")
    ran_too = [*honest, attempt(r4, PassStatus.OK, True, attempt_no=2)]
    assert any("yet its slot also ran a pass" in p for p in unjustified_skips(plan, ran_too))
    # a note blaming another pass (a new user's forgery: the rate that held, in another repetition) is named
    blamed = [*ran, attempt(r4, PassStatus.SKIPPED, notes=why.replace(ran[1].pass_id, ran[0].pass_id))]
    [problem] = unjustified_skips(plan, blamed)
    assert problem.startswith(f"pass {blamed[2].pass_id}: its note is not the rate search's reason") and why in problem
    # a lower rate whose failing attempt ended after the skip was written does not justify it
    ended_late = msgspec.structs.replace(attempt(r2, PassStatus.OK, False), end_time="2026-01-01T00:00:59.000+00:00")
    late = [attempt(r1, PassStatus.OK, True), ended_late, attempt(r4, PassStatus.SKIPPED, notes=why)]
    assert any("before it" in p for p in unjustified_skips(plan, late))


def test_a_rate_skipped_in_one_repetition_does_not_hold_for_its_configuration():
    held = VariantSummary(variant_id="v", label="x, 4 req/s", successes=2, accepted_passes=2, request_rate=4.0,
                          served_holds=2)
    assert held.holds_objective
    skipped = VariantSummary(variant_id="v", label="x, 4 req/s", successes=2, accepted_passes=2, request_rate=4.0,
                             served_holds=2, served_skipped=1)
    assert not skipped.holds_objective


def test_a_search_is_declared_in_the_scenario_and_needs_two_rates_per_configuration(tmp_path):
    proto = load_protocol(server_campaign(tmp_path, scenario=SERVER + "search = true\n"))
    assert proto.config.scenario.search
    one_rate = SERVED.replace("values = [1, 2.5, 4]", "values = [2]")
    with pytest.raises(ProtocolError, match=r"search = true climbs each server configuration's rates, and variant "
                                            r"served/request_rate=2\S* is the only rate of its configuration"):
        load_protocol(server_campaign(tmp_path, scenario=SERVER + "search = true\n", series=one_rate))
