"""A script can tell when a campaign measured nothing usable (issue 35, item 6): a campaign that
finished with no accepted pass (every pass failed, or every pass was rejected) exits 6 and says
so before the archive's path, whether run by `iteralab campaign run` or headless; a finished
campaign with an accepted pass still exits 0. compare with `decision: none` exits 6 too
(tests/integration/test_rederived_evidence.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import REPO, custom_campaign

ENTRY = '''
class Entry:
    def __init__(self, settings, device):
        pass

    def predict(self, texts):
        {body}

    def settings_used(self):
        return {{}}
'''


def campaign(tmp_path, model_dir, body: str):
    (tmp_path / "entry.py").write_text(ENTRY.format(body=body))
    f = custom_campaign(tmp_path, model_dir, "entry.py:Entry", values=(1,))
    return f


def run(*args, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO),
                                            "ITERALAB_RUNS": str(tmp_path / "runs")})


@pytest.mark.parametrize(("body", "why"), [
    ("raise RuntimeError('the model is not there')", "every pass failed"),
    ("return ['no such label' for _ in texts]", "every pass rejected on accuracy"),
])
def test_a_campaign_with_no_accepted_pass_exits_6_and_says_so(tmp_path, model_dir, body, why):
    f = campaign(tmp_path, model_dir, body)
    r = run("-m", "lab.cli", "protocol", "lock", str(f), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run("-m", "lab.cli", "campaign", "run", str(f), "--launcher", "local", tmp_path=tmp_path)
    assert r.returncode == 6, (why, r.stdout, r.stderr)
    assert "campaign finished" in r.stdout and "no pass accepted" in r.stdout, r.stdout
    # headless (make up without a terminal): the same rule, the archive's path still the last line
    r = run("-m", "tui", "--headless", "--launcher", "local", str(f), tmp_path=tmp_path)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 6, (why, r.stdout, r.stderr)
    assert lines[-1].endswith(".tar.gz") and lines[-2].startswith("no pass of 1 was accepted"), lines[-3:]
    # campaign status says it too (it said "state: finished" alone: a new user's trial)
    folder = next((tmp_path / "runs").rglob("journal.sqlite")).parent
    r = run("-m", "lab.cli", "campaign", "status", str(folder), tmp_path=tmp_path)
    assert "1/1 finished, 0 accepted (nothing here can enter a decision yet)" in r.stdout, r.stdout + r.stderr


def test_a_campaign_with_an_accepted_pass_exits_0(tmp_path, model_dir):
    f = campaign(tmp_path, model_dir, "return ['sci.space' for _ in texts]")
    f.write_text(f.read_text().replace("threshold = 0.2", "threshold = 0.0"))
    run("-m", "lab.cli", "protocol", "lock", str(f), tmp_path=tmp_path)
    r = run("-m", "lab.cli", "campaign", "run", str(f), "--launcher", "local", tmp_path=tmp_path)
    assert r.returncode == 0 and "no pass accepted" not in r.stdout, (r.stdout, r.stderr)
