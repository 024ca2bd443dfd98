"""Classification: today's job (a Hugging Face sequence classifier run by the lab's loop),
as a :class:`lab.passes.tasks.job.Job` wrapping lab.passes.inference and the runner's predictions
format (id, pred, prob, truncated, tokens_kept, tokens_total)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.facts.diskfull import atomic_write_text
from lab.facts.files import sha256_lines
from lab.passes.inference import load_model
from lab.passes.tasks.job import KindJob, LabelLines, label_accuracy


def write_label_predictions(path: Path, win, id2label: dict | None) -> tuple[int, str]:
    """Write completed predictions in corpus order; returns (lines, sha256 of the file).

    Each line: id, pred, prob, truncated (bool; null when unknown), tokens_kept and tokens_total
    (tokens, specials included, after and before truncation at max_length). ``id2label``:
    {class index: label}, or None when ``win.pred_index`` already holds the labels (custom code)."""
    lines = []
    for i, (item_id, p, c) in enumerate(zip(win.ids, win.pred_index, win.prob, strict=True)):
        if p is None:
            continue
        kept, total = win.tokens_kept[i], win.tokens_total[i]
        lines.append(json.dumps({"id": item_id, "pred": id2label[p] if id2label is not None else p,
                                 "prob": None if c is None else round(c, 6),
                                 "truncated": None if total is None else total > kept,
                                 "tokens_kept": kept, "tokens_total": total}, ensure_ascii=False) + "\n")
    atomic_write_text(path, "".join(lines))  # whole or absent, never half a file
    return len(lines), sha256_lines(lines)


class ClassificationJob(LabelLines, KindJob):
    """A sequence classifier: ``[task]`` absent or ``kind = "classification"``; the engine's
    ``classify`` per batch (a class index and its probability), the labels its checkpoint's id2label."""

    kind = "classification"
    loader: Any = load_model

    def __init__(self, spec):
        super().__init__(spec)
        self.id2label: dict | None = {}

    def load(self, device: str) -> tuple:
        """The engine's load; the labels are the checkpoint's id2label, from the model the engine
        loaded or, for an engine that loads none here, from the checkpoint's config.json."""
        super().load(device)
        config = getattr(self.model, "config", None)
        if config is None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(self.spec.model_ref, revision=self.spec.extra.get("revision"))
        self.id2label = {int(k): v for k, v in config.id2label.items()}
        return self.tokenizer, self.model

    def use_loaded(self, tokenizer, model, device: str) -> None:
        super().use_loaded(tokenizer, model, device)
        self.id2label = {int(k): v for k, v in model.config.id2label.items()}

    def nonfinite(self, ids: list[str], items_done: int) -> Exception:
        from lab.passes.inference import NonFiniteLogits

        return NonFiniteLogits(ids, items_done)

    def store(self, win, idx: list[int], answer) -> None:
        for i, (pred, prob) in zip(idx, answer.values, strict=True):
            win.pred_index[i], win.prob[i] = pred, prob

    def label(self, pred):
        """The label of a stored prediction: the checkpoint's id2label of its class index, or the
        label itself (the user's code answers labels: no id2label)."""
        return self.id2label[pred] if self.id2label else pred

    def self_metric(self, win) -> float | None:
        return label_accuracy((g, self.label(p)) for g, p in zip(win.labels, win.pred_index, strict=True)
                              if g is not None)

    def write_predictions(self, path: Path, win) -> dict:
        lines, digest = write_label_predictions(path, win, self.id2label or None)
        return {"predictions_lines": lines, "predictions_sha256": digest, **self.engine.result_fields(win)}


def run_batches(rows: list[dict], tokenizer, model, device: str, variant,
                on_batch=None,
                sink: dict | None = None):
    """The classification window of a transformers model already loaded: the pass's own
    (lab.passes.tasks.classification.ClassificationJob on the transformers engine), for benchmarks
    and tests that load once. ``rows``: corpus items (id, text, optional label). Raises
    NonFiniteLogits, and lets OOM errors propagate; ``sink["win"]`` holds the WindowResult as it fills."""
    from types import SimpleNamespace

    job = ClassificationJob(SimpleNamespace(variant=variant, extra={}))
    job.use_loaded(tokenizer, model, device)
    return job.run_window(rows, device, on_batch, sink)
