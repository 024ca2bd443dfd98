"""Model loading, precision, padding, bucketing and the measured window's inference loop.

Rules (seed: "Separare avvio, riscaldamento ed esecuzione misurata"): eval mode and
``torch.inference_mode``; the attention mask is always passed; explicit ``max_length``
with truncation, truncated items counted; probabilities computed in fp32; any
non-finite logit fails the pass; the effective batch size always equals the declared
one (the last batch may be shorter only because the corpus ends); with bucketing the
items are sorted by token count within the pass and predictions come back in corpus
order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from lab.facts.errors import FailureKind, PassFailure
from lab.inputs.variants import DTYPES, Variant


class NonFiniteLogits(PassFailure, RuntimeError):
    """Raised when a batch produced NaN or inf logits; carries the items completed before it."""

    kind = FailureKind.NON_FINITE

    def __init__(self, ids: list[str], items_done: int):
        super().__init__(f"non-finite logits for {len(ids)} item(s), first {ids[0]!r}", items_done=items_done)
        self.ids = ids


class DeviceUnavailable(PassFailure, RuntimeError):
    """The variant asks for a GPU that this process cannot use (never a silent CPU fallback)."""

    kind = FailureKind.DEVICE_UNAVAILABLE


def resolve_device(requested: str) -> tuple[str, str]:
    """(device, backend) for a variant's ``device`` field.

    "auto" takes cuda:0 when torch sees a GPU (CUDA or ROCm/HIP), else cpu. "cuda"/"rocm"
    without a usable GPU raises DeviceUnavailable. backend is "cuda", "rocm" or "cpu".
    """
    import torch

    gpu = torch.cuda.is_available()
    backend = ("rocm" if torch.version.hip else "cuda") if gpu else "cpu"
    if requested in ("auto", ""):
        return ("cuda:0" if gpu else "cpu"), backend
    if requested == "cpu":
        return "cpu", "cpu"
    if requested in ("cuda", "rocm", "gpu") or requested.startswith("cuda:"):
        if not gpu:
            raise DeviceUnavailable(
                f"device {requested!r} requested but torch sees no GPU "
                f"(torch {torch.__version__}, CUDA build {torch.version.cuda}, HIP {torch.version.hip});"
                " check the driver and the container's GPU access (`iteralab doctor`)")
        return (requested if requested.startswith("cuda:") else "cuda:0"), backend
    raise DeviceUnavailable(f"device {requested!r} unknown; use auto, cpu, cuda or rocm")


def synchronize(device: str) -> None:
    """Wait for queued device work (no-op on CPU): host timers start and stop on it."""
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def load_tokenizer(model_ref: str, revision: str | None = None, pad_token: str | None = None):
    """The [model] tokenizer (transformers AutoTokenizer) at ``revision`` (the hub snapshot:
    commit hash, branch or tag; None = main or a local folder), with the campaign's declared
    ``pad_token`` ([model] pad_token, checked at lock) set when given."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_ref, revision=revision)
    if pad_token:
        tok.pad_token = pad_token
    return tok


def load_checkpoint(auto_class, model_ref: str, precision: str, device: str, attention: str | None = None,
                    revision: str | None = None):
    """The checkpoint's model by the transformers Auto class ``auto_class`` (the kind's
    architecture: AutoModelForSequenceClassification, AutoModel, AutoModelForCausalLM) at
    ``precision``, in eval mode on ``device``. ``attention``: transformers' ``attn_implementation``
    ("sdpa", "eager", "flash_attention_2", ...; None = the library's default); (ImportError,
    ValueError) when it cannot be used here: the pass becomes a failure row with the reason.
    ``revision`` as :func:`load_tokenizer`'s, applied to the config and the weights. Raises
    WeightsNotLoaded when the checkpoint lacks some of the model's weights (``check_weights_loaded``)."""
    import torch

    extra = {"attn_implementation": attention} if attention else {}
    model, info = auto_class.from_pretrained(model_ref, revision=revision, dtype=getattr(torch, DTYPES[precision]),
                                             output_loading_info=True, **extra)
    check_weights_loaded(info)
    return model.eval().to(device)


def load_model(model_ref: str, precision: str, device: str, pad_token: str | None = None,
               attention: str | None = None, revision: str | None = None):
    """(tokenizer, sequence classifier) in eval mode at ``precision`` on ``device``
    (:func:`load_tokenizer`, :func:`load_checkpoint`); the declared ``pad_token`` is set on the
    model config too. Raises as :func:`load_checkpoint`."""
    from transformers import AutoModelForSequenceClassification

    tok = load_tokenizer(model_ref, revision, pad_token)
    model = load_checkpoint(AutoModelForSequenceClassification, model_ref, precision, device, attention, revision)
    if pad_token:
        model.config.pad_token_id = tok.pad_token_id
    return tok, model


class WeightsNotLoaded(PassFailure, ValueError):
    """The checkpoint does not hold every weight of the model it declares: transformers would
    initialise the rest at random and the pass would measure another model."""

    kind = FailureKind.WEIGHTS_NOT_LOADED


def check_weights_loaded(info: dict) -> None:
    """Raise WeightsNotLoaded (one line) when transformers' loading report (``from_pretrained``
    with ``output_loading_info=True``: missing_keys, mismatched_keys) says some parameters were
    not read from the checkpoint. transformers only logs this and initialises them at random;
    the predictions would then be noise, found only by the quality check after every pass."""
    missing = sorted(info.get("missing_keys") or [])
    mismatched = list(info.get("mismatched_keys") or [])
    if missing or mismatched:
        first = missing[0] if missing else str(mismatched[0])
        raise WeightsNotLoaded(f"the checkpoint does not hold this model's weights: {len(missing)} missing, "
                               f"{len(mismatched)} of another shape (first: {first}); transformers would "
                               "initialise them at random; give the checkpoint's complete folder")


ENCODER_PADDING_SIDE = "right"
"""The side the lab pads a classification or embedding batch on, whatever the tokenizer's
``padding_side`` says (tokenizer_config.json). An encoder with absolute positions (BERT,
MiniLM, RoBERTa) numbers positions from the first column: left padding shifts every real
token's position and changes its outputs with no error (transformers issue 27502). A model
with rotary or relative positions gives the same outputs either side under the attention mask,
the classification head reads the last real token wherever it is, and mean pooling reads only
the mask's tokens: right padding is right for every model these kinds load. A decoder's
batched generation is padded on the left (lab.passes.tasks.generation_core.pad_left)."""

NO_PADDING_SEEN = "none (no batch needed padding)"


def padding_sides(attention_mask) -> set[str]:
    """{"left", "right"} where the (B, T) ``attention_mask`` (torch tensor, 1 = token) holds
    padding: "left" when some row's first column is padding, "right" when some row's last is."""
    sides = set()
    if attention_mask.shape[1]:
        if not bool(attention_mask[:, 0].all()):
            sides.add("left")
        if not bool(attention_mask[:, -1].all()):
            sides.add("right")
    return sides


def input_ids_digest(input_ids: list[list[int]]) -> str:
    """sha256 (64 hex) of the window's token ids, one list per item in corpus order, as compact
    JSON ("[[101,2023,...],...]"): equal ids, equal digests; a duplicated special token, another
    tokenizer or another truncation changes it."""
    import json

    from lab.facts.files import sha256_bytes

    return sha256_bytes(json.dumps(input_ids, separators=(",", ":")).encode())


@dataclass
class WindowResult:
    """Output of the measured window, in corpus order where it has one entry per item."""

    ids: list[str]
    labels: list[str | None]
    pred_index: list[int | None]
    prob: list[float | None]
    items_done: int
    n_truncated: int
    real_tokens: int
    padded_tokens: int
    batches: int
    tokens_kept: list[int] = field(default_factory=list)  # per item, specials included
    tokens_total: list[int | None] = field(default_factory=list)  # before truncation; None: unknown
    batches_at_max_length: int = 0  # batches padded to exactly max_length
    batches_at_longest: int = 0  # batches padded to exactly their longest item
    order_sorted_by_length: bool = False
    order_is_corpus: bool = True
    attention_pairs: int = 0  # sum over batches of B * T**2 (query-key pairs per layer)
    largest_batch: int = 0  # most items the model received in one batch (its batch dimension)
    vectors: Any = None  # embedding: numpy float32 (items, width) in corpus order (lab.passes.tasks.embedding)
    norms: list = field(default_factory=list)  # embedding: each vector's L2 norm before normalisation
    generated: list = field(default_factory=list)  # generation: a GeneratedItem per item (None: not done)
    max_running: int | None = None  # vLLM: most sequences it ran in one engine step (None: not reported)
    padding_sides: set = field(default_factory=set)  # "left"/"right": where the batches' masks held padding
    input_ids_sha256: str | None = None  # input_ids_digest of the window's token ids, corpus order
    packed: bool = False  # an engine packed the sequences (count_packed_call): no padding side

    def count_padding_side(self, attention_mask) -> None:
        """Note where ``attention_mask`` ((B, T), 1 = token) holds padding: "left" when some row
        starts with padding, "right" when some row ends with it (a batch of equal lengths: none)."""
        self.padding_sides |= padding_sides(attention_mask)

    def padding_side(self) -> str:
        """The side the window's batches were padded on, as their masks show: "right", "left",
        "left and right" (rows of both kinds), or NO_PADDING_SEEN."""
        return " and ".join(sorted(self.padding_sides)) or NO_PADDING_SEEN

    def count_batch(self, idx: list[int], lengths: list[int], shape: tuple[int, int], max_length: int) -> None:
        """Account one batch the model received: ``idx`` its items (corpus positions), ``lengths``
        every item's token count, ``shape`` the padded input's (B, T) in tokens. Adds the items
        done, the batch, real and padded tokens, B * T**2 attention pairs, the largest B, and
        whether T is ``max_length`` or the batch's longest item."""
        b, t = shape
        self.items_done += len(idx)
        self.batches += 1
        self.real_tokens += sum(lengths[i] for i in idx)
        self.padded_tokens += b * t
        self.largest_batch = max(self.largest_batch, b)
        self.attention_pairs += b * t ** 2
        self.batches_at_max_length += t == max_length
        self.batches_at_longest += t == max(lengths[i] for i in idx)

    def count_answer(self, idx: list[int], answer, max_length: int) -> None:
        """Account one batch an engine answered (lab.passes.backends.Answer), as it ran: padded
        (``shape``: :meth:`count_batch`, the masks' padding side noted), packed
        (:meth:`count_packed_call`), or the engine's own (the user's code: the items, the batch,
        its size and the lab's token counts; no padded tokens known)."""
        for mask in answer.masks:
            self.count_padding_side(mask)
        if answer.shape is not None:
            self.count_batch(idx, self.tokens_kept, answer.shape, max_length)
        elif answer.packed:
            self.count_packed_call(idx, self.tokens_kept, answer.max_running)
        else:
            self.items_done += len(idx)
            self.batches += 1
            self.largest_batch = max(self.largest_batch, len(idx))
            self.real_tokens += sum(self.tokens_kept[i] for i in idx)

    def count_packed_call(self, idx: list[int], lengths: list[int], max_running: int | None) -> None:
        """Account one call to an engine that packs sequences without padding (vLLM): ``idx`` its
        items, ``lengths`` every item's token count, ``max_running`` the most sequences the engine
        ran together in it (None: not reported). Padded tokens are the real tokens (none
        computed), attention pairs the sum of each item's length squared, the largest batch
        the items in the call (what the lab sent, not what the engine ran together)."""
        real = sum(lengths[i] for i in idx)
        self.packed = True
        self.items_done += len(idx)
        self.batches += 1
        self.real_tokens += real
        self.padded_tokens += real
        self.attention_pairs += sum(lengths[i] ** 2 for i in idx)
        self.largest_batch = max(self.largest_batch, len(idx))
        if max_running is not None:
            self.max_running = max(self.max_running or 0, max_running)


def tokenize(texts: list[str], tokenizer, max_length: int):
    """Tokenize without padding, truncating at ``max_length`` (specials included).

    Returns (input_ids lists, total tokens per item before truncation, specials included;
    None per item when the tokenizer does not report its overflow: slow tokenizers).
    """
    enc = tokenizer(texts, truncation=True, max_length=max_length, padding=False,
                    return_attention_mask=False, return_token_type_ids=False)
    if not enc.encodings:
        return enc["input_ids"], [None] * len(texts)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    totals = [len(e.ids) + sum(len(o.ids) - specials for o in e.overflowing) for e in enc.encodings]
    return enc["input_ids"], totals


def open_window(rows: list[dict], tokenizer, variant: Variant) -> tuple[WindowResult, list[list[int]], list[int]]:
    """The start of every task's window: ``rows`` tokenized and truncated at the variant's
    ``max_length`` (:func:`tokenize`), their processing order (:func:`batch_order`) and an
    empty WindowResult (ids, labels, truncated count, tokens kept and total per item, whether
    the order is the corpus's or sorted by length, the ids' sha256). Returns (win, input_ids, order)."""
    input_ids, totals = tokenize([r["text"] for r in rows], tokenizer, variant.max_length)
    lengths = [len(x) for x in input_ids]
    order = batch_order(lengths, variant.bucketing)
    win = empty_window(rows, lengths, totals, order)
    win.input_ids_sha256 = input_ids_digest(input_ids)
    return win, input_ids, order


def empty_window(rows: list[dict], lengths: list[int], totals: list, order: list[int]) -> WindowResult:
    """The WindowResult a window starts from: ``rows``' ids and labels, no item done, ``lengths``
    the tokens each item keeps, ``totals`` its untruncated token count (None: not known), the
    truncated count, and whether ``order`` is the corpus's or ascending by length."""
    n = len(rows)
    return WindowResult([r["id"] for r in rows], [r.get("label") for r in rows], [None] * n, [None] * n,
                        0, sum(1 for k, t in zip(lengths, totals, strict=True) if t is not None and t > k),
                        0, 0, 0, lengths, list(totals),
                        order_sorted_by_length=order == sorted(range(n), key=lambda i: lengths[i]),
                        order_is_corpus=order == list(range(n)))


def batch_order(lengths: list[int], bucketing: bool) -> list[int]:
    """Processing order: corpus order, or ascending token count (stable) with bucketing."""
    idx = list(range(len(lengths)))
    return sorted(idx, key=lambda i: lengths[i]) if bucketing else idx


def pad_batch(tokenizer, input_ids: list[list[int]], variant: Variant):
    """One batch padded as the variant declares: to ``max_length`` with padding "max_length",
    else to the batch's longest item, on ``ENCODER_PADDING_SIDE`` whatever the tokenizer's own
    ``padding_side`` says. Returns the tokenizer's BatchEncoding of int64 tensors
    [items, tokens] (input_ids, attention_mask)."""
    pad_to = "max_length" if variant.padding == "max_length" else "longest"
    return tokenizer.pad({"input_ids": input_ids}, padding=pad_to, max_length=variant.max_length,
                         padding_side=ENCODER_PADDING_SIDE, return_attention_mask=True, return_tensors="pt")


def warm_up_window(run_window: Callable, rows: list[dict], device: str, items: int, passes: int) -> float:
    """The protocol's warm-up for a job that warms up with its own window: ``passes`` runs of
    ``run_window(rows, device)`` over the first ``items`` rows, device synchronized. Returns seconds."""
    t0 = time.perf_counter()
    for _ in range(passes):
        if items > 0:
            run_window(rows[:items], device)
    synchronize(device)
    return time.perf_counter() - t0
