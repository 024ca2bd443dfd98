"""Is the journal's orchestrator still running? Its pid must be live and that process must
have started when the recorded one did (lab.orchestration.status.orchestrator_alive)."""
from __future__ import annotations

import subprocess
import sys

import psutil

from lab.orchestration.status import START_TIME_TOLERANCE_S, orchestrator_alive


def test_a_start_time_moved_by_a_clock_step_is_the_same_process():
    """psutil's create_time adds the boot time read from /proc/stat, recomputed from the wall
    clock in whole seconds: after an NTP step during a campaign the same live process reads
    one second off. A 0.05 s match called it dead (the UI would show the campaign
    interrupted while it runs)."""
    me = psutil.Process()
    for shift in (0.0, 1.0, -1.0, START_TIME_TOLERANCE_S):
        assert orchestrator_alive({"pid": me.pid, "process_create_time": me.create_time() + shift})


def test_a_recycled_or_gone_pid_is_not_alive():
    me = psutil.Process()
    assert not orchestrator_alive({"pid": me.pid, "process_create_time": me.create_time() - 3600})
    assert not orchestrator_alive({"pid": me.pid, "process_create_time": me.create_time() + 5})
    assert not orchestrator_alive({"pid": me.pid})  # a bare pid proves nothing
    assert not orchestrator_alive(None)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    info = {"pid": proc.pid, "process_create_time": psutil.Process(proc.pid).create_time()}
    assert orchestrator_alive(info)
    proc.kill()
    proc.wait()
    assert not orchestrator_alive(info)  # exited (a pid reused since would have another start time)
