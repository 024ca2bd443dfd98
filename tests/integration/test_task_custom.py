"""Custom task (the user's own inference code) on the real product: the example entry runs the
demo classifier through the protocol, gives the built-in task's predictions, and its campaign
locks, runs batch 1 and 8, validates, reports, archives and verifies; an entry that raises on
item 7 is a failure row with 7 items done; an entry that does not exist is refused at lock."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, custom_campaign
from test_archive_evidence import edit_raw_table, member, read_members, write_members

EXAMPLE = REPO / "examples" / "custom_classifier.py"


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory, model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.report.build import build_report
    from lab.service.campaigns import make_archive

    d = tmp_path_factory.mktemp("custom")
    f = custom_campaign(d, model_dir, f"{EXAMPLE}:DemoClassifier")
    entry = lock(load_protocol(f))
    orch = Orchestrator.prepare(f, d / "runs", LocalLauncher())
    assert orch.run() == "finished"
    build_report(orch.dir)
    return orch, make_archive(orch.dir), entry


def preds(orch, variant_name: str) -> dict[str, str]:
    a = next(a for a in orch.journal.attempts() if a.variant.name == variant_name)
    lines = (orch.dir / "passes" / a.pass_id / "predictions.jsonl").read_text().splitlines()
    return {r["id"]: r["pred"] for r in map(json.loads, lines)}


def test_example_entry_gives_the_builtin_predictions_and_verifies(custom_run, small_campaign, tmp_path):
    from lab.evidence.archive import verify
    from lab.facts.files import sha256_file

    orch, archive, lock_entry = custom_run
    assert lock_entry["task_sha256"]  # the entry file's sha256 is in the lock identity
    attempts = orch.journal.attempts()
    assert [a.status for a in attempts] == ["ok", "ok"]
    for a in attempts:
        v = a.validation
        assert v.ids_match and v.format_ok and v.corpus_accepted, v.reasons
        res = json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())
        assert res["observed"]["batch_size"] == min(res["variant"]["batch_size"], 10)
        assert res["observed"]["dtype"] == "float32"  # reported by settings_used()
        assert res["observed"]["max_tokens"] == "declared, not observable"
        assert res["entry"].endswith("custom_classifier.py:DemoClassifier")
    builtin = preds(small_campaign, "batch/batch_size=1")
    assert preds(orch, "batch/batch_size=1") == builtin
    assert preds(orch, "batch/batch_size=8") == builtin
    assert sha256_file(EXAMPLE)  # the file the lock hashed is the repository's example

    v = verify(archive)
    assert v.ok, v.problems
    files = read_members(archive)
    pred = member(files, "/predictions.jsonl")
    pid = pred.split("/")[-2]
    edit_raw_table(files, lambda rows: [r.update(metric="0.99") for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: metric 0.99 in the raw table") and "recomputed" in p
               for p in bad.problems), bad.problems


def test_entry_raising_on_item_7_is_a_failure_row_with_7_items(tmp_path, model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    f = custom_campaign(tmp_path, model_dir, "raising.py:Raising", values=(1,))
    eighth = json.loads((tmp_path / "corpus.jsonl").read_text().splitlines()[7])["text"]
    (tmp_path / "raising.py").write_text(
        "class Raising:\n"
        "    def __init__(self, settings, device):\n"
        "        pass\n\n"
        "    def predict(self, texts):\n"
        f"        if {eighth!r} in texts:\n"
        "            raise ValueError('item 7 refused by the entry')\n"
        "        return ['x' for _ in texts]\n")
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    a = orch.journal.attempts()[0]
    assert a.status == "error" and a.items_completed == 7, a
    res = json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())
    assert "raising.py, line 7, in predict: ValueError: item 7 refused by the entry" in res["error"], res["error"]
    lines = (orch.dir / "passes" / a.pass_id / "predictions.jsonl").read_text().splitlines()
    assert len(lines) == 7  # the items completed are kept
    # an exception in the user's code is a failure, not a memory verdict (a new user's trial read
    # "Memory: infeasible" for a ValueError)
    from lab.report.build import build_report

    [variant] = build_report(orch.dir)["summary"]
    assert variant.failures == 1 and variant.feasible is True, variant
    assert "not a memory failure" in variant.infeasible_reason, variant.infeasible_reason
    note = (orch.dir / "report" / "decision_note.md").read_text()
    assert "Memory: infeasible" not in note and "memory 1" not in note, note
    assert variant.memory_verdict() == "not shown" and "- Memory: not shown (no pass judged yet" in note, note


@pytest.mark.parametrize("entry, words", [("missing.py:Nope", "not found"),
                                          ("noproto.py:NoPredict", "has no predict method")])
def test_entry_that_cannot_run_is_refused_at_lock_in_one_line(tmp_path, model_dir, entry, words):
    from lab.orchestration.protocol import ProtocolError, load_protocol, lock

    (tmp_path / "noproto.py").write_text("class NoPredict:\n    pass\n")
    f = custom_campaign(tmp_path, model_dir, entry)
    with pytest.raises(ProtocolError) as exc:
        lock(load_protocol(f))
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)
