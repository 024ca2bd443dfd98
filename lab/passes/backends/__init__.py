"""Engines as backends: what runs a task kind's operations in a pass (SPEC 2: engine).

A task kind (lab.passes.tasks: ClassificationJob, EmbeddingJob, GenerationJob, CustomJob) owns
its window: the items tokenized and ordered by the lab's rule, the batches formed, every answer
stored in the kind's record, the predictions written, the metric. It asks an engine for one
operation per batch and holds no engine's code; an engine holds no kind's code. An engine is a
class satisfying :class:`Engine`, in its own module, found through one line of :data:`ENGINES`:

- ``transformers`` (transformers_backend.TransformersEngine): the checkpoint loaded in this process
  and run by the lab's own loop (padded batches, the lab's pooling, greedy ``generate``);
- ``vllm`` (vllm_backend.VllmEngine): vLLM's offline engine in a child process of its venv
  (lab.engines.vllm.VllmClient), the lab's token ids sent per batch, packed by vLLM;
- ``entry`` (entry_backend.EntryEngine): the user's own code (``[task] entry``), given the lab's
  batches as strings; the kind's record, metrics, verify and compare judge it as any engine.

The steps a kind calls, in the pass sequence's order (lab.passes.sequence):

``name`` is the engine's word (a key of :data:`ENGINES`); ``applies_task_rules`` says whether it
applies the task's declared rules itself (the pooling and normalisation, ``max_new_tokens``), or
hands them to code the lab cannot see (the user's), whose answers the kind then checks against
them (unit norms, output lengths).

1. ``load(device)`` -> (tokenizer, model): the ``model_load`` phase. ``tokenizer`` is the lab's
   (a transformers tokenizer of [model]: the window tokenizes, buckets and counts with it);
   ``model`` is a torch ``nn.Module`` the probe phase counts FLOPs on (vLLM: the model's shape on
   the meta device), or None when the lab cannot see one (the user's code). A classification
   kind reads its labels from ``model.config.id2label``, else from the checkpoint's config.json;
2. ``start(device, pass_dir)`` -> result fields (optional: an engine of its own processes, timed as
   ``engine_start``); ``pid()`` its process tree's root (the window counts its CPU time);
3. ``compile(rows, device, n_items)`` (optional: an engine the lab compiles itself);
4. ``begin_window()`` before each window (optional: an engine that counts per window), then per
   batch the operation the kind names (:attr:`lab.kinds.kind.TaskKind.operation`):
   ``classify(batch)`` -> :class:`Answer` of (class index or label, probability or None) per item;
   ``embed(batch)`` -> Answer of a float32 array (items, width) and each vector's norm when known;
   ``generate(batch)`` -> Answer of one GeneratedItem per item (lab.passes.tasks.generation_core);
5. ``observed(threads, workers_on_host)`` after the warm-up and ``observe_window(win)`` after the
   window: what the engine resolved and ran, checked against the declared variant
   (lab.passes.observed.require_honoured: the keys it reads are its own, e.g. ``dtype``,
   ``device``, ``compile``, ``padding``, ``batch_size``; ``engine``, the engine's name, is read
   as transformers when absent, so any other engine gives it; a value the engine cannot see is
   lab.passes.observed.NOT_OBSERVABLE, recorded, never claimed);
6. ``result_fields(win)`` -> the engine's own result fields after the window (vLLM's engine record,
   the entry and its settings), ``merged_fields(cards)`` the same for a multi-card pass; for a
   ``generate`` engine, ``generation_record()`` -> its part of result.json's ``generation``
   (``padding``: how its prompts were batched; the decoding settings it read, if any);
7. ``close()`` when the phases end, failure included (optional; idempotent, never raises).

What an engine needs of the task (:class:`Needs`: the kind's operation, its checkpoint reader for
an engine that loads one, the declared pooling rule, the generation rule) is given at build time.
A new engine: its module here with one class, one line in :data:`ENGINES`, its name in
lab.facts.constants.ENGINE_NAMES (the words a variant may declare) and in the ``engines`` of the
kinds it runs (lab/kinds/); the lock refuses a variant whose kind does not run on its engine.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, NamedTuple, Protocol

from lab.kinds.kind import CLASSIFY, EMBED, GENERATE, OPERATIONS, TRANSFORMERS, VLLM

ENTRY = "entry"
"""The engine of a kind run by the user's own code (``[task] entry``); never a variant's word."""

ENGINES: dict[str, str] = {
    TRANSFORMERS: "lab.passes.backends.transformers_backend:TransformersEngine",
    VLLM: "lab.passes.backends.vllm_backend:VllmEngine",
    ENTRY: "lab.passes.backends.entry_backend:EntryEngine",
}
"""Engine name -> ``"module:Class"``; the one registry line a new engine adds."""


class Needs(NamedTuple):
    """What an engine needs of the task it runs: ``operation`` (one of OPERATIONS),
    ``architecture`` (the checkpoint's, lab.kinds.kind: SEQUENCE_CLASSIFICATION, ENCODER,
    CAUSAL_LM, ANY), ``loader`` (the kind's transformers checkpoint reader: (model_ref, precision,
    device, pad_token=, attention=, revision=) -> (tokenizer, model); None for an engine that loads
    no weights here), ``pooling`` and ``normalize`` (the declared embedding rule), ``rule`` (the
    declared GenerationRule) and ``entry`` (lab.kinds.kind.EntryRun: the user's method and what it
    returns; ``task`` is the pass's [task] record handed to it)."""

    operation: str
    architecture: str
    loader: Callable[..., tuple] | None = None
    pooling: str | None = None
    normalize: bool = True
    rule: Any = None
    entry: Any = None
    task: dict | None = None


class Batch(NamedTuple):
    """One batch the kind hands an engine: ``idx`` (the items' corpus positions in the window),
    ``input_ids`` (their token ids, the lab's tokenization: cut at max_length, or the generation
    prompts'), ``texts`` (the strings of an engine that takes text: the items' texts, or the
    prompts), ``number`` (1-based, within its window), ``items_before`` (items done before it: a
    failure's ``items_done``) and ``warm_up`` (a warm-up window's batch)."""

    idx: list[int]
    input_ids: list[list[int]]
    texts: list[str]
    number: int
    items_before: int
    warm_up: bool = False

    @property
    def place(self) -> str:
        """The batch in a failure's words: "warm-up batch 2", "batch 3 of the measured window"."""
        return f"warm-up batch {self.number}" if self.warm_up else f"batch {self.number} of the measured window"


class Answer(NamedTuple):
    """An operation's answer for one batch, in the batch's order.

    ``values``: classify, a list of (class index, or the label itself for the user's code;
    probability in [0, 1] or None); embed, a float32 numpy array (items, width); generate, a list
    of GeneratedItem. ``norms``: embed, each vector's L2 norm as the engine saw it (None: vectors
    returned normalised, norm not known). ``nonfinite``: the batch positions whose answer was NaN
    or inf (the kind fails the pass naming their ids). How the batch ran, for the window's
    accounting (lab.passes.inference.WindowResult.count_answer): ``shape``, the padded input's
    (items, tokens) when the engine padded; ``masks``, the attention masks the padding side is read
    from; ``packed``, sequences packed without padding (then ``max_running``, the most sequences
    run in one engine step, None when not reported); neither: the engine's own (the user's code).
    ``returned``: generate by the user's code, each text as returned (its tokens are counted after
    the window)."""

    values: Any
    norms: list | None = None
    nonfinite: tuple[int, ...] = ()
    shape: tuple[int, int] | None = None
    masks: tuple = ()
    packed: bool = False
    max_running: int | None = None
    returned: list | None = None


class Engine(Protocol):
    """An engine running a task kind's operations (module docstring)."""

    name: str
    applies_task_rules: bool

    def load(self, device: str) -> tuple: ...

    def classify(self, batch: Batch) -> Answer: ...

    def embed(self, batch: Batch) -> Answer: ...

    def generate(self, batch: Batch) -> Answer: ...

    def generation_record(self) -> dict: ...

    def observed(self, threads: int, workers_on_host: int = 1) -> dict: ...

    def observe_window(self, win) -> dict: ...

    def result_fields(self, win) -> dict: ...

    def merged_fields(self, cards: list) -> dict: ...


def engine_for(name: str, spec, needs: Needs) -> Any:
    """The engine ``name`` (a key of ENGINES) built for one pass spec (lab.passes.spec.PassSpec);
    nothing is loaded until its ``load``. Raises ValueError (one line) for an unknown name."""
    if name not in ENGINES:
        raise ValueError(f"engine {name!r} unknown; the engines are {', '.join(sorted(ENGINES))}")
    module, cls = ENGINES[name].split(":")
    return getattr(importlib.import_module(module), cls)(spec, needs)


__all__ = ["CLASSIFY", "EMBED", "ENGINES", "ENTRY", "GENERATE", "OPERATIONS", "Answer", "Batch", "Engine", "Needs",
           "engine_for"]
