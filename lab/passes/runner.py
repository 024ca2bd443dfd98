"""The pass runner: what one process (or container) runs for one pass.

    python -m lab.passes.runner PASS_DIR/pass.json

A one-card pass runs the pass sequence (lab.passes.sequence: startup, model load, compile,
warm-up, the measured window under its conditions, probe, evaluation, writing; the task's
steps are calls on its job, ``lab.passes.tasks.job_for(spec)``) as its only card, then
writes ``predictions.jsonl`` (classification: id, pred, prob, truncation; corpus order; the
items completed, also on failure; the task's other files beside it) and ``result.json`` (a
``lab.passes.records.PassResult``); streams events on the stdout it was started with (its
event channel, lab.passes.events.open_event_channel; what else it prints goes to stderr), the
``result`` event last.
Exit codes: 0 ok, 3 OOM, 4 error or interrupted (lab.passes.failures), 2 bad spec. Nothing
is retried with a smaller batch (seed: "Non sostituire silenziosamente questo passaggio con
un batch più piccolo"). A variant with ``cards > 1`` is handed to ``lab.passes.multicard``
(N workers under torchrun, each a card of the same sequence, merged into one pass).
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from lab.facts.diskfull import DiskFull
from lab.facts.errors import clip
from lab.facts.process import leave_process
from lab.passes.events import (
    EXIT_BAD_SPEC,
    EXIT_ERROR,
    EventKind,
    EventWriter,
    PassStatus,
    open_event_channel,
)
from lab.passes.failures import stop_on_sigint, vm_peak_bytes
from lab.passes.records import PassResult, build, write_record
from lab.passes.sequence import Card, PassSequence
from lab.passes.spec import PassSpec, read_spec_or_report

_T_PROCESS = time.perf_counter()


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class PassCard(Card):
    """The one card of a one-card pass: the sequence's defaults, and the pass's own fields."""

    def fields(self) -> dict:
        spec = self.spec
        return {"pass_id": spec.pass_id, "campaign": spec.campaign, "variant": spec.variant.to_json(),
                "start_time": _utc(), "pid": os.getpid()}


def run_pass(spec: PassSpec, ev: EventWriter) -> tuple[int, PassResult]:
    """Run one pass; returns (exit code, its PassResult, also written to ``result.json``).
    Never raises for pass failures: they are the result's ``status`` and ``failure_kind``.
    The figures are gathered phase by phase (lab.passes.sequence) and become the typed record
    once, at the end. A full disk while writing: an ``error`` event of kind disk_full (the
    orchestrator stops the campaign), EXIT_ERROR, and no result.json."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    seq = PassSequence(spec, ev, PassCard(spec), _T_PROCESS)
    code = seq.run()
    res = seq.fields
    pred_path = out / "predictions.jsonl"
    try:
        res["predictions_path"] = pred_path.name if seq.write_predictions(pred_path) else ""
        res["process_peak_vm_bytes"] = vm_peak_bytes()  # address space since process start (VmPeak)
        res["end_time"] = _utc()
        res["exit_code"] = code
        result = build(PassResult, res)
        write_record(out / "result.json", result)
    except DiskFull as exc:  # the orchestrator stops the campaign; the slot runs again on resume
        ev.emit(EventKind.ERROR, items_done=res["items_completed"], kind=exc.kind,
                message=clip(f"DiskFull: {exc}", 300))
        return EXIT_ERROR, build(PassResult, {"predictions_path": "", "end_time": _utc(), **res,
                                              "status": PassStatus.ERROR, "failure_kind": exc.kind,
                                              "exit_code": EXIT_ERROR})
    ev.emit(EventKind.RESULT, status=result.status, items_completed=result.items_completed,
            measured_s=result.phases_s.measured)
    return code, result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ev = EventWriter(open_event_channel())  # before any user code: its output goes to the log
    stop_on_sigint()  # a stop is PassStopped; a KeyboardInterrupt the user's code raises is its failure
    if not argv:
        print("usage: python -m lab.passes.runner PASS_DIR/pass.json [multi-host options]", file=sys.stderr)
        return EXIT_BAD_SPEC
    spec = read_spec_or_report(argv[0], ev)
    if spec is None:
        return EXIT_BAD_SPEC
    if spec.variant.cards > 1 or len(argv) > 1:  # N cards: workers under torchrun
        from lab.passes.multicard import run_multicard

        return run_multicard(spec, argv[0], ev, argv[1:])
    code, _ = run_pass(spec, ev)
    return code


if __name__ == "__main__":
    leave_process(main())
