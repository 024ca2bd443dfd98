"""The user's code runs where it cannot hurt the lab (issue 34, part 2), on the real product with the
demo classifier and the local launcher. Each campaign runs in an orchestrator process of its own
(as `campaign run` does), so a case that would end or hang it fails the test instead of the session:

- a [quality] metric that calls sys.exit(0) or os._exit(0), or raises KeyboardInterrupt, leaves the
  pass's metric empty with the reason, and the campaign finishes (exit 0, its last line printed);
- a metric that sleeps past its time bound is killed, the metric empty with the reason; one that
  sleeps is no obstacle to `campaign stop`;
- a custom entry that leaves a double-forked daemon holding the pass's stdout: the pass ends `ok`,
  the daemon is killed and recorded (a `leftover` event, the row's notes);
- a line in the lab's event format printed by the entry reaches the pass log, never the journal;
- KeyboardInterrupt raised by `predict` is a failure row of the variant, not `interrupted`;
- the entry gets the texts without their labels: reading the corpus named in pass.json gives it no
  gold label."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, custom_campaign, cut_corpus, judged_by, write_campaign

RUN = """
import sys
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
orch = Orchestrator.prepare(sys.argv[1], sys.argv[2], LocalLauncher())
if len(sys.argv) > 3:
    orch.metric_timeout_s = float(sys.argv[3])
print("state", orch.run(), flush=True)
"""


def start(campaign: Path, *extra: str) -> subprocess.Popen:
    """Lock ``campaign`` and run it in an orchestrator process of its own (its own session)."""
    from lab.orchestration.protocol import load_protocol, lock

    lock(load_protocol(campaign))
    return subprocess.Popen([sys.executable, "-c", RUN, str(campaign), str(campaign.parent / "runs"), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)


def finish(proc: subprocess.Popen, timeout_s: float) -> tuple[int, str]:
    """(exit code, output) of an orchestrator process; killed, session and all, past ``timeout_s``."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the orchestrator still ran after {timeout_s:g} s:\n{out[-3000:]}")
    return proc.returncode, out


def journal_of(campaign: Path):
    from lab.orchestration.journal import Journal

    [path] = (campaign.parent / "runs").glob("**/journal.sqlite")
    return Journal(path, read_only=True)


def metric_campaign(folder: Path, model_dir: Path, body: str) -> Path:
    """A classification campaign (10 items, batch 1) judged by mymetric.py:share_right = ``body``."""
    (folder / "mymetric.py").write_text("import os, sys, time\n\n\ndef share_right(predictions, references):\n"
                                        + "".join(f"    {line}\n" for line in body.splitlines()))
    f = write_campaign(folder, model_dir, cut_corpus(folder / "corpus.jsonl", 5, 3, 2), name="umetric", values=(1,))
    f.write_text(judged_by(f.read_text()))
    return f


def entry_campaign(folder: Path, model_dir: Path, head: str, init: str, predict: str) -> Path:
    """A custom campaign (10 items, batch 1) whose entry entry.py:Entry runs ``init`` in its
    constructor and ``predict`` as predict's body (``head``: module-level lines)."""
    (folder / "entry.py").write_text(
        "import json, os, sys, time\n" + head + "\n\nclass Entry:\n    def __init__(self, settings, device):\n"
        + "".join(f"        {line}\n" for line in (init or "pass").splitlines())
        + "\n    def predict(self, texts):\n" + "".join(f"        {line}\n" for line in predict.splitlines()))
    return custom_campaign(folder, model_dir, "entry.py:Entry", values=(1,))


@pytest.mark.parametrize("ending", ["sys.exit(0)", "os._exit(0)", "raise KeyboardInterrupt"])
def test_a_metric_that_ends_its_process_leaves_the_metric_empty_and_the_run_finishes(tmp_path, model_dir, ending):
    f = metric_campaign(tmp_path, model_dir, ending)
    code, out = finish(start(f), 300)
    assert code == 0 and "state finished" in out, out[-3000:]
    [a] = journal_of(f).attempts()
    assert a.status == "ok" and a.validation is not None and a.validation.metric is None, a
    why = " ".join(a.validation.reasons)
    words = {"sys.exit(0)": "metric function raised SystemExit: 0",
             "os._exit(0)": "ended (exit code 0) without returning its values",
             "raise KeyboardInterrupt": "metric function raised KeyboardInterrupt"}[ending]
    assert words in why, why


def test_a_metric_past_its_time_bound_is_killed_and_the_metric_is_empty(tmp_path, model_dir):
    f = metric_campaign(tmp_path, model_dir, "time.sleep(120)\nreturn 1.0")
    t0 = time.monotonic()
    code, out = finish(start(f, "3"), 200)
    assert code == 0 and "state finished" in out, out[-3000:]
    assert time.monotonic() - t0 < 100  # killed at 3 s, not after the 120 s it asked for
    [a] = journal_of(f).attempts()
    assert a.validation is not None and a.validation.metric is None
    assert "mymetric.py: the metric ran past 3 s; killed" in a.validation.reasons, a.validation.reasons


def test_campaign_stop_is_not_blocked_by_a_sleeping_metric(tmp_path, model_dir):
    from lab.service.campaigns import request_control

    marker = tmp_path / "scoring"
    f = metric_campaign(tmp_path, model_dir, f"open({str(marker)!r}, 'w').close()\ntime.sleep(240)\nreturn 1.0")
    proc = start(f)
    deadline = time.monotonic() + 240
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the metric was never called"
    request_control(next((tmp_path / "runs").glob("**/journal.sqlite")).parent, "stop")
    t0 = time.monotonic()
    code, out = finish(proc, 60)
    assert code == 0 and "state stopped" in out, out[-3000:]
    assert time.monotonic() - t0 < 30  # the metric's process killed at once, not after its 240 s


def test_a_daemon_left_by_the_entry_neither_hangs_the_run_nor_outlives_the_pass(tmp_path, model_dir):
    pidfile = tmp_path / "daemon.pid"
    init = (f"if os.fork() == 0:  # a double-forked daemon: new session, the pass's stdout kept\n"
            f"    os.setsid()\n"
            f"    if os.fork() == 0:\n"
            f"        open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
            f"        time.sleep(600)\n"
            f"    os._exit(0)\n"
            f"os.wait()")
    f = entry_campaign(tmp_path, model_dir, "", init, "return ['x' for _ in texts]")
    try:
        code, out = finish(start(f), 150)
        assert code == 0 and "state finished" in out, out[-3000:]
        pid = int(pidfile.read_text())
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        j = journal_of(f)
        [a] = j.attempts()
        assert a.status == "ok", a
        assert "process(es) the pass left running killed" in (a.notes or ""), a.notes
        left = [e["payload"]["process"] for e in j.events_since() if e["kind"] == "leftover"]
        assert [p["pid"] for p in left] == [pid], left
    finally:
        if pidfile.exists() and psutil.pid_exists(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_an_event_line_printed_by_the_entry_reaches_the_log_not_the_journal(tmp_path, model_dir):
    forged = json.dumps({"iteralab": 1, "event": "progress", "t": 0, "done": 1000000000, "total": 10,
                         "items_per_s": 1.0})
    predict = (f"print({forged!r}, flush=True)\n"
               f"os.write(1, ({forged!r} + '\\n').encode())  # as C code or a child would\n"
               f"return ['x' for _ in texts]")
    f = entry_campaign(tmp_path, model_dir, "", "", predict)
    code, out = finish(start(f), 300)
    assert code == 0 and "state finished" in out, out[-3000:]
    j = journal_of(f)
    [a] = j.attempts()
    assert a.status == "ok" and a.items_completed == 10, a
    done = [e["payload"].get("done") for e in j.events_since() if e["kind"] == "progress"]
    assert done and max(done) <= 10, done
    log = (f.parent / "runs").glob(f"**/passes/{a.pass_id}/log.txt")
    assert forged in next(log).read_text()  # what the entry printed is kept, as a log line


@pytest.mark.parametrize("last_words, status", [
    ("memory allocation of 4294967296 bytes failed", "oom"),  # Rust's (the tokenizers library), then abort
    ("something else went wrong", "error"),
])
def test_a_native_abort_after_an_allocation_failure_is_an_oom_row(tmp_path, model_dir, last_words, status):
    """CI once read 'error' for a pass expected to run out of memory under an address-space limit;
    one way there is native code that fails to allocate and aborts (Rust prints its line and
    aborts; C++ an uncaught bad_alloc): Python never sees an exception and no result is written.
    The row is oom when the process died of SIGABRT/SIGSEGV/SIGBUS with an allocation failure as
    the log's last words, naming them; any other native crash stays an error."""
    predict = f"os.write(2, b{(last_words + chr(10))!r}); os.abort()"
    f = entry_campaign(tmp_path, model_dir, "", "", predict)
    code, out = finish(start(f), 300)
    assert code == 0 and "state finished" in out, out[-3000:]
    [a] = journal_of(f).attempts()
    assert a.status == status and a.exit_code == -signal.SIGABRT and a.result is None, a
    if status == "oom":
        assert f"out of memory in native code: killed by signal 6 after '{last_words}'" in a.notes, a.notes
    else:
        assert "crashed: killed by signal 6" in a.notes, a.notes


def test_keyboard_interrupt_raised_by_predict_is_a_failure_row(tmp_path, model_dir):
    f = entry_campaign(tmp_path, model_dir, "", "", "raise KeyboardInterrupt('from the entry')")
    code, out = finish(start(f), 300)
    assert code == 0 and "state finished" in out, out[-3000:]
    [a] = journal_of(f).attempts()
    assert a.status == "error" and a.result is not None, a
    assert "KeyboardInterrupt: from the entry" in (a.result.error or ""), a.result.error


def test_the_entry_gets_the_texts_without_their_labels(tmp_path, model_dir):
    init = ("spec = json.load(open(sys.argv[-1]))  # the runner's argument: pass.json\n"
            "rows = [json.loads(line) for line in open(spec['corpus_path'])]\n"
            "self.gold = {r['text']: r.get('label') for r in rows}")
    f = entry_campaign(tmp_path, model_dir, "", init, "return [self.gold.get(t) or 'no label' for t in texts]")
    code, out = finish(start(f), 300)
    assert code == 0 and "state finished" in out, out[-3000:]
    [a] = journal_of(f).attempts()
    assert a.status == "ok", a
    lines = next((f.parent / "runs").glob(f"**/passes/{a.pass_id}/predictions.jsonl")).read_text().splitlines()
    assert {json.loads(line)["pred"] for line in lines} == {"no label"}  # no gold label within its reach
    assert a.validation is not None and a.validation.metric == 0.0
