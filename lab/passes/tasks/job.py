"""The task interface: what a pass asks of the job it measures (SPEC 2: task).

A task kind is one class that satisfies :class:`Job`. The pass sequence
(lab.passes.sequence, run by lab.passes.runner and by each card's lab.passes.worker) owns
everything around it: corpus reading, ids, warm-up rule, the measured window's clock and
device synchronisation, memory counters, events, failure rows and the result record. It
calls the job for exactly these steps:

1. ``load(device)`` -> (tokenizer, model): model load, timed as ``model_load``;
2. ``warm_up(rows, device)``: the protocol's warm-up over ``rows`` (the first items);
3. ``run_window(rows, device, on_batch, sink)`` -> WindowResult: the measured window's
   work, batches formed by the lab's own rule (lab.passes.inference.batch_order);
4. ``observe(threads, workers)`` after the warm-up and ``observe_window(win)`` after the window:
   the observed records the declared variant is checked against;
5. ``self_metric(win)``: a quick in-pass figure (``self_accuracy`` in result.json), or None;
6. ``write_predictions(path, win)`` -> dict of result fields (``predictions_lines``,
   ``predictions_sha256`` and what else the kind writes beside the predictions file).

A multi-card pass (lab.passes.multicard.merge_cards) asks one more step of the job, built
there without loading anything: ``merge_cards(cards_dir, pred_path, merged, cards, labels)``
-> (lines, result fields): the merged pass's prediction lines (corpus order) and what the kind
writes beside them (an embedding's one ``vectors.npy`` from the cards' shards), with
``self_accuracy`` computed over the merged lines by the kind's own rule (the one ``self_metric``
applies in a one-card pass). Raises :class:`CardsNotMerged` (one line) when a card's files cannot
be merged. :class:`LabelLines` is this step for kinds whose lines are labels.

Three optional steps, for an engine that runs in its own process (lab.passes.tasks.vllm_job):
``start_engine(device, pass_dir)`` -> dict of result fields, timed as ``engine_start`` right
after ``model_load``; ``engine_pid()`` -> the engine's root process id (None: not running), whose
process tree's CPU time the window's conditions count (lab.passes.conditions); and ``close()``,
called when the phases end on every path.

One optional step for a job whose model the lab compiles itself (``compile = true``):
``compile(rows, device, n_items)`` -> the shapes compiled, timed as ``compile`` after the
load (lab.passes.compile.compile_batches with the job's own batch step; ``rows`` are the
warm-up items, ``n_items`` the window's). A job without it has no compile phase: an engine
of its own compiles in its start, and a custom entry gets the declared ``compile`` in its
settings and compiles (or not) itself, which the lab records as declared, not observable
unless the entry reports it (lab.passes.tasks.custom).

The task itself (kind, pooling, entry) reaches the pass as ``PassSpec.extra["task"]``
(lab.orchestration.protocol.Protocol.task_extra); a classification pass carries no such key, so its
pass.json is unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol

from lab.facts.errors import LabError


class Job(Protocol):
    """One pass's task-specific steps (see the module docstring)."""

    kind: str

    def load(self, device: str) -> tuple:
        """(tokenizer, model) on ``device``; the model is None for custom code the lab cannot see."""
        ...

    def warm_up(self, rows: list[dict], device: str) -> float:
        """The warm-up over ``rows``; returns seconds."""
        ...

    def run_window(self, rows: list[dict], device: str, on_batch: Callable[[int], None] | None,
                   sink: dict | None):
        """The measured window over ``rows``: a lab.passes.inference.WindowResult."""
        ...

    def observe(self, threads: int, workers_on_host: int = 1) -> dict:
        """The observed record after load and warm-up (lab.passes.observed.require_honoured checks
        it; lab.passes.observed.NOT_OBSERVABLE for a value the lab cannot read)."""
        ...

    def observe_window(self, win) -> dict:
        """The measured window's observed record (padding, max_tokens, bucketing, batch_size)."""
        ...

    def self_metric(self, win) -> float | None:
        """A quick in-pass figure for result.json's ``self_accuracy``, or None."""
        ...

    def write_predictions(self, path: Path, win) -> dict:
        """The predictions file at ``path`` (and the kind's files beside it), written whole;
        returns the result fields (``predictions_lines``, ``predictions_sha256``, ...)."""
        ...


class CardsNotMerged(LabError, ValueError):
    """A card's files cannot be merged into its pass (a shard missing or unreadable); one line."""


def label_accuracy(pairs) -> float | None:
    """Fraction of ``pairs`` (gold, predicted) that are equal, rounded to 6 decimals (the in-pass
    ``self_accuracy`` of a label task); None for no pairs."""
    pairs = list(pairs)
    return round(sum(a == b for a, b in pairs) / len(pairs), 6) if pairs else None


class LabelLines:
    """``merge_cards`` of a kind whose prediction lines carry a label (``pred``): the cards' lines
    unchanged, in corpus order; ``self_accuracy`` by :func:`label_accuracy` over them.
    ``merged_fields`` (the kind's own result fields, from its card records) is empty here."""

    def merged_fields(self, cards: list) -> dict:
        return {}

    def merge_cards(self, cards_dir: Path, pred_path: Path, merged: list[tuple[int, str]], cards: list,
                    labels: list) -> tuple[list[str], dict]:
        import json

        lines = [line for _, line in merged]
        pairs = [(gold, json.loads(line)["pred"]) for line, gold in zip(lines, labels, strict=True)
                 if gold is not None]
        return lines, {**self.merged_fields(cards), "self_accuracy": label_accuracy(pairs)}


class ModelSteps:
    """The steps a job running a transformers model in the lab's own window shares: ``load`` by
    the job's ``loader`` (a function (model_ref, precision, device, pad_token=, attention=,
    revision=) -> (tokenizer, model)), the warm-up over its own window
    (lab.passes.inference.warm_up_window) and the observed records (lab.passes.observed).
    The job sets ``spec``, and ``run_window`` for the warm-up."""

    spec: Any
    tokenizer: Any = None
    model: Any = None
    loader: Callable[..., tuple]

    def load(self, device: str) -> tuple:
        s = self.spec
        self.tokenizer, self.model = type(self).loader(s.model_ref, s.variant.precision, device,
                                                       pad_token=s.extra.get("pad_token"),
                                                       attention=s.variant.attention,
                                                       revision=s.extra.get("revision"))
        return self.tokenizer, self.model

    def warm_up(self, rows: list[dict], device: str) -> float:
        from lab.passes.inference import warm_up_window

        return warm_up_window(self.run_window, rows, device,  # type: ignore[attr-defined]
                              self.spec.warmup_items, self.spec.warmup_passes)

    def compile(self, rows: list[dict], device: str, n_items: int) -> list:
        """The compile phase of the window's forward (lab.passes.compile.compile_model)."""
        from lab.passes.compile import compile_model

        return compile_model(self.model, rows, self.tokenizer, device, self.spec.variant, n_items)

    def observe(self, threads: int, workers_on_host: int = 1) -> dict:
        """The loaded model's observed record (lab.passes.observed.observe_model)."""
        from lab.passes.observed import observe_model

        return observe_model(self.model, threads, workers_on_host)

    def observe_window(self, win) -> dict:
        """The measured window's observed record (lab.passes.observed.observe_window)."""
        from lab.passes.observed import observe_window

        return observe_window(win, self.spec.variant.max_length)


def job_class(kind) -> type:
    """The transformers job class a task kind (lab.kinds.kind.TaskKind) names by its ``job``
    ("module:Class" under lab/passes/tasks/), imported now (its torch with it)."""
    import importlib

    module, cls = kind.job.split(":")
    return getattr(importlib.import_module(module), cls)
