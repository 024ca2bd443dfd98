"""The pass sequence, written once: the phases one card runs, for a one-card pass
(lab.passes.runner.run_pass) and for each card of a multi-card pass (lab.passes.worker.run_card).

Task kinds and engines plug in as the pass's job (``lab.passes.tasks.job_for(spec)``, the
``Job`` protocol of lab.passes.tasks.job); what differs between a one-card pass and a card
of several is a :class:`Card` (this module's is the one-card pass's; lab.passes.worker's
``WorkerCard`` is one card of several). :class:`PassSequence` owns the rest. Phases, each
timed with a host clock (``time.perf_counter``) into ``phases_s`` (seconds):

1. ``startup``: process start (``t_process``, taken when the entry module was imported) to
   torch and transformers imported; then the seed, the threads (``Card.threads``), the device
   (``Card.place``), what the card is (``Card.identity``) and the process group (``Card.join``).
2. ``model_load``: ``job.load(device)``, device synchronized. A job whose engine runs in its
   own process (lab.passes.backends.vllm_backend) starts it next, its own phase ``engine_start``
   (``job.start_engine``: its fields go into the record), and closes it when the phases end,
   failure included (``job.close``); such an engine compiles in its own start, so it has no
   ``compile`` phase.
3. ``compile`` (compile = true only; lab.passes.compile): ``job.compile`` runs the job's batch
   step over every window batch shape known before the window; ``compile_frames``,
   ``recompiles_warmup`` and ``recompiles_measured`` count dynamo's frames compiled in each
   phase (lab.passes.compile.DynamoCounters; a variant refuses compile with cards > 1). A job
   without ``compile`` and without an engine of its own (a custom entry: the user's code in
   this process) has no such phase and compiles itself, if at all, compile declared or not:
   the same counters are read around its build (``compile_frames``: ``model_load``), its
   warm-up and its window, and ``compile_phase`` says so (lab.passes.compile.NO_LAB_COMPILE);
   its ``observed`` compile stays what the entry reports, else declared, not observable.
4. ``warmup``: ``job.warm_up`` over the first ``warmup_items`` corpus rows; then what the
   job observed (``job.observe``) is checked against the declared variant
   (lab.passes.observed.require_honoured).
5. Freed memory released and the peaks reset (lab.memory), then ``measured``: from the
   common start (``Card.common_start``: the cards' barrier; nothing for one card) to the
   predictions materialized on the host, device synchronized at both ends: read the corpus,
   take the card's rows (``Card.rows``: all of them, or its shard), tokenize, transfer,
   infer (``job.run_window``). The window's conditions (lab.passes.conditions: CPU time,
   CPUs, load, steal, GPU clocks) and memory peaks are recorded, also for a failed window;
   the window's observed record (``job.observe_window``) is checked again.
6. One-card pass only (``Card.one_of_many`` false): ``probe`` (matmul ceiling and the pass's
   model FLOP/s, lab.passes.probe), ``evaluation`` (``job.self_metric``), ``items_per_s`` and
   truncation per bucket (lab.passes.observed.truncation_by_bucket over the window's tokens
   kept and total per item, whatever the kind); a card of several records those per-item
   counts instead (``tokens_kept``, ``tokens_total``, in its ``positions`` order), and the
   multi-card merge (lab.passes.multicard) derives the pass's figures from the cards' records
   and prediction lines by the same rules, and probes nothing.
7. ``writing`` (:meth:`PassSequence.write_predictions`, called by the entry point with its
   path): ``job.write_predictions``, the items completed, also after a failure.

A failure in any phase is classified once (lab.passes.failures): ``status`` and exit code,
``failure_kind``, ``error``, ``items_completed`` and its event. Nothing is retried with a
smaller batch. Events: the ``phase`` starts and ends a card announces (``Card.announces``),
``progress`` per batch, ``oom``/``error`` on failure; the entry point emits the last one.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path
from typing import Any

from lab.passes.events import EXIT_ERROR, EXIT_OK, EventKind, EventWriter, PassStatus
from lab.passes.failures import failure_kind, failure_status, failure_text, report_failure
from lab.passes.spec import PassSpec
from lab.passes.tasks import job_for


class Card:
    """A one-card pass, as the sequence sees it; lab.passes.worker.WorkerCard overrides the hooks
    for one card of a multi-card pass. Each hook is called once, at the point the sequence says."""

    one_of_many = False
    """False: this card is the whole pass (its status is a pass's, it probes and evaluates)."""
    workers_on_host = 1
    """Workers of this pass on this host (the observed thread split, the window's CPU need)."""

    def __init__(self, spec: PassSpec):
        self.spec = spec

    def fields(self) -> dict:
        """The record's own first fields (the sequence adds status, error, phases, item counts)."""
        return {}

    def announces(self, phase: str, start: bool) -> bool:
        """Whether this card emits the ``phase`` event of ``phase``'s start (``start``) or end."""
        return True

    def threads(self) -> int:
        """CPU threads torch runs with (0: torch's default): the declared threads."""
        return self.spec.threads

    def place(self, device: str) -> str:
        """The device this card runs on, from the resolved device of the variant."""
        return device

    def identity(self, device: str, backend: str) -> dict:
        """Record fields saying which card and settings ran (after the device is placed)."""
        from lab.passes.distributed import card_identity

        return {"devices": [card_identity(device, 0)],
                "deterministic": {"torch.manual_seed": self.spec.seed, "cudnn.benchmark": False,
                                  "use_deterministic_algorithms": False}}

    def join(self, backend: str) -> None:
        """Join the other cards (nothing for one card)."""

    def common_start(self) -> None:
        """Wait for the other cards to be loaded and warm: the window's common start."""

    def at_window(self, edge: str) -> dict:
        """Record fields taken at the window's ``edge`` ("start" or "end"); none for one card."""
        return {}

    def rows(self, rows: list[dict], job: Any) -> tuple[list[dict], dict]:
        """(the rows this card's window runs, record fields naming them): every corpus row."""
        return rows, {"items_total": len(rows)}

    def after_batch(self, batches: int) -> None:
        """Called after each window batch (``batches`` done so far)."""

    def quiet(self) -> None:
        """From here on no stop signal may raise (the failure and the files are being written)."""

    def after_predictions(self, path: Path) -> None:
        """Called once the predictions file is written (inside the ``writing`` phase)."""


class PassSequence:
    """The phases of one card (module docstring). ``run()`` runs them and never raises for a
    pass failure; ``fields`` then holds the record's fields (field name -> value, for
    ``lab.passes.records.build``), ``code`` the exit code (0 ok, 3 OOM, 4 error or stopped)."""

    def __init__(self, spec: PassSpec, ev: EventWriter, card: Card, t_process: float):
        self.spec, self.ev, self.card, self.t_process = spec, ev, card, t_process
        self.fields: dict = {**card.fields(), "status": PassStatus.ERROR, "error": "", "phases_s": {},
                             "items_total": None, "items_completed": 0}
        self.phases: dict = self.fields["phases_s"]
        self.job: Any = None
        self.win: Any = None
        self.code = EXIT_ERROR
        self._sink: dict = {}  # the job's partial window, when the window fails
        self._done = self._batches = 0
        self._t0 = 0.0

    def _start(self, phase: str, **extra) -> None:
        if self.card.announces(phase, start=True):
            self.ev.emit(EventKind.PHASE, phase=phase, state="start", **extra)

    def _phase(self, name: str, t0: float) -> None:
        """``name`` took the seconds since ``t0``: its duration, and its end event."""
        self.phases[name] = round(time.perf_counter() - t0, 6)
        if self.card.announces(name, start=False):
            self.ev.emit(EventKind.PHASE, phase=name, state="end", duration_s=self.phases[name])

    def _on_batch(self, done: int, served: dict | None = None) -> None:
        """The window's hook after each batch: ``done`` items so far (a progress event);
        ``served``: a server pass's live figures, carried by the event (EventWriter.progress)."""
        self._done, self._batches = done, self._batches + 1
        el = time.perf_counter() - self._t0
        self.ev.progress(done, self.fields["items_total"], done / el if el > 0 else 0.0, served=served)
        self.card.after_batch(self._batches)

    def run(self) -> int:
        """Run the phases up to the window's figures (``writing`` is the caller's, with its path);
        returns the exit code. Every failure, KeyboardInterrupt included, is recorded, not raised."""
        try:
            self._phases()
            self.fields["status"], self.code = PassStatus.OK, EXIT_OK
        except BaseException as exc:  # noqa: BLE001 - every failure becomes a record
            self._failed(exc)
        finally:
            close = getattr(self.job, "close", None)  # an engine process: gone on every path
            if close is not None:
                close()
        return self.code

    def _phases(self) -> None:
        spec, card, res, phases = self.spec, self.card, self.fields, self.phases
        import torch
        import transformers  # noqa: F401 - imported here so its start-up cost is not model load

        from lab.inputs.corpus import read_corpus
        from lab.inputs.manifest import pass_environment
        from lab.memory.observe import release_memory
        from lab.memory.peaks import PeakTracker
        from lab.passes import inference as inf
        from lab.passes import observed
        from lab.passes.conditions import WindowConditions

        phases["startup"] = round(time.perf_counter() - self.t_process, 6)
        torch.manual_seed(spec.seed)
        if card.threads():
            torch.set_num_threads(card.threads())
        torch.backends.cudnn.benchmark = False
        device, backend = inf.resolve_device(spec.variant.device)
        device = card.place(device)
        res.update(device=device, backend=backend, torch_version=str(torch.__version__),
                   threads=torch.get_num_threads(), environment=pass_environment(),
                   **card.identity(device, backend))
        card.join(backend)
        workers = card.workers_on_host
        self._start("model_load", device=device)
        self.job = job = job_for(spec)
        start_engine = getattr(job, "start_engine", None)  # an engine in its own process (vLLM)
        # every window batch shape known now is compiled here, not in the window, by the job's own
        # step (a job without one: an engine of its own compiles in its start, custom code itself)
        compile_step = getattr(job, "compile", None)
        from lab.passes.compile import NO_LAB_COMPILE, DynamoCounters

        dynamo = None
        if compile_step is None and start_engine is None:  # the user's code, in this process
            dynamo = DynamoCounters()  # whatever compile declares: its own torch.compile is counted
            res["compile_phase"] = NO_LAB_COMPILE
            dynamo.start()
        t = time.perf_counter()
        model = job.load(device)[1]
        inf.synchronize(device)
        self._phase("model_load", t)
        if dynamo:
            res["compile_frames"] = dynamo.read()[0]  # while the entry was built
        if start_engine is not None:
            self._start("engine_start")
            t = time.perf_counter()
            res.update(start_engine(device, Path(spec.out_dir)))
            self._phase("engine_start", t)

        if spec.variant.compile and compile_step is not None and start_engine is None:
            dynamo = DynamoCounters()
            self._start("compile")
            corpus = read_corpus(spec.corpus_path)
            dynamo.start()
            t = time.perf_counter()
            res["compile_shapes"] = compile_step(corpus[: spec.warmup_items], device, len(corpus))
            self._phase("compile", t)
            res["compile_frames"] = dynamo.read()[0]

        self._start("warmup")
        warm_rows = read_corpus(spec.corpus_path)[: spec.warmup_items]
        if dynamo:
            dynamo.start()
        t = time.perf_counter()
        job.warm_up(warm_rows, device)
        self._phase("warmup", t)
        if dynamo:
            res["recompiles_warmup"] = dynamo.read()[0]
        res["observed"] = job.observe(spec.threads, workers)
        observed.require_honoured(spec.variant, res["observed"], device)

        tracker = PeakTracker(device)
        release_memory(device)  # freed warm-up memory goes back before the peaks are reset
        tracker.reset()
        if dynamo:
            dynamo.start()
        engine_pid = getattr(job, "engine_pid", None)  # an engine in its own processes (vLLM): their CPU counts
        cond = WindowConditions(device, torch.get_num_threads(), workers, engine_pid() if engine_pid else None)
        inf.synchronize(device)
        card.common_start()
        cond.start()
        t = self._t0 = time.perf_counter()
        res.update(card.at_window("start"))
        self._start("measured")
        try:
            rows, which = card.rows(read_corpus(spec.corpus_path), job)
            res.update(which)
            win = self.win = job.run_window(rows, device, self._on_batch, self._sink)
            inf.synchronize(device)
            self._phase("measured", t)
            res.update(card.at_window("end"))
        finally:
            res["conditions"] = cond.stop(round(time.perf_counter() - t, 6))  # a failed window's too
            res["peaks"] = tracker.read().to_json()
            if dynamo:
                res["recompiles_measured"], res["graph_breaks_measured"] = dynamo.read()
        res.update(items_completed=win.items_done, n_truncated=win.n_truncated, real_tokens=win.real_tokens,
                   padded_tokens=win.padded_tokens, batches=win.batches)
        if card.one_of_many:  # the merge counts truncation per bucket over every card's items
            res.update(tokens_kept=list(win.tokens_kept), tokens_total=list(win.tokens_total))
        else:
            res["items_per_s"] = round(win.items_done / phases["measured"], 4)
            res["truncated_by_bucket"] = observed.truncation_by_bucket(rows, win)
        res["observed"].update(job.observe_window(win))
        observed.require_honoured(spec.variant, res["observed"], device)
        if card.one_of_many:
            return

        from lab.passes.probe import probe_phase

        self._start("probe")
        t = time.perf_counter()
        res.update(probe_phase(model, device, spec.variant.precision, win, phases["measured"]))
        self._phase("probe", t)
        t = time.perf_counter()
        res["self_accuracy"] = job.self_metric(win)
        self._phase("evaluation", t)

    def _failed(self, exc: BaseException) -> None:
        self.card.quiet()
        kind = failure_kind(exc)
        self.fields["status"], self.code = failure_status(kind, card=self.card.one_of_many)
        self.fields["failure_kind"] = kind
        done = getattr(exc, "items_done", None)
        self.fields["items_completed"] = self._done if done is None else done
        report_failure(self.ev, exc, kind, self._done, self.fields["items_completed"])
        self.fields["error"] = failure_text(exc)
        traceback.print_exc(file=sys.stderr)

    def write_predictions(self, path: Path) -> bool:
        """Write the items the window completed (also a failed window's, from the job's partial
        result) to ``path`` and the task's files beside it, timed as ``writing``; their fields
        (``predictions_lines``, ``predictions_sha256``...) go into ``fields``. Returns whether
        there was anything to write (False: the pass stopped before its window, or no job).
        Raises lab.facts.diskfull.DiskFull when the disk is full."""
        self.card.quiet()
        t = time.perf_counter()
        self.win = self.win or self._sink.get("win")
        written = self.win is not None and self.job is not None
        if written:
            self.fields.update(self.job.write_predictions(path, self.win))
            self.card.after_predictions(path)
        self.phases["writing"] = round(time.perf_counter() - t, 6)
        return written
