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
from lab.passes.tasks.job import LabelLines, ModelSteps, label_accuracy


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


class ClassificationJob(LabelLines, ModelSteps):
    """A sequence classifier: ``[task]`` absent or ``kind = "classification"``. Load, warm-up
    (its own window over the first items), compile and observed records: ModelSteps."""

    kind = "classification"
    loader = load_model

    def __init__(self, spec):
        self.spec = spec
        self.tokenizer: Any = None
        self.model: Any = None
        self.id2label: dict = {}

    def load(self, device: str) -> tuple:
        super().load(device)
        self.id2label = {int(k): v for k, v in self.model.config.id2label.items()}
        return self.tokenizer, self.model

    def run_window(self, rows, device, on_batch=None, sink=None):
        from lab.passes import inference as inf

        return inf.run_batches(rows, self.tokenizer, self.model, device, self.spec.variant, on_batch, sink)

    def self_metric(self, win) -> float | None:
        return label_accuracy((g, self.id2label[p]) for g, p in zip(win.labels, win.pred_index, strict=True)
                              if g is not None)

    def write_predictions(self, path: Path, win) -> dict:
        lines, digest = write_label_predictions(path, win, self.id2label)
        return {"predictions_lines": lines, "predictions_sha256": digest}
