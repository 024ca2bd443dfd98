"""A per-pass memory limit is a positive whole number of bytes or nothing, checked once for the
CLI, the UI's command line and ITERALAB_MEMORY_LIMIT (lab.service.campaigns.memory_limit_bytes)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.service.campaigns import CampaignError, make_launcher, memory_limit_bytes

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, expected", [(None, None), ("", None), (8_000_000_000, 8_000_000_000),
                                             ("1200000000", 1_200_000_000)])
def test_a_limit_is_bytes_or_none(value, expected):
    assert memory_limit_bytes(value) == expected


@pytest.mark.parametrize("value", [0, -5, "0", "-1", "8GB", "1e9", True, 1.5])
def test_zero_negative_or_not_bytes_is_one_line(value):
    with pytest.raises(CampaignError, match=r"memory limit .*: give a positive whole number of bytes per pass"):
        memory_limit_bytes(value)
    with pytest.raises(CampaignError):
        make_launcher("local", value)


def test_the_headless_entry_refuses_a_bad_limit_from_the_environment(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tui", "--headless"], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO), "ITERALAB_MEMORY_LIMIT": "8GB",
                            "ITERALAB_RUNS": str(tmp_path)}, timeout=120, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "memory limit '8GB'" in r.stderr and "Traceback" not in r.stderr


def test_the_headless_demo_runs_under_the_given_limit(monkeypatch):
    """`python -m tui --headless --memory-limit N` ran the demo without any limit."""
    import lab.service.campaigns as campaigns
    import tui.__main__ as entry

    seen = []

    class Stop(Exception):
        pass

    def fake_launcher(kind, memory_limit=None):
        seen.append((kind, memory_limit))
        raise Stop

    monkeypatch.setattr(campaigns, "make_launcher", fake_launcher)
    monkeypatch.setattr(campaigns, "lock", lambda proto: None)
    monkeypatch.setattr(entry.sys.stdin, "isatty", lambda: False, raising=False)
    with pytest.raises(Stop):
        entry.main(["--headless", "--launcher", "local", "--memory-limit", "1500000000"])
    assert seen == [("local", 1_500_000_000)]
