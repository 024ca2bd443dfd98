"""Generation: text written by a causal language model after a prompt (``[task] kind = "generation"``).

The model is loaded with transformers' ``AutoModelForCausalLM`` (no remote code). The declared
rule ([task] prompt, max_new_tokens, stop, max_text_tokens, decoding: a
lab.passes.tasks.generation_core.GenerationRule) and the normalisation for exact match reach the
pass as ``PassSpec.extra["task"]`` and are recorded in result.json (``generation``, with the
rule's sha256). Padding: the lab pads every batch on the LEFT itself
(generation_core.pad_left; a right-padded batch is refused, generation_core.generate_padded), so
a tokenizer declaring right padding cannot make wrong text; the pad token is the tokenizer's or
``[model] pad_token``, and a model with neither is refused at load in one line
(generation_core.PaddingError).

The lab's own loop forms the batches (lab.passes.inference.batch_order over the prompts' token
counts: corpus order, or ascending with bucketing); greedy decoding runs per batch
(generation_core.generate_tokens). A failure mid-window keeps the items already done (the pass
sequence writes them; ``items_completed`` counts them).

On disk: ``predictions.jsonl``, one line per completed item in corpus order,
``{"id", "output", "input_tokens", "output_tokens", "stopped_by"}`` (tokens: prompt tokens fed,
padding excluded; tokens generated up to and including the eos or the token completing a stop
string; ``stopped_by`` one of generation_core.STOPPED_BY). result.json adds ``input_tokens``
and ``output_tokens`` (sums over the items written).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from lab.facts.diskfull import atomic_write_text
from lab.facts.files import sha256_lines
from lab.kinds.generation_kind import GENERATION
from lab.passes.tasks.generation_core import GenerationRule
from lab.passes.tasks.job import ModelSteps
from lab.passes.tasks.text_metrics import NORMALISATION

PADDING_RULE = "left: the lab pads every batch itself (generation_core.pad_left)"
#: The one declared padding this job honours: every batch is padded (left) to its longest prompt, never to
#: max_length (lab.orchestration.protocol.refuse_unsupported refuses any other at lock).
PADDING_HONOURED = GENERATION.fixed_padding


def rule_of(task: dict) -> GenerationRule:
    """The GenerationRule of a pass's ``task`` extra (lab.orchestration.protocol.Protocol.task_extra)."""
    return GenerationRule(prompt=task["prompt"], max_new_tokens=task["max_new_tokens"],
                          stop=tuple(task.get("stop") or ()), max_text_tokens=task.get("max_text_tokens") or 0,
                          decoding=task.get("decoding") or "greedy")


def load_generator(model_ref: str, precision: str, device: str, pad_token: str | None = None,
                   attention: str | None = None, revision: str | None = None):
    """(tokenizer, causal LM) in eval mode at ``precision`` on ``device`` (AutoModelForCausalLM).

    ``pad_token``: the campaign's declared pad token ([model] pad_token), set on the tokenizer.
    The tokenizer's ``padding_side`` is set to "left" (the lab pads itself anyway). Raises
    generation_core.PaddingError when no pad token is declared anywhere, and
    lab.passes.inference.WeightsNotLoaded when the checkpoint lacks weights."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lab.passes.inference import DTYPES, check_weights_loaded
    from lab.passes.tasks.generation_core import pad_token_id

    tok = AutoTokenizer.from_pretrained(model_ref, revision=revision)
    if pad_token:
        tok.pad_token = pad_token
    tok.padding_side = "left"
    extra = {"attn_implementation": attention} if attention else {}
    loaded: Any = AutoModelForCausalLM.from_pretrained(model_ref, revision=revision,
                                                       dtype=getattr(torch, DTYPES[precision]),
                                                       output_loading_info=True, **extra)
    model, info = loaded
    check_weights_loaded(info)
    pad_token_id(tok, model)  # refused here, before any timing, when none is declared
    model.eval().to(device)
    return tok, model


class OpenedWindow(NamedTuple):
    """The start of a generation window (:func:`open_generation_window`): ``win`` (WindowResult),
    ``prompts`` (each item's prompt text: its cut text in the template, input order), ``seqs``
    (those prompts' token ids) and ``order`` (the processing order)."""

    win: Any
    prompts: list[str]
    seqs: list[list[int]]
    order: list[int]


def open_generation_window(rows: list[dict], tokenizer, rule: GenerationRule, bucketing: bool) -> OpenedWindow:
    """The start of a generation window, whichever engine generates: each item's prompt made
    and tokenized once by the lab (generation_core.prompts_for, tokenize_prompts: the text cut to
    max_text_tokens, the template, the tokenizer's own special tokens, no padding), the processing
    order (lab.passes.inference.batch_order over the prompts' token counts) and an empty
    WindowResult (``tokens_kept``: the prompts' token counts; ``tokens_total``: those of the uncut
    prompts; ``generated``: None per item; ``input_ids_sha256``: the prompts' ids)."""
    from lab.passes.inference import batch_order, empty_window, input_ids_digest
    from lab.passes.tasks.generation_core import TEXT_FIELD, prompts_for, tokenize_prompts

    texts = [r["text"] for r in rows]
    prompts = prompts_for(tokenizer, texts, rule)
    seqs = tokenize_prompts(tokenizer, prompts)
    lengths = [len(x) for x in seqs]
    totals = ([len(tokenizer(rule.prompt.replace(TEXT_FIELD, t), verbose=False)["input_ids"]) for t in texts]
              if rule.max_text_tokens else list(lengths))
    order = batch_order(lengths, bucketing)
    win = empty_window(rows, lengths, totals, order)
    win.generated = [None] * len(rows)
    win.input_ids_sha256 = input_ids_digest(seqs)
    return OpenedWindow(win, prompts, seqs, order)


class GenerationJob(ModelSteps):
    """``[task] kind = "generation"``: greedy text per item under the declared rule."""

    kind = "generation"
    loader = load_generator

    def __init__(self, spec):
        self.spec = spec
        task = spec.extra.get("task") or {}
        self.rule = rule_of(task)
        self.normalisation = task.get("normalisation") or NORMALISATION
        self.tokenizer: Any = None
        self.model: Any = None
        self.settings: dict[str, Any] | None = None
        self.overrides: dict[str, Any] | None = None

    def load(self, device: str) -> tuple:
        """The model (ModelSteps.load), then the decoding settings ``generate`` will resolve for
        the rule (``settings``) and the checkpoint's generation_config.json fields the lab's own
        configuration sets aside (``overrides``), both recorded in ``generation``."""
        from lab.passes.tasks.generation_core import (
            checkpoint_overrides,
            effective_settings,
            eos_token_ids,
            lab_generation_config,
            pad_token_id,
        )

        tok, model = super().load(device)
        self.settings = effective_settings(tok, model, self.rule)
        lab_cfg = lab_generation_config(self.rule, pad_token_id(tok, model), eos_token_ids(tok, model))
        self.overrides = checkpoint_overrides(getattr(model, "generation_config", None), lab_cfg)
        return tok, model

    def run_window(self, rows, device, on_batch=None, sink=None):
        """Prompts, batches (the lab's rule), greedy generation per batch, outputs on the host.

        Returns a WindowResult whose ``generated[i]`` is item i's GeneratedItem once done (and
        ``pred_index[i]`` is i); ``tokens_kept`` are the prompts' token counts (the text cut to
        max_text_tokens), ``tokens_total`` those of the uncut prompts. Raises
        generation_core.GenerationRuleError for a prompt past the model's positions and lets
        OOM errors propagate; the items done before stay in ``sink["win"]``."""
        from lab.passes.tasks.generation_core import generate_tokens

        v = self.spec.variant
        win, _, seqs, order = open_generation_window(rows, self.tokenizer, self.rule, v.bucketing)
        lengths = win.tokens_kept
        n = len(rows)
        if sink is not None:
            sink["win"] = win
        for start in range(0, n, v.batch_size):
            idx = order[start:start + v.batch_size]
            batch = [seqs[i] for i in idx]
            items = generate_tokens(self.tokenizer, self.model, device, batch, self.rule,
                                    on_mask=win.count_padding_side)
            for i, g in zip(idx, items, strict=True):
                win.generated[i] = g
                win.pred_index[i] = i
            win.count_batch(idx, lengths, (len(batch), max(lengths[i] for i in idx)), v.max_length)
            if on_batch:
                on_batch(win.items_done)
        return win

    def compile(self, rows: list[dict], device: str, n_items: int) -> list:
        """The compile phase (lab.passes.compile.compile_batches): the model's forward, the one
        ``generate`` calls for the prompt and at every decoding step, compiled with dynamic
        shapes (the step's tensors are made inside ``generate``, where no dimension can be
        marked, and the cache grows a position per step), then whole greedy generations per
        window batch size, as the window runs them: for 2 items or more, one batch of prompts of
        one length and one left-padded batch (its first prompt holds only its text's first
        word), since transformers takes another path when the mask has padding.
        Returns [[items, "dynamic"], ...]."""
        from lab.passes.compile import compile_batches
        from lab.passes.tasks.generation_core import generate_batch

        def generate(texts: list[str]) -> list:
            same = [texts[0]] * len(texts)
            generate_batch(self.tokenizer, self.model, device, same, self.rule)
            if len(texts) > 1 and texts[0].split():
                generate_batch(self.tokenizer, self.model, device, [texts[0].split()[0], *same[1:]], self.rule)
            return [len(texts), "dynamic"]

        return compile_batches(self.model, rows, device, self.spec.variant, n_items, generate, dynamic=True)

    def self_metric(self, win) -> float | None:
        """Exact match (the declared normalisation) of the items done against their labels, or None."""
        return self.exact_match_of([(g.text, lab) for g, lab in zip(win.generated, win.labels, strict=True)
                                    if g is not None])

    def exact_match_of(self, pairs: list[tuple[str, str | None]]) -> float | None:
        """Exact match (the declared normalisation) over the (output, label) pairs whose label is
        known, rounded to 6 decimals; None when there is none."""
        from lab.passes.tasks.text_metrics import exact_match

        known = [(out, gold) for out, gold in pairs if gold is not None]
        if not known:
            return None
        return round(exact_match([p[0] for p in known], [p[1] for p in known], self.normalisation), 6)

    def _fields(self, recs: list[dict], pad_token, settings=None, overrides=None) -> dict:
        """The result fields of the written items ``recs`` (their prediction lines, decoded);
        ``settings`` and ``overrides`` (the job's when None) as ``load`` read them, left out of
        ``generation`` when no settings were read (a job that did not load the model: vLLM's)."""
        from lab.passes.tasks.generation_core import CHECKPOINT_GENERATION_FILE

        stopped = Counter(r["stopped_by"] for r in recs)
        settings = self.settings if settings is None else settings
        overrides = self.overrides if overrides is None else overrides
        # read only where this job loaded the model (transformers); another engine records its own
        read = {} if settings is None else {
            "settings": settings,
            "checkpoint_settings_not_applied": {"file": CHECKPOINT_GENERATION_FILE, "fields": overrides}
            if overrides else {}}
        return {"input_tokens": sum(r["input_tokens"] for r in recs),
                "output_tokens": sum(r["output_tokens"] for r in recs),
                "generation": {"rule": self.rule.to_json(), "rule_sha256": self.rule.digest(),
                               "normalisation": self.normalisation, "padding": PADDING_RULE,
                               "pad_token": pad_token, "stopped_by": dict(sorted(stopped.items())), **read}}

    def write_predictions(self, path: Path, win) -> dict:
        """predictions.jsonl of the completed items (module docstring); returns the result fields
        (lines, sha256, token sums, the rule as run with its sha256)."""
        recs = [{"id": item_id, "output": g.text, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens,
                 "stopped_by": g.stopped_by} for item_id, g in zip(win.ids, win.generated, strict=True)
                if g is not None]
        lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in recs]
        atomic_write_text(path, "".join(lines))
        return {"predictions_lines": len(lines), "predictions_sha256": sha256_lines(lines),
                **self._fields(recs, getattr(self.tokenizer, "pad_token", None))}

    def merge_cards(self, cards_dir: Path, pred_path: Path, merged: list[tuple[int, str]], cards: list,
                    labels: list) -> tuple[list[str], dict]:
        """The cards' lines unchanged (corpus order); token sums and the rule over them as a
        one-card pass writes them, the pad token as the cards recorded it; ``self_accuracy`` by
        :meth:`exact_match_of` over the merged outputs."""
        lines = [line for _, line in merged]
        recs = [json.loads(line) for line in lines]
        gen = next((c.generation for c in cards if c.generation), None) or {}
        not_applied = gen.get("checkpoint_settings_not_applied") or {}
        return lines, {**self._fields(recs, gen.get("pad_token"), gen.get("settings"), not_applied.get("fields") or {}),
                       "self_accuracy": self.exact_match_of([(r["output"], gold)
                                                             for r, gold in zip(recs, labels, strict=True)])}
