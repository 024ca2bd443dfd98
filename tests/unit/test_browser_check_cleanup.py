"""scripts/browser_check.py stops Chromium's whole process group before removing its profile."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from conftest import REPO, wait_until

sys.path.insert(0, str(REPO / "scripts"))
from browser_check import stop_group  # noqa: E402


def test_stop_group_leaves_no_helper_writing_after_the_leader(tmp_path):
    """A leader whose child outlives it (as Chromium's helpers do) and keeps writing: once
    stop_group returns, no process of the group is left and the folder can be removed."""
    out = tmp_path / "profile"
    out.mkdir()
    script = f"(while true; do date > {out}/f.$RANDOM; sleep 0.01; done) & trap '' TERM; wait"
    proc = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        wait_until(lambda: any(out.iterdir()), 30, "the helper to start writing")
        stop_group(proc, timeout_s=5)
        try:
            os.killpg(proc.pid, 0)
            left = True
        except ProcessLookupError:
            left = False
        assert not left
        n = len(list(out.iterdir()))
        time.sleep(0.2)
        assert len(list(out.iterdir())) == n  # nobody writes any more
    finally:  # never leave the writing loop behind, whatever failed
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
