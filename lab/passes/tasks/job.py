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

Three optional steps, for an engine that runs in its own process (vLLM):
``start_engine(device, pass_dir)`` -> dict of result fields, timed as ``engine_start`` right
after ``model_load``; ``engine_pid()`` -> the engine's root process id (None: not running), whose
process tree's CPU time the window's conditions count (lab.passes.conditions); and ``close()``,
called when the phases end on every path. One optional step for an engine the lab compiles
itself (``compile = true``): ``compile(rows, device, n_items)`` -> the shapes compiled, timed as
``compile`` after the load (``rows`` are the warm-up items, ``n_items`` the window's). A job
without it has no compile phase: an engine of its own compiles in its start, and the user's code
gets the declared ``compile`` in its settings and compiles (or not) itself, which the lab records
as declared, not observable unless the entry reports it.

A kind's job is a :class:`KindJob`: the window (its batches, answers stored), the self metric, the
predictions and the merge are the kind's; loading, starting, compiling, observing and closing are
its engine's (lab.passes.backends), so a kind never names an engine and an engine never names a
kind.

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
    unchanged, in corpus order; ``self_accuracy`` by :func:`label_accuracy` over them, and the
    engine's own fields as its cards recorded them (the engine's ``merged_fields``)."""

    def merged_fields(self, cards: list) -> dict:
        return self.engine.merged_fields(cards)  # type: ignore[attr-defined]

    def merge_cards(self, cards_dir: Path, pred_path: Path, merged: list[tuple[int, str]], cards: list,
                    labels: list) -> tuple[list[str], dict]:
        import json

        lines = [line for _, line in merged]
        pairs = [(gold, json.loads(line)["pred"]) for line, gold in zip(lines, labels, strict=True)
                 if gold is not None]
        return lines, {**self.merged_fields(cards), "self_accuracy": label_accuracy(pairs)}


class KindJob:
    """A task kind's pass job over an engine (lab.passes.backends): the kind owns the window (its
    items tokenized and ordered by the lab's rule, batches of the declared size, each answer
    stored in its record, the predictions written, its self metric); the engine runs the kind's
    operation per batch and owns loading, starting, compiling, what it observed and closing.

    The engine is the pass's: the user's code (``entry``) when the kind is run by an entry (a
    kind object's ``by_entry``), else the variant's ``engine`` (transformers, vllm). A kind's job
    gives ``open`` (the window, its order, the token ids and the strings handed over), ``store``
    (an Answer into the window), ``nonfinite`` (the failure for non-finite answers), and its own
    ``self_metric``, ``write_predictions`` and ``merge_cards``; ``loader`` is its transformers
    checkpoint reader and ``needs`` what else its engine needs (its pooling rule, its generation rule)."""

    kind: str
    loader: Callable[..., tuple] | None = None

    def __init__(self, spec):
        from lab.kinds import kind_of_task
        from lab.passes.backends import ENTRY, engine_for

        self.spec = spec
        self.task: dict = spec.extra.get("task") or {}
        self.declared = kind_of_task(spec.extra.get("task"))  # the kind object (lab.kinds), entry applied
        self.tokenizer: Any = None
        self.model: Any = None
        engine = spec.variant.engine
        if not self.declared.runs_on(engine):  # the user's code runs on transformers' side only
            from lab.kinds import KINDS

            runs = ", ".join(k.name for k in KINDS.values() if k.runs_on(engine)) or "none"
            raise ValueError(f"engine {engine} runs task kinds {runs} here, not {self.declared.name!r}")
        self.engine: Any = engine_for(ENTRY if self.declared.by_entry else spec.variant.engine, spec, self.needs())

    def needs(self):
        """What the engine needs of this kind (lab.passes.backends.Needs)."""
        from lab.passes.backends import Needs

        return Needs(operation=self.declared.operation, architecture=self.declared.architecture,
                     loader=type(self).loader, entry=self.declared.entry, task=self.task, **self.kind_needs())

    def kind_needs(self) -> dict:
        """The kind's own fields of Needs (pooling, normalize, rule); none by default."""
        return {}

    # -- the engine's steps, as the pass sequence calls them --------------------------------------

    def load(self, device: str) -> tuple:
        """(tokenizer, model) as the engine loads them (the model: what the probe phase counts on)."""
        self.tokenizer, self.model = self.engine.load(device)
        return self.tokenizer, self.model

    def use_loaded(self, tokenizer, model, device: str) -> None:
        """Run on a tokenizer and model already loaded (benchmarks and tests load once for many
        windows; the transformers engine: TransformersEngine.use_loaded)."""
        self.tokenizer, self.model = tokenizer, model
        self.engine.use_loaded(tokenizer, model, device)

    @property
    def start_engine(self):
        """The engine's start (an engine in its own processes: the ``engine_start`` phase), or None."""
        return getattr(self.engine, "start", None)

    @property
    def engine_pid(self):
        """The engine's process id step (its tree's CPU counts in the window), or None."""
        return getattr(self.engine, "pid", None)

    @property
    def compile(self):
        """The engine's compile step (the lab compiles it: ``compile = true``), or None."""
        return getattr(self.engine, "compile", None)

    def close(self) -> None:
        """Close the engine (idempotent, never raises)."""
        closer = getattr(self.engine, "close", None)
        if closer is not None:
            closer()

    def observe(self, threads: int, workers_on_host: int = 1) -> dict:
        """The engine's observed record, with the threads declared (``threads``) when it does not
        give them (lab.passes.observed.require_honoured reads them)."""
        return {"threads_declared": threads, **self.engine.observed(threads, workers_on_host)}

    def observe_window(self, win) -> dict:
        return self.engine.observe_window(win)

    # -- the window ------------------------------------------------------------------------------

    def open(self, rows: list[dict]) -> tuple[Any, list[int], list[list[int]], list[str]]:
        """(window, processing order, token ids per item, string per item) of ``rows``: the
        lab's tokenization at the variant's max_length (lab.passes.inference.open_window) and
        the items' texts."""
        from lab.passes.inference import open_window

        win, input_ids, order = open_window(rows, self.tokenizer, self.spec.variant)
        return win, order, input_ids, [r["text"] for r in rows]

    def store(self, win, idx: list[int], answer) -> None:
        """The answer of the items ``idx`` (corpus positions) into ``win``."""
        raise NotImplementedError

    def nonfinite(self, ids: list[str], items_done: int) -> Exception:
        """The failure raised for items whose answer is not finite."""
        raise NotImplementedError

    def warm_up(self, rows: list[dict], device: str) -> float:
        """The protocol's warm-up: this job's own window over the first items (lab.passes.inference.warm_up_window)."""
        from lab.passes.inference import warm_up_window

        def warm_window(r, d):
            return self.run_window(r, d, warm_up=True)

        return warm_up_window(warm_window, rows, device, self.spec.warmup_items, self.spec.warmup_passes)

    def run_window(self, rows, device, on_batch=None, sink=None, warm_up: bool = False):
        """The window over ``rows``: batches of ``batch_size`` items in the processing order, the
        engine's operation per batch, each answer stored and accounted (WindowResult.count_answer).
        Returns the WindowResult (``sink["win"]`` holds it as it fills, so a failure keeps the
        items done). Raises the kind's ``nonfinite`` failure and what the engine raises."""
        v = self.spec.variant
        operation = getattr(self.engine, self.declared.operation)
        win, order, input_ids, texts = self.open(rows)
        if sink is not None:
            sink["win"] = win
        begin = getattr(self.engine, "begin_window", None)  # an engine counting per window (vLLM's finish reasons)
        if begin is not None:
            begin()
        from lab.passes.backends import Batch

        for start in range(0, len(rows), v.batch_size):
            idx = order[start:start + v.batch_size]
            answer = operation(Batch(idx, [input_ids[i] for i in idx], [texts[i] for i in idx], win.batches + 1,
                                     win.items_done, warm_up))
            if answer.nonfinite:
                raise self.nonfinite([rows[idx[j]]["id"] for j in answer.nonfinite], win.items_done)
            self.store(win, idx, answer)
            win.count_answer(idx, answer, v.max_length)
            if on_batch:
                on_batch(win.items_done)
        return win


def job_class(kind) -> type:
    """The transformers job class a task kind (lab.kinds.kind.TaskKind) names by its ``job``
    ("module:Class" under lab/passes/tasks/), imported now (its torch with it)."""
    import importlib

    module, cls = kind.job.split(":")
    return getattr(importlib.import_module(module), cls)
