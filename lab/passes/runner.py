"""The pass runner: what one process (or container) runs for one pass.

    python -m lab.passes.runner PASS_DIR/pass.json

Phases, each timed separately with a host clock (``time.perf_counter``): ``startup``
(imports), ``model_load``, ``compile`` (compile = true variants only, lab.passes.compile:
every window batch shape known before the window; ``compile_frames``, ``recompiles_warmup``
and ``recompiles_measured`` count dynamo's frames compiled in each phase),
``warmup``, ``measured`` (read corpus, tokenize, transfer, infer, materialize predictions
on the host; device synchronized at both ends; the conditions it ran under around it:
CPU time, CPUs available, load, steal, GPU clocks and whether they starved it,
lab.passes.conditions), ``probe`` (matmul ceiling and the pass's
model FLOP/s, lab.passes.probe), ``evaluation`` and ``writing``. Memory peaks are reset
right before the measured window. Declared values are checked against the observed ones
after the warm-up and after the window (lab.passes.observed). The task-specific steps (model
load, warm-up, the window's work, the predictions files) are calls on the pass's job,
``lab.passes.tasks.job_for(spec)`` (classification, embedding, custom). Writes ``predictions.jsonl``
(classification: id, pred, prob, truncation; corpus order; the items completed, also on
failure; the task's other files beside it) and ``result.json``; streams events on stdout.
Exit codes: 0 ok, 3 OOM, 4 error, 2 bad spec. Nothing is retried with a smaller batch (seed: "Non sostituire
silenziosamente questo passaggio con un batch più piccolo"). A variant with ``cards > 1``
is handed to ``lab.passes.multicard`` (N workers under torchrun, merged into one pass);
a one-card pass keeps this single-process path.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path

from lab.facts.diskfull import DiskFull, is_disk_full
from lab.facts.errors import FailureKind, PassFailure
from lab.passes.events import EXIT_BAD_SPEC, EXIT_ERROR, EXIT_OK, EXIT_OOM, EventKind, EventWriter, PassStatus
from lab.passes.records import PassResult, build, write_record
from lab.passes.spec import PassSpec, read_spec_or_report
from lab.passes.tasks import job_for

_T_PROCESS = time.perf_counter()
OOM_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "std::bad_alloc")


def is_oom(exc: BaseException) -> bool:
    """True for CUDA/HIP OOM, Python MemoryError and torch's host allocator failures."""
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return name == "OutOfMemoryError" or any(m in str(exc).lower() for m in OOM_MARKERS)


def failure_kind(exc: BaseException) -> FailureKind:
    """Why a pass stopped, from the exception it raised: a ``PassFailure``'s own kind (device
    unavailable, not honoured, non-finite, weights not loaded, disk full, a stopped card), else
    interrupted (KeyboardInterrupt), oom (``is_oom``), disk full (``is_disk_full``), timeout
    (TimeoutError), error. The one classification for the runner and the multi-card worker."""
    if isinstance(exc, PassFailure):
        return exc.kind
    if isinstance(exc, KeyboardInterrupt):
        return FailureKind.INTERRUPTED
    if is_oom(exc):
        return FailureKind.OOM
    if is_disk_full(exc):
        return FailureKind.DISK_FULL
    if isinstance(exc, TimeoutError):
        return FailureKind.TIMEOUT
    return FailureKind.ERROR


FAILURE_STATUS = {FailureKind.INTERRUPTED: (PassStatus.INTERRUPTED, EXIT_ERROR),
                  FailureKind.OOM: (PassStatus.OOM, EXIT_OOM)}
"""(pass status, exit code) of a failure kind; any other kind: (error, EXIT_ERROR)."""


def failure_status(kind: FailureKind) -> tuple[PassStatus, int]:
    """(pass status, exit code) of a pass that failed with ``kind`` (``FAILURE_STATUS``)."""
    return FAILURE_STATUS.get(kind, (PassStatus.ERROR, EXIT_ERROR))


def failure_text(exc: BaseException) -> str:
    """The ``error`` field of a failed pass or card: the class name and the first line (500 chars)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]


def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _vm_peak() -> int | None:
    """VmPeak (bytes): the largest address space this process had; what RLIMIT_AS limits."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_pass(spec: PassSpec, ev: EventWriter) -> tuple[int, PassResult]:
    """Run one pass; returns (exit code, its PassResult, also written to ``result.json``).
    Never raises for pass failures: they are the result's ``status`` and ``failure_kind``.
    The figures are gathered phase by phase and become the typed record once, at the end."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    res: dict = {"pass_id": spec.pass_id, "campaign": spec.campaign, "variant": spec.variant.to_json(),
                 "start_time": _utc(), "status": PassStatus.ERROR, "error": "", "phases_s": {},
                 "items_total": None, "items_completed": 0, "pid": os.getpid()}
    phases = res["phases_s"]
    win = None
    sink: dict = {}
    state: dict = {"done": 0, "t0": None, "total": 0}
    job = None
    device = "cpu"

    def phase(name: str, t0: float) -> None:
        phases[name] = round(time.perf_counter() - t0, 6)
        ev.emit(EventKind.PHASE, phase=name, state="end", duration_s=phases[name])

    def on_batch(done: int) -> None:
        state["done"] = done
        el = time.perf_counter() - state["t0"]
        ev.progress(done, state["total"], done / el if el > 0 else 0.0)

    try:
        import torch
        import transformers  # noqa: F401 - imported here so its start-up cost is not model load

        from lab.inputs.corpus import read_corpus
        from lab.memory.observe import release_memory
        from lab.memory.peaks import PeakTracker
        from lab.passes import inference as inf
        from lab.passes import observed
        from lab.passes.conditions import WindowConditions

        phases["startup"] = round(time.perf_counter() - _T_PROCESS, 6)
        torch.manual_seed(spec.seed)
        if spec.threads:
            torch.set_num_threads(spec.threads)
        torch.backends.cudnn.benchmark = False
        device, backend = inf.resolve_device(spec.variant.device)
        from lab.inputs.manifest import pass_environment
        from lab.passes.distributed import card_identity

        res.update(device=device, backend=backend, torch_version=str(torch.__version__),
                   devices=[card_identity(device, 0)], environment=pass_environment(),
                   threads=torch.get_num_threads(),
                   deterministic={"torch.manual_seed": spec.seed, "cudnn.benchmark": False,
                                  "use_deterministic_algorithms": False})
        ev.emit(EventKind.PHASE, phase="model_load", state="start", device=device)
        job = job_for(spec)
        t = time.perf_counter()
        tok, model = job.load(device)
        inf.synchronize(device)
        phase("model_load", t)
        dynamo = None
        if spec.variant.compile:  # every window batch shape known now is compiled here, not in the window
            from lab.passes.compile import DynamoCounters, compile_model

            dynamo = DynamoCounters()
            ev.emit(EventKind.PHASE, phase="compile", state="start")
            corpus = read_corpus(spec.corpus_path)
            dynamo.start()
            t = time.perf_counter()
            res["compile_shapes"] = compile_model(model, corpus[: spec.warmup_items], tok, device,
                                                  spec.variant, len(corpus))
            phase("compile", t)
            res["compile_frames"] = dynamo.read()[0]

        ev.emit(EventKind.PHASE, phase="warmup", state="start")
        warm_rows = read_corpus(spec.corpus_path)[: spec.warmup_items]
        if dynamo:
            dynamo.start()
        t = time.perf_counter()
        job.warm_up(warm_rows, device)
        phase("warmup", t)
        if dynamo:
            res["recompiles_warmup"] = dynamo.read()[0]
        res["observed"] = job.observe(spec.threads)
        observed.require_honoured(spec.variant, res["observed"], device)

        tracker = PeakTracker(device)
        release_memory(device)  # freed warm-up memory goes back before the peaks are reset
        tracker.reset()
        ev.emit(EventKind.PHASE, phase="measured", state="start")
        if dynamo:
            dynamo.start()
        cond = WindowConditions(device, torch.get_num_threads())
        inf.synchronize(device)
        cond.start()
        t = state["t0"] = time.perf_counter()
        rows = read_corpus(spec.corpus_path)
        state["total"] = res["items_total"] = len(rows)
        try:
            win = job.run_window(rows, device, on_batch, sink)
            inf.synchronize(device)
            phase("measured", t)
        finally:
            res["conditions"] = cond.stop(round(time.perf_counter() - t, 6))  # a failed window's too
            res["peaks"] = tracker.read().to_json()
            if dynamo:
                res["recompiles_measured"], res["graph_breaks_measured"] = dynamo.read()
        res["items_completed"] = win.items_done
        res["items_per_s"] = round(win.items_done / phases["measured"], 4)
        res.update(n_truncated=win.n_truncated, real_tokens=win.real_tokens,
                   padded_tokens=win.padded_tokens, batches=win.batches,
                   truncated_by_bucket=observed.truncation_by_bucket(rows, win))
        res["observed"].update(job.observe_window(win))
        observed.require_honoured(spec.variant, res["observed"], device)

        from lab.passes.probe import probe_phase

        ev.emit(EventKind.PHASE, phase="probe", state="start")
        t = time.perf_counter()
        res.update(probe_phase(model, device, spec.variant.precision, win, phases["measured"]))
        phase("probe", t)

        t = time.perf_counter()
        res["self_accuracy"] = job.self_metric(win)
        phase("evaluation", t)
        res["status"] = PassStatus.OK
        code = EXIT_OK
    except BaseException as exc:  # noqa: BLE001 - every failure becomes a row
        kind = failure_kind(exc)
        res["status"], code = failure_status(kind)
        res["failure_kind"] = kind
        done = getattr(exc, "items_done", None)
        res["items_completed"] = state["done"] if done is None else done
        if kind == FailureKind.OOM:
            ev.emit(EventKind.OOM, items_done=state["done"], kind=kind, message=str(exc).splitlines()[0][:300])
        elif kind != FailureKind.INTERRUPTED:
            ev.emit(EventKind.ERROR, items_done=res["items_completed"], kind=kind,
                    message=f"{type(exc).__name__}: {exc}"[:300])
        res["error"] = failure_text(exc)
        traceback.print_exc(file=sys.stderr)
    t = time.perf_counter()
    pred_path = out / "predictions.jsonl"
    win = win or sink.get("win")
    try:
        if win is not None and job is not None:
            res.update(job.write_predictions(pred_path, win))
        res["predictions_path"] = pred_path.name if win is not None and job is not None else ""
        phases["writing"] = round(time.perf_counter() - t, 6)
        res["process_peak_vm_bytes"] = _vm_peak()  # address space since process start (VmPeak)
        res["end_time"] = _utc()
        res["exit_code"] = code
        result = build(PassResult, res)
        write_record(out / "result.json", result)
    except DiskFull as exc:  # the orchestrator stops the campaign; the slot runs again on resume
        ev.emit(EventKind.ERROR, items_done=res["items_completed"], kind=exc.kind, message=f"DiskFull: {exc}"[:300])
        return EXIT_ERROR, build(PassResult, {"predictions_path": "", "end_time": _utc(), **res,
                                              "status": PassStatus.ERROR, "failure_kind": exc.kind,
                                              "exit_code": EXIT_ERROR})
    ev.emit(EventKind.RESULT, status=result.status, items_completed=result.items_completed,
            measured_s=result.phases_s.measured)
    return code, result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ev = EventWriter()
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
    sys.exit(main())
