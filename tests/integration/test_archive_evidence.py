"""The evidence archive is a consistent, final snapshot, and `archive verify` re-derives what it
claims (real finished campaign, real demo model, 10-item corpus; CLI run as a real process)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sqlite3
import subprocess
import sys
import tarfile

import pytest
from conftest import REPO, cut_corpus, read_members, write_campaign, write_members

from lab.cli import make_archive
from lab.evidence.archive import ArchiveError, extract, verify
from lab.evidence.format import ARCHIVE_FORMAT
from lab.facts.host import iteralab_command


def cli(*args, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=REPO, env={**env, **kw.pop("env", {})}, timeout=300, check=False, **kw)


def member(files, suffix):
    return next(n for n in files if n.endswith(suffix))


def edit_raw_table(files, fn):
    name = member(files, "/report/raw_table.csv")
    rows = list(csv.DictReader(io.StringIO(files[name].decode())))
    fn(rows)
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    files[name] = out.getvalue().encode()


@pytest.fixture(scope="module")
def archive(small_campaign):
    return make_archive(small_campaign.dir)


# ---- 1. a consistent, final snapshot ------------------------------------------------------

def test_archived_journal_is_a_complete_snapshot_while_a_connection_is_open(small_campaign, archive, tmp_path):
    assert small_campaign.journal.db is not None  # the orchestrator's WAL connection is still open
    top = extract(archive, tmp_path / "x")
    db = sqlite3.connect(f"file:{top / 'journal.sqlite'}?mode=ro", uri=True)
    attempts = {r[0]: r[1:] for r in db.execute("SELECT pass_id, status, items_completed FROM attempts")}
    planned = [r[0] for r in db.execute("SELECT seq FROM plan")]
    state = db.execute("SELECT value FROM control WHERE key='state'").fetchone()[0]
    db.close()
    with open(top / "report" / "raw_table.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(planned) == 4 and json.loads(state) == "finished"
    assert {r["pass_id"]: (r["status"], int(r["items_completed"])) for r in rows} == attempts
    assert all(s == "ok" for s, _ in attempts.values())
    assert json.loads((top / "ARCHIVE.json").read_text())["partial"] is False


def test_links_in_the_campaign_folder_are_never_followed(small_campaign, tmp_path):
    secret = tmp_path / "outside.txt"
    secret.write_text("root-only secret\n")
    (tmp_path / "outside_dir").mkdir()
    (tmp_path / "outside_dir" / "f.txt").write_text("outside\n")
    pdir = next((small_campaign.dir / "passes").iterdir())
    links = [pdir / "notes.txt", pdir / "linked_dir"]
    links[0].symlink_to(secret)
    links[1].symlink_to(tmp_path / "outside_dir")
    try:
        path = make_archive(small_campaign.dir)
    finally:
        for link in links:
            link.unlink()
    files = read_members(path)
    assert not any(n.endswith(("notes.txt", "f.txt")) for n in files)
    sums = files[member(files, "/SHA256SUMS")].decode()
    assert hashlib.sha256(b"root-only secret\n").hexdigest() not in sums
    skipped = json.loads(files[member(files, "/ARCHIVE.json")])["skipped"]
    assert {s["path"].split("/")[-1] for s in skipped} == {"notes.txt", "linked_dir"}
    assert all("symbolic link" in s["reason"] and "not followed" in s["reason"] for s in skipped)
    assert verify(path).ok, verify(path).problems


def test_unfinished_campaign_is_refused_or_packed_labelled_partial(model_dir, tmp_path, runs_root):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.journal import Journal
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="unfinished")
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, runs_root, LocalLauncher())  # planned, nothing run: no finished pass
    # report on a campaign with no finished pass: no KeyError, an empty table with the reason
    r = cli("report", orch.dir)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "0 rows" in r.stdout and "no pass has run yet" in r.stdout and len(r.stdout.splitlines()) == 1
    assert "no pass has finished" in (orch.dir / "report" / "decision_note.md").read_text()
    r = cli("archive", orch.dir)
    assert r.returncode == 2 and "not finished" in r.stderr and "--partial" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    # an orchestrator (a real live process) holds the campaign: refused with the reason
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        j = Journal(orch.dir / "journal.sqlite")
        import psutil

        j.set_control("orchestrator", {"pid": sleeper.pid,  # as the orchestrator records itself
                                       "process_create_time": psutil.Process(sleeper.pid).create_time()})
        j.set_control("state", "running")
        j.close()
        r = cli("archive", orch.dir)
        assert r.returncode == 2 and f"still running (orchestrator pid {sleeper.pid})" in r.stderr
        r = cli("archive", orch.dir, "--partial")
        assert r.returncode == 0, r.stderr
    finally:
        sleeper.kill()
        sleeper.wait()
    path = r.stdout.strip().splitlines()[-1]
    files = read_members(path)
    info = json.loads(files[member(files, "/ARCHIVE.json")])
    assert info["partial"] is True and "0 of 2 planned passes" in info["partial_reason"]
    assert "Partial evidence" in files[member(files, "/report/decision_note.md")].decode()
    assert verify(path).ok, verify(path).problems


# ---- 2. verify re-derives, streams, and refuses what it cannot check ------------------------

def test_consistent_forgery_is_refused_naming_the_pass(archive, tmp_path):
    files = read_members(archive)
    pred = member(files, "/predictions.jsonl")
    pid = pred.split("/")[-2]
    lines = [json.loads(x) for x in files[pred].decode().splitlines()]
    files[pred] = "".join(json.dumps({**x, "pred": lines[0]["pred"]}) + "\n" for x in lines).encode()
    digest = hashlib.sha256(files[pred]).hexdigest()
    res = member(files, f"/passes/{pid}/result.json")
    files[res] = json.dumps({**json.loads(files[res]), "predictions_sha256": digest}).encode()

    def forge(rows):
        for r in rows:
            if r["pass_id"] == pid:
                r.update(predictions_sha256=digest, metric="0.99")
    edit_raw_table(files, forge)
    bad = write_members(tmp_path / "forged.tar.gz", files)
    v = verify(bad)
    assert not v.ok
    assert any(p.startswith(f"pass {pid}: metric 0.99 in the raw table") and "recomputed" in p
               for p in v.problems), v.problems
    assert any(f"pass {pid}: metric 0.99 in the raw table" in p and "in the journal" in p for p in v.problems)
    r = cli("archive", "verify", bad)
    assert r.returncode == 1 and f"pass {pid}" in r.stdout and r.stdout.strip().endswith("rows checked")


def test_journal_and_result_json_are_compared_with_the_raw_table(archive, tmp_path):
    files = read_members(archive)
    pred = member(files, "/predictions.jsonl")
    pid = pred.split("/")[-2]
    files[pred] = files[pred].replace(b'"prob": ', b'"prob": 0', 1)  # same preds, so same metric
    digest = hashlib.sha256(files[pred]).hexdigest()

    def edit(rows):
        for r in rows:
            if r["pass_id"] == pid:
                r["predictions_sha256"] = digest
            else:
                r["status"], r["items_completed"] = "oom", "3"
    edit_raw_table(files, edit)
    v = verify(write_members(tmp_path / "edited.tar.gz", files))
    assert any(p == f"pass {pid}: predictions sha256 differs from the one its result.json recorded"
               for p in v.problems), v.problems
    assert sum("status 'oom' in the raw table, 'ok' in the journal" in p for p in v.problems) == 3
    assert sum("3 items completed in the raw table, 10 in the journal" in p for p in v.problems) == 3
    # an empty journal (what a copy without its write-ahead log gives) is named, not trusted
    files[member(files, "/journal.sqlite")] = b""
    v = verify(write_members(tmp_path / "nojournal.tar.gz", files))
    assert any("journal.sqlite: not a readable campaign journal" in p for p in v.problems), v.problems


def test_two_top_folders_are_refused(archive, tmp_path):
    files = read_members(archive)
    files["another/report/raw_table.csv"] = b"pass_id\n"
    bad = write_members(tmp_path / "two.tar.gz", files, resum=False)
    with pytest.raises(ArchiveError, match="more than one top folder"):
        verify(bad)
    with pytest.raises(ArchiveError, match="more than one top folder"):
        extract(bad, tmp_path / "x")
    r = cli("archive", "verify", bad)
    assert r.returncode == 2 and r.stdout.startswith("FAILED: more than one top folder") and not r.stderr


@pytest.mark.parametrize("cut_bytes", range(1, 11))
def test_archive_cut_short_is_refused(archive, tmp_path, cut_bytes):
    data = archive.read_bytes()
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[:-cut_bytes])
    with pytest.raises(ArchiveError, match="cut short"):
        verify(cut)


@pytest.mark.parametrize("case", ["tab", "blank line", "binary marker", "not utf-8", "no pass_id"])
def test_malformed_sums_or_raw_table_is_a_verdict_line_exit_2(archive, tmp_path, case):
    files = read_members(archive)
    sums = member(files, "/SHA256SUMS")
    text = files[sums]
    if case == "no pass_id":
        table = member(files, "/report/raw_table.csv")
        files[table] = files[table].replace(b"pass_id,", b"pass,", 1)
        write_members(tmp_path / "bad.tar.gz", files)
    else:
        first, rest = text.split(b"\n", 1)
        digest, name = first.split(b"  ", 1)
        files[sums] = {"tab": digest + b"\t" + name + b"\n" + rest,
                       "blank line": first + b"\n\n" + rest,
                       "binary marker": digest + b" *" + name + b"\n" + rest,
                       "not utf-8": first + b"\n" + rest + b"\xff\xfe  x\n"}[case]
        write_members(tmp_path / "bad.tar.gz", files, resum=False)
    r = cli("archive", "verify", tmp_path / "bad.tar.gz")
    assert r.returncode == 2 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert len(r.stdout.strip().splitlines()) == 1 and r.stdout.startswith("FAILED: ")
    assert ("pass_id" if case == "no pass_id" else "SHA256SUMS") in r.stdout


def test_verify_streams_members_within_bounded_memory(tmp_path):
    """A 512 MiB member (under 1 MiB compressed) is hashed in chunks, never held in memory."""
    bomb = tmp_path / "bomb.tar.gz"
    size = 2**29
    with tarfile.open(bomb, "w:gz", compresslevel=1) as t:
        for name in ("x/ARCHIVE.json", "x/SHA256SUMS", "x/passes/p1/log.txt"):
            info = tarfile.TarInfo(name)
            if name.endswith("ARCHIVE.json"):  # of this format: read first, then the members
                blob = json.dumps({"format": ARCHIVE_FORMAT}).encode()
                info.size = len(blob)
                t.addfile(info, io.BytesIO(blob))
            elif name.endswith("log.txt"):
                info.size = size
                t.addfile(info, _Zeros(size))
            else:
                digest = hashlib.sha256()
                for _ in range(size // 2**20):
                    digest.update(bytes(2**20))
                blob = f"{digest.hexdigest()}  passes/p1/log.txt\n".encode()
                info.size = len(blob)
                t.addfile(info, io.BytesIO(blob))
    code = ("import sys; from pathlib import Path; from lab.evidence.archive import verify; "
            "v = verify(Path(sys.argv[1])); "  # VmHWM: this process's peak resident memory (kB)
            "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; "
            "print(int(hwm) * 1024, v.files_checked)")
    r = subprocess.run([sys.executable, "-c", code, str(bomb)], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    peak_rss_bytes, files_checked = map(int, r.stdout.split())
    assert files_checked == 1
    assert peak_rss_bytes < size // 2, f"verify held {peak_rss_bytes} bytes for a {size}-byte member"


class _Zeros:
    def __init__(self, n):
        self.left = n

    def read(self, n=-1):
        n = self.left if n < 0 else min(n, self.left)
        self.left -= n
        return bytes(n)


def test_an_archive_never_overwrites_one_made_in_the_same_second(small_campaign):
    from datetime import UTC, datetime, timedelta

    d = small_campaign.dir
    now = datetime.now(UTC)
    taken = [d.parent / f"{d.parent.name}-{d.name}-{(now + timedelta(seconds=s)).strftime('%Y%m%dT%H%M%SZ')}.tar.gz"
             for s in range(3)]
    for t in taken:
        t.write_bytes(b"an earlier archive")
    try:
        path = make_archive(d)
        assert all(t.read_bytes() == b"an earlier archive" for t in taken)
        assert path not in taken and verify(path).ok
    finally:
        for t in taken:
            t.unlink()


def test_acceptance_is_re_derived_from_the_predictions_and_the_locked_threshold(archive, tmp_path):
    from lab.orchestration.validate import accuracy

    files = read_members(archive)
    gold = {x["id"]: x for x in map(json.loads, files[member(files, "/report/gold_labels.jsonl")].splitlines())}
    pred = member(files, "/predictions.jsonl")
    pid = pred.split("/")[-2]
    lines = [json.loads(x) for x in files[pred].decode().splitlines()]
    files[pred] = "".join(json.dumps({**x, "pred": "not-a-class"}) + "\n" for x in lines).encode()
    digest = hashlib.sha256(files[pred]).hexdigest()
    res = member(files, f"/passes/{pid}/result.json")
    files[res] = json.dumps({**json.loads(files[res]), "predictions_sha256": digest}).encode()

    def consistent(rows):  # every figure agrees with the new predictions; only acceptance lies
        for r in rows:
            if r["pass_id"] == pid:
                r.update(predictions_sha256=digest, metric="0.0", metric_short="0.0", metric_medium="0.0",
                         metric_long="0.0")
    edit_raw_table(files, consistent)
    assert accuracy([g["label"] for g in gold.values()], ["not-a-class"] * len(gold)) == 0.0
    v = verify(write_members(tmp_path / "accepted.tar.gz", files))
    assert f"pass {pid}: marked accepted, but its recomputed metric 0.0 is below the locked threshold 0.2" \
        in v.problems, v.problems
    # the metric figures agree; the agreement with the reference pass, left as it was, is recomputed too,
    # and the other pass, now beyond the agreement rule, is no longer the same ML result
    assert not any("recomputed from its predictions" in p and "reference pass" not in p
                   for p in v.problems), v.problems
    assert any("marked accepted, but not the same ML result" in p and pid in p for p in v.problems), v.problems
    assert any("agreement_with_reference" in p and "recomputed from its predictions and reference pass" in p
               for p in v.problems), v.problems

    edit_raw_table(files, lambda rows: [r.update(corpus_accepted="False") for r in rows if r["pass_id"] != pid])
    v = verify(write_members(tmp_path / "flipped.tar.gz", files))
    assert sum("corpus_accepted False in the raw table, True in the journal" in p for p in v.problems) == 3


def test_odd_json_members_give_problem_lines_never_a_traceback(archive, tmp_path):
    files = read_members(archive)
    files[member(files, "/result.json")] = b"[1]"
    gold = member(files, "/report/gold_labels.jsonl")
    files[gold] = b'{"id": 1, "label": 2}\n' + files[gold]
    r = cli("archive", "verify", write_members(tmp_path / "odd.tar.gz", files))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "result.json is not a JSON object" in r.stdout
    assert "gold_labels.jsonl line 1: not a JSON object with string id and label" in r.stdout
    # an ARCHIVE.json that is no object gives no format: refused in one line, before any other check
    files[member(files, "/ARCHIVE.json")] = b"[]"
    r = cli("archive", "verify", write_members(tmp_path / "odd-info.tar.gz", files))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.strip() == ("FAILED: odd-info.tar.gz: evidence archive format unknown (ARCHIVE.json is not a "
                                f"JSON object), this lab reads format {ARCHIVE_FORMAT}; re-pack it from its "
                                f"campaign folder with `{iteralab_command()} archive CAMPAIGN_FOLDER` using this lab, "
                                "or read it with the lab version that made it"), r.stdout


FORMAT_EDITS = {"no format": (lambda info: {k: v for k, v in info.items() if k != "format"},
                              "none: made before formats were recorded"),
                "another format": (lambda info: {**info, "format": ARCHIVE_FORMAT + 1}, str(ARCHIVE_FORMAT + 1))}


@pytest.mark.parametrize("edit", FORMAT_EDITS)
def test_an_archive_of_no_format_or_another_is_refused_in_one_line_by_every_reader(archive, tmp_path, edit):
    """archive verify, compare and replay read the archive's format first (lab.evidence.format.check_format):
    an archive whose ARCHIVE.json records none, or another, is refused in the same one line, which says
    what it is and how to fix it; nothing is written."""
    fn, found = FORMAT_EDITS[edit]
    files = read_members(archive)
    name = member(files, "/ARCHIVE.json")
    files[name] = json.dumps(fn(json.loads(files[name]))).encode()
    old = write_members(tmp_path / "old.tar.gz", files)
    line = (f"old.tar.gz: evidence archive format {found}, this lab reads format {ARCHIVE_FORMAT}; re-pack it from "
            f"its campaign folder with `{iteralab_command()} archive CAMPAIGN_FOLDER` using this lab, or read it with "
            "the lab version that made it")
    window = ["--window-start", "2026-12-01T09:00+01:00", "--deadline", "2026-12-05T09:00+01:00", "--allow-short"]
    for args, shown in ((("archive", "verify", old), f"FAILED: {line}"),
                        (("compare", old, archive, "--load", 1000, *window, "--out", tmp_path / "cmp"),
                         f"iteralab: error: {line}"),
                        (("campaign", "replay", old, "--out", tmp_path / "replay" / "campaign.toml"),
                         f"iteralab: error: {line}")):
        r = cli(*args)
        assert r.returncode == 2 and (r.stdout + r.stderr).strip() == shown, (args[0], r.stdout, r.stderr)
    assert not (tmp_path / "cmp").exists() and not (tmp_path / "replay").exists()


def test_an_archive_info_claiming_this_format_is_still_checked_member_by_member(archive, tmp_path):
    """The format is no trust signal: ARCHIVE.json edited (its format kept) without SHA256SUMS is
    named, and with SHA256SUMS re-hashed its claim is checked (a final campaign said partial)."""
    files = read_members(archive)
    name = member(files, "/ARCHIVE.json")
    info = json.loads(files[name])
    assert info["format"] == ARCHIVE_FORMAT and info["partial"] is False
    files[name] = json.dumps({**info, "skipped": [{"path": "x", "reason": "forged"}]}).encode()
    v = verify(write_members(tmp_path / "unsummed.tar.gz", dict(files), resum=False))
    assert v.problems == ["ARCHIVE.json: sha256 does not match SHA256SUMS"], v.problems
    files[name] = json.dumps({**info, "corpus": "corpus/forged.jsonl"}).encode()
    v = verify(write_members(tmp_path / "resummed.tar.gz", dict(files)))
    assert v.problems == ["ARCHIVE.json names the corpus corpus/forged.jsonl, which the archive lacks"], v.problems


def test_links_written_into_a_pass_folder_are_never_read(model_dir, tmp_path):
    """A pass (or its container) swaps its predictions for a link to a perfect forgery outside
    the campaign folder: validation, raw table and archive never follow it."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.report.build import build_report

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="linked", values=(1,))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert orch.run() == "finished"
    [a] = orch.journal.attempts()
    pdir = orch.dir / "passes" / a.pass_id
    forged = tmp_path / "perfect.jsonl"
    forged.write_text("".join(json.dumps({"id": r["id"], "pred": r["label"], "prob": 1.0}) + "\n"
                              for r in map(json.loads, corpus.read_text().splitlines())))
    (pdir / "predictions.jsonl").unlink()
    (pdir / "predictions.jsonl").symlink_to(forged)
    orch.revalidate_all()
    build_report(orch.dir)
    with open(orch.dir / "report" / "raw_table.csv", newline="") as fh:
        [row] = list(csv.DictReader(fh))
    assert row["corpus_accepted"] == "False" and row["metric"] == "" and row["predictions_path"] == ""
    assert "predictions file is a symbolic link: not followed" in row["notes"]
    # packing verifies first: the pass recorded predictions the folder no longer holds, so no archive
    with pytest.raises(ArchiveError, match=r"would not verify .*predictions sha256 differs from the one its "
                                           r"result.json recorded\); nothing was written"):
        make_archive(orch.dir)
    assert not list(orch.dir.parent.glob("*.tar*"))
