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
from lab.passes.tasks.job import KindJob
from lab.passes.tasks.text_metrics import NORMALISATION

#: The one declared padding this job honours: every batch is padded (left) to its longest prompt, never to
#: max_length (lab.orchestration.protocol.refuse_unsupported refuses any other at lock).
PADDING_HONOURED = GENERATION.fixed_padding


def token_slack(max_new_tokens: int) -> int:
    """Tokens an output of the user's code may exceed ``max_new_tokens`` by, as the lab counts them:
    the lab sees only the text, and decoding ids to text then encoding the text again can change
    the count at word pieces and spaces; max(2, 10 % of ``max_new_tokens``, rounded up)."""
    return max(2, -(-max_new_tokens // 10))


def rule_of(task: dict) -> GenerationRule:
    """The GenerationRule of a pass's ``task`` extra (lab.orchestration.protocol.Protocol.task_extra)."""
    return GenerationRule(prompt=task["prompt"], max_new_tokens=task["max_new_tokens"],
                          stop=tuple(task.get("stop") or ()), max_text_tokens=task.get("max_text_tokens") or 0,
                          decoding=task.get("decoding") or "greedy")


def load_generator(model_ref: str, precision: str, device: str, pad_token: str | None = None,
                   attention: str | None = None, revision: str | None = None):
    """(tokenizer, causal LM) in eval mode at ``precision`` on ``device`` (AutoModelForCausalLM;
    lab.passes.inference.load_tokenizer, load_checkpoint).

    ``pad_token``: the campaign's declared pad token ([model] pad_token), set on the tokenizer.
    The tokenizer's ``padding_side`` is set to "left" (the lab pads itself anyway). Raises
    generation_core.PaddingError when no pad token is declared anywhere (in the load phase, before
    any timing), and lab.passes.inference.WeightsNotLoaded when the checkpoint lacks weights."""
    from transformers import AutoModelForCausalLM

    from lab.passes.inference import load_checkpoint, load_tokenizer
    from lab.passes.tasks.generation_core import pad_token_id

    tok = load_tokenizer(model_ref, revision, pad_token)
    tok.padding_side = "left"
    model = load_checkpoint(AutoModelForCausalLM, model_ref, precision, device, attention, revision)
    pad_token_id(tok, model)
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


class GenerationJob(KindJob):
    """``[task] kind = "generation"``: text per item under the declared rule, from the engine's
    ``generate`` (greedy); with ``entry``, the user's ``generate`` over the lab's prompts."""

    kind = "generation"
    loader = load_generator

    def __init__(self, spec):
        task = spec.extra.get("task") or {}
        self.rule = rule_of(task)
        self.normalisation = task.get("normalisation") or NORMALISATION
        super().__init__(spec)

    def kind_needs(self) -> dict:
        return {"rule": self.rule}

    def open(self, rows):
        """The generation window (:func:`open_generation_window`): the prompts are the strings
        handed over, their ids the token ids."""
        win, prompts, seqs, order = open_generation_window(rows, self.tokenizer, self.rule, self.spec.variant.bucketing)
        return win, order, seqs, prompts

    def store(self, win, idx: list[int], answer) -> None:
        """Each item's GeneratedItem; the text the user's code returned, kept for its token count
        (:meth:`count_tokens`)."""
        for j, i in enumerate(idx):
            win.generated[i] = answer.values[j]
            win.pred_index[i] = i
        if answer.returned is not None:
            if getattr(win, "returned", None) is None:
                win.returned = [None] * len(win.ids)
            for i, text in zip(idx, answer.returned, strict=True):
                win.returned[i] = text

    def count_tokens(self, win) -> None:
        """``output_tokens`` of each output the user's code returned, counted once, after the window,
        by the [model] tokenizer over the output as returned (before the lab's cut at a stop
        string); nothing for an engine that counts its own tokens."""
        import msgspec

        returned = getattr(win, "returned", None)
        if returned is None or getattr(win, "tokens_counted", False):
            return
        win.generated = [g if g is None or text is None else msgspec.structs.replace(
            g, output_tokens=len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]))
            for g, text in zip(win.generated, returned, strict=True)]
        win.tokens_counted = True

    def observe_window(self, win) -> dict:
        """The engine's record; for the user's code, raises NotHonoured when an output it returned
        is longer than the declared ``max_new_tokens`` by more than :func:`token_slack` (counted by
        :meth:`count_tokens`): a task setting the code did not apply, as a variant's would be."""
        from lab.passes.observed import NotHonoured

        rec = super().observe_window(win)
        if self.engine.applies_task_rules:
            return rec
        self.count_tokens(win)
        limit = self.rule.max_new_tokens
        counts = [g.output_tokens for g in win.generated if g is not None]
        over = [c for c in counts if c > limit + token_slack(limit)]
        if over:
            raise NotHonoured(f"declared value not honoured: max_new_tokens = {limit}, but {len(over)} of "
                              f"{len(counts)} outputs the entry returned are longer (up to {max(over)} tokens by "
                              f"the [model] tokenizer, {token_slack(limit)} over allowed for re-tokenized text); "
                              "stop generate() at settings['max_new_tokens']")
        return rec

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

    def _fields(self, recs: list[dict], pad_token, engine_part: dict) -> dict:
        """The result fields of the written items ``recs`` (their prediction lines, decoded);
        ``engine_part``: the engine's part of ``generation`` (its padding; the transformers
        engine's decoding settings and overridden checkpoint fields, when it read them)."""
        stopped = Counter(r["stopped_by"] for r in recs)
        read = {} if engine_part.get("settings") is None else {k: v for k, v in engine_part.items() if k != "padding"}
        return {"input_tokens": sum(r["input_tokens"] for r in recs),
                "output_tokens": sum(r["output_tokens"] for r in recs),
                "generation": {"rule": self.rule.to_json(), "rule_sha256": self.rule.digest(),
                               "normalisation": self.normalisation, "padding": engine_part["padding"],
                               "pad_token": pad_token, "stopped_by": dict(sorted(stopped.items())), **read}}

    def write_predictions(self, path: Path, win) -> dict:
        """predictions.jsonl of the completed items (module docstring); returns the result fields
        (lines, sha256, token sums, the rule as run with its sha256, the engine's own)."""
        self.count_tokens(win)
        recs = [{"id": item_id, "output": g.text, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens,
                 "stopped_by": g.stopped_by} for item_id, g in zip(win.ids, win.generated, strict=True)
                if g is not None]
        lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in recs]
        atomic_write_text(path, "".join(lines))
        return {"predictions_lines": len(lines), "predictions_sha256": sha256_lines(lines),
                **self._fields(recs, getattr(self.tokenizer, "pad_token", None), self.engine.generation_record()),
                **self.engine.result_fields(win)}

    def merge_cards(self, cards_dir: Path, pred_path: Path, merged: list[tuple[int, str]], cards: list,
                    labels: list) -> tuple[list[str], dict]:
        """The cards' lines unchanged (corpus order); token sums and the rule over them as a
        one-card pass writes them, the engine's part and the pad token as the cards recorded them;
        ``self_accuracy`` by :meth:`exact_match_of` over the merged outputs."""
        lines = [line for _, line in merged]
        recs = [json.loads(line) for line in lines]
        gen = next((c.generation for c in cards if c.generation), None) or {}
        part = {k: gen.get(k) for k in ("padding", "settings", "checkpoint_settings_not_applied")}
        if part["padding"] is None:
            part["padding"] = self.engine.generation_record()["padding"]
        return lines, {**self._fields(recs, gen.get("pad_token"), part), **self.engine.merged_fields(cards),
                       "self_accuracy": self.exact_match_of([(r["output"], gold)
                                                             for r, gold in zip(recs, labels, strict=True)])}
