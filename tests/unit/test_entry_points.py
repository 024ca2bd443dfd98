"""`make up` / `iteralab up` / `python -m tui`: the CLI hands over to the UI's own entry point
(it never imports tui), and the UI's entry point refuses bad input in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO


def test_iteralab_up_execs_the_ui_entry_point(monkeypatch):
    import lab.cli

    seen = {}

    def fake_execv(path, argv):
        seen["argv"] = argv
        raise SystemExit(0)

    monkeypatch.setattr(lab.cli.os, "execv", fake_execv)
    with pytest.raises(SystemExit):
        lab.cli.main(["up", "--headless", "--launcher", "local"])
    assert seen["argv"] == [sys.executable, "-m", "tui", "--launcher", "local", "--headless"]
    with pytest.raises(SystemExit):
        lab.cli.main(["up"])
    assert seen["argv"] == [sys.executable, "-m", "tui"]  # launcher: $ITERALAB_LAUNCHER, else auto


def test_headless_ui_entry_point_with_a_campaign_file_is_one_line_exit_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tui", "--headless", str(tmp_path / "c.toml")],
                       capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
                       env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "ITERALAB_RUNS": str(tmp_path)})
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "no such campaign file" in r.stderr
    assert not list(tmp_path.iterdir())  # nothing written
