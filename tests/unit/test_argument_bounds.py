"""Issue 23 part 5 (the cases that need no model): a campaign file with a byte-order mark,
values that can never be meant, dates at the ends of the calendar, Ctrl-C while `iteralab`
starts. Each through the real command line; every refusal is one line, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cut_corpus, write_campaign

from lab.orchestration.protocol import load_protocol

REPO = Path(__file__).resolve().parents[2]
UNBUILT_MODEL = Path("/nonexistent/model-not-needed-to-parse")


def iteralab(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[0]


def test_a_campaign_file_with_a_byte_order_mark_parses_like_one_without(tmp_path):
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    plain = load_protocol(f)
    f.write_bytes(b"\xef\xbb\xbf" + f.read_bytes())  # as Notepad saves "UTF-8 with BOM"
    bom = load_protocol(f)
    assert bom.raw == plain.raw and bom.variants == plain.variants


@pytest.mark.parametrize("old, new, message", [
    ("repetitions = 1", "repetitions = 100000000", "[timing] repetitions = 100000000 is beyond 1000"),
    ("threads = 1", "threads = 100000", "[timing] threads = 100000 is beyond 4096"),
    ("warmup_passes = 1", "warmup_passes = 1000000000", "[timing] warmup_passes = 1000000000 is beyond 100"),
    ("warmup_items = 2", "warmup_items = 1000000000", "[timing] warmup_items = 1000000000 is beyond 10000"),
    ("values = [1, 8]", f"values = [1, {2**63 - 1}]", f"batch_size {2**63 - 1} is beyond 65,536"),
])
def test_values_that_can_never_be_meant_are_refused_in_one_line(tmp_path, old, new, message):
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    assert old in f.read_text()
    f.write_text(f.read_text().replace(old, new))
    line = one_line(iteralab("protocol", "lock", f))
    assert message in line, line
    assert not f.with_suffix(".lock.json").exists()


@pytest.mark.parametrize("start, end", [
    ("0001-01-01T00:00+01:00", "2026-12-04T09:00+01:00"),
    ("2026-12-01T09:00+01:00", "9999-12-31T23:59-01:00"),
])
def test_dates_at_year_1_or_9999_with_offsets_are_one_line_in_the_pricing_script(start, end):
    r = subprocess.run([sys.executable, "-I", str(REPO / "scripts" / "calcul_forfaits.py"), "--gpu", "b200",
                        "--days", "7", "--window-start", start, "--window-end", end], capture_output=True, text=True,
                       timeout=60)
    line = one_line(r)
    assert "out of range once converted to UTC" in line, line


@pytest.mark.parametrize("delay_s", [0.05, 0.1, 0.15, 0.2, 0.25, 0.3])
def test_ctrl_c_in_the_first_tenths_of_a_second_of_archive_is_one_line(tmp_path, delay_s):
    # the delay counts from the moment lab.cli asks for its first lab import (inside the guarded
    # block): a SIGINT in the interpreter's start-up or in runpy, before any code of the lab, is
    # Python's, and counting from an earlier "ready" let a loaded host deliver it there
    start = ("import runpy, sys\n"
             "class Ready:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name == 'lab.facts':\n"
             "            sys.meta_path.remove(self)\n"
             "            print('ready', flush=True)\n"
             "sys.meta_path.insert(0, Ready())\n"
             "sys.argv = ['iteralab', 'archive', sys.argv[1]]\n"
             "runpy.run_module('lab.cli', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", start, str(tmp_path)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    time.sleep(delay_s)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-2000:]
    assert len(err.strip().splitlines()) <= 1, err
    assert proc.returncode in (130, 2, -signal.SIGINT), (proc.returncode, err)
