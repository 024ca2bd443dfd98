"""One worker (one card) of a multi-card pass, started by torchrun (never by hand).

    python -m torch.distributed.run --nproc_per_node N ... -m lab.passes.worker PASS_DIR/pass.json

Reads RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE from torchrun's environment, joins
the process group (``nccl`` on CUDA/ROCm, ``gloo`` on CPU), loads the model on its card
(``cuda:LOCAL_RANK``, or CPU with ``threads // LOCAL_WORLD_SIZE`` threads: the declared
``threads`` is for the pass, split per worker by ``lab.passes.distributed.threads_per_worker``)
with the variant's attention and the campaign's pad token, warms up (the same protocol
warm-up as a one-card pass), records what it observed and refuses a declared value it did
not honour (``lab.passes.observed``, the one-card functions; again on its window after the
measured window), releases freed memory and resets its peaks, then meets the other workers
at a barrier. Its measured window starts when it leaves the barrier and ends when its
shard's predictions are materialised on the host (device synchronized): read corpus,
tokenize, shard (``lab.passes.distributed.shard_positions``), transfer, infer; the conditions
of its window (lab.passes.conditions, as a one-card pass) are recorded on the card. The pass's
window is the slowest card's (``lab.passes.multicard``).

Writes ``cards/card<RANK>.json`` and ``cards/card<RANK>.predictions.jsonl`` in the pass
folder before any later collective, so they survive a failure elsewhere. On success the
workers meet again and gather their records to rank 0, which writes those of cards on
other hosts. SIGTERM (torchrun stops the others when one worker fails; or the user
stops the pass) makes a worker write what it completed, status ``stopped``, and exit.
Exit codes as the runner: 0 ok, 3 OOM, 4 error or stopped.

Test-only hook: ``ITERALAB_TEST_ONLY_INJECT_OOM="RANK:BATCHES"`` raises
``torch.OutOfMemoryError`` on worker RANK after BATCHES batches; the card record then says
``test_only_injected_oom: true`` (tests/test_multicard.py; never set it in a campaign).
"""

from __future__ import annotations

from typing import Any

import os
import signal
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import FailureKind, PassFailure
from lab.passes.events import EXIT_BAD_SPEC, EXIT_ERROR, EXIT_OK, EventKind, EventWriter, PassStatus
from lab.passes.multicard import CARD_STOPPED
from lab.passes.records import CardRecord, build, write_record
from lab.passes.spec import PassSpec, read_spec_or_report

_T_PROCESS = time.perf_counter()
TEST_OOM_ENV = "ITERALAB_TEST_ONLY_INJECT_OOM"


class WorkerStopped(PassFailure):
    """SIGTERM/SIGINT reached this worker: another worker failed, or the pass was stopped."""

    kind = FailureKind.INTERRUPTED


class _StopSignal:
    """Signal handler: raises WorkerStopped at once, or only records it while files are written."""

    def __init__(self) -> None:
        self.requested = False
        self.raise_now = True

    def __call__(self, signum, frame) -> None:
        self.requested = True
        if self.raise_now:
            self.raise_now = False
            raise WorkerStopped(f"stopped by signal {signal.Signals(signum).name} (another card failed, "
                                "or the pass was stopped)")


class CardEvents(EventWriter):
    """Events of one card: every event carries ``rank`` and ``cards`` (world size)."""

    def __init__(self, rank: int, world: int):
        super().__init__()
        self.rank, self.world = rank, world

    def emit(self, event: EventKind, **fields) -> None:
        super().emit(event, rank=self.rank, cards=self.world, **fields)


def card_paths(out_dir: str | Path, rank: int) -> tuple[Path, Path]:
    """(card record, card predictions) of worker ``rank`` under ``out_dir/cards/``."""
    d = Path(out_dir) / "cards"
    return d / f"card{rank}.json", d / f"card{rank}.predictions.jsonl"


def wait_barrier(dist, stop: _StopSignal, poll_s: float = 0.001) -> None:
    """A barrier that a stop signal can interrupt (a blocking one would hold the signal)."""
    work = dist.barrier(async_op=True)
    while not work.is_completed():
        if stop.requested:
            raise WorkerStopped("stopped while waiting for the other cards")
        time.sleep(poll_s)
    work.wait()


def _injected_oom() -> tuple[int, int] | None:
    raw = os.environ.get(TEST_OOM_ENV, "")
    if not raw:
        return None
    rank, batches = raw.split(":")
    return int(rank), int(batches)


def run_card(spec: PassSpec, ev: EventWriter, rank: int, local_rank: int, world: int,
             local_world: int, stop: _StopSignal) -> int:
    """Run this worker's shard; write its card files; returns the exit code. Never raises."""
    from lab.passes.distributed import (
        BACKENDS,
        card_identity,
        shard_positions,
        threads_per_worker,
    )
    from lab.passes.runner import failure_kind, failure_status, failure_text
    from lab.passes.tasks import job_for

    card: dict = {"rank": rank, "local_rank": local_rank, "world_size": world,
                  "node_rank": int(os.environ.get("GROUP_RANK", "0")), "status": PassStatus.ERROR, "error": "",
                  "phases_s": {}, "items_total": None, "items_completed": 0, "positions": []}
    phases: dict = card["phases_s"]
    sink: dict = {}
    job = None
    state: dict = {"done": 0, "batches": 0, "t0": None}
    win, code = None, EXIT_ERROR
    dist: Any = None  # torch.distributed once imported
    inject = _injected_oom()

    def phase(name: str, t0: float) -> None:
        phases[name] = round(time.perf_counter() - t0, 6)
        if rank == 0:
            ev.emit(EventKind.PHASE, phase=name, state="end", duration_s=phases[name])

    try:
        import torch
        import torch.distributed as dist
        import transformers  # noqa: F401 - start-up cost, not model load

        from lab.inputs.corpus import read_corpus
        from lab.memory.observe import release_memory
        from lab.memory.peaks import PeakTracker
        from lab.passes import inference as inf
        from lab.inputs.manifest import pass_environment
        from lab.passes import observed
        from lab.passes.conditions import WindowConditions

        phases["startup"] = round(time.perf_counter() - _T_PROCESS, 6)
        torch.manual_seed(spec.seed)
        torch.set_num_threads(threads_per_worker(spec.threads, local_world))
        torch.backends.cudnn.benchmark = False
        device, backend = inf.resolve_device(spec.variant.device)
        if device.startswith("cuda"):
            device = f"cuda:{local_rank}"
            torch.cuda.set_device(device)
        card.update(device=device, backend=backend, torch_version=str(torch.__version__),
                    threads=torch.get_num_threads(), identity=card_identity(device, rank),
                    environment=pass_environment(),
                    dist_backend=BACKENDS[backend], test_only_injected_oom=inject is not None and inject[0] == rank)
        dist.init_process_group(BACKENDS[backend], timeout=timedelta(minutes=30))
        t = time.perf_counter()
        job = job_for(spec)
        job.load(device)
        inf.synchronize(device)
        phase("model_load", t)
        t = time.perf_counter()
        job.warm_up(read_corpus(spec.corpus_path)[: spec.warmup_items], device)
        phase("warmup", t)
        card["observed"] = job.observe(spec.threads, local_world)  # as a one-card pass
        observed.require_honoured(spec.variant, card["observed"], device)
        tracker = PeakTracker(device)
        release_memory(device)
        tracker.reset()
        inf.synchronize(device)
        cond = WindowConditions(device, torch.get_num_threads(), local_world)
        wait_barrier(dist, stop)  # every card loaded and warm: the common start
        cond.start()
        t = state["t0"] = time.perf_counter()
        card["window_start_unix_s"] = time.time()
        if rank == 0:
            ev.emit(EventKind.PHASE, phase="measured", state="start")

        def on_batch(done: int) -> None:
            state["done"], state["batches"] = done, state["batches"] + 1
            el = time.perf_counter() - state["t0"]
            ev.progress(done, card["items_total"], done / el if el > 0 else 0.0)
            if inject and inject[0] == rank and state["batches"] >= inject[1]:
                raise torch.OutOfMemoryError(f"test-only injected out of memory on card {rank} after "
                                             f"{state['batches']} batches ({TEST_OOM_ENV})")

        try:
            rows = read_corpus(spec.corpus_path)
            bucketing = spec.variant.bucketing
            lengths = ([len(x) for x in inf.tokenize([r["text"] for r in rows], job.tokenizer,
                                                     spec.variant.max_length)[0]]
                       if bucketing else [0] * len(rows))
            mine = shard_positions(lengths, world, bucketing)[rank]
            card["positions"], card["items_total"] = mine, len(mine)
            win = job.run_window([rows[i] for i in mine], device, on_batch, sink)
            inf.synchronize(device)
            phase("measured", t)
            card["window_end_unix_s"] = time.time()
        finally:
            card["conditions"] = cond.stop(round(time.perf_counter() - t, 6))
            card["peaks"] = tracker.read().to_json()
        card.update(items_completed=win.items_done, n_truncated=win.n_truncated, real_tokens=win.real_tokens,
                    padded_tokens=win.padded_tokens, batches=win.batches)
        card["observed"].update(job.observe_window(win))
        observed.require_honoured(spec.variant, card["observed"], device)
        card["status"] = PassStatus.OK
        code = EXIT_OK
    except BaseException as exc:  # noqa: BLE001 - every failure is recorded on the card
        stop.raise_now = False
        kind = failure_kind(exc)
        card["failure_kind"] = kind
        done = getattr(exc, "items_done", None)
        card["items_completed"] = state["done"] if done is None else done
        if kind == FailureKind.INTERRUPTED:  # a stopped card (not a pass status: the merge decides)
            card["status"], code = CARD_STOPPED, EXIT_ERROR
        else:
            card["status"], code = failure_status(kind)
            ev.emit(EventKind.OOM if kind == FailureKind.OOM else EventKind.ERROR, kind=kind,
                    items_done=state["done"] if kind == FailureKind.OOM else card["items_completed"],
                    message=(str(exc).splitlines()[0] if kind == FailureKind.OOM
                             else f"{type(exc).__name__}: {exc}")[:300])
        card["error"] = failure_text(exc)
        traceback.print_exc(file=sys.stderr)
    stop.raise_now = False  # the files below are written whole
    t = time.perf_counter()
    rec_path, pred_path = card_paths(spec.out_dir, rank)
    rec_path.parent.mkdir(parents=True, exist_ok=True)
    win = win or sink.get("win")
    lines: list[str] = []
    if win is not None and job is not None:
        card.update(job.write_predictions(pred_path, win))
        lines = pred_path.read_text(encoding="utf-8").splitlines(keepends=True)
    phases["writing"] = round(time.perf_counter() - t, 6)
    card["exit_code"] = code
    record = build(CardRecord, card)
    write_record(rec_path, record)
    ev.emit(EventKind.CARD, status=record.status, items_completed=record.items_completed,
            items_total=record.items_total, measured_s=record.phases_s.measured, device=record.device)
    if code == EXIT_OK and not stop.requested:
        stop.raise_now = True
        try:
            _gather_to_rank0(dist, spec, rank, world, record, lines, stop)
            dist.destroy_process_group()
        except WorkerStopped:
            pass  # this card's files are already written
        except Exception as exc:  # noqa: BLE001 - another card failed meanwhile: its record says why
            print(f"card {rank}: gathering to rank 0 failed after this card's files were written: "
                  f"{type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
    return code


def _gather_to_rank0(dist, spec: PassSpec, rank: int, world: int, card: CardRecord, lines: list[str],
                     stop: _StopSignal) -> None:
    """All cards succeeded: rank 0 writes the records of cards whose files it lacks (other hosts)."""
    wait_barrier(dist, stop)
    got: list | None = [None] * world if rank == 0 else None
    dist.gather_object((card, lines), got, dst=0)
    if rank != 0 or got is None:
        return
    stop.raise_now = False
    for other, other_lines in got:
        rec_path, pred_path = card_paths(spec.out_dir, other.rank)
        if not rec_path.is_file():
            atomic_write_text(pred_path, "".join(other_lines))
            write_record(rec_path, other.replace(written_by="rank 0 (gathered)"))


def _term_when_parent_dies() -> None:
    """SIGTERM this worker if torchrun dies (it runs workers in their own sessions, so a
    killed torchrun would otherwise leave them running). Linux prctl(PR_SET_PDEATHSIG)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: torchrun's own shutdown is all there is
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    rank, world = int(os.environ.get("RANK", "-1")), int(os.environ.get("WORLD_SIZE", "0"))
    if rank < 0 or world < 1 or len(argv) != 1:
        print("lab.passes.worker runs under torchrun: python -m torch.distributed.run --nproc_per_node N "
              "-m lab.passes.worker PASS_DIR/pass.json (see lab.passes.distributed.torchrun_command)",
              file=sys.stderr)
        return 2
    ev = CardEvents(rank, world)
    stop = _StopSignal()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    _term_when_parent_dies()
    spec = read_spec_or_report(argv[0], ev)
    if spec is None:
        return EXIT_BAD_SPEC
    code = run_card(spec, ev, rank, int(os.environ.get("LOCAL_RANK", "0")), world,
                    int(os.environ.get("LOCAL_WORLD_SIZE", "1")), stop)
    if code != EXIT_OK:  # files written: leave at once so torchrun stops the other cards sooner
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
