"""`archive verify` re-derives every figure compare and the report read, and compare reads the
re-derived figures (issue 23, part 1). Real archives made by the real product in this test
session: the same one-pass campaign (7 items, batch 1) priced rtx-4090 and b200, once with a
threshold its passes meet and once with one they never meet. Each forgery edits two files and
SHA256SUMS, as a person with a text editor would."""

from __future__ import annotations

import csv
import io
import json

import pytest
from conftest import cut_corpus, write_campaign
from conftest import read_members as members
from conftest import write_members as repack  # SHA256SUMS recomputed: a consistent edit

from lab.compare import CompareError, compare_archives
from lab.evidence.archive import verify
from lab.report.summary import VariantSummary

WINDOW = dict(window_start="2026-12-01T09:00+01:00", deadline="2026-12-01T21:00+01:00")  # 12 h


def _archive(folder, model, corpus, gpu: str, threshold: float):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.service.campaigns import make_archive

    folder.mkdir(parents=True)
    c = folder / "corpus.jsonl"
    c.write_bytes(corpus.read_bytes())
    f = write_campaign(folder, model, c, name="rental", values=(1,), threshold=threshold)
    f.write_text(f.read_text() + f'\n[cost]\ngpu = "{gpu}"\ndays = 7\nlots = 1\n')
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, folder / "runs", LocalLauncher())
    assert orch.run() == "finished"
    return make_archive(orch.dir)


@pytest.fixture(scope="module")
def archives(tmp_path_factory, model_dir) -> dict:
    """{("accepted" | "rejected", "rtx" | "b200"): archive}; threshold 0.2 (met) and 0.99 (not met)."""
    d = tmp_path_factory.mktemp("rederived")
    corpus = cut_corpus(d / "corpus.jsonl", 4, 2, 1)
    out = {}
    for verdict, threshold in (("accepted", 0.2), ("rejected", 0.99)):
        for key, gpu in (("rtx", "rtx-4090"), ("b200", "b200")):
            out[verdict, key] = _archive(d / f"{verdict}-{key}", model_dir, corpus, gpu, threshold)
    return out


def member(files, suffix: str) -> str:
    return next(n for n in files if n.endswith(suffix))


def table(files) -> tuple[str, list[dict]]:
    name = member(files, "/report/raw_table.csv")
    return name, list(csv.DictReader(io.StringIO(files[name].decode(), newline="")))


def put_table(files, name: str, rows: list[dict]) -> None:
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
    files[name] = out.getvalue().encode()


def test_genuine_archives_verify_and_compare_reads_the_re_derived_figures(archives):
    from lab.compare.evidence import load_evidence

    for path in archives.values():
        v = verify(path)
        assert v.ok, v.problems
        files = members(path)
        _, rows = table(files)
        assert v.rederived.raw_rows == rows  # re-derived from the journal: the same cells as the CSV
        assert v.rederived.summary == json.loads(files[member(files, "/report/summary.json")])
        ev = load_evidence(path)
        assert ev.raw_rows == v.rederived.rows
        assert ev.variants == tuple(VariantSummary.from_json(d) for d in v.rederived.summary)
        assert [r.cells for r in ev.raw_rows] == rows  # compare reads the typed rows of those cells


def test_raised_accepted_passes_is_refused_and_never_compared(archives, tmp_path):
    """summary.json's accepted_passes raised for a variant whose every pass missed the threshold:
    compare found it eligible and chose a package; now verify names the field and compare refuses."""
    genuine = [archives["rejected", "rtx"], archives["rejected", "b200"]]
    assert compare_archives(genuine, 1000, **WINDOW).chosen is None  # every pass rejected
    forged = []
    for path in genuine:
        files = members(path)
        name = member(files, "/report/summary.json")
        summary = json.loads(files[name])
        assert [s["accepted_passes"] for s in summary] == [0]
        files[name] = json.dumps([{**s, "accepted_passes": 1, "quality_verdict": "accepted (1 of 1 passes)"}
                                  for s in summary]).encode()
        forged.append(repack(tmp_path / path.name, files))
    vid = summary[0]["variant_id"]
    v = verify(forged[0])
    assert f"variant {vid}: accepted_passes 1 in report/summary.json, 0 re-derived from the journal and the " \
        "pass records" in v.problems, v.problems
    assert any(p.startswith(f"variant {vid}: quality_verdict accepted (1 of 1 passes) in report/summary.json")
               for p in v.problems)
    with pytest.raises(CompareError, match="does not verify"):
        compare_archives(forged, 1000, **WINDOW)


def test_inflated_throughput_is_refused_and_never_moves_the_decision(archives, tmp_path):
    """raw_table.csv items_per_s x 100 (result.json and the journal keep the true figure) moved
    compare's decision from none to a b200 package; now verify names the cell."""
    pair = [archives["accepted", "rtx"], archives["accepted", "b200"]]
    rates = [float(r["items_per_s"]) for p in pair for r in table(members(p))[1]]
    load = int(20 * 3600 * max(rates))  # 20 h of work at the fastest pass: no 12-h window holds it on 1 lot
    assert compare_archives(pair, load, max_lots=1, **WINDOW).chosen is None
    files = members(pair[1])
    name, rows = table(files)
    for r in rows:
        r["items_per_s"] = str(float(r["items_per_s"]) * 100)
    put_table(files, name, rows)
    forged = repack(tmp_path / "fast.tar.gz", files)
    v = verify(forged)
    pid = rows[0]["pass_id"]
    assert any(p.startswith(f"pass {pid}: items_per_s {rows[0]['items_per_s']} in the raw table, ")
               and p.endswith("re-derived from the journal and the pass records") for p in v.problems), v.problems
    with pytest.raises(CompareError, match="does not verify"):
        compare_archives([pair[0], forged], load, max_lots=1, **WINDOW)
    # result.json is compared with the journal's record of the pass too
    res = member(files, f"/passes/{pid}/result.json")
    result = json.loads(files[res])
    files[res] = json.dumps({**result, "items_per_s": result["items_per_s"] * 100}).encode()
    v = verify(repack(tmp_path / "fast2.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: result.json items_per_s ") and "in the journal's record" in p
               for p in v.problems), v.problems


def test_duplicated_raw_table_rows_are_refused(archives, tmp_path):
    files = members(archives["accepted", "rtx"])
    name, rows = table(files)
    put_table(files, name, rows + rows)
    v = verify(repack(tmp_path / "twice.tar.gz", files))
    assert f"pass {rows[0]['pass_id']}: 2 rows in the raw table; it holds one row per attempt" in v.problems, \
        v.problems


def test_a_journal_whose_attempts_give_no_raw_table_is_a_problem_line(archives, tmp_path):
    import sqlite3

    files = members(archives["accepted", "rtx"])
    name = member(files, "/journal.sqlite")
    db_path = tmp_path / "journal.sqlite"
    db_path.write_bytes(files[name])
    with sqlite3.connect(db_path) as db:
        db.execute("""UPDATE attempts SET result_json = '{"phases_s": 5}'""")
    db.close()
    files[name] = db_path.read_bytes()
    v = verify(repack(tmp_path / "odd.tar.gz", files))
    assert any(p.startswith("pass ") and "its attempt in the journal is not a pass record (ValidationError"
               in p for p in v.problems), v.problems
    assert any(p.startswith("journal.sqlite: its attempts do not give a raw table (") for p in v.problems), \
        v.problems
    assert v.rederived is None


def test_an_archive_from_another_lab_version_is_judged_on_its_figures_not_its_wording(archives, tmp_path):
    """An archive written by another version of the lab's sources (ARCHIVE.json lab_sources_sha256)
    whose notes and verdict wording differ from what this lab writes verifies on every figure, and
    says so in one NOTE line naming what it did not compare; the same edits in an archive this lab
    wrote are a forgery, and a figure edit is refused whichever lab wrote the archive."""
    from lab.facts.files import lab_sources_sha256

    path = archives["accepted", "rtx"]
    files = members(path)
    info_name = member(files, "/ARCHIVE.json")
    info = json.loads(files[info_name])
    assert info["lab_sources_sha256"] == lab_sources_sha256()
    assert verify(path).lab_apart == []  # the same lab: nothing to say

    name, rows = table(files)
    pid = rows[0]["pass_id"]
    reworded = [{**r, "notes": r["notes"] + " | worded by an older lab"} for r in rows]
    put_table(files, name, reworded)
    sname = member(files, "/report/summary.json")
    summary = json.loads(files[sname])
    files[sname] = json.dumps([{**s, "quality_verdict": "accepted (worded otherwise)"} for s in summary]).encode()

    same_lab = verify(repack(tmp_path / "same-lab.tar.gz", dict(files)))
    assert same_lab.outcome == "FAILED" and any(p.startswith(f"pass {pid}: notes ") for p in same_lab.problems)

    files[info_name] = json.dumps({**info, "lab_sources_sha256": "0" * 64}).encode()
    v = verify(repack(tmp_path / "other-lab.tar.gz", dict(files)))
    assert v.outcome == "OK" and v.problems == [], v.problems
    [line] = v.lab_apart
    assert f"pass {pid} notes" in line and "quality_verdict" in line and "not compared" in line
    assert "lab sources 000000000000" in line

    # this format records the lab that wrote the archive: without it, verify names the key and
    # compares the prose as its own
    files[info_name] = json.dumps({k: x for k, x in info.items() if k != "lab_sources_sha256"}).encode()
    v = verify(repack(tmp_path / "no-lab.tar.gz", dict(files)))
    assert v.outcome == "FAILED" and v.lab_apart == [], v.lab_apart
    assert ("ARCHIVE.json: no lab_sources_sha256 (the sources of the lab that wrote the archive); its prose is "
            "compared as this lab words it") in v.problems, v.problems
    assert any(p.startswith(f"pass {pid}: notes ") for p in v.problems), v.problems
    files[info_name] = json.dumps(info).encode()

    items = [{**r, "items_per_s": str(float(r["items_per_s"]) * 2)} for r in reworded]  # a figure
    put_table(files, name, items)
    v = verify(repack(tmp_path / "figure.tar.gz", dict(files)))
    assert v.outcome == "FAILED" and any(p.startswith(f"pass {pid}: items_per_s ") for p in v.problems), v.problems


def test_a_rejected_verdict_worded_from_the_notes_is_named_by_verify(archives, tmp_path):
    """A lab before the typed verdict worded a rejected variant's verdict from its raw-table notes
    ("rejected: " and the notes after "validation: ", cut at 120 characters); this format's
    summary holds the validation's reasons: that wording in summary.json is a problem naming the
    variant and the field."""
    files = members(archives["rejected", "rtx"])
    _, rows = table(files)
    sname = member(files, "/report/summary.json")
    summary = json.loads(files[sname])
    cut = {s["variant_id"]: "rejected: " + sorted({r["notes"].split("validation: ")[-1][:120] for r in rows
                                                    if r["variant_id"] == s["variant_id"]})[0] for s in summary}
    assert all(cut[s["variant_id"]] != s["quality_verdict"] for s in summary), (cut, summary)
    files[sname] = json.dumps([{**s, "quality_verdict": cut[s["variant_id"]]} for s in summary]).encode()
    v = verify(repack(tmp_path / "cut-verdict.tar.gz", files))
    named = [p for p in v.problems if "quality_verdict" in p]
    assert v.outcome == "FAILED" and len(named) == len(summary), v.problems
    assert all(p.startswith(f"variant {s['variant_id']}: quality_verdict ") and " in report/summary.json, " in p
               for p, s in zip(named, summary, strict=True)), named


def test_no_decision_says_why_in_one_line_counted_from_the_exclusions(archives, tmp_path):
    """Every pass misses the 0.99 threshold (a new user's case: decision none, the reason only in
    decision.md, and a headline naming a deadline never given). The terminal's last line and the
    UI's Compare screen (the service's decision paragraph) count the configurations excluded per
    reason, the same counts as compare.csv's exclusions cells; "before the deadline" only with one."""
    import os
    import subprocess
    import sys
    from collections import Counter

    from conftest import REPO

    from lab.service.views import run_comparison

    pair = [archives["rejected", "rtx"], archives["rejected", "b200"]]
    r = subprocess.run([sys.executable, "-m", "lab.cli", "compare", *map(str, pair), "--load", "2000000",
                        "--allow-short", "--out", str(tmp_path / "o")], capture_output=True, text=True, cwd=REPO,
                       check=False, timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 6, r.stdout + r.stderr  # decision: none (lab.service.campaigns.NO_DECISION_EXIT)
    with open(tmp_path / "o" / "compare.csv", newline="") as f:
        cells = [row["exclusions"] for row in csv.DictReader(f)]
    kinds = Counter(k for cell in cells for k in dict.fromkeys(x.split(":", 1)[0] for x in cell.split("; ") if x))
    assert kinds["quality"] == 2 and all("rejected: accuracy" in cell for cell in cells), cells
    counts = f"2 of 2 excluded: {', '.join(f'{k} {n}' for k, n in kinds.most_common())}"
    last = r.stdout.splitlines()[-4]  # then the three "wrote" lines
    assert last.startswith(f"8. decision: none: {counts} (each configuration's reasons in decision.md)"), r.stdout
    assert "deadline" not in r.stdout, r.stdout  # none was given
    md = (tmp_path / "o" / "decision.md").read_text()
    assert f"**Decision: none.** no configuration is accepted, feasible and covered by a package ({counts}): " in md
    fields = {"load": "1000", **WINDOW}  # a deadline, and the 7-item passes too short without --allow-short
    out = run_comparison([str(p) for p in pair], fields, tmp_path / "runs")
    assert out.path[-1].startswith("decision: none: 2 of 2 excluded: quality 2, too short to project 2 ("), \
        out.path
    assert ("**Decision: none.** no configuration is accepted, feasible and covered by a package before the "
            "deadline (2 of 2 excluded: quality 2, too short to project 2): ") in out.decision
