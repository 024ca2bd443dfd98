"""Issue 11 part 4: a stopped (SIGSTOP) or hung pass fails once with the reason (stall rule of
[timing]) instead of leaving the campaign "running" forever; liveness is pid + start time,
never a bare pid. Real orchestrator, real runner processes, tiny corpus."""

from __future__ import annotations

import os
import signal
import threading
import time

import psutil
from conftest import cut_corpus, write_campaign

from lab.launchers.base import limit_reason
from lab.launchers.local import LocalLauncher
from lab.orchestration.journal import Journal
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock
from lab.orchestration.status import campaign_status, orchestrator_alive


class StoppingLauncher(LocalLauncher):
    """Sends SIGSTOP to the pass process at its first event line, as a user or a bug might.

    The stall rule is held off (stall_s None) until the SIGSTOP is sent: the runner's first
    event only comes after importing torch/transformers, which takes 5-12 s on a loaded CI
    machine, so a stall_s counted from the start could fire before the stop. The launcher's
    watch re-reads ``self.stall_s`` on every tick, so restoring it right after the SIGSTOP
    makes the rule count from the last event line, i.e. from the stop."""

    stopped_pids: list[int] = []
    stopped: list[psutil.Process] = []  # psutil checks the start time: a recycled pid is never signalled

    def launch(self, spec, pass_dir, on_line, should_stop=lambda: False):
        me = psutil.Process()
        done = []
        stall_s, self.stall_s = self.stall_s, None

        def first(line: str) -> None:
            if not done:
                done.append(True)
                for child in me.children(recursive=True):
                    try:
                        runner = "lab.passes.runner" in " ".join(child.cmdline())
                    except psutil.Error:  # a child that ended meanwhile
                        continue
                    if runner:
                        os.kill(child.pid, signal.SIGSTOP)
                        self.stopped_pids.append(child.pid)
                        self.stopped.append(child)
                self.stall_s = stall_s
            on_line(line)

        try:
            return super().launch(spec, pass_dir, first, should_stop)
        finally:
            self.stall_s = stall_s


def test_stopped_runner_is_killed_by_the_stall_rule(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), values=(1,))
    f.write_text(f.read_text().replace("threads = 1", "threads = 1\nstall_s = 15"))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", StoppingLauncher())
    out: list = []
    t = threading.Thread(target=lambda: out.append(orch.run()), daemon=True)
    t0 = time.monotonic()
    t.start()
    try:
        t.join(120)
        assert not t.is_alive(), "the stopped pass kept the campaign running"
        assert out == ["finished"] and time.monotonic() - t0 < 100
        assert StoppingLauncher.stopped_pids, "the pass was never stopped"
        [a] = Journal(orch.dir / "journal.sqlite").attempts()
        assert a.status == "error"
        assert "stalled: no event for 15 s ([timing] stall_s)" in a.notes
        st = campaign_status(orch.dir)
        assert st["state"] == "finished" and not st["alive"]
        assert Journal(orch.dir / "journal.sqlite").get_control("pass_limits") == {"timeout_s": 21600.0,
                                                                                    "stall_s": 15.0}
    finally:  # never leave a SIGSTOPped process behind, whatever failed
        for child in StoppingLauncher.stopped:
            try:
                child.kill()
            except psutil.Error:
                pass


def test_limit_reason():
    assert limit_reason(0, 0, 10, 5, now=4) == ""
    assert limit_reason(0, 0, 10, 5, now=6).startswith("stalled: no event for 5 s")
    assert limit_reason(0, 5.5, 10, 5, now=9.5) == ""
    assert limit_reason(0, 10, 10, 5, now=11).startswith("killed after the 10 s pass timeout")


def test_recycled_pid_is_not_a_live_orchestrator(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    j = orch.journal
    me = psutil.Process()
    j.set_control("state", "running")
    # the pid of a live process, but one that started after the orchestrator recorded it: recycled
    j.set_control("orchestrator", {"pid": me.pid, "process_create_time": me.create_time() - 3600})
    st = campaign_status(orch.dir)
    assert st["state"] == "interrupted" and st["alive"] is False
    j.set_control("orchestrator", {"pid": me.pid})  # a bare pid proves nothing
    assert orchestrator_alive(j.get_control("orchestrator")) is False
    j.set_control("orchestrator", {"pid": me.pid, "process_create_time": me.create_time()})
    assert campaign_status(orch.dir)["state"] == "running"
