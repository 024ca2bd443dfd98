"""The rate search of a server scenario: the highest declared request rate that holds the latency
objective, found by climbing each server configuration's ladder of rates (issue 36).

``[scenario] search = true``: the variants of one server configuration (the same variant but for
``request_rate``: lab.inputs.variants.Variant.ladder_id) are the rungs of a ladder, bounded by its
lowest and its highest declared rate, its steps the rates declared between them. The plan stays the declared one,
locked before timing; only the order within a repetition changes: each ladder's rungs take the
positions the rotated schedule gives them, lowest rate first (:func:`climb`), and the offline
variants still rotate. While a repetition climbs, a rung above one that did not hold the objective
in that repetition is not run: its slot gets a SKIPPED row (lab.passes.events.PassStatus) whose
note names the rung below (:func:`skip_reason`). A rung does not hold when its slot's last finished
attempt failed (oom, error, killed), was itself skipped, or ended ok without holding the objective
(its result.json's ``serving`` verdict); acceptance (the same ML result) is judged for every pass as
before and does not stop the climb. A rate then holds for a configuration only when every
repetition ran it and held (lab.report.summary: a skipped slot is not a pass that held).

``archive verify`` re-derives every SKIPPED row with the same rule from the plan and the attempts
(lab.evidence.rederive): a skip no rung below justifies is a problem. A rung run where the rule
would have skipped it is not one: it is one more measured pass (an earlier rung's interrupted
attempt, run again after it, may come to fail).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from lab.inputs.variants import Variant
from lab.orchestration.schedule import PlannedPass, rotated_schedule
from lab.passes.events import FAILED, FILLS_SLOT, PassStatus
from lab.passes.records import Attempt


def planned_passes(variants: list[Variant], repetitions: int, search: bool) -> list[PlannedPass]:
    """The campaign's plan: the rotated schedule (lab.orchestration.schedule), its ladders climbed
    when ``search`` ([scenario] search). Raises ValueError as rotated_schedule does."""
    planned = rotated_schedule(variants, repetitions)
    return climb(planned) if search else planned


def climb(planned: Sequence[PlannedPass]) -> list[PlannedPass]:
    """``planned`` (a rotated schedule) with each ladder's rungs re-ordered within every
    repetition: the same positions, lowest rate first. Offline variants keep their slots."""
    out = list(planned)
    for rep in sorted({p.repetition for p in planned}):
        slots: dict[str, list[int]] = {}
        for k, p in enumerate(out):
            key = p.variant.ladder_id if p.repetition == rep else None
            if key is not None:
                slots.setdefault(key, []).append(k)
        for ks in slots.values():
            rungs = sorted((out[k].variant for k in ks), key=lambda v: v.request_rate or 0.0)
            for k, v in zip(ks, rungs, strict=True):
                out[k] = dataclasses.replace(out[k], variant=v)
    return out


def outcome(attempts: Sequence[Attempt], seq: int) -> Attempt | None:
    """The last finished attempt of slot ``seq`` (skipped rows included); None while it has none."""
    done = [a for a in attempts if a.seq == seq and a.status in FILLS_SLOT]
    return done[-1] if done else None


def held(a: Attempt) -> bool:
    """Whether a rung's finished attempt held the objective: status ok and its serving verdict."""
    from lab.passes.tasks.server_job import serving_record

    rec = serving_record(a.result.serving) if a.status == PassStatus.OK and a.result is not None else None
    return rec is not None and rec.verdict.holds


def skip_reason(plan: Sequence[PlannedPass], attempts: Sequence[Attempt], seq: int) -> str:
    """Why slot ``seq`` of ``plan`` is not run by the search ('' when it is run): the first rung
    below it, in its repetition and ladder, whose outcome did not hold the objective."""
    slot = next(p for p in plan if p.seq == seq)
    key = slot.variant.ladder_id
    if key is None:
        return ""
    rate = slot.variant.request_rate or 0.0
    below = sorted((p for p in plan if p.repetition == slot.repetition and p.variant.ladder_id == key
                    and (p.variant.request_rate or 0.0) < rate), key=lambda p: p.variant.request_rate or 0.0)
    for p in below:
        a = outcome(attempts, p.seq)
        if a is None or held(a):
            continue
        why = ("skipped by the search itself" if a.status == PassStatus.SKIPPED else
               f"failed ({a.status})" if a.status in FAILED else "did not hold the objective")
        return (f"not run: rate search ([scenario] search = true): {p.variant.request_rate:g} req/s "
                f"(pass {a.pass_id}) {why} in repetition {slot.repetition}, so the higher rates of this "
                "configuration are not tried in it")
    return ""


def unjustified_skips(plan: Sequence[PlannedPass], attempts: Sequence[Attempt]) -> list[str]:
    """One line per SKIPPED row that the rule (:func:`skip_reason`) does not give from the attempts
    that had ended when it was written (end time at or before its start), whose note is not that
    reason word for word, or whose slot also has a pass that ran: what ``archive verify`` reports."""
    out = []
    for a in attempts:
        if a.status != PassStatus.SKIPPED:
            continue
        if any(b.seq == a.seq and b.status != PassStatus.SKIPPED for b in attempts):
            out.append(f"pass {a.pass_id}: skipped by the rate search, yet its slot also ran a pass")
            continue
        ended = [b for b in attempts if b is not a and b.end_time and a.start_time and b.end_time <= a.start_time]
        why = skip_reason(plan, ended, a.seq) if any(p.seq == a.seq for p in plan) else ""
        if not why:
            out.append(f"pass {a.pass_id}: skipped by the rate search, but no lower rate of its configuration "
                       "had failed to hold the objective in its repetition before it")
        elif a.notes != why:
            out.append(f"pass {a.pass_id}: its note is not the rate search's reason re-derived from the passes "
                       f"before it ({why!r})")
    return out
