"""A pass over several cards: start its workers under torchrun, then merge them into one pass.

    python -m lab.passes.runner PASS_DIR/pass.json            (variant cards = N, one host)
    python -m lab.passes.runner PASS_DIR/pass.json --nnodes 2 --node-rank K \\
        --rdzv-endpoint HOST0:29400 [--rdzv-id ID] [--local-addr ADDR]      (several hosts)

The runner hands a pass whose variant has ``cards > 1`` (or any multi-host option) to
:func:`run_multicard`. It starts ``lab.passes.distributed.torchrun_command`` with
``cards // nnodes`` workers on this host and ``OMP_NUM_THREADS`` = each worker's share of
the declared threads, passes the workers' event lines through to its event channel unchanged (whole
lines; each carries its ``rank``), forwards SIGTERM/SIGINT to torchrun (which stops the
workers), and after torchrun exits merges the card files into the pass's
``predictions.jsonl`` (corpus order) and ``result.json`` (:func:`merge_cards`), so the
pass is validated as one. Over several hosts the c10d rendezvous assigns the ranks (not
``--node-rank``, which only says which host serves the rendezvous store): the host where
global rank 0 ran holds every card's files (rank 0 gathers them on success) and merges;
the others keep their own card files and write no result.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import msgspec

from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import FailureKind, clip
from lab.facts.files import REPO_ROOT, sha256_lines
from lab.inputs.variants import Variant
from lab.passes.events import EXIT_BAD_SPEC, EXIT_ERROR, EXIT_OK, EXIT_OOM, EventKind, EventWriter, PassStatus
from lab.passes.failures import CARD_STOPPED
from lab.passes.observed import combine_cards
from lab.passes.records import CardRecord, Observed, PassResult, Phases, decode_card, write_record
from lab.passes.spec import PassSpec
from lab.passes.tasks import job_for
from lab.passes.tasks.job import CardsNotMerged

PEAK_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "process_peak_rss_bytes", "device_used_bytes")
STATUS_CODES = {PassStatus.OK: EXIT_OK, PassStatus.OOM: EXIT_OOM}


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def parse_node_args(argv: list[str]) -> argparse.Namespace:
    """Multi-host options after the spec path. Raises SystemExit(2) on bad options (argparse)."""
    p = argparse.ArgumentParser(prog="python -m lab.passes.runner PASS_DIR/pass.json")
    p.add_argument("--nnodes", type=int, default=1, help="hosts taking part in the pass")
    p.add_argument("--node-rank", type=int, default=0,
                   help="0 on the host serving the rendezvous store (the endpoint's host), 1.. elsewhere")
    p.add_argument("--rdzv-endpoint", default="", help="HOST:PORT of the c10d rendezvous (a port on node 0)")
    p.add_argument("--rdzv-id", default="", help="one id shared by the hosts of this pass (default: pass id)")
    p.add_argument("--local-addr", default="", help="address the other hosts reach this one at")
    return p.parse_args(argv)


def run_multicard(spec: PassSpec, spec_path: str, ev: EventWriter, argv: list[str]) -> int:
    """Run one multi-card pass on this host; returns the pass's exit code (0 ok, 3 OOM, 4 error)."""
    from lab.passes.distributed import threads_per_worker, torchrun_command

    args = parse_node_args(argv)
    cards = spec.variant.cards
    if args.nnodes < 1 or cards % args.nnodes or not 0 <= args.node_rank < args.nnodes:
        ev.emit(EventKind.ERROR, items_done=0, message=f"cards {cards} cannot be split over {args.nnodes} host(s) "
                f"as node {args.node_rank}: cards must be a multiple of --nnodes and 0 <= --node-rank < --nnodes")
        return EXIT_BAD_SPEC
    nproc = cards // args.nnodes
    out = Path(spec.out_dir)
    (out / "cards").mkdir(parents=True, exist_ok=True)
    for stale in (out / "cards").glob("card*"):
        stale.unlink()  # a folder is one pass; leftovers of an earlier run must not merge in
    start = _utc()
    try:
        cmd = torchrun_command(spec_path, nproc, args.nnodes, args.node_rank, args.rdzv_endpoint,
                               args.rdzv_id or spec.pass_id, args.local_addr)
    except ValueError as exc:
        ev.emit(EventKind.ERROR, items_done=0, message=str(exc))
        return EXIT_BAD_SPEC
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads_per_worker(spec.threads, nproc))
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    ev.emit(EventKind.PHASE, phase="launch", state="start", cards=cards, nproc_per_node=nproc, nnodes=args.nnodes,
            node_rank=args.node_rank, command=" ".join(cmd))
    ev.stream.flush()
    t_launch = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=str(REPO_ROOT))

    def forward(signum, frame) -> None:
        if proc.poll() is None:
            proc.send_signal(signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:  # whole lines, passed through
            ev.forward(raw)
        torchrun_code = proc.wait()
        torchrun_wall_s = round(time.perf_counter() - t_launch, 6)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    if args.nnodes > 1 and not (out / "cards" / "card0.json").is_file():
        # ranks are given by the c10d rendezvous, not by --node-rank: the host of rank 0 merges
        ev.emit(EventKind.RESULT, status=f"host done, rank 0 ran elsewhere (torchrun exit {torchrun_code})",
                items_completed=None, measured_s=None)
        return EXIT_OK if torchrun_code == 0 else EXIT_ERROR
    res = merge_cards(spec, cards, torchrun_code, start, torchrun_wall_s)
    ev.emit(EventKind.RESULT, status=res.status, items_completed=res.items_completed,
            measured_s=res.phases_s.measured)
    return res.exit_code if res.exit_code is not None else EXIT_ERROR


def _max(values) -> float | int | None:
    vals = [v for v in values if v is not None]
    return max(vals) if vals else None


def _one_or_joined(values: list):
    """The common value of every card (an int, as a one-card pass records it), else "a+b"."""
    return values[0] if len(set(values)) == 1 else "+".join(map(str, values))


def _check_cards(variant: Variant, recs: list[CardRecord]) -> list[CardRecord]:
    """The one-card rule (lab.passes.observed.require_honoured) on every ok card's record.

    A card that says ok but did not honour a declared value, or recorded no observation,
    comes back as an error card whose ``error`` gives the reason (the pass's error names the card).
    """
    from lab.passes.observed import NotHonoured, require_honoured

    def checked(c: CardRecord) -> CardRecord:
        if c.status != PassStatus.OK:
            return c
        if not c.observed:
            return c.replace(status=PassStatus.ERROR, failure_kind=FailureKind.NOT_HONOURED,
                             error="no observed values recorded: declared values unchecked")
        try:
            require_honoured(variant, c.observed.to_json(), c.device or "")
        except NotHonoured as exc:
            return c.replace(status=PassStatus.ERROR, failure_kind=exc.kind, error=f"NotHonoured: {exc}")
        return c

    return [checked(c) for c in recs]


def _truncation(rows: list[dict], recs: list[CardRecord]) -> dict | None:
    """Truncation per bucket of the merged pass, the one-card pass's rule on the same counts:
    each card's tokens kept and total per item (CardRecord ``tokens_kept``/``tokens_total``, in
    its ``positions`` order, whatever the task kind) put at their corpus positions, then
    lab.passes.observed.truncation_counts over the corpus rows. Items of a card that recorded
    none (it stopped before the end of its window), or counts not one per position, are
    unknown; None when no card recorded them."""
    from lab.passes.observed import truncation_counts

    kept: list = [None] * len(rows)
    total: list = [None] * len(rows)
    counted = [c for c in recs if c.tokens_kept is not None and c.tokens_total is not None
               and len(c.tokens_kept) == len(c.tokens_total) == len(c.positions)]
    for c in counted:
        for p, k, t in zip(c.positions, c.tokens_kept or [], c.tokens_total or [], strict=True):
            kept[p], total[p] = k, t
    return truncation_counts(rows, kept, total) if counted else None


COMPILE_COUNTS = ("compile_frames", "recompiles_warmup", "recompiles_measured", "graph_breaks_measured")


def compile_counts(recs: list[CardRecord]) -> dict:
    """The pass's dynamo counts (a custom entry's cards: lab.passes.compile.DynamoCounters per
    card process) and its ``compile_phase``: each count summed over the cards, None unless every
    card recorded it (a sum over some cards would be taken for the pass's)."""
    out: dict = {"compile_phase": next((c.compile_phase for c in recs if c.compile_phase), None)}
    for k in COMPILE_COUNTS:
        vals = [getattr(c, k) for c in recs]
        out[k] = sum(vals) if vals and all(v is not None for v in vals) else None
    return out


def worst_conditions(recs: list[CardRecord]) -> dict | None:
    """The pass's window conditions: those of its worst card (a starved one first, then the
    lowest CPU share), with ``card`` (its rank) and ``starved_cards`` (ranks of every starved
    card); each card's own are in ``per_card``. None when no card recorded them."""
    have = [c for c in recs if c.conditions]
    if not have:
        return None
    worst = min(have, key=lambda c: (not (c.conditions or {}).get("starved"),
                                     (c.conditions or {}).get("cpu_share") or 0.0))
    return {**(worst.conditions or {}), "card": worst.rank,
            "starved_cards": [c.rank for c in have if (c.conditions or {}).get("starved")]}


def _pass_failure(status: str, recs: list[CardRecord], missing: list[int]) -> FailureKind | None:
    """The failure kind of a merged pass: None when ok; oom when a card ran out of memory;
    interrupted when every failure is a stopped card; else the first failing card's own kind
    (error when a card left no record)."""
    if status == PassStatus.OK:
        return None
    if status in (PassStatus.OOM, PassStatus.INTERRUPTED):
        return FailureKind(str(status))
    kinds = [c.failure_kind for c in recs if c.status not in (PassStatus.OK, CARD_STOPPED) and c.failure_kind]
    return kinds[0] if kinds and not missing else FailureKind.ERROR


def merge_cards(spec: PassSpec, cards: int, torchrun_code: int | None, start_time: str,
                torchrun_wall_s: float | None = None) -> PassResult:
    """Merge ``cards/card<r>.*`` (CardRecord, strictly decoded) into ``predictions.jsonl`` and
    ``result.json`` (both written atomically); returns the PassResult.

    Predictions: every card's lines, ordered by corpus position (ids the corpus lacks last,
    duplicates kept, so validation sees exactly what the cards produced), merged by the task
    kind's own step (``job.merge_cards``, lab.passes.tasks.job): label and generation lines
    unchanged; an embedding's lines renumbered into one ``vectors.npy`` copied from the cards'
    shards. The kind's result fields (vectors, tokens, rule, entry) and ``self_accuracy`` come
    from that step, by the kind's own rule over the merged lines. A card whose files cannot be
    merged (CardsNotMerged) makes the pass an error, no predictions written. Status: ok when
    every card wrote an ok record; else oom when any card ran out of memory; else error
    (a card error, or a card with no record: killed before writing, or on another host);
    interrupted when the only failures are cards stopped from outside. Durations: the
    slowest card's (``measured`` = max over cards of barrier-to-materialised seconds);
    ``torchrun_wall_s`` is the whole launcher, start to exit (rendezvous, start-up, shutdown).
    Observed values (lab.passes.observed): combined over the cards (``combine_cards``), each
    ok card checked by the one-card rule (``require_honoured``): a card that did not honour a
    declared value makes the pass an error with the reason naming the card. Truncation per
    bucket: from the cards' tokens kept and total per item (``_truncation``), for every kind.
    Window conditions (lab.passes.conditions): the worst card's (``worst_conditions``), each
    card's in ``per_card``. Compile counts (a custom entry's cards): summed (``compile_counts``).
    Memory: per-card records in ``per_card`` (scope kept); the pass-level peaks are the
    largest single card's, never a sum. Items completed: sum over cards (each item once).
    """
    from lab.inputs.corpus import read_corpus

    out = Path(spec.out_dir)
    rows = read_corpus(spec.corpus_path)
    pos = {r["id"]: i for i, r in enumerate(rows)}
    recs: list[CardRecord] = []
    missing: list[int] = []
    for r in range(cards):
        p = out / "cards" / f"card{r}.json"
        (recs.append(decode_card(p.read_bytes())) if p.is_file() else missing.append(r))
    merged: list[tuple[float, int, str]] = []
    for c in recs:
        p = out / "cards" / f"card{c.rank}.predictions.jsonl"
        if p.is_file():
            for line in p.read_text(encoding="utf-8").splitlines(keepends=True):
                merged.append((pos.get(json.loads(line)["id"], math.inf), c.rank, line))
    merged.sort(key=lambda x: x[0])
    pred_path = out / "predictions.jsonl"
    labels = [rows[int(k)].get("label") if k != math.inf else None for k, _, _ in merged]
    merge_error = ""
    try:  # the kind's own merge: its lines, what it writes beside them, its self metric
        merged_lines, kind_fields = job_for(spec).merge_cards(out / "cards", pred_path,
                                                              [(r, line) for _, r, line in merged], recs, labels)
    except CardsNotMerged as exc:
        merged_lines, kind_fields, merge_error = [], {}, f"merge: {exc}"
    atomic_write_text(pred_path, "".join(merged_lines))  # whole or absent
    predictions_sha256 = sha256_lines(merged_lines)
    recs = _check_cards(spec.variant, recs)
    statuses = [c.status for c in recs]
    failing = [c for c in recs if c.status not in (PassStatus.OK, CARD_STOPPED)]
    if not merge_error and not missing and all(s == PassStatus.OK for s in statuses):
        status = PassStatus.OK
    elif PassStatus.OOM in statuses:
        status = PassStatus.OOM
    elif failing or missing or merge_error:
        status = PassStatus.ERROR
    else:
        status = PassStatus.INTERRUPTED
    errors = [f"card {c.rank}: {c.error}" for c in failing + [c for c in recs if c.status == CARD_STOPPED]]
    errors += [f"card {r}: no record written (killed before writing, or on another host)" for r in missing]
    errors += [merge_error] if merge_error else []
    phases = Phases(**{k: _max(getattr(c.phases_s, k) for c in recs)
                       for k in ("startup", "model_load", "warmup", "writing")},
                    measured=_max(c.phases_s.measured for c in recs) if status == PassStatus.OK else None)
    items = sum(c.items_completed or 0 for c in recs)
    per_card = [{"card": c.rank, "status": c.status, "device": c.device,
                 "items_total": c.items_total, "items_completed": c.items_completed,
                 "measured_s": c.phases_s.measured, "threads": c.threads,
                 "peaks": c.peaks, "error": c.error, "observed": c.observed.to_json() if c.observed else None,
                 "conditions": c.conditions,
                 "test_only_injected_oom": c.test_only_injected_oom} for c in recs]
    peaks = None
    if any(c.peaks for c in recs):
        reasons = {}
        for c in recs:
            reasons.update({k: v for k, v in ((c.peaks or {}).get("reasons") or {}).items()})
        reasons["scope_across_cards"] = (f"largest single card of {len(recs)}; per-card figures in per_card; "
                                         "never added across cards")
        peaks = {**{k: _max((c.peaks or {}).get(k) for c in recs) for k in PEAK_KEYS},
                 "reasons": reasons, "scopes": next((c.peaks or {}).get("scopes") for c in recs if c.peaks)}
    devs = [c.device for c in recs if c.device]
    observed = combine_cards([(c.rank, c.observed.to_json()) for c in recs if c.observed])
    res = PassResult(
        pass_id=spec.pass_id, campaign=spec.campaign, variant=spec.variant.to_json(),
        start_time=start_time, end_time=_utc(), status=status,
        failure_kind=_pass_failure(status, recs, missing), error=clip("; ".join(errors), 500),
        phases_s=phases, items_total=len(rows), items_completed=items,
        items_per_s=round(items / phases.measured, 4) if phases.measured else None,
        device=(f"{devs[0]} x{len(devs)}" if len(set(devs)) == 1 else "+".join(devs)) if devs else None,
        backend=next((c.backend for c in recs if c.backend), None),
        torch_version=next((c.torch_version for c in recs if c.torch_version), None),
        threads=_one_or_joined([c.threads for c in recs]),  # CPU threads of one worker
        threads_per_card=[c.threads for c in recs],
        cards_declared=cards, cards_observed=len(recs), cards_missing=missing,
        devices=[c.identity for c in recs if c.identity], per_card=per_card,
        peaks=peaks, shard_rule="lab.passes.distributed.shard_positions",
        window="per card: barrier exit to shard predictions on the host; pass: the slowest card",
        n_truncated=sum(c.n_truncated or 0 for c in recs), real_tokens=sum(c.real_tokens or 0 for c in recs),
        padded_tokens=sum(c.padded_tokens or 0 for c in recs), batches=sum(c.batches or 0 for c in recs),
        observed=msgspec.convert(observed, Observed) if observed else None,
        conditions=worst_conditions(recs),
        environment=next((c.environment for c in recs if c.environment is not None), None),
        truncated_by_bucket=_truncation(rows, recs),
        deterministic={"torch.manual_seed": spec.seed, "cudnn.benchmark": False,
                       "use_deterministic_algorithms": False},
        predictions_path=pred_path.name, predictions_lines=len(merged_lines), predictions_sha256=predictions_sha256,
        torchrun_exit_code=torchrun_code,
        torchrun_wall_s=torchrun_wall_s,  # launcher start to exit: rendezvous, workers, shutdown
        exit_code=STATUS_CODES.get(status, EXIT_ERROR), **compile_counts(recs), **kind_fields)
    write_record(out / "result.json", res)
    return res
