"""The user's own code running the embedding and generation kinds (``[task] entry`` beside
``kind = "embedding"`` or ``kind = "generation"``; docs/task-custom.md).

The entry class follows the custom kind's protocol (lab.passes.tasks.custom: ``Class(settings,
device)``, optional ``settings_used()``) with the kind's own method, called once per batch the lab
forms (lab.kinds.kind.EntryRun):

- embedding: ``embed(texts: list[str])`` -> a 2-D array of finite numbers (numpy array, torch
  tensor on any device, list of lists), one row per text, every batch the same width. The lab
  stores the rows as returned (float16, ``vectors.npy``) with each row's L2 norm (``norm``); the
  declared ``pooling`` and ``normalize`` reach the entry in its settings and are its to apply
  (``pooling`` in result.json says so).
- generation: ``generate(prompts: list[str])`` -> one str per prompt. The lab forms each prompt
  by the declared rule (the text cut to ``max_text_tokens`` with the [model] tokenizer, put in
  ``prompt``) and hands the rule (``max_new_tokens``, ``stop``, ``decoding``) in the settings; it
  cuts each output before the first stop string, as the built-in job does, and counts the prompt's
  and the output's tokens with the [model] tokenizer (``stopped_by``: "stop" where the lab cut,
  else "entry": the code's own end, its eos or token limit, which the lab does not see).

Everything else is the kind's: the prediction records, validation, metrics, the agreement rule,
``archive verify`` and compare. A return of another shape is a failure row naming what it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.facts.errors import clip
from lab.kinds.embedding_kind import EMBEDDING
from lab.kinds.generation_kind import GENERATION
from lab.passes.tasks.custom import EntryJob, _shown
from lab.passes.tasks.embedding import EmbeddingJob
from lab.passes.tasks.generation import GenerationJob
from lab.passes.tasks.generation_core import GeneratedItem, cut_at_stop

ENTRY_POOLING = "the entry's own (the declared pooling and normalize are in its settings)"
"""``pooling.rule`` of an embedding pass whose vectors the user's code made."""
ENTRY_PADDING = "the entry's own (the lab hands over prompt strings, unpadded)"
"""``generation.padding`` of a generation pass whose outputs the user's code made."""
ENTRY_STOP = "entry"
"""``stopped_by`` of an output the lab did not cut: the code ended it (its eos or token limit)."""
NORM_TOLERANCE = 0.01
"""With ``normalize = true`` every vector the entry returns must have an L2 norm within 1 +/- this
(float16 arithmetic in the user's code leaves about 1e-3; a forgotten normalisation leaves norms
of several units: the reported case read 6.2 to 7.1)."""


def token_slack(max_new_tokens: int) -> int:
    """Tokens an entry's output may exceed ``max_new_tokens`` by, as the lab counts them: the lab
    sees only the text, and decoding ids to text then encoding the text again can change the count
    at word pieces and spaces; max(2, 10 % of ``max_new_tokens``, rounded up)."""
    return max(2, -(-max_new_tokens // 10))


def vectors_refusal(out, n: int, width: int | None) -> tuple[str, list]:
    """('', [the rows as a float32 numpy array]) when ``out`` (what embed returned for ``n`` texts)
    is a 2-D array of ``n`` rows of finite numbers, ``width`` wide when given (the first batch's);
    else (what it is, in a few words, [])."""
    import numpy as np

    if hasattr(out, "detach"):  # a torch tensor, wherever it lives
        out = out.detach().float().cpu().numpy()
    if out is None or isinstance(out, (str, bytes, dict)):
        return _shown(out), []
    try:
        arr = np.asarray(out, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        return f"{type(out).__name__} that is no array of numbers ({clip(str(exc), 80)})", []
    if arr.ndim != 2:
        return f"an array of shape {tuple(arr.shape)}, not (texts, width)", []
    if arr.shape[0] != n:
        return f"{arr.shape[0]} row(s) for {n} texts", []
    if width is not None and arr.shape[1] != width:
        return f"rows {arr.shape[1]} wide after {width} wide ones", []
    bad = np.flatnonzero(~np.isfinite(arr).all(axis=1))
    if bad.size:
        return f"a non-finite value in row {int(bad[0])}", []
    return "", [arr]


class EntryEmbeddingJob(EntryJob, EmbeddingJob):
    """``kind = "embedding"`` with ``entry``: the user's ``embed`` per batch; vectors.npy and
    predictions.jsonl as the built-in job writes them (its ``write_predictions`` and ``merge_cards``)."""

    kind = "embedding"
    entry_run: Any = EMBEDDING.entry

    def __init__(self, spec):
        EntryJob.__init__(self, spec)
        self.pooling = ENTRY_POOLING
        self.normalize = bool(self.task.get("normalize", True))
        self.width: int | None = None  # the first batch's: every later batch must return as wide

    def open(self, rows):
        win, order, texts = super().open(rows)
        win.vectors = None  # allocated at the first batch, at the width the entry returns
        win.norms = [None] * len(rows)
        return win, order, texts

    def accept(self, out, n: int) -> tuple[str, list]:
        why, values = vectors_refusal(out, n, self.width)
        if values:
            self.width = values[0].shape[1]
        return why, values

    def store(self, win, idx: list[int], values: list) -> None:
        import numpy as np

        (arr,) = values
        if win.vectors is None:
            win.vectors = np.zeros((len(win.ids), arr.shape[1]), np.float32)
        win.vectors[idx] = arr
        norms = np.linalg.norm(arr.astype(np.float64), axis=1)
        for j, i in enumerate(idx):
            win.pred_index[i] = i
            win.norms[i] = float(norms[j])

    def observe_window(self, win) -> dict:
        """EntryJob's record; raises NotHonoured when ``normalize = true`` is declared and a vector
        the entry returned is not of unit norm (within NORM_TOLERANCE): a task setting the code
        did not apply, as a variant's would be."""
        from lab.passes.observed import NotHonoured

        rec = EntryJob.observe_window(self, win)
        norms = [n for n in win.norms if n is not None]
        off = [n for n in norms if abs(n - 1.0) > NORM_TOLERANCE]
        if self.normalize and off:
            raise NotHonoured(f"declared value not honoured: normalize = true, but {len(off)} of {len(norms)} "
                              f"vectors the entry returned have an L2 norm outside 1 +/- {NORM_TOLERANCE:g} "
                              f"({min(off):.4g} to {max(off):.4g}); normalize them in embed(), or declare "
                              "normalize = false")
        return rec

    def write_predictions(self, path: Path, win) -> dict:
        if win.vectors is None:  # no batch done: no width known; nothing to store
            import numpy as np

            win.vectors = np.zeros((len(win.ids), 0), np.float32)
        fields = EmbeddingJob.write_predictions(self, path, win)
        declared = json.dumps(self.normalize)
        fields["pooling"] = {"rule": ENTRY_POOLING, "normalize": f"the entry's own (declared {declared})",
                             "dtype": "as returned, float16 in storage"}
        return {**fields, **self.entry_fields()}

    def merge_cards(self, cards_dir, pred_path, merged, cards, labels):
        lines, fields = EmbeddingJob.merge_cards(self, cards_dir, pred_path, merged, cards, labels)
        return lines, {**fields, **self.merged_fields(cards)}


class EntryGenerationJob(EntryJob, GenerationJob):
    """``kind = "generation"`` with ``entry``: the user's ``generate`` per batch of prompts the lab
    forms; predictions.jsonl as the built-in job writes it."""

    kind = "generation"
    entry_run: Any = GENERATION.entry

    def __init__(self, spec):
        EntryJob.__init__(self, spec)
        from lab.passes.tasks.generation import rule_of
        from lab.passes.tasks.text_metrics import NORMALISATION

        self.rule = rule_of(self.task)
        self.normalisation = self.task.get("normalisation") or NORMALISATION
        self.overrides = None

    def open(self, rows):
        from lab.passes.tasks.generation import open_generation_window

        win, prompts, _, order = open_generation_window(rows, self.tokenizer, self.rule, self.spec.variant.bucketing)
        return win, order, prompts

    def accept(self, out, n: int) -> tuple[str, list]:
        from lab.passes.tasks.custom import predict_refusal

        return predict_refusal(out, n)

    def store(self, win, idx: list[int], values: list) -> None:
        """Each output cut before its first stop string; its tokens are counted after the window
        (:meth:`write_predictions`: the lab's bookkeeping stays out of the code's measured time)."""
        for i, text in zip(idx, values, strict=True):
            shown, cut = cut_at_stop(text, self.rule.stop)
            win.generated[i] = GeneratedItem(text=shown, input_tokens=win.tokens_kept[i], output_tokens=0,
                                             stopped_by="stop" if cut else ENTRY_STOP)
            win.pred_index[i] = i
        if getattr(win, "returned", None) is None:
            win.returned = [None] * len(win.ids)
        for i, text in zip(idx, values, strict=True):
            win.returned[i] = str(text)

    def _fields(self, recs, pad_token, settings=None, overrides=None) -> dict:
        fields = GenerationJob._fields(self, recs, pad_token, {}, {})
        fields["generation"] = {**{k: v for k, v in fields["generation"].items()
                                   if k not in ("settings", "checkpoint_settings_not_applied")},
                                "padding": ENTRY_PADDING}
        return fields

    def count_tokens(self, win) -> None:
        """``output_tokens`` of each output, counted once, after the window, by the [model]
        tokenizer over the output as the code returned it (before the lab's cut at a stop string)."""
        import msgspec

        if getattr(win, "tokens_counted", False):
            return
        returned = getattr(win, "returned", None) or [None] * len(win.ids)
        win.generated = [g if g is None or text is None else msgspec.structs.replace(
            g, output_tokens=len(self.tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]))
            for g, text in zip(win.generated, returned, strict=True)]
        win.tokens_counted = True

    def observe_window(self, win) -> dict:
        """EntryJob's record; raises NotHonoured when an output the entry returned is longer than
        the declared ``max_new_tokens`` by more than :func:`token_slack` (counted by
        :meth:`count_tokens`): a task setting the code did not apply, as a variant's would be."""
        from lab.passes.observed import NotHonoured

        rec = EntryJob.observe_window(self, win)
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

    def write_predictions(self, path: Path, win) -> dict:
        """The built-in job's lines, with ``output_tokens`` as :meth:`count_tokens` counts them."""
        self.count_tokens(win)
        return {**GenerationJob.write_predictions(self, path, win), **self.entry_fields()}

    def merge_cards(self, cards_dir, pred_path, merged, cards, labels):
        lines, fields = GenerationJob.merge_cards(self, cards_dir, pred_path, merged, cards, labels)
        return lines, {**fields, **self.merged_fields(cards)}
