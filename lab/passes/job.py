"""The task-specific steps of a pass, as one object: the seam where a task kind plugs in.

The pass's phases (timing, observation, peaks, conditions, failure classification, records)
are the runner's (``lab.passes.runner.run_pass``) and the multi-card worker's
(``lab.passes.worker.run_card``); what depends on the task is four calls on one job:

- ``load(device)``: load what the pass measures onto ``device``; sets ``model`` (the torch
  module observed by lab.passes.observed) and ``tokenizer``.
- ``warm_up(rows, device)``: the protocol warm-up over ``rows`` (corpus items).
- ``run_window(rows, device, on_batch, sink)``: the measured window over ``rows``; returns a
  ``lab.passes.inference.WindowResult`` (``sink["win"]`` holds the partial one on failure).
- ``write_predictions(path, win)``: the window's output, written whole; returns (lines, sha256).

``ClassificationJob`` is the sequence-classification job of today, backed by
lab.passes.inference and ``write_predictions`` (here). ``job_for(spec)`` gives the
job a pass spec asks for (one kind today).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.diskfull import atomic_write_text
from lab.files import sha256_lines
from lab.passes.spec import PassSpec


class ClassificationJob:
    """Sequence classification (``AutoModelForSequenceClassification``): predictions are
    (id, label, probability, truncation) lines in corpus order."""

    kind = "classification"

    def __init__(self, spec: PassSpec):
        self.spec = spec
        self.model: Any = None
        self.tokenizer: Any = None
        self.id2label: dict[int, str] = {}

    def load(self, device: str) -> None:
        """Load the tokenizer and model at the variant's precision and attention onto ``device``
        (lab.passes.inference.load_model; WeightsNotLoaded when the checkpoint lacks weights)."""
        from lab.passes import inference as inf

        s = self.spec
        self.tokenizer, self.model = inf.load_model(s.model_ref, s.variant.precision, device,
                                                    pad_token=s.extra.get("pad_token"),
                                                    revision=s.extra.get("revision"),
                                                    attention=s.variant.attention)
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}

    def warm_up(self, rows: list[dict], device: str) -> None:
        """The protocol warm-up (``warmup_items`` of ``rows``, ``warmup_passes`` times)."""
        from lab.passes import inference as inf

        s = self.spec
        inf.warm_up(rows, self.tokenizer, self.model, device, s.variant, s.warmup_items, s.warmup_passes)

    def run_window(self, rows: list[dict], device: str, on_batch: Callable[[int], None], sink: dict):
        """The measured window over ``rows`` (lab.passes.inference.run_batches): a WindowResult."""
        from lab.passes import inference as inf

        return inf.run_batches(rows, self.tokenizer, self.model, device, self.spec.variant, on_batch, sink)

    def write_predictions(self, path: Path, win) -> tuple[int, str]:
        """The window's completed predictions (``write_predictions``): (lines, sha256)."""
        return write_predictions(path, win, self.id2label)

    def gold_pairs(self, win) -> list[tuple[str, str]]:
        """(gold label, predicted label) of the window's items that have a gold label."""
        return [(g, self.id2label[p]) for g, p in zip(win.labels, win.pred_index, strict=True) if g is not None]


def write_predictions(path: Path, win, id2label: dict) -> tuple[int, str]:
    """Write completed predictions in corpus order; returns (lines, sha256 of the file).

    Each line: id, pred, prob, truncated (bool; null when unknown), tokens_kept and tokens_total
    (tokens, specials included, after and before truncation at max_length)."""
    n = 0
    lines = []
    for i, (item_id, p, c) in enumerate(zip(win.ids, win.pred_index, win.prob, strict=True)):
        if p is None:
            continue
        kept, total = win.tokens_kept[i], win.tokens_total[i]
        line = json.dumps({"id": item_id, "pred": id2label[p], "prob": round(c, 6),
                           "truncated": None if total is None else total > kept,
                           "tokens_kept": kept, "tokens_total": total}, ensure_ascii=False) + "\n"
        lines.append(line)
        n += 1
    atomic_write_text(path, "".join(lines))  # whole or absent, never half a file
    return n, sha256_lines(lines)


def job_for(spec: PassSpec) -> ClassificationJob:
    """The job of a pass spec (one task kind today: classification)."""
    return ClassificationJob(spec)
