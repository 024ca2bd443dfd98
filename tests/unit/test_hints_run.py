"""A printed next-step command runs as printed (issue 35, item 5): with no `iteralab` on PATH
and the lab run as `python -m lab.cli` from a venv, the hint named the venv's interpreter
resolved to the base interpreter (`.../python3.11 -m lab.cli campaign status`: ModuleNotFoundError,
no msgspec there) and had no target. The hint of an unfinished campaign's archive is run here."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

import pytest

from lab.facts.host import iteralab_command


@pytest.fixture()
def run_as_module(monkeypatch):
    """The lab started as `<venv python> -m lab.cli` with no iteralab on PATH."""
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(sys, "argv", ["/somewhere/lab/cli.py"])


def test_the_interpreter_named_is_the_venvs_own_not_the_one_it_links_to(run_as_module):
    shown = iteralab_command()
    assert shown == f"{os.path.abspath(sys.executable)} -m lab.cli"
    assert shlex.split(shown)[0] == os.path.abspath(sys.executable)  # a venv's bin/python link kept


def test_an_unfinished_campaigns_archive_hint_runs_as_printed(run_as_module, tmp_path):
    from lab.evidence.assemble import ArchiveError, archive_campaign
    from lab.orchestration.journal import Journal

    campaign = tmp_path / "my runs" / "demo-v1"  # a space: the printed path must be quoted
    campaign.mkdir(parents=True)
    Journal(campaign / "journal.sqlite").close()
    with pytest.raises(ArchiveError) as exc:
        archive_campaign(campaign, partial=False)
    hint = str(exc.value).split("`")[1]
    assert hint.endswith(f"campaign status {shlex.quote(str(campaign))}"), hint
    r = subprocess.run(shlex.split(hint), capture_output=True, text=True, timeout=120, check=False,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert "ModuleNotFoundError" not in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 0 and str(campaign) in r.stdout, (r.stdout, r.stderr)
