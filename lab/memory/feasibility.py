"""Feasibility before cost: what fits a memory budget (planning, before any pass).

Rule (seed: "Un'opzione deve completare il corpus con i suoi input lunghi prima che il
suo costo venga confrontato"; SPEC 3.9): memory is a feasibility criterion, judged
before cost. A variant is compared on cost only if it is feasible:

- (a) planning, before any pass (here): the largest batch per length bucket whose estimated
  peak (``lab.memory.estimate``) fits ``budget_bytes * (1 - margin_fraction)``; the
  margin is kept for what the estimate leaves out (context, allocator rounding,
  fragmentation) and is stated in every result.
- (b) evidence, after passes: ``lab.report.long_items.campaign_feasibility``, which reads the
  passes' statuses (kept out of this package: ``lab.passes`` imports ``lab.memory``, never the
  other way round).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from lab.memory.estimate import (
    DecoderShape,
    EncoderShape,
    activation_bytes_per_item,
    bytes_per_element,
    estimate_generation,
)

DEFAULT_MARGIN_FRACTION = 0.10
LONG = "long"


@dataclass(frozen=True)
class BucketFit:
    """Largest batch (items) of one length bucket under a budget; 0 when nothing fits.

    ``activation_bytes_per_item``: the bytes one more item adds (everything linear in the batch:
    an encoder's activations; for generation, KV cache + prefill activations + logits)."""

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
    _check_budget(budget_bytes, margin_fraction)
    weights = shape.n_params * bytes_per_element(precision)
    out = {}
    for bucket, n in bucket_max_tokens.items():
        s = min(n, max_length) if max_length else n
        out[bucket] = _fit(bucket, s, weights, activation_bytes_per_item(shape, precision, s), budget_bytes,
                           variant_batch_size, margin_fraction)
    return out


def _check_budget(budget_bytes: int, margin_fraction: float) -> None:
    if budget_bytes <= 0 or not 0 <= margin_fraction < 1:
        raise ValueError(f"budget {budget_bytes} B must be > 0 and margin {margin_fraction} in [0, 1)")


def _fit(bucket: str, s: int, weights: int, per_item: int, budget_bytes: int, variant_batch_size: int | None,
         margin_fraction: float) -> BucketFit:
    """The largest batch floor((usable - weights) / per_item) of a peak linear in the batch."""
    usable = int(budget_bytes * (1 - margin_fraction))
    best = max(0, (usable - weights) // per_item)
    fits = None if variant_batch_size is None else variant_batch_size <= best
    return BucketFit(bucket, s, int(best), budget_bytes, margin_fraction, usable, weights, per_item,
                     variant_batch_size, fits)


def generation_fits(shape: DecoderShape, precision: str, buckets: list[str], budget_bytes: int, prompt_tokens: int,
                    max_new_tokens: int, variant_batch_size: int | None = None,
                    margin_fraction: float = DEFAULT_MARGIN_FRACTION) -> dict[str, BucketFit]:
    """{bucket: BucketFit} for one generation variant (``[task] kind = "generation"``).

    Every bucket is judged at ``prompt_tokens`` (the variant's max_length: the longest prompt
    the lab sends, whatever the text's bucket) plus ``max_new_tokens``, with
    ``lab.memory.estimate.estimate_generation`` (weights + KV cache + prefill activations +
    logits); its terms are linear in the batch, so the largest batch is floor((usable -
    weights) / bytes per item). Raises ValueError for a budget <= 0, a margin outside [0, 1) or
    a length < 1."""
    _check_budget(budget_bytes, margin_fraction)
    one = estimate_generation(shape, precision, 1, prompt_tokens, max_new_tokens)
    return {b: _fit(b, prompt_tokens, one.weights_bytes, one.activation_bytes, budget_bytes, variant_batch_size,
                    margin_fraction) for b in buckets}


@dataclass(frozen=True)
class ReservationFit:
    """A vLLM variant under a budget: vLLM reserves ``fraction`` of the device's memory (on CPU
    of host RAM) up front, ``reserved_bytes``, and must hold the weights and one sequence of
    ``max_model_len`` tokens in it (the least it runs an item with); the rest is its KV cache
    and batching room. ``fits``: ``needed_bytes`` <= the reservation less the margin."""

    budget_bytes: int
    fraction: float
    reserved_bytes: int
    margin_fraction: float
    weights_bytes: int
    needed_bytes: int
    fits: bool

    def to_json(self) -> dict:
        return asdict(self)


def reservation_fits(shape: EncoderShape, precision: str, budget_bytes: int, fraction: float, max_model_len: int,
                     margin_fraction: float = DEFAULT_MARGIN_FRACTION) -> ReservationFit:
    """Feasibility of a vLLM variant (``engine = "vllm"``): its reservation, not a batch's peak.

    ``reserved_bytes`` = ceil(``budget_bytes`` x ``fraction``) (vLLM's ``gpu_memory_utilization``:
    on CPU, vLLM's CPU worker takes that fraction of host RAM, math.ceil of the product); the
    variant fits when the weights plus one ``max_model_len``-token sequence's activations
    (lab.memory.estimate) fit the reservation less ``margin_fraction``. The reservation is never
    added to a transformers estimate (another scope). Raises ValueError for a budget <= 0, a
    fraction outside (0, 1] or a margin outside [0, 1)."""
    import math

    if budget_bytes <= 0 or not 0 < fraction <= 1 or not 0 <= margin_fraction < 1:
        raise ValueError(f"budget {budget_bytes} B must be > 0, fraction {fraction} in (0, 1] and margin "
                         f"{margin_fraction} in [0, 1)")
    reserved = math.ceil(budget_bytes * fraction)
    weights = shape.n_params * bytes_per_element(precision)
    needed = weights + activation_bytes_per_item(shape, precision, max_model_len)
    return ReservationFit(budget_bytes, fraction, reserved, margin_fraction, weights, needed,
                          needed <= int(reserved * (1 - margin_fraction)))

