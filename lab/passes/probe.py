"""Utilization: the device's achieved matmul ceiling and a pass's model FLOP/s.

Ceiling (``matmul_ceiling``): a short probe, its own phase outside the measured window,
that times square matrix multiplies in the pass's dtype on the pass's device and keeps the
best of a few timed rounds (FLOP/s). It is what this device reaches on dense matmuls here,
with the same thread count as the pass, not a datasheet peak.

Model FLOPs (``forward_flop``): the matmul work of an encoder's forward pass over the token
positions actually fed (padding included, since the device computes it), following
Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Table 1 (C_forward =
2 N + 2 n_layer n_ctx d_attn per token) in the non-causal form of Chowdhery et al. 2022,
"PaLM", Appendix B (6 N + 12 L H Q T per token for training, i.e. 2 N + 4 L H Q T for a
forward pass). For one batch of B sequences padded to T positions:

    FLOP = 2 * N * B * T  +  4 * n_layers * d_attn * B * T**2

N = weights of the model's matrix multiplies (every ``nn.Linear`` weight: embeddings are
look-ups, not matmuls, and are excluded; the pooler and classifier head are counted per
position although they see one position per sequence, an over-count of about 1.5 % for
MiniLM-L6), d_attn = heads x head size (hidden size for BERT-style encoders). Summed over
batches: 2 N * sum(B*T) + 4 L d_attn * sum(B*T^2) (``padded_tokens`` and ``attention_pairs``
of the measured window). Achieved FLOP/s = FLOP / measured-window seconds (like PaLM's
model FLOPs utilization, over the whole window: reading, tokenizing and copying count as
time in which no matmul ran). Utilization = achieved / ceiling, a fraction.
"""

from __future__ import annotations

import time

PROBE_SIZE = {"cpu": 1024, "gpu": 8192}  # square matrix side per device kind


def matmul_parameters(model) -> int:
    """N: number of weights of the model's ``nn.Linear`` layers (matmul parameters)."""
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def model_shape(model) -> dict:
    """{"matmul_parameters": N, "n_layers": L, "d_attn": heads x head size} from the config.

    Raises ValueError when the config does not name its layer count or hidden size.
    """
    cfg = getattr(model, "config", None)
    if cfg is None:
        raise ValueError("the pass's model is not visible to the lab (the user's own code)")
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", None)
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", None)
    if not layers or not hidden:
        raise ValueError(f"model config {type(cfg).__name__} names no layer count or hidden size")
    heads = getattr(cfg, "num_attention_heads", None)
    head_dim = getattr(cfg, "head_dim", None)
    d_attn = heads * head_dim if heads and head_dim else hidden
    return {"matmul_parameters": matmul_parameters(model), "n_layers": int(layers), "d_attn": int(d_attn)}


def forward_flop(shape: dict, padded_tokens: int, attention_pairs: int) -> int:
    """Model FLOPs of forward passes that fed ``padded_tokens`` = sum(B*T) positions and
    ``attention_pairs`` = sum(B*T^2) query-key pairs per layer (see the module docstring)."""
    return (2 * shape["matmul_parameters"] * padded_tokens
            + 4 * shape["n_layers"] * shape["d_attn"] * attention_pairs)


def matmul_ceiling(device: str, precision: str, size: int | None = None,
                   rounds: int = 5, min_round_s: float = 0.05) -> dict:
    """Best achieved FLOP/s of ``size`` x ``size`` matmuls in ``precision`` on ``device``.

    One untimed multiply, then ``rounds`` timed rounds of k multiplies each (k doubled until
    a round lasts ``min_round_s``), device synchronized at both ends of each round. One
    multiply = 2 * size**3 FLOP. Returns {"ceiling_flop_per_s", "probe_size", "probe_dtype",
    "probe_rounds"}. Raises what torch raises (e.g. an out-of-memory error).
    """
    import torch

    from lab.passes.inference import DTYPES, synchronize

    gpu = device.startswith("cuda")
    n = size or PROBE_SIZE["gpu" if gpu else "cpu"]
    dtype = getattr(torch, DTYPES[precision])
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=dtype)
    flop = 2 * n ** 3
    with torch.inference_mode():
        torch.mm(a, b)
        synchronize(device)
        k, best = 1, 0.0
        for _ in range(rounds):
            while True:
                t0 = time.perf_counter()
                for _ in range(k):
                    torch.mm(a, b)
                synchronize(device)
                dt = time.perf_counter() - t0
                if dt >= min_round_s:
                    break
                k *= 2
            best = max(best, flop * k / dt)
    del a, b
    return {"ceiling_flop_per_s": best, "probe_size": n, "probe_dtype": precision, "probe_rounds": rounds}


def utilization(shape: dict, padded_tokens: int, attention_pairs: int, measured_s: float,
                ceiling_flop_per_s: float | None) -> dict:
    """{"model_flop", "achieved_flop_per_s", "utilization"} of a measured window (s > 0).
    ``utilization`` is None when no ceiling was measured."""
    flop = forward_flop(shape, padded_tokens, attention_pairs)
    achieved = flop / measured_s
    return {"model_flop": flop, "achieved_flop_per_s": achieved,
            "utilization": achieved / ceiling_flop_per_s if ceiling_flop_per_s else None}


def probe_phase(model, device: str, precision: str, win, measured_s: float) -> dict:
    """The runner's ``probe`` phase: ceiling probe, then the pass's utilization figures.

    ``win``: the measured window's result (padded_tokens, attention_pairs). Returns the
    result fields: model_flop, achieved_flop_per_s, ceiling_flop_per_s, utilization,
    probe_size, probe_dtype (a probe failure leaves ceiling and ratio empty, with
    ``probe_error`` saying why; achieved FLOP/s needs only the model's shape).
    """
    out: dict = {}
    try:
        shape = model_shape(model)
    except ValueError as exc:
        return {"probe_error": f"model FLOPs not computed: {exc}"}
    out.update(shape)
    try:
        ceiling = matmul_ceiling(device, precision)
        out.update(ceiling)
    except Exception as exc:  # noqa: BLE001 - the probe never turns a good pass into a failure
        out["probe_error"] = f"ceiling probe failed: {type(exc).__name__}: {str(exc)[:200]}"
        ceiling = {}
    out.update(utilization(shape, win.padded_tokens, win.attention_pairs, measured_s,
                           ceiling.get("ceiling_flop_per_s")))
    return out
