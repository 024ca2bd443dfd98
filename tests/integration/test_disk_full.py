"""Issue 11 part 4: a full disk during a pass, a report or an archive gives one line naming the
folder, leaves no .partial file, and the campaign resumes once space is free.

A real small filesystem (tmpfs of a few MB, mounted as root) holds the runs folder; a filler
file takes the free space. Skipped, with the reason, where mounting is not permitted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cut_corpus, write_campaign

from lab.facts.diskfull import DiskFull
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock


@pytest.fixture()
def small_fs(tmp_path):
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({r.stderr.strip()[:120]}); needs root")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(folder: Path) -> Path:
    """Take every free byte of ``folder``'s filesystem; returns the filler file."""
    filler = folder / "filler.bin"
    chunk = b"\0" * (1 << 16)
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
    with open(filler, "ab", buffering=0) as fh:  # the last bytes too
        try:
            while True:
                fh.write(b"\0")
        except OSError:
            pass
    return filler


def partials(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".partial") or ".partial" in p.suffixes]


class FillingLauncher(LocalLauncher):
    """The disk fills up while the pass runs (at its first event line)."""

    def __init__(self, runs: Path, **kw):
        super().__init__(**kw)
        self.runs, self.filler = runs, None

    def launch(self, spec, pass_dir, on_line, should_stop=lambda: False):
        def first(line: str) -> None:
            if self.filler is None:
                self.filler = fill(self.runs)
            on_line(line)

        return super().launch(spec, pass_dir, first, should_stop)


def test_disk_full_during_a_pass_stops_in_one_line_and_resumes(tmp_path, small_fs, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), values=(1,))
    lock(load_protocol(f))
    launcher = FillingLauncher(small_fs)
    orch = Orchestrator.prepare(f, small_fs, launcher)
    with pytest.raises(DiskFull) as e:
        orch.run()
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"no space left on device in {orch.dir}")
    assert partials(small_fs) == []
    launcher.filler.unlink()  # space freed: the same campaign resumes
    orch2 = Orchestrator.prepare(f, small_fs, LocalLauncher())
    assert orch2.run() == "finished"
    statuses = [a.status for a in orch2.journal.attempts()]
    assert statuses == ["interrupted", "ok"], statuses  # the interrupted row stays, the slot ran again
    assert partials(small_fs) == []


def cli(*args, runs: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "ITERALAB_RUNS": str(runs), "PYTHONPATH": str(REPO)})


def test_disk_full_during_report_and_archive_is_one_line_and_keeps_what_was_written(tmp_path, small_fs, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, small_fs, LocalLauncher())
    assert orch.run() == "finished"
    d = orch.dir
    r = cli("report", str(d), runs=small_fs)
    assert r.returncode == 0, r.stderr
    before = (d / "report" / "raw_table.csv").read_bytes()
    filler = fill(small_fs)
    for verb in ("report", "archive"):
        r = cli(verb, str(d), runs=small_fs)
        assert r.returncode == 2, (verb, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "no space left on device in" in lines[0] and str(d.parent) in lines[0], lines
        assert partials(small_fs) == [] and not (d / "report.partial").exists()
        assert (d / "report" / "raw_table.csv").read_bytes() == before  # the last report is intact
    assert not list(d.parent.glob("*.tar.gz"))
    filler.unlink()
    r = cli("archive", str(d), runs=small_fs)
    assert r.returncode == 0, r.stderr
    archive = Path(r.stdout.strip().splitlines()[-1])
    v = cli("archive", "verify", str(archive), runs=small_fs)
    assert v.returncode == 0 and v.stdout.splitlines()[-1].startswith("OK"), v.stdout  # after the signature line
