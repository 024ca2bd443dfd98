"""One worker (one card) of a multi-card pass, started by torchrun (never by hand).

    python -m torch.distributed.run --nproc_per_node N ... -m lab.passes.worker PASS_DIR/pass.json

Reads RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE from torchrun's environment and runs
its card of the pass sequence (lab.passes.sequence, the phases of a one-card pass) as a
:class:`WorkerCard`: ``threads // LOCAL_WORLD_SIZE`` threads (the declared ``threads`` is for
the pass, split per worker by ``lab.passes.distributed.threads_per_worker``), its card
(``cuda:LOCAL_RANK``, or CPU), the process group (``nccl`` on CUDA/ROCm, ``gloo`` on CPU),
then model load, warm-up and the declared-value check as a one-card pass; after the peaks
are reset it meets the other workers at a barrier. Its measured window starts when it leaves
the barrier and ends when its shard's predictions are materialised on the host (device
synchronized): read corpus, tokenize, shard (``lab.passes.distributed.shard_positions``),
transfer, infer; its window conditions are recorded on the card. No probe, no evaluation:
the pass's window is the slowest card's and its figures are the merge's (lab.passes.multicard).
Only rank 0 emits phase events (ends, and the window's start); every event carries ``rank``.

Writes ``cards/card<RANK>.json`` and ``cards/card<RANK>.predictions.jsonl`` in the pass
folder (and what its task kind writes beside them: an embedding card's ``card<RANK>.vectors.npy``)
before any later collective, so they survive a failure elsewhere. On success the
workers meet again and gather their records, lines and vector shards to rank 0, which writes
those of cards on other hosts. SIGTERM/SIGINT (torchrun stops the others when one worker fails; or the user
stops the pass) raises ``WorkerStopped`` (failure kind interrupted): the worker writes what it
completed, card status ``stopped`` (lab.passes.failures.CARD_STOPPED), and exits.
Exit codes as the runner: 0 ok, 3 OOM, 4 error or stopped.

Test-only hook: ``ITERALAB_TEST_ONLY_INJECT_OOM="RANK:BATCHES"`` raises
``torch.OutOfMemoryError`` on worker RANK after BATCHES batches; the card record then says
``test_only_injected_oom: true`` (tests/integration/test_multicard.py; never set it in a campaign).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import FailureKind, PassFailure
from lab.passes.events import EXIT_BAD_SPEC, EXIT_OK, EventKind, EventWriter, open_event_channel
from lab.passes.records import CardRecord, build, write_record
from lab.passes.sequence import Card, PassSequence
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

    def __init__(self, rank: int, world: int, stream=None):
        super().__init__(stream)
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


class WorkerCard(Card):
    """One card of a multi-card pass: rank and world from torchrun, its share of the threads,
    ``cuda:LOCAL_RANK``, the process group, the barrier, its shard, the stop signal."""

    one_of_many = True

    def __init__(self, spec: PassSpec, rank: int, local_rank: int, world: int, local_world: int,
                 stop: _StopSignal):
        super().__init__(spec)
        self.rank, self.local_rank, self.world, self.workers_on_host = rank, local_rank, world, local_world
        self.stop = stop
        self.inject = _injected_oom()
        self.dist: Any = None  # torch.distributed once joined
        self.lines: list[str] = []  # this card's prediction lines, once written (gathered to rank 0)

    def fields(self) -> dict:
        return {"rank": self.rank, "local_rank": self.local_rank, "world_size": self.world,
                "node_rank": int(os.environ.get("GROUP_RANK", "0")), "positions": []}

    def announces(self, phase: str, start: bool) -> bool:
        """Rank 0 speaks for the cards: phase ends, and the start of the common window (the
        launcher announced ``launch`` for the load and warm-up)."""
        return self.rank == 0 and (not start or phase == "measured")

    def threads(self) -> int:
        from lab.passes.distributed import threads_per_worker

        return threads_per_worker(self.spec.threads, self.workers_on_host)

    def place(self, device: str) -> str:
        if device.startswith("cuda"):
            import torch

            device = f"cuda:{self.local_rank}"
            torch.cuda.set_device(device)
        return device

    def identity(self, device: str, backend: str) -> dict:
        from lab.passes.distributed import BACKENDS, card_identity

        return {"identity": card_identity(device, self.rank), "dist_backend": BACKENDS[backend],
                "test_only_injected_oom": self.inject is not None and self.inject[0] == self.rank}

    def join(self, backend: str) -> None:
        import torch.distributed as dist

        from lab.passes.distributed import BACKENDS

        self.dist = dist
        dist.init_process_group(BACKENDS[backend], timeout=timedelta(minutes=30))

    def common_start(self) -> None:
        wait_barrier(self.dist, self.stop)  # every card loaded and warm: the common start

    def at_window(self, edge: str) -> dict:
        return {f"window_{edge}_unix_s": time.time()}

    def rows(self, rows: list[dict], job) -> tuple[list[dict], dict]:
        """This card's shard (lab.passes.distributed.shard_positions; with bucketing balanced by
        token count, so the corpus is tokenized here, inside the window)."""
        from lab.passes import inference as inf
        from lab.passes.distributed import shard_positions

        bucketing = self.spec.variant.bucketing
        lengths = ([len(x) for x in inf.tokenize([r["text"] for r in rows], job.tokenizer,
                                                 self.spec.variant.max_length)[0]]
                   if bucketing else [0] * len(rows))
        mine = shard_positions(lengths, self.world, bucketing)[self.rank]
        return [rows[i] for i in mine], {"positions": mine, "items_total": len(mine)}

    def after_batch(self, batches: int) -> None:
        if self.inject and self.inject[0] == self.rank and batches >= self.inject[1]:
            import torch

            raise torch.OutOfMemoryError(f"test-only injected out of memory on card {self.rank} after "
                                         f"{batches} batches ({TEST_OOM_ENV})")

    def quiet(self) -> None:
        self.stop.raise_now = False  # the failure and the files are written whole

    def after_predictions(self, path: Path) -> None:
        self.lines = path.read_text(encoding="utf-8").splitlines(keepends=True)


def run_card(spec: PassSpec, ev: EventWriter, rank: int, local_rank: int, world: int,
             local_world: int, stop: _StopSignal) -> int:
    """Run this worker's card of the pass sequence (lab.passes.sequence) over its shard; write
    its card files (``card_paths``) before any later collective; on success gather the records
    to rank 0. Returns the exit code. Never raises."""
    card = WorkerCard(spec, rank, local_rank, world, local_world, stop)
    seq = PassSequence(spec, ev, card, _T_PROCESS)
    code = seq.run()
    rec_path, pred_path = card_paths(spec.out_dir, rank)
    rec_path.parent.mkdir(parents=True, exist_ok=True)
    seq.write_predictions(pred_path)
    record = build(CardRecord, {**seq.fields, "exit_code": code})
    write_record(rec_path, record)
    ev.emit(EventKind.CARD, status=record.status, items_completed=record.items_completed,
            items_total=record.items_total, measured_s=record.phases_s.measured, device=record.device)
    if code == EXIT_OK and not stop.requested:
        stop.raise_now = True
        try:
            _gather_to_rank0(card.dist, spec, rank, world, record, card.lines, stop)
            card.dist.destroy_process_group()
        except WorkerStopped:
            pass  # this card's files are already written
        except Exception as exc:  # noqa: BLE001 - another card failed meanwhile: its record says why
            print(f"card {rank}: gathering to rank 0 failed after this card's files were written: "
                  f"{type(exc).__name__}: {str(exc)[:200]}", file=sys.stderr)
    return code


def _gather_to_rank0(dist, spec: PassSpec, rank: int, world: int, card: CardRecord, lines: list[str],
                     stop: _StopSignal) -> None:
    """All cards succeeded: rank 0 writes the files of cards it lacks (other hosts): the record,
    the prediction lines and an embedding card's vector shard (``vectors_path``, its bytes as
    written, so the record's ``vectors_sha256`` still holds)."""
    wait_barrier(dist, stop)
    cards_dir = card_paths(spec.out_dir, rank)[0].parent
    shard = (cards_dir / card.vectors_path).read_bytes() if card.vectors_path else None
    got: list | None = [None] * world if rank == 0 else None
    dist.gather_object((card, lines, shard), got, dst=0)
    if rank != 0 or got is None:
        return
    stop.raise_now = False
    for other, other_lines, other_shard in got:
        rec_path, pred_path = card_paths(spec.out_dir, other.rank)
        if not rec_path.is_file():
            if other.vectors_path and other_shard is not None:  # whole or absent, as the card wrote it
                tmp = cards_dir / (other.vectors_path + ".tmp")
                tmp.write_bytes(other_shard)
                tmp.replace(cards_dir / other.vectors_path)
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
    ev = CardEvents(rank, world, open_event_channel())  # before any user code: its output goes to the log
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
