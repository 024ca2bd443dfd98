"""Memory estimate of an encoder forward pass in inference mode: weights + activations.

Formula (all figures in bytes; ``e`` = bytes per element of the precision: fp32 4,
bf16/fp16 2; ``b`` batch size in items, ``s`` sequence length in tokens, ``h`` hidden
size, ``a`` attention heads, ``i`` intermediate (MLP) size, ``N`` parameter count):

    weights_bytes    = N * e
    activation_bytes = e * (s*b*(5h + (h + 2i) + 2h) + attn_scores) + mask_bytes
        attn_scores  = 2 * a * s^2 * b   with eager attention (scores and softmax
                       probabilities materialized), 0 with fused SDPA / flash kernels
        mask_bytes   = b * s^2 * (e for eager, 1 for SDPA: a boolean mask)
    total_bytes      = weights_bytes + activation_bytes

Source: the per-layer activation count of Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, section 4.1):
per layer ``s*b*h*(34 + 5*a*s/h)`` bytes in training with 16-bit activations, i.e.
attention 11sbh + 5as^2b, MLP 19sbh, layer norms 4sbh. Adapted to inference:

1. ``torch.inference_mode``: nothing is kept for backward, so only one layer's
   tensors are alive at a time (the previous layer's are freed). We count the tensors
   of one layer, once, not times the number of layers.
2. eval mode: dropout is the identity, so the dropout masks (1 byte each) and the
   dropout output copies are gone.
3. What remains, in elements: attention 5sbh (layer input, Q, K, V, context), MLP
   sbh + 2*i*sb (input, GeLU input, GeLU output; ``i = 4h`` gives the paper's 9sbh),
   layer norms 2sbh, plus the 2as^2b scores and probabilities under eager attention
   (the paper keeps only the probabilities; in inference both exist at once).
4. The count sums those tensors as if all were alive together (Q/K/V are in fact
   freed before the MLP runs), but it is NOT an upper bound of the real peak: eager
   inference also creates temporaries the paper does not count (bias adds, residual
   sums, layer-norm outputs, GeLU intermediates). Measured on CPU with the demo model
   (docs/memory.md) its error against the RSS rise ran from +0.3 % to -47 %.

Left out (stated, not hidden): the CUDA/HIP context and kernels (visible only in the
device-level counter), allocator rounding and caching (visible in peak reserved),
the embedding lookup output, logits (b x labels), input ids, framework workspaces
(oneDNN / cuBLAS scratch), the Python interpreter and libraries (in process RSS).

Generation (``[task] kind = "generation"``, greedy ``generate`` of a causal LM):
``estimate_generation``, whose formula and sources are in its docstring.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
FUSED_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")


@dataclass(frozen=True)
class EncoderShape:
    """What the estimate needs from a model config: sizes in elements, parameter count."""

    hidden_size: int
    num_attention_heads: int
    intermediate_size: int
    num_hidden_layers: int
    n_params: int
    attention: str = "sdpa"  # config._attn_implementation: "eager", "sdpa", ...

    @classmethod
    def from_model(cls, model) -> "EncoderShape":
        """From a loaded transformers model: config sizes and the counted parameters."""
        cfg = model.config
        return cls(cfg.hidden_size, cfg.num_attention_heads, cfg.intermediate_size,
                   cfg.num_hidden_layers, count_parameters(model),
                   getattr(cfg, "_attn_implementation", None) or "eager")

    @classmethod
    def from_pretrained(cls, model_ref: str, revision: str | None = None) -> "EncoderShape":
        """From a checkpoint (a hub id at ``revision``) without loading weights: the model is
        built on the meta device."""
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification

        cfg = AutoConfig.from_pretrained(model_ref, revision=revision)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(cfg)
        return cls.from_model(model)


def count_parameters(model) -> int:
    """Number of parameter elements (buffers such as position ids are not counted)."""
    return int(sum(p.numel() for p in model.parameters()))


@dataclass(frozen=True)
class Estimate:
    """Estimated peak of one forward pass, in bytes. ``total_bytes`` = weights + activations."""

    precision: str
    batch_size: int
    seq_len_tokens: int
    attention: str
    weights_bytes: int
    activation_bytes: int
    total_bytes: int

    def to_json(self) -> dict:
        return asdict(self)


def bytes_per_element(precision: str) -> int:
    """4 for fp32, 2 for bf16/fp16. Raises ValueError for an unknown precision."""
    try:
        return BYTES_PER_ELEMENT[precision]
    except KeyError:
        raise ValueError(f"precision {precision!r} unknown; use one of {', '.join(BYTES_PER_ELEMENT)}") from None


def activation_bytes_per_item(shape: EncoderShape, precision: str, seq_len_tokens: int) -> int:
    """Activation bytes for one item (b = 1); the activation term is linear in b."""
    e = bytes_per_element(precision)
    s, h, a, i = seq_len_tokens, shape.hidden_size, shape.num_attention_heads, shape.intermediate_size
    eager = shape.attention not in FUSED_ATTENTION
    elements = s * (5 * h + (h + 2 * i) + 2 * h) + (2 * a * s * s if eager else 0)
    mask = s * s * (e if eager else 1)
    return e * elements + mask


def estimate(shape: EncoderShape, precision: str, batch_size: int, seq_len_tokens: int) -> Estimate:
    """Estimate for (model shape, precision, batch size in items, length in tokens).

    Raises ValueError for an unknown precision or a non-positive batch size / length.
    """
    if batch_size < 1 or seq_len_tokens < 1:
        raise ValueError(f"batch_size {batch_size} and seq_len_tokens {seq_len_tokens} must be >= 1")
    weights = shape.n_params * bytes_per_element(precision)
    act = batch_size * activation_bytes_per_item(shape, precision, seq_len_tokens)
    return Estimate(precision, batch_size, seq_len_tokens, shape.attention, weights, act, weights + act)


@dataclass(frozen=True)
class DecoderShape:
    """What the generation estimate needs from a causal LM's config, sizes in elements.

    ``layer``: the transformer layer's sizes and ``n_params`` (the causal LM's parameters, its
    LM head included); ``num_key_value_heads`` (config's, else the attention heads: no grouped
    attention), ``head_dim`` (config's, else hidden / heads), ``vocab_size``;
    ``logits_last_only``: the model's ``forward`` takes ``logits_to_keep``, so transformers'
    ``generate`` computes the prefill's logits at the last position only."""

    layer: EncoderShape
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    logits_last_only: bool

    @classmethod
    def from_model(cls, model) -> "DecoderShape":
        """From a loaded (or meta-device) transformers causal LM."""
        import inspect

        cfg = model.config
        heads = cfg.num_attention_heads
        return cls(EncoderShape.from_model(model),
                   getattr(cfg, "num_key_value_heads", None) or heads,
                   getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, cfg.vocab_size,
                   "logits_to_keep" in inspect.signature(model.forward).parameters)

    @classmethod
    def from_pretrained(cls, model_ref: str, revision: str | None = None) -> "DecoderShape":
        """From a checkpoint (a hub id at ``revision``) without loading weights: the
        ``AutoModelForCausalLM`` is built on the meta device."""
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(model_ref, revision=revision)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg)
        return cls.from_model(model)


@dataclass(frozen=True)
class GenerationEstimate:
    """Estimated peak of one greedy generation of a batch, in bytes.

    ``activation_bytes`` = ``kv_cache_bytes`` + ``prefill_activation_bytes`` + ``logits_bytes``
    (all the generation adds above the weights; the figure compared with an observed rise);
    ``total_bytes`` = ``weights_bytes`` + ``activation_bytes``. ``seq_len_tokens`` is the prompt's
    length (the prefill forward's)."""

    precision: str
    batch_size: int
    seq_len_tokens: int
    max_new_tokens: int
    attention: str
    weights_bytes: int
    kv_cache_bytes: int
    prefill_activation_bytes: int
    logits_bytes: int
    activation_bytes: int
    total_bytes: int

    def to_json(self) -> dict:
        return asdict(self)


def estimate_generation(shape: DecoderShape, precision: str, batch_size: int, prompt_tokens: int,
                        max_new_tokens: int) -> GenerationEstimate:
    """Estimate for greedy generation: (model shape, precision, batch in items, prompt length and
    ``max_new_tokens`` in tokens). All terms are linear in the batch.

    Formula (bytes; ``e`` bytes per element, ``b`` batch, ``p`` prompt tokens, ``m``
    max_new_tokens, ``L`` layers, ``g`` key/value heads, ``d`` head size, ``V`` vocabulary)::

        weights_bytes            = N * e
        kv_cache_bytes           = 2 * L * g * d * (p + m) * b * e
        prefill_activation_bytes = b * activation_bytes_per_item(layer, precision, p)
        logits_bytes             = b * V * (k * e + 4),  k = 1 if logits_last_only else p
        total_bytes              = weights + kv_cache + prefill_activation + logits

    Sources: the KV cache holds one key and one value tensor (b, g, positions, d) per layer
    (transformers' ``DynamicCache``: ``DynamicLayer.update`` concatenates each step's keys and
    values along the positions), and greedy decoding with ``max_new_tokens`` fills p + m
    positions at most (counted as if no row stops early: the worst case). The prefill forward
    over the p prompt tokens is the largest forward of the generation; its per-layer
    activations are the encoder estimate's (Korthikanti et al. 2022 adapted to inference, this
    module's docstring), one layer at a time. Logits: transformers 5.23 ``generate``
    (generation/utils.py) sets ``logits_to_keep = 1`` when the model's ``forward`` accepts it
    (BertLMHeadModel, Llama, ... do), so the prefill's logits are (b, 1, V), else (b, p, V); it
    then copies the last position's logits to float32 (``outputs.logits[:, -1].to(copy=True,
    dtype=torch.float32)``): the ``+ 4`` per vocabulary entry.

    Left out (stated): the decoding steps' own activations (one position each, far below the
    prefill's), the transient copy ``torch.cat`` makes of one layer's cache when it grows, the
    output ids (b x (p + m) int64), and what the encoder estimate leaves out. Raises ValueError
    for an unknown precision or a non-positive batch size, prompt or max_new_tokens."""
    if batch_size < 1 or prompt_tokens < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size {batch_size}, prompt_tokens {prompt_tokens} and max_new_tokens "
                         f"{max_new_tokens} must be >= 1")
    e = bytes_per_element(precision)
    b, p, m, layer = batch_size, prompt_tokens, max_new_tokens, shape.layer
    weights = layer.n_params * e
    kv = 2 * layer.num_hidden_layers * shape.num_key_value_heads * shape.head_dim * (p + m) * b * e
    act = b * activation_bytes_per_item(layer, precision, p)
    kept = 1 if shape.logits_last_only else p
    logits = b * shape.vocab_size * (kept * e + BYTES_PER_ELEMENT["fp32"])
    added = kv + act + logits
    return GenerationEstimate(precision, b, p, m, layer.attention, weights, kv, act, logits, added,
                              weights + added)
