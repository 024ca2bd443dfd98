"""Observed memory of one real forward pass, each counter with its scope, never summed.

One observation = (model, precision, batch size, length): a warm-up forward at the same
shape, then a release step, a peak reset, and one measured forward (inputs built and
transferred, forward under ``torch.inference_mode``, logits materialized on the host,
device synchronized). Counters (scopes in ``lab.memory.peaks.SCOPES``):

- ``peak_allocated_bytes`` / ``peak_reserved_bytes``: torch CUDA/ROCm allocator peaks
  (tensors / caching allocator). Separate figures; their peaks may happen at different
  times, so they are never added (SPEC 3.9).
- ``device_used_bytes``: device-level used memory of all processes (NVML, or amdsmi on
  ROCm), read at the end of the window: a third figure, includes the CUDA context.
- ``process_peak_rss_bytes``: this process's host peak resident set (VmHWM).
  ``process_rss_before_bytes`` is the RSS right after the reset (interpreter, libraries,
  weights on CPU); ``process_rss_rise_bytes`` = peak - before, the pass's own growth,
  the CPU figure the activation estimate is compared with.

No inheritance between measurements: before each reset, ``gc.collect()``, glibc
``malloc_trim(0)`` (freed heap pages go back to the OS, so VmHWM restarts from what is
really in use) and, on a GPU, ``torch.cuda.empty_cache()`` (otherwise the reserved peak
would start from blocks cached by an earlier, larger batch).
"""

from __future__ import annotations

import ctypes
import gc
import time
from dataclasses import asdict, dataclass, field

from lab.memory.peaks import SCOPES, PeakTracker, current_rss_bytes

SCOPES_HERE = {**SCOPES,
               "process_rss_before_bytes": "host: this process's RSS right after the peak reset",
               "weights_allocated_bytes": "torch allocator: tensors on the GPU before the forward (weights)"}


@dataclass(frozen=True)
class Observation:
    """Counters of one measured forward, in bytes; None with a reason in ``reasons``."""

    model_ref: str
    precision: str
    device: str
    batch_size: int
    seq_len_tokens: int
    peak_allocated_bytes: int | None
    peak_reserved_bytes: int | None
    device_used_bytes: int | None
    process_peak_rss_bytes: int | None
    process_rss_before_bytes: int | None
    weights_allocated_bytes: int | None
    duration_s: float
    reasons: dict = field(default_factory=dict)

    @property
    def process_rss_rise_bytes(self) -> int | None:
        """Peak RSS minus RSS at reset (same counter, two readings): the pass's host growth."""
        if self.process_peak_rss_bytes is None or self.process_rss_before_bytes is None:
            return None
        return self.process_peak_rss_bytes - self.process_rss_before_bytes

    def to_json(self) -> dict:
        return {**asdict(self), "process_rss_rise_bytes": self.process_rss_rise_bytes,
                "scopes": SCOPES_HERE}


def release_memory(device: str) -> str:
    """Give freed memory back before a reset; returns what was done, in words."""
    gc.collect()
    done = ["gc.collect"]
    try:
        if ctypes.CDLL("libc.so.6").malloc_trim(0) is not None:
            done.append("malloc_trim(0)")
    except (OSError, AttributeError):
        done.append("malloc_trim unavailable (not glibc): host peak may carry freed pages")
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        done.append("torch.cuda.empty_cache")
    return ", ".join(done)


def make_inputs(tokenizer, texts: list[str], batch_size: int, seq_len_tokens: int) -> dict:
    """Host tensors (batch_size, seq_len_tokens): texts cycled, truncated and padded to length."""
    if not texts:
        raise ValueError("make_inputs needs at least one text")
    batch = [texts[k % len(texts)] for k in range(batch_size)]
    return dict(tokenizer(batch, truncation=True, max_length=seq_len_tokens, padding="max_length",
                          return_tensors="pt", return_token_type_ids=False))


def _forward(model, inputs: dict, device: str):
    import torch

    with torch.inference_mode():
        moved = {k: v.to(device) for k, v in inputs.items()}
        logits = model(**moved).logits.float().cpu()
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    return logits


def observe(model, tokenizer, texts: list[str], batch_size: int, seq_len_tokens: int,
            device: str, precision: str, model_ref: str = "", warmup: bool = True) -> Observation:
    """Measure one forward of ``batch_size`` items x ``seq_len_tokens`` tokens on ``device``.

    ``model`` is already at ``precision`` on ``device`` (``lab.passes.inference.load_model``).
    On CPU the GPU counters are None with the reason. Lets torch's OOM error propagate.
    """
    inputs = make_inputs(tokenizer, texts, batch_size, seq_len_tokens)
    if warmup:
        _forward(model, inputs, device)
    release = release_memory(device)
    tracker = PeakTracker(device)
    tracker.reset()
    before = current_rss_bytes()
    weights = None
    if device.startswith("cuda"):
        import torch

        weights = int(torch.cuda.memory_allocated(device))
    t0 = time.perf_counter()
    _forward(model, inputs, device)
    duration = time.perf_counter() - t0
    peaks = tracker.read()
    reasons = dict(peaks.reasons, release=release)
    used = peaks.device_used_bytes
    if weights is None:
        reasons["weights_allocated_bytes"] = reasons.get("peak_allocated_bytes", "not a GPU pass")
    if before is None:
        reasons["process_rss_before_bytes"] = "no /proc/self/status (not Linux)"
    reasons = {k: v for k, v in reasons.items() if v}
    return Observation(model_ref, precision, device, batch_size, seq_len_tokens,
                       peaks.peak_allocated_bytes, peaks.peak_reserved_bytes, used,
                       peaks.process_peak_rss_bytes, before, weights, round(duration, 6), reasons)


def compare(est, obs: Observation) -> dict:
    """Estimate vs observation on counters of the same scope; error = (est - obs) / obs.

    On a GPU: ``total_bytes`` (weights + activations) against ``peak_allocated_bytes``
    (tensors). On CPU: ``activation_bytes`` against ``process_rss_rise_bytes`` (RSS also
    holds the interpreter, libraries and weights, which the estimate does not model).
    Returns {"estimate_term", "observed_counter", "estimate_bytes", "observed_bytes",
    "error_fraction"}; observed_bytes and error_fraction are None when not measured.
    """
    o: int | None
    if obs.peak_allocated_bytes is not None:
        term, counter, e, o = "total_bytes", "peak_allocated_bytes", est.total_bytes, obs.peak_allocated_bytes
    else:
        term, counter = "activation_bytes", "process_rss_rise_bytes"
        e, o = est.activation_bytes, obs.process_rss_rise_bytes
    err = (e - o) / o if o else None
    return {"estimate_term": term, "observed_counter": counter, "estimate_bytes": e,
            "observed_bytes": o, "error_fraction": None if err is None else round(err, 4)}


def observe_grid(model, tokenizer, texts: list[str], batches: list[int], lengths: list[int],
                 device: str, precision: str, model_ref: str = "") -> list[dict]:
    """Estimate and observe every (length, batch) of the grid; one dict per cell, in order.

    Each dict: batch_size, seq_len_tokens, estimate (Estimate.to_json), observation
    (Observation.to_json), comparison (``compare``). An OOM becomes a row with
    observation None and ``error`` set; the grid goes on (torch frees the failed batch).
    """
    from lab.memory.estimate import EncoderShape, estimate

    shape = EncoderShape.from_model(model)
    rows = []
    for s in lengths:
        for b in batches:
            est = estimate(shape, precision, b, s)
            row = {"batch_size": b, "seq_len_tokens": s, "estimate": est.to_json()}
            try:
                obs = observe(model, tokenizer, texts, b, s, device, precision, model_ref)
            except (RuntimeError, MemoryError) as exc:
                if "out of memory" not in str(exc).lower() and not isinstance(exc, MemoryError):
                    raise
                row.update(observation=None, comparison=None, error=f"OOM: {str(exc)[:160]}")
                release_memory(device)
            else:
                row.update(observation=obs.to_json(), comparison=compare(est, obs), error=None)
            rows.append(row)
    return rows
