"""The generation step the lab's own loop calls once per batch (issue 20, ``kind = "generation"``).

What it owns: the declared prompt template and decoding rule (``GenerationRule``, a frozen
record with a content digest for the lock identity), cutting each item's text to its first
``max_text_tokens`` tokens, LEFT padding under the lab's control, greedy decoding with
``transformers``' ``generate``, cutting at stop strings, and counting input and output tokens
per item. What it does not own: batching, timing, device synchronisation, memory counters (the
pass's loop around it).

Why left padding: a decoder-only model generates after the last position of each row; with
right padding the last positions of the shorter rows are pad tokens, so those rows continue
from padding and give different (wrong) text with no error. ``generate_batch`` always builds
left-padded batches itself, whatever the tokenizer's ``padding_side`` says, and
``generate_padded`` (the step for a batch a caller padded) refuses a right-padded batch with
one line (``PaddingError``).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Literal

import msgspec

from lab.facts.errors import UserError
from lab.facts.files import sha256_bytes

TEXT_FIELD = "{text}"


class GenerationRuleError(UserError):
    """A prompt template or decoding rule that cannot be used as written (one line)."""


class PaddingError(UserError):
    """A batch or tokenizer that would make a decoder-only model generate wrong text silently."""


class GenerationRule(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The declared prompt template and decoding rule of a generation task.

    - ``prompt``: template holding ``{text}`` exactly once (the item's text goes there; no other
      brace is interpreted, so a JSON example in a prompt is safe).
    - ``max_new_tokens``: at most this many generated tokens per item (>= 1).
    - ``stop``: stop strings; the output ends before the first occurrence of any of them (the
      stop string itself is not part of the output). Generation also ends at the model's eos.
    - ``max_text_tokens``: the item's text is cut to its first N tokens (the model's tokenizer)
      before it enters the template; 0 = the whole text.
    - ``decoding``: ``"greedy"`` only (argmax at every step, no sampling, one beam).

    Raises ``GenerationRuleError`` (one line) on construction when a value cannot be used.
    """

    prompt: str
    max_new_tokens: int
    stop: tuple[str, ...] = ()
    max_text_tokens: int = 0
    decoding: Literal["greedy"] = "greedy"

    def __post_init__(self) -> None:
        n = self.prompt.count(TEXT_FIELD)
        if n != 1:
            raise GenerationRuleError(
                f"prompt must hold {TEXT_FIELD} exactly once (it holds it {n} times); "
                f"write where the item's text goes, e.g. prompt = \"{TEXT_FIELD}\\nAnswer:\"")
        if isinstance(self.max_new_tokens, bool) or self.max_new_tokens < 1:
            raise GenerationRuleError(f"max_new_tokens must be an integer >= 1, not {self.max_new_tokens!r}")
        if isinstance(self.max_text_tokens, bool) or self.max_text_tokens < 0:
            raise GenerationRuleError(
                f"max_text_tokens must be an integer >= 0 (0 = whole text), not {self.max_text_tokens!r}")
        if any(not s for s in self.stop):
            raise GenerationRuleError("stop strings must not be empty; remove the \"\" from stop = [...]")

    def to_json(self) -> dict[str, Any]:
        """The rule as a plain dict (every field, declared order): what the lock records."""
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GenerationRule:
        """Strict decode (unknown field or wrong type: ``GenerationRuleError``, one line)."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as e:
            raise GenerationRuleError(f"generation rule: {e}") from None

    def digest(self) -> str:
        """sha256 (64 hex) of the rule's canonical JSON (sorted keys, no spaces): equal rules,
        equal digests; any change of template, limit, stop string or cut changes it."""
        blob = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return sha256_bytes(blob.encode("utf-8"))


STOPPED_BY = ("stop", "eos", "max_new_tokens", "entry", "server")
"""Why an item's generation ended: a stop string, the model's eos, the token limit, or (a user's entry,
lab.passes.backends.entry_backend) the code's own end, which the lab does not see, or (a server pass,
lab.passes.tasks.server_job) the server's end before max_new_tokens (its eos or a stop string)."""


class GeneratedItem(msgspec.Struct, frozen=True):
    """One item's generation: ``text`` (decoded, cut before the first stop string, special
    tokens dropped), ``input_tokens`` (prompt tokens fed, padding excluded), ``output_tokens``
    (tokens generated up to and including the eos or the token completing a stop string;
    the padding after a row finished excluded), ``stopped_by`` (one of ``STOPPED_BY``)."""

    text: str
    input_tokens: int
    output_tokens: int
    stopped_by: str = "max_new_tokens"


def pad_token_id(tokenizer, model) -> int:
    """The declared pad token's id: the tokenizer's, else the model's generation config's.

    Raises ``PaddingError`` (one line) when neither declares one."""
    pid = getattr(tokenizer, "pad_token_id", None)
    if pid is None:
        pid = getattr(getattr(model, "generation_config", None), "pad_token_id", None)
    if pid is None:
        raise PaddingError("the tokenizer declares no pad token, which batched generation needs; set "
                           "\"pad_token\" in the model's tokenizer_config.json (often the eos token)")
    return int(pid)


def eos_token_ids(tokenizer, model) -> list[int]:
    """The ids that end a generation: the model's generation config's eos (int or list), else
    the tokenizer's eos. Empty when neither declares one (then only max_new_tokens and stop
    strings end it)."""
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if eos is None:
        eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return []
    return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]


def cut_text(tokenizer, text: str, max_text_tokens: int) -> str:
    """``text`` cut to its first ``max_text_tokens`` tokens (0: unchanged), by character
    offsets, so the kept part is the original text (not a decode of it). Needs a fast
    tokenizer (offsets); raises ``GenerationRuleError`` otherwise."""
    if max_text_tokens == 0:
        return text
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    except NotImplementedError:
        raise GenerationRuleError("max_text_tokens needs a fast tokenizer (tokenizer.json) to cut by offsets; "
                                  "set max_text_tokens = 0 or give the model a fast tokenizer") from None
    offsets = enc["offset_mapping"]
    if len(offsets) <= max_text_tokens:
        return text
    return text[:offsets[max_text_tokens - 1][1]]


def prompts_for(tokenizer, texts: list[str], rule: GenerationRule) -> list[str]:
    """Each item's prompt: its (cut) text in the template, in input order."""
    return [rule.prompt.replace(TEXT_FIELD, cut_text(tokenizer, t, rule.max_text_tokens)) for t in texts]


def pad_left(sequences: list[list[int]], pad_id: int):
    """(input_ids, attention_mask), int64 tensors of shape (len(sequences), longest): each row
    right-aligned, pads (``pad_id``, mask 0) on the left. Raises ``ValueError`` on an empty
    list or an empty sequence."""
    import torch

    if not sequences or any(len(s) == 0 for s in sequences):
        raise ValueError("pad_left needs at least one sequence and no empty one")
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
        mask[i, width - len(s):] = 1
    return ids, mask


def require_left_padded(attention_mask) -> None:
    """Refuse a batch whose mask has padding after a real token in any row (right padding, or
    holes): ``PaddingError``, one line naming the first such row. ``attention_mask``: (B, T)."""
    import torch

    m = attention_mask.to(torch.long)
    # left-padded: along each row the mask never goes from 1 back to 0
    drops = (m[:, :-1] > m[:, 1:]).any(dim=1)
    if bool(drops.any()):
        row = int(torch.nonzero(drops)[0])
        raise PaddingError(f"batch row {row} is right-padded (padding after its tokens): a decoder-only "
                           "model would continue from the padding and write wrong text; pad on the left "
                           "(tokenizer.padding_side = \"left\")")


def template_tokens(tokenizer, rule: GenerationRule) -> int:
    """Tokens of the prompt template alone (its ``{text}`` empty, the tokenizer's own special
    tokens included): what every prompt of ``rule`` holds besides its item's text."""
    return len(tokenizer(rule.prompt.replace(TEXT_FIELD, ""), verbose=False)["input_ids"])


def positions_fix(rule: GenerationRule, max_positions: int, template: int) -> str:
    """The fix, as a refusal's tail, for prompts that with ``rule.max_new_tokens`` pass
    ``max_positions`` (the model's ``max_position_embeddings``), given the template's own
    ``template`` tokens (``template_tokens``): a lower max_new_tokens when even a one-token
    text cannot fit (no cut of the text helps), else a cut of the text (max_text_tokens)."""
    text_room = max_positions - template - rule.max_new_tokens  # text tokens that still fit
    if max_positions - template < 2:
        return (f"shorten [task] prompt: the template alone has {template} tokens of the model's "
                f"{max_positions} positions")
    if text_room < 1:
        return f"lower max_new_tokens to at most {max_positions - template - 1}"
    return (f"set max_text_tokens to at most {text_room} (the template holds {template} tokens) or a lower "
            "max_new_tokens")


def require_positions(sequences: list[list[int]], rule: GenerationRule, max_positions: int | None,
                      tokenizer=None) -> None:
    """Refuse (``GenerationRuleError``, one line) a prompt whose tokens plus ``max_new_tokens``
    exceed ``max_positions`` (the model's ``max_position_embeddings``; ``None``: no limit known),
    which would index past the position table instead of generating. ``tokenizer``: the one
    that made ``sequences``; the template's own tokens it gives (``template_tokens``, counted
    only on refusal) choose the fix named (``positions_fix``); None: counted as 0."""
    if max_positions is None:
        return
    for i, seq in enumerate(sequences):
        if len(seq) + rule.max_new_tokens > max_positions:
            raise GenerationRuleError(
                f"item {i} of the batch: its prompt has {len(seq)} tokens, and with max_new_tokens "
                f"{rule.max_new_tokens} that passes the model's {max_positions} positions; "
                f"{positions_fix(rule, max_positions, template_tokens(tokenizer, rule) if tokenizer else 0)}")


def cut_at_stop(text: str, stop: tuple[str, ...]) -> tuple[str, bool]:
    """(``text`` cut before the first of the ``stop`` strings it holds, True) or (``text``, False)."""
    hits = [text.find(s) for s in stop if s in text]
    return (text[:min(hits)], True) if hits else (text, False)


def _finished_length(tokens: list[int], eos: set[int], stop: tuple[str, ...], decode) -> tuple[int, str, str]:
    """(output token count, output text, what ended it: ``STOPPED_BY``) of one row's generated tokens."""
    n = len(tokens)
    by = "max_new_tokens"
    for k, t in enumerate(tokens):
        if t in eos:
            n, by = k + 1, "eos"
            break
    text, cut = cut_at_stop(decode(tokens[:n]), stop)
    if not cut:
        return n, text, by
    # the fewest tokens whose decode already holds a stop string (prefix decodes only grow)
    lo, hi = 1, n
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in decode(tokens[:mid]) for s in stop):
            hi = mid
        else:
            lo = mid + 1
    return lo, text, "stop"


CHECKPOINT_GENERATION_FILE = "generation_config.json"
"""The checkpoint file whose decoding settings transformers merges into ``generate``'s own
configuration (its unset fields) unless the caller hands it a complete one."""

TOKEN_ID_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
"""Fields of a generation config that name token ids, not decoding settings: the eos ids are
taken from the checkpoint (eos_token_ids), the pad id is the lab's (pad_token_id)."""

NOT_SETTINGS = (*TOKEN_ID_KEYS, "transformers_version", "_from_model_config")
"""Fields of a checkpoint's generation config that checkpoint_overrides never names."""

RECORDED_SETTINGS = ("do_sample", "num_beams", "max_new_tokens", "min_new_tokens", "min_length",
                     "temperature", "top_k", "top_p", "repetition_penalty", "no_repeat_ngram_size",
                     "suppress_tokens", "begin_suppress_tokens", "bad_words_ids", "forced_bos_token_id",
                     "forced_eos_token_id", "length_penalty", "stop_strings")
"""The effective decoding settings a generation pass records (``generation.settings``): those
that change a greedy output when a checkpoint sets them (transformers issues 34304, 29080)."""


def lab_generation_config(rule: GenerationRule, pad_id: int | None = None, eos: list[int] | None = None):
    """The complete transformers GenerationConfig the lab hands ``generate`` for ``rule``:
    greedy (no sampling, one beam), ``max_new_tokens``, the stop strings, ``pad_id`` and the
    ``eos`` ids, and every other decoding field at transformers' global default (no repetition
    penalty, no n-gram ban, no minimum length, no suppressed token), so nothing of a
    checkpoint's generation_config.json is merged in."""
    from transformers import GenerationConfig

    cfg = GenerationConfig(max_new_tokens=rule.max_new_tokens, do_sample=False, num_beams=1,
                           pad_token_id=pad_id, eos_token_id=eos or None,
                           stop_strings=list(rule.stop) or None)
    defaults = {k: v for k, v in cfg._get_default_generation_params().items() if k != "max_length"}
    cfg.update(**defaults, defaults_only=True)  # max_length: max_new_tokens bounds the output
    return cfg


def recorded_settings(cfg) -> dict[str, Any]:
    """``RECORDED_SETTINGS`` of the GenerationConfig ``cfg`` as plain JSON values."""
    return {k: _plain(getattr(cfg, k, None)) for k in RECORDED_SETTINGS}


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def checkpoint_overrides(checkpoint_cfg, lab_cfg) -> dict[str, dict[str, Any]]:
    """The decoding fields the checkpoint's generation config (``checkpoint_cfg``, None: no file)
    sets to a value other than the one the lab runs (``lab_cfg``, lab_generation_config):
    {field: {"checkpoint": its value, "run": the lab's}}, sorted; token ids are not settings."""
    if checkpoint_cfg is None:
        return {}
    out = {}
    for k, v in sorted(checkpoint_cfg.to_diff_dict().items()):
        run = _plain(getattr(lab_cfg, k, None))
        if k not in NOT_SETTINGS and v is not None and _plain(v) != run:
            out[k] = {"checkpoint": _plain(v), "run": run}
    return out


def overrides_line(overrides: dict[str, dict[str, Any]]) -> str:
    """The one wording of the checkpoint's fields the lab sets aside (``checkpoint_overrides``):
    "the checkpoint's generation_config.json sets repetition_penalty 1.8, ...; the lab hands
    generate its own complete configuration for the declared rule (repetition_penalty 1.0, ...),
    so these are not applied"."""
    keys = ", ".join(f"{k} {v['checkpoint']!r}" for k, v in overrides.items())
    run = ", ".join(f"{k} {v['run']!r}" for k, v in overrides.items())
    return (f"the checkpoint's {CHECKPOINT_GENERATION_FILE} sets {keys}; the lab hands generate its own "
            f"complete configuration for the declared rule ({run}), so these are not applied")


@contextmanager
def without_checkpoint_config(model):
    """The model's own ``generation_config`` (read from the checkpoint's generation_config.json)
    replaced by transformers' empty one for the duration: ``generate`` merges the model's into
    every field its caller left unset, so only the caller's configuration applies inside."""
    from transformers import GenerationConfig

    own = model.generation_config
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = own


def effective_settings(tokenizer, model, rule: GenerationRule) -> dict[str, Any]:
    """``RECORDED_SETTINGS`` as ``generate`` resolves them for ``rule`` on ``model``: the lab's
    configuration after transformers' own merge (its ``_prepare_generation_config``, where
    the pinned version has it; else the lab's configuration as handed over)."""
    cfg = lab_generation_config(rule, pad_token_id(tokenizer, model), eos_token_ids(tokenizer, model))
    prepare = getattr(model, "_prepare_generation_config", None)
    if prepare is not None:
        with without_checkpoint_config(model):
            cfg = prepare(cfg)[0]
    return recorded_settings(cfg)


def generate_padded(tokenizer, model, input_ids, attention_mask, rule: GenerationRule) -> list[GeneratedItem]:
    """Greedy generation for a left-padded batch already on the model's device.

    ``input_ids``, ``attention_mask``: (B, T) int64. Returns B ``GeneratedItem`` in row order.
    Raises ``PaddingError`` for a right-padded mask or an undeclared pad token.
    Greedy means argmax at every step: the lab's complete configuration
    (``lab_generation_config``), and the model's own ``generation_config`` (the checkpoint's
    generation_config.json, which transformers merges into the fields a caller left unset)
    set aside during the call, so that file cannot change the rule; only its eos ids are taken.
    """
    import torch

    require_left_padded(attention_mask)
    eos = eos_token_ids(tokenizer, model)
    cfg = lab_generation_config(rule, pad_token_id(tokenizer, model), eos)
    with without_checkpoint_config(model), torch.inference_mode():
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=cfg,
                             tokenizer=tokenizer if rule.stop else None)
    width = input_ids.shape[1]
    new = out[:, width:].tolist()
    fed = attention_mask.sum(dim=1).tolist()

    return [finish_generated(tokenizer, row, int(n_in), eos, rule) for row, n_in in zip(new, fed, strict=True)]


def finish_generated(tokenizer, tokens: list[int], input_tokens: int, eos: list[int],
                     rule: GenerationRule) -> GeneratedItem:
    """The lab's one stop rule, for every engine: one row's generated token ids (``tokens``,
    prompt excluded; any padding after the row finished included) cut at the first of ``eos``
    (eos_token_ids) or after the fewest tokens whose decode holds one of ``rule.stop``, decoded
    with the tokenizer (special tokens dropped), the text ended before the first stop string.
    ``output_tokens`` counts the kept tokens (the eos or the token completing a stop string
    included); ``input_tokens`` is the prompt's count, passed through."""

    def decode(toks: list[int]) -> str:
        return tokenizer.decode(toks, skip_special_tokens=True)

    n_out, text, by = _finished_length(list(tokens), set(eos), rule.stop, decode)
    return GeneratedItem(text=text, input_tokens=input_tokens, output_tokens=n_out, stopped_by=by)


def generate_batch(tokenizer, model, device, texts: list[str], rule: GenerationRule) -> list[GeneratedItem]:
    """The per-batch step: prompts from ``texts`` (input order), tokenized one by one with the
    tokenizer's own special tokens, left-padded by the lab (the tokenizer's ``padding_side`` is
    not used, so a tokenizer declaring right padding cannot make wrong text), generated greedily.

    ``device``: a torch device or its name; the model must already be there. Returns
    ``len(texts)`` ``GeneratedItem`` in input order. Raises ``PaddingError`` (no pad token),
    ``GenerationRuleError`` (a cut the tokenizer cannot make), ``ValueError`` (empty batch).
    """
    if not texts:
        raise ValueError("generate_batch needs at least one text")
    return generate_tokens(tokenizer, model, device, encode_prompts(tokenizer, texts, rule), rule)


def encode_prompts(tokenizer, texts: list[str], rule: GenerationRule) -> list[list[int]]:
    """Each item's prompt (``prompts_for``) as token ids, tokenized one by one with the
    tokenizer's own special tokens, no padding; input order."""
    return tokenize_prompts(tokenizer, prompts_for(tokenizer, texts, rule))


def tokenize_prompts(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Prompts already made (``prompts_for``) as token ids, one by one, the tokenizer's own
    special tokens, no padding; input order."""
    return [tokenizer(p, verbose=False)["input_ids"] for p in prompts]


def generate_tokens(tokenizer, model, device, seqs: list[list[int]], rule: GenerationRule,
                    on_mask=None) -> list[GeneratedItem]:
    """Greedy generation for prompts already tokenized (``encode_prompts``): positions checked
    (``require_positions``), left-padded by the lab (``pad_left``), generated (``generate_padded``).
    ``on_mask``: called with the batch's (B, T) attention mask (the window notes its padding side).
    Returns ``len(seqs)`` ``GeneratedItem`` in input order; raises as ``generate_batch``."""
    pid = pad_token_id(tokenizer, model)
    require_positions(seqs, rule, getattr(model.config, "max_position_embeddings", None), tokenizer)
    ids, mask = pad_left(seqs, pid)
    if on_mask is not None:
        on_mask(mask)
    return generate_padded(tokenizer, model, ids.to(device), mask.to(device), rule)
