"""What a task kind declares: :class:`TaskKind` (one frozen object per kind) and :class:`Metric`.

Everything that differs by task kind outside the kind's pass job is an attribute or a method
here, so that no caller branches on a kind's name (``scripts/kind_branches.py``, run by
``make lint``, refuses such a branch). The heavy per-kind code stays where it runs: the pass job
(``job``, a ``"module:Class"`` path under ``lab/passes/tasks/``, imported only by
``lab.passes.tasks.job_for``), the validation and the metrics (named by path, never imported
here). Standard library and ``lab.facts`` only: importing a kind loads no torch, numpy or
transformers (tests/unit/test_kinds.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from lab.facts.constants import AGREEMENT, ENGINE_NAMES

# The prediction record a pass of the kind writes (predictions.jsonl, one line per id)
LABEL = "label"    # {"id", "pred": label string, ...}; judged against the corpus labels
VECTOR = "vector"  # {"id", "row": its row of vectors.npy, ...}; the vectors are the result
TEXT = "text"      # {"id", "output": generated text, ...}; judged against the reference answers
RECORDS = (LABEL, VECTOR, TEXT)
RECORD_FIELDS = {LABEL: "pred", VECTOR: "row", TEXT: "output"}
"""The field of a predictions.jsonl line that holds a pass's result, by record."""

CLASSIFY, EMBED, GENERATE = "classify", "embed", "generate"
OPERATIONS = (CLASSIFY, EMBED, GENERATE)
"""The operations an engine runs for a kind (lab.passes.backends); a kind's is its record's."""
RECORD_OPERATIONS = {LABEL: CLASSIFY, VECTOR: EMBED, TEXT: GENERATE}

# The checkpoint a kind's transformers job loads (lab.orchestration.preflight checks it at lock;
# lab.passes.backends.vllm_backend builds the shape model from it)
SEQUENCE_CLASSIFICATION = "sequence_classification"  # ...ForSequenceClassification, with id2label
ENCODER = "encoder"                                  # any encoder: its last hidden state
CAUSAL_LM = "causal_lm"                              # ...ForCausalLM (or another generation head)
ANY = "any"                                          # the user's own code loads what it needs
ARCHITECTURES = (SEQUENCE_CLASSIFICATION, ENCODER, CAUSAL_LM, ANY)

TRANSFORMERS, VLLM = ENGINE_NAMES
"""The engines a variant declares (lab.inputs.variants.Variant.engine; lab.facts.constants.ENGINE_NAMES)."""

ENTRY_KEYS = ("entry", "files")
"""The [task] keys naming the user's own code: ``entry`` ("file.py:Class") and the ``files`` it reads."""


@dataclass(frozen=True)
class EntryRun:
    """How the user's own code (``[task] entry``) runs a kind as its engine
    (lab.passes.backends.entry_backend): ``method`` (the entry's method called once per batch the
    kind's job forms, for the kind's operation) and ``returns`` (what it returns, in the words its
    refusals and the docs use). The results are the kind's own record, judged exactly as the
    built-in engines' (validation, metrics, agreement, verify, compare)."""

    method: str
    returns: str


@dataclass(frozen=True)
class Metric:
    """A built-in [quality] metric: ``name`` (the campaign file's word), ``direction`` ("higher"
    is better for every built-in), ``aggregation`` (how per-item results make the pass's figure,
    in words for the docs and the report) and ``function`` (``"module:function"`` that computes
    it, the same one validation and ``archive verify`` call)."""

    name: str
    aggregation: str
    function: str
    direction: str = "higher"


def differing_share(share: float) -> str:
    """'a share of at most 0.05 (5 %)': how a decision note words the agreement rule's share of ids that
    may differ (``agreement_max_differing`` or the [quality] max_differing locked), the same for every
    kind, so an embedding's 0 reads as the share it is ('a share of at most 0 (0 %)'), never as a count."""
    return f"a share of at most {share:g} ({share * 100:g} %)"


AGREEMENT_METRIC = Metric(AGREEMENT, "share of ids agreeing with the reference variant's first valid pass",
                          "lab.orchestration.validate:agreement_figures")
"""The metric every kind accepts (no labels needed; the rule is the kind's, ``agreement_*``)."""


@dataclass(frozen=True)
class TaskKind:
    """One task kind (SPEC 2: task), as the campaign file's ``[task] kind`` names it.

    name: the word in the campaign file. job: ``"module:Class"`` of its pass job (transformers).
    keys: the [task] keys it reads besides ``kind``; defaults: the value a key left out takes
    (``None`` in TaskSection until then). metrics: its built-in metrics besides agreement; the
    first is its example. user_metric: True when a user's own ``"file.py:function"`` may judge it
    (its outputs are labels). engines: the engines that run it. vllm_runner: vLLM's runner for it
    ("pooling" or "generate"; None when vLLM does not run it). record: its prediction record
    (LABEL, VECTOR, TEXT). architecture: the checkpoint its job loads (ARCHITECTURES).
    agreement_max_differing: the agreement rule's default share of ids that may differ;
    agreement_noun: what differs, in the rule's words ("labels"). model_labels: its labels are the
    checkpoint's id2label (and a pass records class probabilities). lab_tokenizes: the lab
    tokenizes its inputs (False: the user's code does, only the buckets use the lab's tokenizer).
    keys_private: its keys are left out of other kinds' pass.json (they never held them).
    labels_role: what the corpus labels are to it, in the lock's words (None: labels the model
    must be able to produce, checked against its id2label). fixed_padding: the one ``padding`` its
    job honours (a variant declaring another is refused at lock), None when it honours each.
    entry: how the user's own code runs it (``[task] entry``, :meth:`run_by_entry`), None when it
    cannot. by_entry: True for the kind as the user's code runs it (its own, or ``run_by_entry``).
    served_endpoint: the endpoint of vLLM's OpenAI-compatible server a server scenario loads for
    it (lab.passes.tasks.server_job; None: not served). streams: its served answer streams token
    by token (TTFT, TPOT); False: it comes whole, its one latency end-to-end."""

    name: str
    job: str
    keys: tuple[str, ...]
    defaults: tuple[tuple[str, object], ...]
    metrics: tuple[Metric, ...]
    user_metric: bool
    engines: tuple[str, ...]
    vllm_runner: str | None
    record: str
    architecture: str
    agreement_max_differing: float
    agreement_noun: str
    model_labels: bool
    lab_tokenizes: bool
    keys_private: bool
    labels_role: str | None
    fixed_padding: str | None = None
    entry: EntryRun | None = None
    by_entry: bool = False
    served_endpoint: str | None = None
    streams: bool = False

    def __post_init__(self) -> None:
        assert self.record in RECORDS and self.architecture in ARCHITECTURES, self
        assert (VLLM in self.engines) == (self.vllm_runner is not None), self
        assert {k for k, _ in self.defaults} <= set(self.keys), self

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The built-in [quality] metric names it accepts, agreement last."""
        return (*(m.name for m in self.metrics), AGREEMENT)

    @property
    def by_cosine(self) -> bool:
        """Its agreement rule compares vectors by cosine (``min_cosine``), not equal results."""
        return self.record == VECTOR

    @property
    def operation(self) -> str:
        """The engine operation its passes call per batch (lab.passes.backends): classify, embed or generate."""
        return RECORD_OPERATIONS[self.record]

    @property
    def generates_text(self) -> bool:
        """Its passes generate text: output tokens, a stop rule, a text normalisation."""
        return self.record == TEXT

    @property
    def article(self) -> str:
        """Its name after its indefinite article: "a generation", "an embedding"."""
        return ("an " if self.name[:1].lower() in "aeiou" else "a ") + self.name

    @property
    def accepted_keys(self) -> tuple[str, ...]:
        """The [task] keys besides ``kind`` a campaign file of this kind may hold: its own, and
        ENTRY_KEYS when the user's code may run it."""
        return tuple(dict.fromkeys(self.keys + (ENTRY_KEYS if self.entry is not None else ())))

    def run_by_entry(self) -> TaskKind:
        """This kind as the user's own code runs it (``[task] entry`` declared): the entry's job,
        the transformers engine only (the code is the user's), any checkpoint (the code loads its
        own model; the lab keeps the [model] tokenizer for buckets and token counts), the lab
        tokenizing nothing it hands over, no fixed padding (the code pads itself). The record,
        metrics and agreement rule stay the kind's. Itself for a kind already run by the user's code;
        ValueError for a kind with no ``entry``."""
        if self.by_entry:
            return self
        if self.entry is None:
            raise ValueError(f"{self.name}: the user's code does not run this kind")
        return replace(self, engines=(TRANSFORMERS,), vllm_runner=None, architecture=ANY,
                       served_endpoint=None,
                       model_labels=False, lab_tokenizes=False, fixed_padding=None, by_entry=True)

    def runs_on(self, engine: str) -> bool:
        """True when ``engine`` (a variant's ``engine``) runs this kind in this lab."""
        return engine in self.engines
