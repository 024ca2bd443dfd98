"""The typed records of a pass, once each: what ``result.json`` and a card's record hold, the
phases and observed values inside them, a validation, and an attempt as the journal gives it.

Every record is a frozen ``msgspec.Struct``. The JSON field names are those written before the
records existed, so old journals, result files and archives decode into them; a field a pass
did not reach is ``None`` and is left out when the record is written (``encode``), as the
older runners left it out. Decoding is strict (``msgspec.json.decode(..., type=...)``: no type
coercion); a value of the wrong type raises ``msgspec.ValidationError`` naming its path.

A pass that failed carries ``failure_kind`` (a ``lab.facts.errors.FailureKind``); readers compare it,
never a substring of ``error``. Adding a pass figure: one field here (the runner or the merge
sets it), one column in ``lab.report.raw_table.COLUMNS`` that reads it, and
``lab.evidence.format.ARCHIVE_FORMAT`` raised by one (an archive without the column is of the
format before).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import msgspec

from lab.facts.constants import AGREEMENT
from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import FailureKind
from lab.inputs.variants import Variant

R = TypeVar("R", bound="Record")
Number = int | float
Cell = str | int | float | bool | None  # an observed value: per card it may be "card 0: x; card 1: y"


class Record(msgspec.Struct, frozen=True, omit_defaults=True):
    """Base of the pass records: frozen, keyword-only, unset (None) fields not written."""

    def to_json(self) -> dict:
        """The record as plain JSON types (what ``result.json`` and the journal hold)."""
        return msgspec.to_builtins(self, enc_hook=str)

    def replace(self, **changes):
        """A copy with ``changes`` (field name -> value)."""
        return msgspec.structs.replace(self, **changes)


class Phases(Record, frozen=True):
    """Seconds per phase (host clock, ``time.perf_counter``); None: the pass ended before it."""

    startup: float | None = None
    model_load: float | None = None
    engine_start: float | None = None  # an engine in its own process (vLLM): spawn to ready
    compile: float | None = None
    warmup: float | None = None
    measured: float | None = None
    probe: float | None = None
    evaluation: float | None = None
    writing: float | None = None


# The phases before the measured window (SPEC: set-up / warm-up, "timed separately, never inside
# the measured window"): a lot pays them once, whatever it measures. compare sums them per pass
# (lab.compare.projection); the rest of Phases (measured, probe, evaluation, writing) is not set-up.
SETUP_PHASES = ("startup", "model_load", "engine_start", "compile", "warmup")
PHASES = tuple(Phases.__struct_fields__)  # every phase, in the sequence's order


class Observed(Record, frozen=True):
    """What actually ran (lab.passes.observed): after the warm-up (model fields) and after the
    window (window fields). Over several cards a value that differs is "card 0: x; card 1: y"."""

    dtype: Cell = None
    device: Cell = None
    attention: Cell = None
    threads: Cell = None
    threads_declared: Cell = None
    compile: Cell = None
    quantization: Cell = None
    float32_matmul_precision: Cell = None
    tf32_matmul_declared: Cell = None
    tf32_matmul: Cell = None
    tf32_cudnn: Cell = None
    threads_per_worker: Cell = None
    threads_split: Cell = None
    padding: Cell = None
    padding_side: Cell = None  # where the window's batch masks held padding (lab.passes.inference)
    input_ids_sha256: Cell = None  # sha256 of the window's token ids (lab.passes.inference.input_ids_digest)
    cpu_capability: Cell = None  # torch's CPU kernel level in the pass (lab.passes.observed.observe_cpu)
    max_tokens: Cell = None
    bucketing: Cell = None
    batch_size: Cell = None
    window_items: Cell = None
    # a vLLM pass (lab.engines.vllm.VllmClient.observed): what the engine resolved and scheduled
    engine: Cell = None
    max_num_seqs: Cell = None
    max_num_batched_tokens: Cell = None
    max_model_len: Cell = None
    vllm_memory_fraction: Cell = None
    prefix_caching: Cell = None  # vLLM's enable_prefix_caching, read back from its cache config
    threads_bind: Cell = None  # the CPUs vLLM bound its OpenMP threads to (lab.engines.vllm.ThreadBinding)
    max_running: Cell = None
    # a server pass (lab.passes.tasks.server_job): the load generator's releases against its schedule
    request_rate: Cell = None  # requests released per second between the first release and the last
    generator_lag_p99_s: Cell = None  # 99th percentile of the release lag behind the schedule (s)
    request_schedule: Cell = None  # "replayed" (checked) or "unknown"
    # a custom entry (lab.passes.tasks.custom): the settings its settings_used() reported, comma-joined;
    # present (even empty) means the values above came from the user's code, not from the lab's sight
    reported_by_entry: Cell = None


class PassFacts(Record, frozen=True, kw_only=True):
    """What a pass's ``result.json`` and a card's record share, declared once: the status, the
    phases, the items, the window's counts and conditions, the predictions' digest and what the
    task kind writes beside them (lab.passes.tasks: an embedding's vectors file and pooling, a
    generation's tokens and rule, the user's entry), and dynamo's counts. Units: seconds, bytes,
    items, tokens. ``status`` is a lab.passes.events.PassStatus word; ``failure_kind`` says why a
    pass (or card) did not finish (None when it did)."""

    status: str
    error: str
    phases_s: Phases
    items_total: int | None
    items_completed: int
    failure_kind: FailureKind | None = None
    device: str | None = None
    backend: str | None = None
    torch_version: str | None = None
    environment: dict[str, Any] | None = None
    observed: Observed | None = None
    conditions: dict[str, Any] | None = None
    peaks: dict[str, Any] | None = None
    n_truncated: int | None = None
    real_tokens: int | None = None
    padded_tokens: int | None = None
    batches: int | None = None
    predictions_lines: int | None = None
    predictions_sha256: str | None = None
    # an embedding pass (lab.passes.tasks.embedding): the vectors file beside the predictions (a card's
    # shard, ``card<r>.vectors.npy``) and the pooling rule
    vectors_path: str | None = None
    vectors_sha256: str | None = None
    vectors_shape: list[int] | None = None
    vectors_dtype: str | None = None
    pooling: dict[str, Any] | None = None
    # the user's code (lab.passes.backends.entry_backend): the entry and the settings it was built with
    entry: str | None = None
    entry_settings: dict[str, Any] | None = None
    # a generation pass (lab.passes.tasks.generation): tokens fed and generated over the items
    # written, and the rule as run (template, limits, stop strings, its sha256, normalisation)
    input_tokens: int | None = None
    output_tokens: int | None = None
    generation: dict[str, Any] | None = None
    # frames torch._dynamo compiled in the pass (or card) process (lab.passes.compile.DynamoCounters): in
    # the compile phase (the user's code: while it was built, in model_load), the warm-up and the window;
    # over several cards, the sum over the cards' processes. ``compile_phase``: why there was no lab
    # compile phase (lab.passes.compile.NO_LAB_COMPILE)
    compile_phase: str | None = None
    compile_frames: int | None = None
    recompiles_warmup: int | None = None
    recompiles_measured: int | None = None
    graph_breaks_measured: int | None = None


class CardRecord(PassFacts, frozen=True, kw_only=True):
    """One card (worker) of a multi-card pass: ``cards/card<rank>.json`` (lab.passes.worker); its
    ``status`` may also be ``lab.passes.failures.CARD_STOPPED`` (a card stopped from outside)."""

    rank: int
    local_rank: int
    world_size: int
    node_rank: int
    positions: list[int]
    threads: int | None = None
    identity: dict[str, Any] | None = None
    dist_backend: str | None = None
    test_only_injected_oom: bool = False
    window_start_unix_s: float | None = None
    window_end_unix_s: float | None = None
    # tokens per item of ``positions`` (same order) after and before truncation, as the card's window
    # counted them (lab.passes.inference.WindowResult; None: unknown): the merge's truncation per bucket
    tokens_kept: list[int] | None = None
    tokens_total: list[int | None] | None = None
    exit_code: int | None = None
    written_by: str | None = None


class PassResult(PassFacts, frozen=True, kw_only=True):
    """A pass's ``result.json``: written by lab.passes.runner (one card) or lab.passes.multicard
    (the merge of its cards). The fields without a default are always written; the others
    only when measured (None: left out, as a pass that stopped before them leaves them out)."""

    pass_id: str
    campaign: str
    variant: dict[str, Any]
    start_time: str
    end_time: str
    predictions_path: str
    exit_code: int
    items_per_s: float | None = None
    pid: int | None = None
    devices: list[dict[str, Any] | None] | None = None
    threads: int | str | None = None
    deterministic: dict[str, Any] | None = None
    compile_shapes: list[list[int | str]] | None = None
    truncated_by_bucket: dict[str, dict[str, Any]] | None = None
    matmul_parameters: int | None = None
    n_layers: int | None = None
    d_attn: int | None = None
    ceiling_flop_per_s: float | None = None
    probe_size: int | None = None
    probe_dtype: str | None = None
    probe_rounds: int | None = None
    model_flop: Number | None = None
    achieved_flop_per_s: float | None = None
    utilization: float | None = None
    probe_error: str | None = None
    self_accuracy: float | None = None
    process_peak_vm_bytes: int | None = None
    # a vLLM pass (lab.passes.backends.vllm_backend): the engine as it resolved, and its reservation
    engine: dict[str, Any] | None = None
    engine_memory: dict[str, Any] | None = None
    # a server pass (lab.passes.tasks.server_job): the served requests' figures, verdict, generator
    serving: dict[str, Any] | None = None
    # a multi-card pass (lab.passes.multicard.merge_cards)
    threads_per_card: list[int | None] | None = None
    cards_declared: int | None = None
    cards_observed: int | None = None
    cards_missing: list[int] | None = None
    per_card: list[dict[str, Any]] | None = None
    shard_rule: str | None = None
    window: str | None = None
    torchrun_exit_code: int | None = None
    torchrun_wall_s: float | None = None


class Validation(Record, frozen=True):
    """The checks of one pass (lab.orchestration.validate.validate_pass). Counts are items; metrics are
    fractions in [0, 1]. Empty figures (None) carry their reason in ``reasons`` (a list).
    ``reference_pass``: the reference variant's pass it was compared with ("" when none)."""

    expected_ids: int
    observed_ids: int
    duplicate_ids: int
    missing_ids: int
    extra_ids: int
    ids_match: bool
    format_ok: bool
    coverage: dict[str, Any]
    coverage_ok: bool
    metric_name: str
    metric: float | None
    metric_by_bucket: dict[str, Any]
    threshold: float
    threshold_ok: bool | None
    reference_metric: float | None
    gap_to_reference: float | None
    agreement_with_reference: float | None
    tolerance: float
    tolerance_ok: bool | None
    corpus_accepted: bool
    reasons: list[str] = []
    examples: dict[str, Any] = {}
    reference_pass: str | None = None
    agreement_worst: float | None = None  # embedding: the lowest per-id cosine with the reference
    agreement_worst_id: str | None = None
    agreement_rule: str | None = None  # what agreement_with_reference measures, when not "same label"
    second_metric_name: str | None = None  # generation: the figure reported beside the judged one
    second_metric: float | None = None
    # the agreement rule (lab.orchestration.agreement), checked beside the threshold: ids compared with
    # the reference pass, of them those whose result differs (embedding: cosine below the floor), the
    # rule applied; agreement_ok None = not checked (no reference pass yet, ids or format wrong, or a
    # record written before the rule existed)
    agreement_ids: int | None = None
    agreement_differing: int | None = None
    agreement_max_differing: float | None = None
    agreement_min_cosine: float | None = None
    agreement_ok: bool | None = None

    def verdict(self) -> str:
        """The pass's verdict in words: "accepted (accuracy 0.8123)" or "rejected: <reasons>"."""
        if self.corpus_accepted:
            return f"accepted ({self.metric_name} {self.metric:.4f})" if self.metric is not None else "accepted"
        return rejected_text(self.reasons)

    def failed_checks(self) -> list[str]:
        """The acceptance checks this pass failed, by name, in the rule's order (SPEC section 3
        rule 2): "ids", "format", "coverage", the metric's name (``metric_name``: below its
        threshold, or not computed on matching ids and format), "reference" (gap beyond the
        tolerance, or not computed for want of a reference pass: for the agreement metric, that
        alone), "agreement" (the agreement rule's share of differing ids beyond the allowed one);
        [] when accepted. Read from the typed checks, never from the ``reasons`` text."""
        if self.corpus_accepted:
            return []
        failed = [name for name, ok in (("ids", self.ids_match), ("format", self.format_ok),
                                        ("coverage", self.coverage_ok)) if not ok]
        if self.metric_name == AGREEMENT and self.metric is None and not self.reference_pass \
                and self.ids_match and self.format_ok:  # the agreement waits for a reference pass
            return [*failed, "reference"]
        if self.threshold_ok is False or (self.threshold_ok is None and self.ids_match and self.format_ok):
            failed.append(self.metric_name)
        if self.tolerance_ok is False or (self.tolerance_ok is None and self.metric is not None):
            failed.append("reference")
        if self.agreement_ok is False:
            failed.append("agreement")
        return failed

    def verdict_short(self) -> str:
        """The verdict in a table cell's width (the Runs screen's status cell): "accepted", or the
        one rejection wording (:func:`rejected_text`) of the checks failed
        (:meth:`failed_checks`): "rejected: accuracy", "rejected: ids; coverage". The full words
        with the figures are :meth:`verdict`'s (used as is when no named check failed)."""
        if self.corpus_accepted:
            return "accepted"
        failed = self.failed_checks()
        return rejected_text(failed) if failed else self.verdict()


def rejected_text(reasons: list[str]) -> str:
    """The one wording of a rejection: "rejected: " and the validation's reasons, "; "-joined
    (no reason recorded: "rejected: no validated pass")."""
    return "rejected: " + ("; ".join(reasons) or "no validated pass")


class Attempt(Record, frozen=True):
    """One attempted pass as the journal gives it (lab.orchestration.journal.Journal.attempts): its
    slot, its declared ``variant`` (a typed, frozen ``lab.inputs.variants.Variant``, decoded from the
    row with no dict in between) and ``variant_label``, the label stored with it (``Variant.label``
    as the lab that wrote the row words it: a re-derived raw table of a campaign another lab version
    ran keeps its labels), its result (None while running or when none was written), the orchestrator's record
    of its ``launch`` (kept with the result in the journal's copy) and its validation (None before
    it was validated); ``verdict`` in words."""

    pass_id: str
    seq: int
    attempt: int
    repetition: int
    position: int
    variant_id: str
    status: str
    launch: dict[str, Any] | None = None
    start_time: str | None = None
    end_time: str | None = None
    exit_code: int | None = None
    items_completed: int | None = None
    items_total: int | None = None
    items_per_s: float | None = None
    launcher: str | None = None
    notes: str | None = None
    updated: float | None = None
    variant: Variant | None = None
    variant_label: str | None = None
    result: PassResult | None = None
    validation: Validation | None = None

    @property
    def failure_kind(self) -> FailureKind | None:
        """Why the pass did not finish, from its result (None when it did, or wrote none)."""
        return self.result.failure_kind if self.result is not None else None

    @property
    def verdict(self) -> str:
        """The attempt's verdict in words (``Validation.verdict``, the one rule); "" before it was
        validated. Read by ``iteralab campaign status``."""
        return self.validation.verdict() if self.validation is not None else ""

    @property
    def verdict_short(self) -> str:
        """The attempt's verdict in a table cell's width (``Validation.verdict_short``); "" before
        it was validated. Read by the Runs screen's status cell."""
        return self.validation.verdict_short() if self.validation is not None else ""


def build(cls: type[R], fields: dict) -> R:
    """The record ``cls`` from ``fields`` (field name -> value, as a pass gathers them phase by
    phase), checked strictly. Raises TypeError naming a key that is no field (a figure would
    otherwise be dropped from result.json unseen), msgspec.ValidationError for a wrong type."""
    unknown = set(fields) - set(cls.__struct_fields__)
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {', '.join(sorted(unknown))}: declare them in "
                        "lab.passes.records")
    return msgspec.convert(fields, cls)


def decode_result(data: bytes | str) -> PassResult:
    """A ``result.json``'s bytes as a PassResult. Raises msgspec.DecodeError / ValidationError."""
    return msgspec.json.decode(data, type=PassResult)


def decode_card(data: bytes | str) -> CardRecord:
    """A card record's bytes as a CardRecord. Raises msgspec.DecodeError / ValidationError."""
    return msgspec.json.decode(data, type=CardRecord)


def write_record(path: Path, record: Record) -> None:
    """Write ``record`` as indented JSON, atomically (whole or absent; lab.facts.diskfull.DiskFull
    when the disk is full). A value of a str subclass JSON does not know (torch's version) is
    written as its string."""
    text = msgspec.json.format(msgspec.json.encode(record, enc_hook=str), indent=1).decode()
    atomic_write_text(Path(path), text + "\n")
