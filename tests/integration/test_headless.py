"""Issue 22 part 2: `make up` without a terminal runs the user's ./campaign.toml (not the demo),
prints progress with ETAs, leaves no pass process behind when it is interrupted (the slot is
recorded interrupted, status says nothing is running), and a paused run exits non-zero with
"paused: N of M passes"."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
from conftest import REPO, cut_corpus, wait_until, write_campaign

from lab.orchestration.journal import Journal
from lab.orchestration.status import campaign_status, pass_processes


def bundle_copy(tmp_path: Path) -> Path:
    """The bundle's code (lab/, tui/) copied to a folder of its own: its root is that folder."""
    b = tmp_path / "bundle"
    for part in ("lab", "tui"):
        shutil.copytree(REPO / part, b / part, ignore=shutil.ignore_patterns("__pycache__"))
    return b


def headless(bundle: Path, runs: Path, *args: str, every_s: str = "30") -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ITERALAB_")}
    env.update(PYTHONPATH=str(bundle), ITERALAB_RUNS=str(runs), ITERALAB_PROGRESS_EVERY_S=every_s)
    return subprocess.Popen([sys.executable, "-m", "tui", "--launcher", "local", *args], cwd=bundle, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def campaign_dir(runs: Path, name: str) -> Path | None:
    found = sorted((runs / name).glob("v*/journal.sqlite")) if (runs / name).is_dir() else []
    return found[0].parent if found else None


def test_without_a_terminal_the_bundle_campaign_toml_runs_not_the_demo(tmp_path, model_dir):
    b = bundle_copy(tmp_path)
    cut_corpus(b / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(b, model_dir, b / "corpus.jsonl", name="mine", values=(1,))
    f.rename(b / "campaign.toml")
    runs = tmp_path / "runs"
    p = headless(b, runs)  # no --headless: stdin is not a terminal, as under a script or CI
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err
    lines = out.strip().splitlines()
    assert any(line.startswith("campaign mine: ") for line in lines), out
    assert lines[-1].endswith(".tar.gz") and Path(lines[-1]).is_file() and "/mine/" in lines[-1]
    assert not (runs / "demo").exists()  # the demo never ran
    # the report's folder, the archive's sha256 and how to check it, before its path (a user trial
    # packed a second archive by hand, not knowing this one was made)
    from lab.inputs.corpus import sha256_file

    said = next(line for line in lines if line.startswith("report: "))
    assert f"archive sha256 {sha256_file(Path(lines[-1]))}" in said and "archive verify " in said, said


def test_sigterm_mid_pass_leaves_no_pass_process_and_records_the_slot_interrupted(tmp_path, model_dir):
    b = bundle_copy(tmp_path)
    cut_corpus(b / "corpus.jsonl", 120, 60, 20)
    f = write_campaign(b, model_dir, b / "corpus.jsonl", name="long", values=(1,), max_length=256)
    runs = tmp_path / "runs"
    p = headless(b, runs, "--headless", str(f), every_s="0.5")
    try:
        wait_until(lambda: campaign_dir(runs, "long") is not None and pass_processes(campaign_dir(runs, "long")),
                   180, "a pass process of the headless run")
        d = campaign_dir(runs, "long")
        assert d is not None
        runner = pass_processes(d)[0]["pid"]

        def items_done() -> int:
            j = Journal(d / "journal.sqlite")
            try:
                return max((a.items_completed or 0 for a in j.attempts()), default=0)
            finally:
                j.close()

        wait_until(lambda: items_done() > 0, 180, "the pass's first items")  # mid-pass: in the measured window
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 128 + signal.SIGTERM, err
    assert "SIGTERM" in err and "recorded interrupted" in err
    assert "items/s" in out and "campaign ETA" in out  # the progress lines of the running pass
    assert not psutil.pid_exists(runner) or psutil.Process(runner).status() == psutil.STATUS_ZOMBIE
    assert pass_processes(d) == []
    st = campaign_status(d)
    assert st["state"] == "interrupted" and not st["alive"]
    assert [a.status for a in st["attempts"]] == ["interrupted"]
    assert "SIGTERM" in st["attempts"][0].notes
    r = subprocess.run([sys.executable, "-m", "lab.cli", "campaign", "status", str(d)], capture_output=True,
                       text=True, cwd=b, env={**os.environ, "PYTHONPATH": str(b), "ITERALAB_RUNS": str(runs)},
                       timeout=120)
    assert r.returncode == 0 and "nothing running" in r.stdout, r.stdout + r.stderr


def test_a_paused_headless_campaign_exits_non_zero_with_passes_done(tmp_path, model_dir):
    from lab.service.campaigns import request_control

    b = bundle_copy(tmp_path)
    cut_corpus(b / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(b, model_dir, b / "corpus.jsonl", name="paused", repetitions=2, values=(1,))
    runs = tmp_path / "runs"
    p = headless(b, runs, "--headless", str(f))
    try:
        wait_until(lambda: campaign_dir(runs, "paused") is not None, 180, "the campaign folder")
        d = campaign_dir(runs, "paused")
        assert d is not None
        request_control(d, "pause")  # after the current pass
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 3, out + err
    last = out.strip().splitlines()[-1]
    assert last.startswith("paused: ") and " of 2 passes finished" in last, last
    assert not list((runs / "paused").glob("*.tar.gz"))  # no partial archive packed behind the user's back
