"""Feasibility before cost, (b) evidence after passes: which variants completed their long items.

The rule's planning half, (a), is ``lab.memory.feasibility`` (SPEC 3.9: memory is judged before
cost, and a variant is compared on cost only if it is feasible).

A variant is infeasible when any of its passes that was not interrupted by the user ran out of
memory (status "oom"), or was killed for host memory (status "killed") before it completed the
long bucket (coverage["long"] observed < expected; where a pass has no coverage,
items_completed < items_total means the long items cannot be shown complete). Passes with
status "interrupted" (stopped by the user) are left out of the judgement: they alone never make
a variant infeasible; so are a rate search's "skipped" rows (never run: no memory evidence). A
pass that failed with any other error (status "error": an exception in
the user's code, a bad output, a crash that is not a memory failure) is no memory evidence,
before or after the long items: it shows neither that the variant fits nor that it does not, is
named in the reason, and leaves the exclusion to the failure and validation verdicts (a
new user's trial: a ValueError raised in a custom entry's predict read "Memory: infeasible").
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.memory.feasibility import LONG
from lab.passes.events import PassStatus
from lab.report.pass_row import PassRow


@dataclass(frozen=True)
class Feasibility:
    """A variant's memory feasibility after its passes (rule in the module doc): ``feasible``, and
    ``reason``, the evidence in words ("OOM in 2 of 5 passes; long items completed 37/100")."""

    feasible: bool = True
    reason: str = ""


def _long_counts(p: PassRow, bucket: str) -> tuple[int, int] | None:
    c = (p.coverage or {}).get(bucket)
    return (c.observed, c.expected) if c else None


def _short_of_items(p: PassRow) -> bool:
    """The pass completed fewer items than it was given (an empty count reads as 0)."""
    return (p.items_completed or 0) < (p.items_total or 0)


def campaign_feasibility(passes: list[PassRow], long_bucket: str = LONG) -> dict[str, Feasibility]:
    """{variant_id: Feasibility} from typed raw-table rows (rule in the module doc).

    Each row's ``status`` ("ok", "oom", "error", "killed", "interrupted"), ``items_completed``,
    ``items_total`` and ``coverage`` ({bucket: BucketCoverage} or None) are read.
    """
    by_variant: dict[str, list[PassRow]] = {}
    for p in passes:
        by_variant.setdefault(p.variant_id, []).append(p)
    out = {}
    for vid, rows in by_variant.items():
        judged = [p for p in rows if p.status not in (PassStatus.INTERRUPTED, PassStatus.SKIPPED)]
        n_int = sum(p.status == PassStatus.INTERRUPTED for p in rows)
        n_oom = sum(p.status == PassStatus.OOM for p in judged)
        incomplete, worst = 0, None
        crash_after_long = errors_before_long = 0
        for p in judged:
            lc = _long_counts(p, long_bucket)
            if p.status == PassStatus.ERROR:  # no memory evidence either way (module doc)
                if (lc[0] < lc[1]) if lc is not None else _short_of_items(p):
                    errors_before_long += 1
                else:
                    crash_after_long += 1
                continue
            if lc is not None:
                short_of_long = lc[0] < lc[1]
                if worst is None or lc[0] * worst[1] < worst[0] * lc[1]:
                    worst = lc
            else:
                short_of_long = p.status != PassStatus.OK and _short_of_items(p)
            if short_of_long and p.status != PassStatus.OOM:
                incomplete += 1
            elif not short_of_long and p.status == PassStatus.KILLED:
                crash_after_long += 1
        parts = []
        if n_oom:
            parts.append(f"OOM in {n_oom} of {len(judged)} passes")
        if incomplete:
            parts.append(f"long items incomplete in {incomplete} of {len(judged)} passes without OOM")
        feasible = not parts
        if worst is not None and (not feasible or worst[0] < worst[1]):
            parts.append(f"{long_bucket} items completed {worst[0]}/{worst[1]}")
        elif not feasible:
            parts.append(f"{long_bucket} items not shown complete (no coverage recorded)")
        if feasible:
            shown = len(judged) - errors_before_long
            if shown:
                parts.append(f"{shown} pass(es) judged, none ran out of memory or stopped before "
                             f"the {long_bucket} items")
            else:
                parts.append("no pass judged yet (feasibility not shown, not refuted)")
            if errors_before_long:
                parts.append(f"{errors_before_long} pass(es) failed with an error that is not a memory failure "
                             f"before the {long_bucket} items: no memory evidence (a failure verdict)")
            if crash_after_long:
                parts.append(f"{crash_after_long} crash(es) after the {long_bucket} items: a validation matter")
        if n_int:
            parts.append(f"{n_int} interrupted pass(es) not counted")
        out[vid] = Feasibility(feasible, "; ".join(parts))
    return out
