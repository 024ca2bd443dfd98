"""Issue 22 part 1: `iteralab campaign replay` puts exactly the same question again on another
rental (another runs folder, another [cost]), and compare finds the two archives comparable by
construction; an input that is not the archive's is refused with both sha256 values; a
deliberate new model is a new question version that compare calls two models."""

from __future__ import annotations

import json
import shutil
import tarfile
import tomllib
from pathlib import Path

import pytest

from lab.compare import compare_to_folder
from lab.evidence.replay import ReplayError, replay_archive
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.service.campaigns import make_archive

WINDOW = {"window_start": "2026-12-01T09:00+01:00", "deadline": "2026-12-20T09:00+01:00", "allow_short": True}


def archive_protocol(archive: Path) -> dict:
    with tarfile.open(archive) as tar:
        top = tar.getnames()[0].split("/")[0]
        return tomllib.loads(tar.extractfile(f"{top}/campaign.toml").read().decode())


def run_and_archive(campaign: Path, runs: Path) -> Path:
    orch = Orchestrator.prepare(campaign, runs, LocalLauncher())
    assert orch.run() == "finished"
    return make_archive(orch.dir)


def test_replay_on_another_rental_is_comparable_by_construction(two_rentals, tmp_path):
    first = two_rentals[0]  # rtx-4090, threads 1
    out = tmp_path / "rental-2" / "campaign.toml"
    r = replay_archive(first, out, cost={"gpu": "b200", "days": 7, "lots": 1})
    # exactly the archive's protocol; only [cost] differs (the corpus and model paths resolve to the same files)
    old, new = archive_protocol(first), tomllib.loads(out.read_text())
    for section in ("campaign", "quality", "timing", "defaults", "series"):
        assert new[section] == old[section], section
    assert new["cost"] == {"gpu": "b200", "days": 7, "lots": 1} != old["cost"]
    entry = json.loads(out.with_suffix(".lock.json").read_text())["versions"][-1]
    assert entry["replays"]["archive"] == first.name and entry["replays"]["change"] == ""
    assert len(entry["replays"]["archive_sha256"]) == 64 and entry["question_version"] == 1
    from lab.service.views import protocol_info
    from tui.screens.protocol_screen import render_rules

    shown = render_rules(protocol_info(out))  # the Protocol screen names the archive it replays
    assert f"Replays[/b] {first.name}" in shown and "the same question, question version 1" in shown
    assert "its protocol version 1)" in shown  # which of the archive's protocol versions it replays
    second = run_and_archive(out, tmp_path / "runs-2")  # another runs folder
    c, _ = compare_to_folder([first, second], 50000, tmp_path / "cmp", **WINDOW)
    assert any(line.startswith("comparable: corpus sha256") for line in c.path), c.path
    assert not any("TWO MODELS" in line for line in c.path)
    assert any(line.startswith("decision: ") for line in c.path), c.path
    assert r.question_version == 1


def test_a_corpus_edited_by_one_byte_is_refused_with_both_sha256(two_rentals, tmp_path, capsys):
    import lab.cli
    from lab.facts.files import sha256_file

    first = two_rentals[0]
    recorded = next(p for p in first.parents if (p / "corpus.jsonl").is_file()) / "corpus.jsonl"
    edited = tmp_path / "corpus.jsonl"
    data = bytearray(recorded.read_bytes())
    data[10] = ord("X") if data[10] != ord("X") else ord("Y")
    edited.write_bytes(bytes(data))
    out = tmp_path / "campaign.toml"
    code = lab.cli.main(["campaign", "replay", str(first), "--corpus", str(edited), "--out", str(out),
                         "--gpu", "b200", "--days", "7"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err and "Traceback" not in err
    assert sha256_file(edited) in err and sha256_file(recorded) in err
    assert not out.exists() and not out.with_suffix(".lock.json").exists()


def test_the_replay_line_names_the_archives_protocol_version(two_rentals, tmp_path, capsys):
    """Issue 35 item 7: the new lock's version is this campaign file's own; the line also says
    which protocol version of the archive it replays."""
    import lab.cli

    first = two_rentals[0]
    out = tmp_path / "campaign.toml"
    assert lab.cli.main(["campaign", "replay", str(first), "--out", str(out), "--gpu", "b200", "--days", "7"]) == 0
    locked = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("locked "))
    entry = json.loads(out.with_suffix(".lock.json").read_text())["versions"][-1]
    assert "version 1 of this campaign file" in locked, locked
    assert entry["replays"]["protocol_version"] == 1  # the session's archives hold version 1
    assert "its protocol version 1)" in locked, locked


def test_with_corpus_archive_replays_without_the_corpus_file(two_rentals, tmp_path):
    from lab.evidence.archive import verify

    first = two_rentals[0]
    src = next(d for d in first.parent.iterdir() if d.is_dir() and (d / "journal.sqlite").is_file())
    copy = tmp_path / "runs" / first.parent.name / src.name  # never touch the session's folder
    shutil.copytree(src, copy)
    packed = make_archive(copy, with_corpus=True)
    v = verify(packed)
    assert v.ok, v.problems
    with tarfile.open(packed) as tar:
        names = [n.split("/", 1)[1] for n in tar.getnames() if "/" in n]
    assert "corpus/corpus.jsonl" in names
    r = replay_archive(packed, tmp_path / "replayed" / "campaign.toml")
    assert r.corpus.parent.name == "campaign-inputs"  # the archive's own copy, beside the new file


def test_a_new_model_is_a_new_question_version_and_compare_says_two_models(two_rentals, model_dir, tmp_path):
    first = two_rentals[0]
    other = tmp_path / "model-2"  # another model: the same weights under another config.json
    shutil.copytree(model_dir, other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "iteralab_note": "retrained"}, indent=1))
    with pytest.raises(ReplayError, match="--new-model"):  # another model without --new-model: refused
        replay_archive(first, tmp_path / "same" / "campaign.toml", model=str(other))
    out = tmp_path / "new-model" / "campaign.toml"
    r = replay_archive(first, out, model=str(other), new_model=True)
    entry = json.loads(out.with_suffix(".lock.json").read_text())["versions"][-1]
    assert r.question_version == 2 and entry["question_version"] == 2
    assert entry["replays"]["archive"] == first.name and entry["replays"]["change"].startswith("model: ")
    second = run_and_archive(out, tmp_path / "runs-new")
    c, paths = compare_to_folder([first, second], 50000, tmp_path / "cmp", **WINDOW)
    line = next(line for line in c.path if line.startswith("comparable"))
    assert "TWO MODELS, not two rentals of one question" in line and first.name in line
    assert "Two models compared, not two rentals of one question" in paths["decision"].read_text()
