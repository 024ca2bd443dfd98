"""The pass sequence is written once (lab.passes.sequence, issue 18 part 2): the one-card runner
(``run_pass``) and a card of a multi-card pass (``run_card``, here a world of one card over
gloo) run the same phases in the same order on a model-free job, write the same predictions,
and classify each failure once (lab.passes.failures); a pass stopped from outside is
``interrupted``, a card ``stopped``, and neither emits an error event."""

from __future__ import annotations

import hashlib
import io
import json
import socket
from pathlib import Path

import pytest

from lab.facts.errors import FailureKind
from lab.inputs.variants import Variant
from lab.passes import sequence
from lab.passes.events import EventWriter
from lab.passes.failures import CARD_STOPPED, failure_kind, failure_status, report_failure
from lab.passes.inference import NonFiniteLogits, WindowResult
from lab.passes.records import decode_card
from lab.passes.runner import run_pass
from lab.passes.spec import PassSpec
from lab.passes.worker import CardEvents, WorkerStopped, _StopSignal, card_paths, run_card

ROWS = [{"id": f"i{k}", "text": "x " * (k + 1), "label": "a" if k % 2 else "b",
         "bucket": ("short", "medium", "long")[k % 3]} for k in range(5)]
JOB_STEPS = ["load", "warm_up", "observe", "run_window", "observe_window", "self_metric", "write_predictions"]


def _oom() -> BaseException:
    import torch

    return torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")


FAILURES = {"oom": _oom, "interrupt": KeyboardInterrupt, "stopped": lambda: WorkerStopped("signal"),
            "non_finite": lambda: NonFiniteLogits(["i2"], 2), "error": lambda: ValueError("boom")}


class FakeJob:
    """A model-free job: predicts label "a" for every row, two rows a batch; ``extra["fail"]``
    names a failure raised after its first batch."""

    kind = "fake"
    tokenizer = None

    def __init__(self, spec: PassSpec, calls: list[str]):
        self.spec, self.calls = spec, calls
        self.fail = spec.extra.get("fail")

    def load(self, device):
        self.calls.append("load")
        return None, None

    def warm_up(self, rows, device):
        self.calls.append("warm_up")
        return 0.0

    def observe(self, threads, workers_on_host=1):
        import torch

        self.calls.append("observe")
        out = {"threads": torch.get_num_threads(), "threads_declared": threads}
        if workers_on_host > 1:
            out["threads_per_worker"] = torch.get_num_threads()
        return out

    def run_window(self, rows, device, on_batch, sink):
        self.calls.append("run_window")
        for start in range(0, len(rows), 2):
            done = rows[: start + 2]
            sink["win"] = WindowResult(ids=[r["id"] for r in done], labels=[r["label"] for r in done],
                                       pred_index=[0] * len(done), prob=[1.0] * len(done), items_done=len(done),
                                       n_truncated=0, real_tokens=len(done), padded_tokens=len(done),
                                       batches=start // 2 + 1, tokens_kept=[1] * len(done),
                                       tokens_total=[1] * len(done), largest_batch=2)
            on_batch(len(done))
            if self.fail in FAILURES:
                raise FAILURES[self.fail]()
        return sink["win"]

    def observe_window(self, win):
        self.calls.append("observe_window")
        wider = 1 if self.fail == "batch_not_honoured" else 0  # the model saw bigger batches than declared
        return {"batch_size": win.largest_batch + wider, "window_items": win.items_done}

    def self_metric(self, win):
        self.calls.append("self_metric")
        return None

    def write_predictions(self, path, win):
        self.calls.append("write_predictions")
        lines = [json.dumps({"id": i, "pred": "a"}) + "\n" for i in win.ids]
        path.write_text("".join(lines), encoding="utf-8")
        digest = hashlib.sha256("".join(lines).encode()).hexdigest()
        return {"predictions_lines": len(lines), "predictions_sha256": digest}


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """(spec for an out folder and a failure, job calls); the sequence's job is a FakeJob."""
    calls: list[str] = []
    monkeypatch.setattr(sequence, "job_for", lambda spec: FakeJob(spec, calls))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")

    def spec(name: str, fail: str | None = None) -> PassSpec:
        return PassSpec("t", name, Variant(batch_size=2, device="cpu"), str(corpus), "fake-model",
                        str(tmp_path / name), warmup_items=2, threads=1, extra={"fail": fail} if fail else {})

    return spec, calls


def _events(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def _phases(events: list[dict]) -> list[tuple[str, str]]:
    return [(e["phase"], e["state"]) for e in events if e["event"] == "phase"]


def _run_runner(spec: PassSpec):
    buf = io.StringIO()
    code, result = run_pass(spec, EventWriter(stream=buf))
    return code, result, _events(buf)


def _run_card(spec: PassSpec, monkeypatch):
    """run_card as rank 0 of a world of one (gloo over a local TCP store)."""
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    ev = CardEvents(0, 1)
    ev.stream = buf = io.StringIO()
    try:
        code = run_card(spec, ev, 0, 0, 1, 1, _StopSignal())
    finally:
        if dist.is_initialized():  # a failed card leaves its group to the process exit
            dist.destroy_process_group()
    rec_path, pred_path = card_paths(spec.out_dir, 0)
    return code, decode_card(rec_path.read_bytes()), _events(buf), pred_path


def test_runner_and_card_run_the_same_sequence(fake, monkeypatch):
    spec, calls = fake
    code, result, events = _run_runner(spec("one"))
    runner_calls = list(calls)
    calls.clear()
    card_code, card, card_events, card_preds = _run_card(spec("card"), monkeypatch)
    assert code == card_code == 0 and result.status == card.status == "ok"
    assert runner_calls == JOB_STEPS  # the job's steps, in the sequence's order
    assert calls == [s for s in JOB_STEPS if s != "self_metric"]  # a card leaves the metric to the merge
    assert _phases(events) == [("model_load", "start"), ("model_load", "end"), ("warmup", "start"),
                               ("warmup", "end"), ("measured", "start"), ("measured", "end"),
                               ("probe", "start"), ("probe", "end"), ("evaluation", "end")]
    # rank 0 announces the same phases' ends and the window's start, in the same order
    one_card_only = ("probe", "evaluation")
    assert _phases(card_events) == [(phase, state) for phase, state in _phases(events)
                                    if phase not in one_card_only and (state == "end" or phase == "measured")]
    assert all(e["rank"] == 0 and e["cards"] == 1 for e in card_events)
    assert [e["event"] for e in events][-1] == "result" and [e["event"] for e in card_events][-1] == "card"
    assert set(result.phases_s.to_json()) == {"startup", "model_load", "warmup", "measured", "probe",
                                              "evaluation", "writing"}
    assert set(card.phases_s.to_json()) == {"startup", "model_load", "warmup", "measured", "writing"}
    assert (result.items_total, result.items_completed, result.batches) == (5, 5, 3)
    assert (card.items_total, card.items_completed, card.batches, card.positions) == (5, 5, 3, list(range(5)))
    assert result.predictions_sha256 == card.predictions_sha256
    assert card_preds.read_text() == (Path(spec("one").out_dir) / "predictions.jsonl").read_text()
    assert result.conditions and card.conditions and result.peaks and card.peaks
    assert result.probe_error and result.self_accuracy is None  # a model the lab cannot see: no FLOPs
    assert card.window_start_unix_s and card.window_end_unix_s and card.dist_backend == "gloo"


@pytest.mark.parametrize("fail, kind, status, card_status, code, event", [
    ("oom", FailureKind.OOM, "oom", "oom", 3, "oom"),
    ("interrupt", FailureKind.INTERRUPTED, "interrupted", CARD_STOPPED, 4, None),
    ("stopped", FailureKind.INTERRUPTED, "interrupted", CARD_STOPPED, 4, None),
    ("non_finite", FailureKind.NON_FINITE, "error", "error", 4, "error"),
    ("error", FailureKind.ERROR, "error", "error", 4, "error"),
])
def test_a_failure_is_classified_once_for_the_runner_and_a_card(fake, monkeypatch, fail, kind, status,
                                                               card_status, code, event):
    spec, _ = fake
    got, result, events = _run_runner(spec("one", fail))
    card_code, card, card_events, card_preds = _run_card(spec("card", fail), monkeypatch)
    assert (got, result.status, result.failure_kind) == (code, status, kind)
    assert (card_code, card.status, card.failure_kind) == (code, card_status, kind)
    assert result.exit_code == card.exit_code == code
    assert result.items_completed == card.items_completed == 2  # the first batch, written
    assert result.predictions_lines == card.predictions_lines == 2 and card_preds.is_file()
    assert result.error == card.error and result.error.startswith(type(FAILURES[fail]()).__name__)
    failed = [e for e in events if e["event"] in ("oom", "error")]
    card_failed = [e for e in card_events if e["event"] in ("oom", "error")]
    assert [e["event"] for e in failed] == [e["event"] for e in card_failed] == ([event] if event else [])
    assert [(e["kind"], e["items_done"]) for e in failed] == [(e["kind"], e["items_done"]) for e in card_failed]
    assert "measured" not in result.phases_s.to_json() and result.conditions and card.conditions


def test_a_window_refused_after_it_ran_still_writes_its_predictions(fake, monkeypatch):
    """The window's declared-value check fails after the window returned: both a not_honoured
    failure with every item written, as before the sequence was shared."""
    spec, _ = fake
    code, result, _ = _run_runner(spec("one", "batch_not_honoured"))
    card_code, card, _, card_preds = _run_card(spec("card", "batch_not_honoured"), monkeypatch)
    assert code == card_code == 4 and result.failure_kind == card.failure_kind == FailureKind.NOT_HONOURED
    assert "batch_size 2 declared" in result.error and result.error == card.error
    assert result.items_completed == card.items_completed == 5 and "measured" in result.phases_s.to_json()
    assert result.predictions_lines == card.predictions_lines == 5 and len(card_preds.read_text().splitlines()) == 5


def test_the_classification_maps_each_exception_once():
    assert failure_kind(MemoryError()) == FailureKind.OOM
    assert failure_kind(KeyboardInterrupt()) == FailureKind.INTERRUPTED
    assert failure_kind(WorkerStopped("x")) == FailureKind.INTERRUPTED
    assert failure_status(FailureKind.INTERRUPTED) == ("interrupted", 4)
    assert failure_status(FailureKind.INTERRUPTED, card=True) == (CARD_STOPPED, 4)
    assert failure_status(FailureKind.OOM, card=True) == ("oom", 3)
    assert failure_status(FailureKind.DISK_FULL, card=True) == ("error", 4)
    buf = io.StringIO()
    report_failure(EventWriter(stream=buf), MemoryError(), FailureKind.OOM, 3, 3)  # a bare MemoryError
    [ev] = _events(buf)
    assert (ev["event"], ev["kind"], ev["items_done"], ev["message"]) == ("oom", "oom", 3, "")
