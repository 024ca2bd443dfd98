"""Observed memory of one real forward pass, each counter with its scope, never summed.

One observation = (model, precision, batch size, length): a warm-up forward at the same
shape, then a release step, a peak reset, and one measured forward (inputs built and
transferred, forward under ``torch.inference_mode``, logits materialized on the host,
device synchronized); for a causal LM (``observe_generation``), one greedy ``generate`` of
``max_new_tokens`` after prompts of that length, measured the same way. Counters (scopes in
``lab.memory.peaks.SCOPES``):

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

from lab.facts.errors import clip
from lab.memory.peaks import SCOPES, Peaks, PeakTracker, current_rss_bytes

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


def _measure(step, device: str) -> tuple[Peaks, int | None, int | None, float, str]:
    """Release, reset the peaks, run ``step()`` once: (peak readings, RSS at reset, allocated
    bytes before the step on a GPU, duration in s, what the release did)."""
    release = release_memory(device)
    tracker = PeakTracker(device)
    tracker.reset()
    before = current_rss_bytes()
    weights = None
    if device.startswith("cuda"):
        import torch

        weights = int(torch.cuda.memory_allocated(device))
    t0 = time.perf_counter()
    step()
    duration = time.perf_counter() - t0
    return tracker.read(), before, weights, duration, release


def _observation(model_ref: str, precision: str, device: str, batch_size: int, seq_len_tokens: int,
                 measured: tuple) -> Observation:
    peaks, before, weights, duration, release = measured
    reasons = dict(peaks.reasons, release=release)
    if weights is None:
        reasons["weights_allocated_bytes"] = reasons.get("peak_allocated_bytes", "not a GPU pass")
    if before is None:
        reasons["process_rss_before_bytes"] = "no /proc/self/status (not Linux)"
    reasons = {k: v for k, v in reasons.items() if v}
    return Observation(model_ref, precision, device, batch_size, seq_len_tokens,
                       peaks.peak_allocated_bytes, peaks.peak_reserved_bytes, peaks.device_used_bytes,
                       peaks.process_peak_rss_bytes, before, weights, round(duration, 6), reasons)


def observe(model, tokenizer, texts: list[str], batch_size: int, seq_len_tokens: int,
            device: str, precision: str, model_ref: str = "", warmup: bool = True) -> Observation:
    """Measure one forward of ``batch_size`` items x ``seq_len_tokens`` tokens on ``device``.

    ``model`` is already at ``precision`` on ``device`` (``lab.passes.inference.load_model``).
    On CPU the GPU counters are None with the reason. Lets torch's OOM error propagate.
    """
    inputs = make_inputs(tokenizer, texts, batch_size, seq_len_tokens)
    if warmup:
        _forward(model, inputs, device)
    measured = _measure(lambda: _forward(model, inputs, device), device)
    return _observation(model_ref, precision, device, batch_size, seq_len_tokens, measured)


def _generate(model, inputs: dict, device: str, max_new_tokens: int, pad_token_id: int):
    """Greedy generation of exactly ``max_new_tokens`` tokens per row (``min_new_tokens`` too, so
    no eos ends it early: the estimate's worst case); the ids on the host. Raises RuntimeError
    when the output is not prompt + max_new_tokens long."""
    import torch
    from transformers import GenerationConfig

    cfg = GenerationConfig(max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, do_sample=False,
                           num_beams=1, pad_token_id=pad_token_id)
    with torch.inference_mode():
        moved = {k: v.to(device) for k, v in inputs.items()}
        out = model.generate(**moved, generation_config=cfg).cpu()
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)
    if out.shape[1] != inputs["input_ids"].shape[1] + max_new_tokens:
        raise RuntimeError(f"generate wrote {out.shape[1] - inputs['input_ids'].shape[1]} tokens, not {max_new_tokens}")
    return out


def observe_generation(model, tokenizer, texts: list[str], batch_size: int, prompt_tokens: int,
                       max_new_tokens: int, device: str, precision: str, model_ref: str = "",
                       warmup: bool = True) -> Observation:
    """Measure one greedy ``generate`` of ``batch_size`` prompts of ``prompt_tokens`` tokens
    (texts cycled, truncated, left-padded to that length) writing ``max_new_tokens`` each, as
    ``observe`` measures a forward (warm-up at the same shape, release, peak reset, one run).

    ``model``: a causal LM at ``precision`` on ``device``; ``tokenizer`` must have a pad token.
    ``seq_len_tokens`` of the Observation is the prompt's length. Lets torch's OOM error propagate."""
    tokenizer.padding_side = "left"
    inputs = make_inputs(tokenizer, texts, batch_size, prompt_tokens)
    pid = tokenizer.pad_token_id

    def step():
        return _generate(model, inputs, device, max_new_tokens, pid)

    if warmup:
        step()
    return _observation(model_ref, precision, device, batch_size, prompt_tokens, _measure(step, device))


def compare(est, obs: Observation) -> dict:
    """Estimate vs observation on counters of the same scope; error = (est - obs) / obs.

    ``est``: an Estimate or a GenerationEstimate (whose ``activation_bytes`` is all it adds
    above the weights: KV cache, prefill activations, logits).
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
                 device: str, precision: str, model_ref: str = "", max_new_tokens: int | None = None) -> list[dict]:
    """Estimate and observe every (length, batch) of the grid; one dict per cell, in order.

    Each dict: batch_size, seq_len_tokens, estimate (Estimate.to_json), observation
    (Observation.to_json), comparison (``compare``). With ``max_new_tokens`` (a causal LM,
    ``[task] kind = "generation"``): greedy generation of that many tokens after prompts of each
    length (``observe_generation``, ``lab.memory.estimate.estimate_generation``), and the dict
    adds max_new_tokens. An OOM becomes a row with observation None and ``error`` set; the grid
    goes on (torch frees the failed batch).
    """
    from lab.memory.estimate import (
        DecoderShape,
        EncoderShape,
        Estimate,
        GenerationEstimate,
        estimate,
        estimate_generation,
    )

    gen = DecoderShape.from_model(model) if max_new_tokens else None
    shape = EncoderShape.from_model(model)
    rows = []
    for s in lengths:
        for b in batches:
            row: dict
            est: Estimate | GenerationEstimate
            if gen is not None and max_new_tokens:
                est = estimate_generation(gen, precision, b, s, max_new_tokens)
                row = {"batch_size": b, "seq_len_tokens": s, "max_new_tokens": max_new_tokens,
                       "estimate": est.to_json()}
            else:
                est = estimate(shape, precision, b, s)
                row = {"batch_size": b, "seq_len_tokens": s, "estimate": est.to_json()}
            try:
                if max_new_tokens:
                    obs = observe_generation(model, tokenizer, texts, b, s, max_new_tokens, device, precision,
                                             model_ref)
                else:
                    obs = observe(model, tokenizer, texts, b, s, device, precision, model_ref)
            except (RuntimeError, MemoryError) as exc:
                if "out of memory" not in str(exc).lower() and not isinstance(exc, MemoryError):
                    raise
                row.update(observation=None, comparison=None, error=f"OOM: {clip(str(exc), 160)}")
                release_memory(device)
            else:
                row.update(observation=obs.to_json(), comparison=compare(est, obs), error=None)
            rows.append(row)
    return rows
