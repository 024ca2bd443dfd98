"""Feasibility before cost: what fits a memory budget, and which variants completed their long items.

Rule (seed: "Un'opzione deve completare il corpus con i suoi input lunghi prima che il
suo costo venga confrontato"; SPEC 3.9): memory is a feasibility criterion, judged
before cost. A variant is compared on cost only if it is feasible:

- (a) planning, before any pass: the largest batch per length bucket whose estimated
  peak (``lab.memory.estimate``) fits ``budget_bytes * (1 - margin_fraction)``; the
  margin is kept for what the estimate leaves out (context, allocator rounding,
  fragmentation) and is stated in every result.
- (b) evidence, after passes: ``campaign_feasibility``. A variant is infeasible when any
  of its passes that was not interrupted by the user ran out of memory (status "oom"),
  or did not complete the long bucket (coverage["long"] observed < expected; where a
  pass has no coverage, items_completed < items_total on a failed pass means the long
  items cannot be shown complete). Passes with status "interrupted" (stopped by the
  user) are left out of the judgement: they alone never make a variant infeasible.
  A crash after the long items were all completed is a validation failure, not a
  feasibility one; it is named in the reason but does not exclude the variant here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lab.memory.estimate import EncoderShape, activation_bytes_per_item, bytes_per_element
from lab.passes.events import PassStatus

DEFAULT_MARGIN_FRACTION = 0.10
LONG = "long"


@dataclass(frozen=True)
class BucketFit:
    """Largest batch (items) of one length bucket under a budget; 0 when nothing fits."""

    bucket: str
    seq_len_tokens: int
    max_batch_size: int
    budget_bytes: int
    margin_fraction: float
    usable_bytes: int
    weights_bytes: int
    activation_bytes_per_item: int
    variant_batch_size: int | None
    variant_fits: bool | None

    def to_json(self) -> dict:
        return asdict(self)


def device_budget_bytes(device: str) -> tuple[int | None, str]:
    """Total memory of a GPU in bytes (torch device properties), or (None, reason) on CPU."""
    if not device.startswith("cuda"):
        return None, "no GPU in this run: give a budget in bytes (--budget-bytes)"
    import torch

    return int(torch.cuda.get_device_properties(device).total_memory), ""


def batch_fits(shape: EncoderShape, precision: str, bucket_max_tokens: dict[str, int],
               budget_bytes: int, max_length: int | None = None, variant_batch_size: int | None = None,
               margin_fraction: float = DEFAULT_MARGIN_FRACTION) -> dict[str, BucketFit]:
    """{bucket: BucketFit} for one variant (precision, max_length, batch size).

    ``bucket_max_tokens``: longest item per bucket in tokens; the bucket's length is that,
    capped at the variant's ``max_length`` (padding to the longest in a batch is the worst
    case). The activation term is linear in batch size, so the largest batch is
    floor((usable - weights) / activation per item). Raises ValueError for a budget <= 0
    or a margin outside [0, 1).
    """
    if budget_bytes <= 0 or not 0 <= margin_fraction < 1:
        raise ValueError(f"budget {budget_bytes} B must be > 0 and margin {margin_fraction} in [0, 1)")
    usable = int(budget_bytes * (1 - margin_fraction))
    weights = shape.n_params * bytes_per_element(precision)
    out = {}
    for bucket, n in bucket_max_tokens.items():
        s = min(n, max_length) if max_length else n
        per_item = activation_bytes_per_item(shape, precision, s)
        best = max(0, (usable - weights) // per_item)
        fits = None if variant_batch_size is None else variant_batch_size <= best
        out[bucket] = BucketFit(bucket, s, int(best), budget_bytes, margin_fraction, usable, weights,
                                per_item, variant_batch_size, fits)
    return out


def _long_counts(p: dict, bucket: str) -> tuple[int, int] | None:
    cov = p.get("coverage") or {}
    c = cov.get(bucket)
    return (int(c["observed"]), int(c["expected"])) if c else None


def campaign_feasibility(passes: list[dict], long_bucket: str = LONG) -> dict[str, dict]:
    """{variant_id: {"feasible": bool, "reason": str}} from raw-table rows (rule in the module doc).

    Each row: ``variant_id``, ``status`` ("ok", "oom", "error", "killed", "interrupted"),
    ``items_completed``, ``items_total``, ``coverage`` ({bucket: {"expected", "observed"}}
    or None). Raises KeyError when a row lacks ``variant_id`` or ``status``.
    """
    by_variant: dict[str, list[dict]] = {}
    for p in passes:
        by_variant.setdefault(p["variant_id"], []).append(p)
    out = {}
    for vid, rows in by_variant.items():
        judged = [p for p in rows if p["status"] != PassStatus.INTERRUPTED]
        n_int = len(rows) - len(judged)
        n_oom = sum(p["status"] == PassStatus.OOM for p in judged)
        incomplete, worst = 0, None
        crash_after_long = 0
        for p in judged:
            lc = _long_counts(p, long_bucket)
            if lc is not None:
                short_of_long = lc[0] < lc[1]
                if worst is None or lc[0] * worst[1] < worst[0] * lc[1]:
                    worst = lc
            else:
                short_of_long = p["status"] != PassStatus.OK and p.get("items_completed", 0) < p.get("items_total", 0)
            if short_of_long and p["status"] != PassStatus.OOM:
                incomplete += 1
            elif not short_of_long and p["status"] in (PassStatus.ERROR, PassStatus.KILLED):
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
            if judged:
                parts.append(f"{len(judged)} pass(es) judged, none ran out of memory or stopped before "
                             f"the {long_bucket} items")
            else:
                parts.append("no pass judged yet (feasibility not shown, not refuted)")
            if crash_after_long:
                parts.append(f"{crash_after_long} crash(es) after the {long_bucket} items: a validation matter")
        if n_int:
            parts.append(f"{n_int} interrupted pass(es) not counted")
        out[vid] = {"feasible": feasible, "reason": "; ".join(parts)}
    return out
