"""A pass.json the runner or a card's worker cannot use is one error event and exit 2, never a
traceback (lab.passes.spec.read_spec_or_report)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CARD_ENV = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}


@pytest.mark.parametrize("module, env", [("lab.passes.runner", {}), ("lab.passes.worker", CARD_ENV)])
@pytest.mark.parametrize("content, words", [
    (None, "No such file or directory"),
    ("{not json", "(line 1, column 2)"),  # msgspec names the byte; the line and column are added
    ('{"campaign": "t"}', "missing key(s) pass_id, variant"),
])
def test_a_bad_pass_json_is_one_error_event_and_exit_2(tmp_path, module, env, content, words):
    spec = tmp_path / "pass.json"
    if content is not None:
        spec.write_text(content)
    r = subprocess.run([sys.executable, "-m", module, str(spec)], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO), **env}, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    [event] = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    assert event["event"] == "error" and event["items_done"] == 0
    assert event["message"].startswith(f"bad pass spec {spec}: ") and words in event["message"], event
