"""Issue 23 part 4: writes that fail never destroy what was there.

A full disk is a real small filesystem (tmpfs, mounted as root; skipped with the reason
elsewhere) filled by a filler file, as in tests/integration/test_disk_full.py. A pass that runs while the
archive is asked for is a real pass held at its start by the launcher.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from conftest import COMPARISON, REPO, cut_corpus, wait_until, write_campaign
from test_disk_full import fill, small_fs  # noqa: F401  (the tmpfs fixture)


def cli(*args, cwd=REPO, runs: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if runs is not None:
        env["ITERALAB_RUNS"] = str(runs)
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or "partial" in p.name)


def test_corpus_build_on_a_full_disk_leaves_the_existing_corpus_whole(small_fs, model_dir):  # noqa: F811
    source = small_fs / "source.jsonl"
    source.write_text("".join(line + "\n" for line in COMPARISON.read_text().splitlines()[:200]))
    out = small_fs / "corpus"
    sizes = ["--short", "4", "--medium", "2", "--long", "1", "--tuning", "10", "--tokenizer", model_dir]
    r = cli("corpus", "build", "--source", source, "--out", out, *sizes)
    assert r.returncode == 0, r.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["comparison.jsonl", "corpus_card.json", "tuning.jsonl"]
    filler = fill(small_fs)
    try:
        line = one_line(cli("corpus", "build", "--source", source, "--out", out, *sizes, "--seed", "7", "--force"))
        assert line.startswith(f"iteralab: error: no space left on device in {out} "), line
        after = {p.name: p.read_bytes() for p in out.iterdir()}
        assert after == before  # the old corpus, its card's sha256 still matching its files
        card = json.loads(after["corpus_card.json"])
        from lab.facts.files import sha256_file

        assert card["comparison"]["sha256"] == sha256_file(out / "comparison.jsonl")
    finally:
        filler.unlink()


def test_compare_out_on_a_full_disk_names_the_folder_and_keeps_the_last_report(small_fs, two_rentals):  # noqa: F811
    out = small_fs / "cmp"
    # one pass each, under a second: projected only with --allow-short (else no decision, exit 6)
    r = cli("compare", *two_rentals, "--load", "1000", "--allow-short", "--out", out)
    assert r.returncode == 0, r.stderr
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["compare.csv", "decision.md", "report.html"]
    filler = fill(small_fs)
    try:
        line = one_line(cli("compare", *two_rentals, "--load", "2000", "--allow-short", "--out", out))
        assert f"no space left on device in {out} " in line, line
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert leftovers(out) == []
    finally:
        filler.unlink()


def test_archive_while_a_pass_runs_is_refused_in_one_line(tmp_path, model_dir, runs_root):
    """`report` then `archive --partial` while a pass is running: refused (the raw table would
    be written before the pass ends and the journal copied after), nothing written."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    class HeldLauncher(LocalLauncher):
        def __init__(self):
            super().__init__()
            self.started, self.release = threading.Event(), threading.Event()

        def launch(self, spec, pass_dir, on_line, should_stop=lambda: False):
            self.started.set()
            self.release.wait(120)
            return super().launch(spec, pass_dir, on_line, should_stop)

    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), name="held", values=(1,))
    lock(load_protocol(f))
    launcher = HeldLauncher()
    orch = Orchestrator.prepare(f, runs_root, launcher)
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault("state", orch.run()))
    t.start()
    try:
        assert launcher.started.wait(120), "the pass never started"
        from lab.orchestration.status import campaign_status

        wait_until(lambda: any(a.status == "running" for a in campaign_status(orch.dir)["attempts"]), 60,
                   "the running attempt in the journal")
        assert cli("report", orch.dir, runs=runs_root).returncode == 0
        line = one_line(cli("archive", orch.dir, "--partial", runs=runs_root))
        assert "is running" in line and "pause" in line, line
        assert not list(orch.dir.parent.glob("*.tar.gz"))
    finally:
        launcher.release.set()
        t.join(300)
    assert result.get("state") == "finished"
    r = cli("archive", orch.dir, runs=runs_root)  # once the pass has ended: a final archive that verifies
    assert r.returncode == 0, r.stderr
    v = cli("archive", "verify", r.stdout.strip().splitlines()[-1])
    assert v.returncode == 0 and v.stdout.splitlines()[-1].startswith("OK"), v.stdout  # after the signature line
