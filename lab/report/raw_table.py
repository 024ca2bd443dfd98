"""The raw table: one row per attempted pass, failures included (seed: "Una riga della tabella
grezza rappresenta un passaggio tentato, incluso un arresto").

A figure that was not measured is an empty cell, and ``notes`` says why (SPEC 3.10). The
conditions of each pass's measured window (CPU time and share, CPUs available, cgroup quota,
load, steal, ``starved``, GPU clocks and throttle reasons) are the ``CONDITIONS`` columns
(lab.report.condition_cells); ``environment`` is the pass process's own settings that change
numerics, speed or memory (JSON, lab.inputs.manifest.ENV_ALLOWED).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pandas as pd

from lab.facts.constants import AGREEMENT
from lab.facts.files import sha256_file
from lab.inputs.variants import Variant
from lab.passes.events import PassStatus
from lab.passes.observed import NOT_OBSERVABLE
from lab.passes.records import PHASES, Attempt, Observed, PassResult, Phases, Validation
from lab.report.condition_cells import CONDITIONS, INT_CONDITIONS, condition_cells
from lab.report.result_parts import BucketCut, CardIdentity, CardPeaks, EngineMemory, EngineRecord, Scheduler
from lab.report.served_cells import SERVED, served_cells, served_notes

OBSERVED = ("dtype", "device", "attention", "threads_declared", "threads", "compile", "quantization",
            "padding", "padding_side", "max_tokens", "bucketing", "batch_size",
            # what the kernels and the inputs were (lab.passes.observed.observe_cpu, input_ids_digest)
            "cpu_capability", "input_ids_sha256",
            # TF32 (lab.passes.observed.observe_tf32): declared never on; observed torch settings
            "float32_matmul_precision", "tf32_matmul_declared", "tf32_matmul", "tf32_cudnn",
            # a vLLM pass (lab.engines.vllm): the engine that ran, its scheduler limits, the most
            # sequences it ran in one engine step (batch_size above: the most items the lab sent per call)
            "engine", "max_num_seqs", "max_num_batched_tokens", "max_running")
TRUNCATED = ("truncated_short", "truncated_medium", "truncated_long")
ENTRY_CUTS = ("n_truncated", *TRUNCATED, "real_tokens", "padded_tokens")
"""Token counts a custom entry's pass leaves empty: the entry receives whole texts and applies
max_length, padding and truncation in its own code, so the counts of the lab's tokenizer (which
forms its buckets; kept in result.json) are not what ran (issue 20: "declared, not observable")."""
ENTRY_CUTS_NOTE = ("empty n_truncated, truncated_*, real_tokens and padded_tokens: the entry receives whole texts "
                   "and cuts and pads them in its own code, not observable (the lab's tokenizer counts, which form "
                   "its buckets, are in result.json)")
ENTRY_PADS = ("padded_tokens",)
"""What a generation entry's pass leaves empty: the lab makes its prompts (each text cut to
max_text_tokens, counted by the lab: n_truncated, truncated_*, real_tokens stand) and the entry
pads them in its own code."""
ENTRY_PADS_NOTE = "empty padded_tokens: the entry pads the prompts the lab made in its own code, not observable"
# utilization (lab.passes.probe) and compilation (lab.passes.compile), from result.json: frames dynamo
# compiled in the compile phase, the warm-up and the measured window; shapes compiled as "4x128; 3x128"
# (items x tokens, "dynamic" tokens where the sequence dimension was compiled symbolically)
COMPILE = ("recompiles_measured", "graph_breaks_measured", "compile_shapes", "compile_frames",
           "recompiles_warmup")
PERF = ("model_flop", "achieved_flop_per_s", "ceiling_flop_per_s", "utilization", *COMPILE)
NO_COMPILE = "empty compile cells: compile = false: no compile phase"
# a generation pass (lab.passes.tasks.generation): prompt tokens fed and tokens generated over the
# items written, and output tokens per second of the measured window
GENERATED = ("input_tokens", "output_tokens", "output_tokens_per_s")
NOT_GENERATED = "empty input/output-token cells: not a generation pass (no text generated)"
PEAKS = ("peak_allocated_bytes", "peak_reserved_bytes", "process_peak_rss_bytes", "device_used_bytes")
ENGINE_MEMORY = ("engine_reserved_bytes", "engine_reserved_fraction", "engine_reserved_of", "engine_kv_blocks",
                 "engine_rss_bytes")
"""A vLLM pass's reservation (result.json ``engine_memory``, lab.engines.vllm.reservation): its own
scope, next to the lab process's PEAKS and never added to them; ``engine_rss_bytes`` per engine
process at ready (JSON {pid: bytes}, never summed)."""
AGREEMENT_RULE = ("agreement_ids", "agreement_differing", "agreement_max_differing", "agreement_min_cosine",
                  "agreement_ok")
"""The agreement rule's figures of a pass (lab.orchestration.agreement; Validation fields of the same
names): ids compared with the reference pass, ids that differ, the rule applied, its verdict."""
NOT_CHECKED_NOTE = "empty agreement cells: the agreement rule was not checked (a record written before it)"
COLUMNS = (["campaign", "protocol_version", "pass_id", "variant_id", "variant_name", "variant_label", "series",
            "batch_size", "precision", "padding", "max_length", "bucketing", "device", "backend",
            "cards", "cards_observed", "devices_observed", "attention", "quantization", "compile", "engine",
            "request_rate"]
           + [f"observed_{k}" for k in OBSERVED]
           + ["repetition", "order_position", "seq", "attempt", "launcher",
            "start_time", "end_time", "status", "exit_code"]
           + [f"{p}_s" for p in PHASES]
           + ["items_total", "items_completed", "items_per_s", "n_truncated", *TRUNCATED, "real_tokens",
              "padded_tokens", *GENERATED, *SERVED, *PERF, *CONDITIONS, "environment", "expected_ids", "observed_ids",
              "duplicate_ids", "missing_ids",
              "extra_ids", "ids_match", "format_ok", "coverage_ok", "metric_name", "metric",
              "metric_short", "metric_medium", "metric_long", "reference_metric",
              "gap_to_reference", "agreement_with_reference", *AGREEMENT_RULE, "threshold", "tolerance",
              "corpus_accepted"]
           + list(PEAKS) + list(ENGINE_MEMORY)
           + ["per_card_memory", "predictions_path", "predictions_sha256", "notes"])



def unreadable_count_note(key: str, value: str, served: bool = False) -> str:
    """The raw table's note for an observed count (``key``) recorded as text, its cell left empty:
    NOT_OBSERVABLE (custom code applies it itself, or, ``served``, the server of a server pass:
    recorded, never claimed), else the per-card values of a multi-card pass that differ
    ("card 0: x; card 1: y")."""
    if value == NOT_OBSERVABLE:
        return (f"observed {key}: not observable, the server applies it and its endpoints do not report it"
                if served else f"observed {key}: not observable, the entry's own code applies it")
    return f"observed {key} differs between cards: {value}"


def _sha256(path: Path) -> str:
    return sha256_file(path) if _regular(path) else ""


def _regular(path: Path) -> bool:
    """A regular file, not a symbolic link (links in a pass folder are never followed)."""
    return path.is_file() and not path.is_symlink()


PredictionsFile = Callable[[str], tuple[str, str, str]]
"""pass_id -> (predictions path relative to the campaign folder or "", its sha256 or "", why
there is none or "")."""
LINKED = "predictions file is a symbolic link: not followed"
NO_PREDICTIONS = "no predictions file"


def folder_predictions(campaign_dir: Path) -> PredictionsFile:
    """The predictions of each pass in a campaign folder (``passes/<pass_id>/predictions.jsonl``,
    never followed through a link)."""
    def look(pass_id: str) -> tuple[str, str, str]:
        pred = Path(campaign_dir) / "passes" / pass_id / "predictions.jsonl"
        if _regular(pred):
            return str(pred.relative_to(campaign_dir)), _sha256(pred), ""
        return "", "", LINKED if pred.is_symlink() else NO_PREDICTIONS
    return look


NO_RESULT = PassResult(pass_id="", campaign="", variant={}, start_time="", end_time="", status="", error="",
                       phases_s=Phases(), items_total=None, items_completed=0, predictions_path="", exit_code=0)
"""What ``raw_rows`` reads for an attempt without a result (running, or stopped before one was
written): every figure None, never a row cell of its own (status, items and times come from the
attempt)."""
NOTHING_OBSERVED = Observed()


def raw_rows(attempts: list[Attempt], campaign: str, protocol_version: int, campaign_dir: Path,
             predictions: PredictionsFile | None = None) -> list[dict]:
    """Rows in schedule order from the journal's typed attempts (lab.orchestration.journal.Journal.attempts).
    Units: seconds, bytes. ``predictions``: where each pass's predictions file is (default:
    ``folder_predictions`` of ``campaign_dir``; ``archive verify`` gives the archive's members instead)."""
    predictions = predictions or folder_predictions(campaign_dir)
    rows = []
    for a in attempts:
        pred_path, pred_sha, pred_note = predictions(a.pass_id)
        v, r, val = a.variant, a.result or NO_RESULT, a.validation
        ok, running = a.status == PassStatus.OK, a.status == PassStatus.RUNNING
        phases = r.phases_s
        peaks = r.peaks or {}
        notes = [a.notes] if a.notes else []
        row = {
            "campaign": campaign, "protocol_version": protocol_version, "pass_id": a.pass_id,
            "variant_id": a.variant_id, "variant_name": _declared(v, "name"),
            "variant_label": a.variant_label or (v.label if v is not None else None),
            "series": _declared(v, "series"),
            **{k: _declared(v, k) for k in ("batch_size", "precision", "padding", "max_length", "bucketing",
                                            "attention", "quantization", "compile")},
            "device": r.device or f"{_declared(v, 'device')} (not resolved: pass ended first)",
            "backend": r.backend,
            "cards": _declared(v, "cards"), "engine": _declared(v, "engine"),
            "request_rate": _declared(v, "request_rate"),
            **observed_cards(r),
            "repetition": a.repetition, "order_position": a.position, "seq": a.seq,
            "attempt": a.attempt, "launcher": a.launcher, "start_time": a.start_time,
            "end_time": a.end_time, "status": a.status, "exit_code": a.exit_code,
            "items_total": a.items_total, "items_completed": a.items_completed,
            "items_per_s": r.items_per_s if ok else None,
            "n_truncated": r.n_truncated, "real_tokens": r.real_tokens,
            "padded_tokens": r.padded_tokens,
            "input_tokens": r.input_tokens, "output_tokens": r.output_tokens,
            "output_tokens_per_s": output_tokens_per_s(r) if ok else None,
            **served_cells(r),
            "predictions_path": pred_path, "predictions_sha256": pred_sha,
        }
        if ok and r.output_tokens is None:
            notes.append(NOT_GENERATED)
        obs = r.observed or NOTHING_OBSERVED
        seen = obs != NOTHING_OBSERVED
        for k in OBSERVED:
            value = getattr(obs, k)
            row[f"observed_{k}"] = value
            if f"observed_{k}" in INT_COLUMNS and isinstance(value, str):  # cards differ: "card 0: x; ..."
                row[f"observed_{k}"] = None
                notes.append(unreadable_count_note(k, value, served=r.serving is not None))
        if seen and obs.tf32_matmul is None:
            notes.append("empty observed TF32 cells: " + ("the server's own settings, its endpoints do not "
                                                          "report them" if r.serving is not None
                                                          else "this pass's runner predates their observation"))
        notes += served_notes(r)
        if obs.threads_split:
            notes.append(f"threads: {obs.threads_split}")
        if not obs.padding and not running:
            notes.append("observed values " + ("partly " if seen else "") + "not recorded: the pass ended before "
                         + ("the end of the measured window" if seen else "the measured window")
                         + " (or its runner predates observation)")
        cuts = msgspec.convert(r.truncated_by_bucket or {}, dict[str, BucketCut | None])
        for b in TRUNCATED:
            row[b] = (cuts.get(b.removeprefix("truncated_")) or BucketCut()).fraction
        # the user's code: the lab's counts of what it did not hand over are kept in result.json, never claimed
        hidden, hidden_note = (ENTRY_PADS, ENTRY_PADS_NOTE) if r.generation is not None else (ENTRY_CUTS,
                                                                                               ENTRY_CUTS_NOTE)
        if r.entry is not None and any(row[k] is not None for k in hidden):
            row.update(dict.fromkeys(hidden))
            notes.append(hidden_note)
        for p in PHASES:
            row[f"{p}_s"] = getattr(phases, p)
        vllm = _declared(v, "engine") == "vllm"
        lab_compiled = _declared(v, "compile") and not r.compile_phase  # a custom entry compiles itself
        missing_phases = [p for p in PHASES if getattr(phases, p) is None and (p != "compile" or lab_compiled)
                          and (p != "engine_start" or vllm) and not (p == "compile" and vllm)]
        if ok and "probe" in missing_phases:
            missing_phases.remove("probe")
            notes.append("utilization not measured: " + (
                "multi-card passes (lab.passes.multicard) run no probe phase" if (_declared(v, "cards") or 1) > 1
                else "this pass's runner has no probe phase (an image older than it)"))
        if missing_phases and not running:
            notes.append(f"no duration for {', '.join(missing_phases)}: pass ended before that phase")
        for k in PERF:
            row[k] = getattr(r, k)
        row["compile_shapes"] = "; ".join(f"{b}x{t}" for b, t in r.compile_shapes) if r.compile_shapes else None
        cells, cond_notes = condition_cells(r.conditions, running, own_engine=vllm)
        row.update(cells)
        notes += cond_notes
        row["environment"] = json.dumps(r.environment, sort_keys=True) if r.environment is not None else None
        if r.environment is None and not running:
            notes.append("empty environment: not recorded (the pass ended before its device was resolved, "
                         "or its runner predates it)")
        if r.probe_error:
            notes.append(r.probe_error)
        notes += engine_notes(v, r) if vllm else compile_notes(v, r, a.status)
        for k in VALIDATION:
            row[k] = getattr(val, k) if val is not None else None
        for b in ("short", "medium", "long"):
            row[f"metric_{b}"] = (val.metric_by_bucket if val is not None else {}).get(b)
        if val is not None and val.metric_name == AGREEMENT and val.reference_pass:
            notes.append(agreement_note(val, a.pass_id))
        elif val is not None and val.agreement_worst is not None:  # an embedding pass: per-id cosine with the reference
            notes.append(f"agreement_with_reference is the median per-id cosine with the reference's vectors; "
                         f"worst id {val.agreement_worst_id} at {val.agreement_worst}")
        if val is not None and val.second_metric_name:  # a generation pass: the figure beside the judged one
            notes.append(f"{val.second_metric_name} {val.second_metric} beside {val.metric_name} "
                         f"(reported, not judged); agreement_with_reference is the {val.agreement_rule}")
        if val is not None and val.agreement_ok is None and val.reference_pass and val.ids_match and val.format_ok:
            notes.append(NOT_CHECKED_NOTE)
        if val is not None and val.reasons:
            notes.append("validation: " + "; ".join(val.reasons))
        for k in PEAKS:
            row[k] = peaks.get(k)
        mem = engine_memory(r)
        row.update(engine_reserved_bytes=mem.reserved_bytes, engine_reserved_fraction=mem.fraction,
                   engine_reserved_of=mem.of, engine_kv_blocks=mem.num_kv_blocks,
                   engine_rss_bytes=json.dumps(mem.engine_rss_bytes, sort_keys=True)
                   if mem.engine_rss_bytes else None)
        if r.cards_missing:
            notes.append(f"cards {r.cards_missing} left no record: their figures are not in this row")
        reasons = peaks.get("reasons") or {}
        why = {reasons[k] for k in PEAKS if k in reasons and peaks.get(k) is None}
        if not peaks and not running:
            why = {"memory not measured: pass ended before the measured window"}
        notes.extend(f"empty memory cells: {w}" for w in sorted(why))
        if pred_note:
            notes.append(pred_note)
        row["notes"] = " | ".join(notes)
        rows.append(row)
    return rows


def agreement_note(val: Validation, pass_id: str) -> str:
    """The raw table's note of a pass judged by agreement ([quality] metric = "agreement"): what the
    figure measures, against which pass, and, for the reference pass itself, that it holds by
    definition (its first valid pass is the reference, so it agrees with itself)."""
    worst = (f"; worst id {val.agreement_worst_id} at {val.agreement_worst}"
             if val.agreement_worst is not None else "")
    if val.reference_pass == pass_id:
        return (f"the reference pass: the reference variant's first valid pass, so its agreement "
                f"({val.agreement_rule}) with itself is 1 by definition, not a measurement; the others are "
                "judged against it")
    return f"agreement is the judged metric: {val.agreement_rule}, against reference pass {val.reference_pass}{worst}"


VALIDATION = ("expected_ids", "observed_ids", "duplicate_ids", "missing_ids", "extra_ids", "ids_match",
              "format_ok", "coverage_ok", "metric_name", "metric", "reference_metric", "gap_to_reference",
              "agreement_with_reference", *AGREEMENT_RULE, "threshold", "tolerance", "corpus_accepted")
"""The raw table's columns read from the attempt's Validation, one field each (same name)."""


def output_tokens_per_s(result: PassResult) -> float | None:
    """Output tokens generated per second of the measured window (``output_tokens`` over
    ``phases_s.measured``), rounded to 4 decimals; None when either is missing or the window is 0 s."""
    out, window = result.output_tokens, result.phases_s.measured
    return round(out / window, 4) if out is not None and window else None


def _declared(variant: Variant | None, field: str):
    """A declared field of the attempt's typed Variant (``batch_size``: items per batch), None when
    the attempt holds no variant (its declared cells are then empty, never a default)."""
    return getattr(variant, field) if variant is not None else None


def engine_notes(variant: Variant | None, result: PassResult) -> list[str]:
    """A vLLM pass's notes: where its weights were loaded, what compile was declared and what vLLM
    ran (the record's ``engine.scheduler.enforce_eager``; lab.engines.vllm.settings_for maps
    ``compile = false`` to ``enforce_eager``), what its batch size means, what its memory cells are
    (``engine_memory``; lab.passes.backends.vllm_backend, lab.engines.vllm.reservation). ``variant``: the
    attempt's declared Variant (None: no declared cells)."""
    declared = "true" if _declared(variant, "compile") else "false"
    eager = (msgspec.convert(result.engine or {}, EngineRecord).scheduler or Scheduler()).enforce_eager
    eager_text = ("vLLM did not record its enforce_eager" if eager is None
                  else f"vLLM ran enforce_eager {'true' if eager else 'false'}")
    out = ["vLLM pass: its weights load and its KV cache is reserved in engine_start_s (set-up, outside "
           f"the measured window); model_load_s is the lab's tokenizer; compile = {declared} was declared, "
           f"{eager_text} (vLLM's own compilation, no lab compile phase)"]
    obs = result.observed or NOTHING_OBSERVED
    if result.serving is not None:
        out.append("a server pass: one request per item, the server forms its own batches")
    elif obs.batch_size is not None:
        ran = obs.max_running
        out.append(f"batch_size {obs.batch_size} is the most items the lab sent vLLM per call; vLLM "
                   + (f"ran at most {ran} sequences in one engine step" if ran is not None
                      else "did not report how many sequences it ran together")
                   + f" (its limits: max_num_seqs {obs.max_num_seqs}, max_num_batched_tokens "
                   f"{obs.max_num_batched_tokens})")
    if result.engine_memory:
        mem = engine_memory(result)
        out.append(f"engine_reserved_bytes: vLLM's up-front reservation (weights + KV cache), fraction "
                   f"{mem.fraction} of {mem.of}, in the engine's own processes: never added to "
                   "peak_allocated_bytes or process_peak_rss_bytes (the lab process's)")
        out += [f"empty {k} cell: {why}" for k, why in sorted(mem.reasons.items())]
    return out


def compile_notes(variant: Variant | None, result: PassResult, status: str) -> list[str]:
    """Why compile cells are empty, and when a phase's duration includes compile work that
    the compile phase did not take (lab.passes.compile): frames dynamo compiled in the
    warm-up or inside the measured window (the durations are then not steady-state). A custom
    entry's pass (``compile_phase`` set, compile declared or not): why the lab has no compile
    phase, then the frames counted in its build, warm-up and window."""
    notes = []
    if result.compile_phase:  # a custom entry's pass: the lab compiled nothing, dynamo counted around the entry
        notes.append(result.compile_phase)
        if result.compile_frames:
            notes.append(f"the entry's build compiled {result.compile_frames} frame(s): model_load_s includes "
                         "compile time")
    elif not _declared(variant, "compile"):
        return [NO_COMPILE]
    if status == PassStatus.OK and result.recompiles_measured is None:
        notes.append("recompilations not counted: torch._dynamo counters not read")
    if status == PassStatus.OK and result.recompiles_warmup is None:
        notes.append("compile_frames and recompiles_warmup not counted: this pass's runner predates them")
    if result.recompiles_warmup:
        notes.append(f"warm-up compiled {result.recompiles_warmup} frame(s): warmup_s includes compile time"
                     + ("" if result.compile_phase else " that compile_s does not"))
    if result.recompiles_measured:
        notes.append(f"measured window includes recompilation ({result.recompiles_measured} frame(s) "
                     "compiled): measured_s, items_per_s and utilization are not steady-state")
    return notes


def observed_cards(result: PassResult) -> dict:
    """Cards a pass really used, from its result: ``cards_observed`` (count),
    ``devices_observed`` ("card R: device name [uuid] @host; ..."), and ``per_card_memory``
    (JSON list, one record per card with its own peaks in bytes; never added across cards).
    Empty cells when the pass ended before its devices were resolved.
    """
    devices = card_identities(result)
    per_card = msgspec.convert(result.per_card, list[CardPeaks]) if result.per_card is not None else None
    if per_card is None and result.peaks:  # one card: its peaks are the card's
        per_card = [CardPeaks(card=0, device=result.device, peaks=result.peaks)]
    mem = [{"card": c.card, "device": c.device,
            "scope": "this card's worker process and device only; never added across cards",
            **{k: (c.peaks or {}).get(k) for k in PEAKS}} for c in per_card or []]
    text = "; ".join(f"card {d.rank}: {d.device} {d.name or ''}"
                     + (f" {d.uuid}" if d.uuid else "") + f" @{d.hostname}"
                     for d in devices)
    return {"cards_observed": len(devices) if devices else None, "devices_observed": text or None,
            "per_card_memory": json.dumps(mem) if mem else None}


def card_identities(result: PassResult) -> list[CardIdentity]:
    """The cards of a pass's result.json ``devices`` (None entries left out), decoded once."""
    return msgspec.convert([d for d in result.devices or [] if d is not None], list[CardIdentity])


def engine_memory(result: PassResult) -> EngineMemory:
    """result.json ``engine_memory`` decoded (every figure None for a pass with none)."""
    return msgspec.convert(result.engine_memory or {}, EngineMemory)


def pass_cards(result: PassResult) -> tuple[tuple[str, str | None], ...]:
    """The cards a pass ran on, ``(backend, name)`` per card ("cuda", "NVIDIA H200"; "cpu", the CPU's
    model), from its result's ``devices`` (lab.passes.distributed.card_identity; every card of a pass
    runs on its one backend); a pass whose result predates them gives its backend (or device) with no
    name; () when it ended before its device was resolved. What lab.cost.hardware.Measured reads for
    the campaign note, the Cost screen and compare."""
    backend = result.backend or result.device
    if not backend:
        return ()
    names = [d.name for d in card_identities(result)]
    return tuple((backend, name) for name in names) or ((backend, None),)


INT_COLUMNS = ("exit_code", "cards", "cards_observed", "items_total", "items_completed", "n_truncated",
               "real_tokens", "padded_tokens", "input_tokens", "output_tokens", "recompiles_measured",
               "graph_breaks_measured",
               "compile_frames", "recompiles_warmup",
               "expected_ids", "observed_ids", "duplicate_ids", "missing_ids", "extra_ids",
               "observed_threads_declared", "observed_threads", "observed_max_tokens",
               "observed_batch_size", "observed_max_num_seqs", "observed_max_num_batched_tokens",
               "observed_max_running", "engine_reserved_bytes", "engine_kv_blocks") + INT_CONDITIONS + PEAKS


def raw_table(rows: list[dict]) -> pd.DataFrame:
    """DataFrame with the fixed column order; integer columns stay integers, empty cells empty."""
    df = pd.DataFrame(rows, columns=list(COLUMNS))
    for c in INT_COLUMNS:
        df[c] = df[c].astype("Int64")
    return df


def write_raw_table(rows: list[dict], path: Path) -> Path:
    from lab.report.csv_safe import write_csv

    return write_csv(raw_table(rows), path)
