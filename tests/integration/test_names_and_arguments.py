"""Issue 23 part 5, on real campaigns and archives: `archive .` and `archive ..` name the
archive after the campaign and never write it inside the campaign folder; an archive never
packs another; compare's --out and dates at the ends of the calendar are one line; values
that lock but are unusual are warned, a deadline already past is refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from conftest import REPO, cut_corpus, write_campaign


def cli(*args, cwd=REPO, runs: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if runs is not None:
        env["ITERALAB_RUNS"] = str(runs)
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def one_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr[-2000:])
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[0]


@pytest.fixture(scope="module")
def finished(tmp_path_factory, model_dir) -> Path:
    """A real finished campaign folder (4 items, batch 1, one pass)."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    d = tmp_path_factory.mktemp("named")
    f = write_campaign(d, model_dir, cut_corpus(d / "c.jsonl", 2, 1, 1), name="named", values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, d / "runs", LocalLauncher())
    assert orch.run() == "finished"
    return orch.dir


def archive_path(r: subprocess.CompletedProcess) -> Path:
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip().splitlines()[-1])


def test_archive_dot_and_dotdot_are_named_after_the_campaign_and_never_packed_again(finished):
    runs = finished.parent.parent
    a = archive_path(cli("archive", ".", cwd=finished, runs=runs))
    assert a.parent == finished.parent, a  # beside the campaign folder, as from anywhere else
    assert a.name.startswith(f"named-{finished.name}-") and not a.name.startswith("-"), a.name
    b = archive_path(cli("archive", "..", cwd=finished / "passes", runs=runs))
    assert b.parent == finished.parent and b.name.startswith(f"named-{finished.name}-"), b
    assert finished not in b.parents
    # an archive copied into the campaign folder (by hand, or by an older lab) is never packed
    pid = next(p for p in (finished / "passes").iterdir() if p.is_dir())
    (pid / "old.tar.gz").write_bytes(a.read_bytes())
    c = archive_path(cli("archive", finished, runs=runs))
    with tarfile.open(c) as tar:
        names = tar.getnames()
        info = json.loads(tar.extractfile(next(n for n in names if n.endswith("/ARCHIVE.json"))).read())
    assert not [n for n in names if n.endswith(".tar.gz")], names
    assert any(s["path"].endswith("old.tar.gz") and "never packed" in s["reason"] for s in info["skipped"])
    v = cli("archive", "verify", c)
    assert v.returncode == 0 and v.stdout.splitlines()[-1].startswith("OK"), v.stdout  # after the signature line


def test_compare_out_and_dates_at_the_ends_of_the_calendar_are_one_line(two_rentals, tmp_path):
    a = [str(p) for p in two_rentals]
    existing = tmp_path / "report.txt"
    existing.write_text("keep me")
    line = one_line(cli("compare", *a, "--load", "1000", "--out", existing))
    assert f"--out {existing}: exists and is not a folder" in line, line
    assert existing.read_text() == "keep me"
    line = one_line(cli("compare", *a, "--load", "1000", "--out", "/proc/iteralab-compare"))
    assert "--out /proc/iteralab-compare: cannot create the folder" in line, line
    for args in (["--deadline", "9999-12-31T23:59-01:00"], ["--window-start", "0001-01-01T00:00+01:00"]):
        line = one_line(cli("compare", *a, "--load", "1000", "--out", tmp_path / "c", *args))
        assert "out of range once converted to UTC" in line, (args, line)
    # one pass each, under a second: projected (the calendar arithmetic runs) only with --allow-short
    r = cli("compare", *a, "--load", "1000", "--allow-short", "--out", tmp_path / "far", "--deadline",
            "9999-12-30T00:00+00:00", "--window-start", "0001-01-02T00:00+00:00")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]


def test_compare_max_lots_at_its_bound_runs_and_beyond_is_refused(two_rentals, tmp_path):
    from lab.compare.decision import MAX_LOTS

    a = [str(p) for p in two_rentals]
    # --allow-short: the passes last under a second; without it nothing is projected over the lots
    r = cli("compare", *a, "--load", "100000", "--allow-short", "--max-lots", str(MAX_LOTS), "--out", tmp_path / "c")
    assert r.returncode == 0, r.stderr[-2000:]
    line = one_line(cli("compare", *a, "--load", "100000", "--max-lots", "10000000", "--out", tmp_path / "d"))
    assert f"from 1 to {MAX_LOTS}" in line and not (tmp_path / "d").exists(), line


def test_compare_with_a_catalog_without_newlines_fails_fast(two_rentals, tmp_path):
    import resource

    def limit() -> None:  # where the read is unbounded, MemoryError (a traceback) instead of the host's OOM
        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))

    r = subprocess.run([sys.executable, "-m", "lab.cli", "compare", *map(str, two_rentals), "--load", "1000",
                        "--catalog", "/dev/zero", "--out", str(tmp_path / "c")], capture_output=True, text=True,
                       cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600, preexec_fn=limit)
    line = one_line(r)
    assert "/dev/zero: larger than" in line and "not a catalog" in line, line


def test_a_deadline_already_past_is_refused_and_unusual_values_are_warned(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), name="odd")
    base = f.read_text()
    f.write_text(base.replace('question = ', 'deadline = "2001-09-10T09:00+00:00"\nquestion = '))
    line = one_line(cli("protocol", "lock", f))
    assert "[campaign] deadline 2001-09-10T09:00+00:00 is already past" in line, line
    assert not f.with_suffix(".lock.json").exists()
    cpus = os.cpu_count() or 1
    f.write_text(base.replace('question = ', 'deadline = "2031-01-10T09:00+00:00"\nquestion = ')
                 .replace("repetitions = 1", "repetitions = 50").replace("threads = 1", f"threads = {cpus + 1}")
                 .replace("values = [1, 8]", "values = [1, 2048]"))
    r = cli("protocol", "lock", f)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    warnings = r.stderr.strip().splitlines()
    # the fifth: 4 corpus items cannot make a 60 s window (compare's projection rule)
    assert len(warnings) == 5 and all(w.startswith("iteralab: warning: ") for w in warnings), warnings
    text = "\n".join(warnings)
    for needle in ("repetitions = 50", f"threads = {cpus + 1}", "batch_size 2048", "more than a year ahead",
                   "projection rule: 4 corpus items: a pass lasts 60 s only below 0.07 items/s"):
        assert needle in text, (needle, text)
    assert re.search(r"^locked .*: version 1", r.stdout), r.stdout
