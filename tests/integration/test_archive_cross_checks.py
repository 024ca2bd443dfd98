"""Every fact an archive states in two members must agree (issue 34 part 1): each case edits one
member of a real archive and re-hashes SHA256SUMS as anyone can; verify must fail, naming the
fact and both members. Packing verifies what it packs before it writes the archive."""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib

import pytest
from test_archive_evidence import member, read_members, write_members

from lab.evidence.archive import ArchiveError, verify
from lab.orchestration.protocol import protocol_digest


@pytest.fixture()
def rtx(two_rentals):
    """The rtx-4090 rental's archive: (path, {member name: bytes})."""
    return two_rentals[0], read_members(two_rentals[0])


def forged(tmp_path, files, name="forged.tar.gz"):
    return write_members(tmp_path / name, files)


def test_an_unedited_archive_verifies(rtx):
    v = verify(rtx[0])
    assert v.ok, v.problems


def test_campaign_file_gpu_and_question_edited_apart_from_the_lock_fail(rtx, tmp_path):
    _, files = rtx
    name = member(files, "/campaign.toml")
    text = files[name].decode()
    assert 'gpu = "rtx-4090"' in text
    files[name] = (text.replace('gpu = "rtx-4090"', 'gpu = "b200"')
                   .replace("Which configuration", "Which forged configuration")).encode()
    problems = verify(forged(tmp_path, files)).problems
    gpu = [p for p in problems if p.startswith("[cost] gpu:")]
    assert gpu == ["[cost] gpu: 'b200' in campaign.toml, 'rtx-4090' in campaign.lock.json (version 1) "
                   "(the members disagree)"], problems
    assert any(p.startswith("[campaign] question:") for p in problems), problems


def test_lock_protocol_edited_with_its_protocol_sha256_recomputed_fails(rtx, tmp_path):
    _, files = rtx
    name = member(files, "/campaign.lock.json")
    lock = json.loads(files[name])
    entry = lock["versions"][0]
    entry["protocol"]["campaign"]["question"] = "A forged question?"
    entry["protocol"]["quality"]["tolerance"] = 0.99
    entry["protocol_sha256"] = protocol_digest(entry["protocol"])
    files[name] = json.dumps(lock, indent=1).encode()
    problems = verify(forged(tmp_path, files)).problems
    assert any(p.startswith("[quality] tolerance: 0.05 in campaign.toml, 0.99 in campaign.lock.json")
               for p in problems), problems
    assert any(p.startswith("protocol_sha256:") and "protocol_version.json" in p and "campaign.lock.json" in p
               for p in problems), problems
    assert any("give the identity" in p for p in problems), problems


def test_lock_protocol_edited_without_its_hash_fails_on_the_re_hash(rtx, tmp_path):
    _, files = rtx
    name = member(files, "/campaign.lock.json")
    lock = json.loads(files[name])
    lock["versions"][0]["protocol"]["quality"]["tolerance"] = 0.99
    files[name] = json.dumps(lock, indent=1).encode()
    problems = verify(forged(tmp_path, files)).problems
    assert any("its protocol re-hashes to" in p and "the protocol was edited" in p for p in problems), problems


def test_campaign_file_lock_and_version_edited_together_fail_on_the_identity(rtx, tmp_path):
    """The campaign file, the lock's protocol and both protocol_sha256 rewritten together: the
    lock's identity sha256 (and the manifest's copy of it) no longer follow."""
    _, files = rtx
    toml_name = member(files, "/campaign.toml")
    files[toml_name] = files[toml_name].decode().replace('gpu = "rtx-4090"', 'gpu = "b200"').encode()
    raw = tomllib.loads(files[toml_name].decode())
    digest = protocol_digest(raw)
    lock_name, version_name = member(files, "/campaign.lock.json"), member(files, "/protocol_version.json")
    lock, version = json.loads(files[lock_name]), json.loads(files[version_name])
    lock["versions"][0]["protocol"] = raw
    lock["versions"][0]["protocol_sha256"] = version["protocol_sha256"] = digest
    files[lock_name], files[version_name] = json.dumps(lock).encode(), json.dumps(version).encode()
    problems = verify(forged(tmp_path, files)).problems
    assert any("give the identity" in p for p in problems), problems
    assert any(p.startswith("protocol_sha256:") and "report/manifest.json" in p for p in problems), problems


def test_forged_catalog_copy_disagrees_with_the_manifest(rtx, tmp_path):
    _, files = rtx
    name = member(files, "/report/catalog.csv")
    files[name] = (files[name].decode().replace("2026-09-24", "2099-12-31")
                   .replace("2071.00", "1.00")).encode()
    problems = verify(forged(tmp_path, files)).problems
    locked = json.loads(files[member(files, "/report/manifest.json")])["catalog"]["sha256"]
    assert [p for p in problems if p.startswith("catalog sha256:")] == [
        f"catalog sha256: '{locked}' in report/manifest.json, '{hashlib.sha256(files[name]).hexdigest()}' in "
        "report/catalog.csv (its bytes) (the members disagree)"], problems


def test_manifest_campaign_facts_disagreeing_fail(rtx, tmp_path):
    _, files = rtx
    name = member(files, "/report/manifest.json")
    manifest = json.loads(files[name])
    manifest["campaign"]["threads_requested"] = 64
    manifest["corpus"]["sha256"] = "0" * 64
    files[name] = json.dumps(manifest).encode()
    problems = verify(forged(tmp_path, files)).problems
    assert "threads: 64 in report/manifest.json, 1 in campaign.toml (the members disagree)" in problems, problems
    assert any(p.startswith("corpus_sha256:") and "report/manifest.json" in p for p in problems), problems


@pytest.mark.parametrize("edit, fact", [
    (lambda spec: spec.update(threads=8), "[timing] threads: 8 in passes/"),
    (lambda spec: spec["variant"].update(batch_size=64), "[variant] batch_size: 64 in passes/"),
    (lambda spec: spec.update(warmup_items=0), "[timing] warmup_items: 0 in passes/"),
])
def test_pass_spec_disagreeing_with_journal_or_campaign_fails(rtx, tmp_path, edit, fact):
    _, files = rtx
    name = member(files, "/pass.json")
    spec = json.loads(files[name])
    edit(spec)
    files[name] = json.dumps(spec).encode()
    problems = verify(forged(tmp_path, files)).problems
    assert any(p.startswith(fact) for p in problems), problems


def test_journal_plan_disagreeing_with_the_campaign_file_fails(rtx, tmp_path):
    _, files = rtx
    name = member(files, "/campaign.toml")
    files[name] = files[name].decode().replace("repetitions = 1", "repetitions = 3").encode()
    problems = verify(forged(tmp_path, files)).problems
    assert any(p.startswith("planned passes per variant:") and "journal.sqlite" in p for p in problems), problems
    assert any(p.startswith("[timing] repetitions: 3 in campaign.toml, 1 in campaign.lock.json") for p in problems)


# ---- packing verifies before it writes ------------------------------------------------------

def _campaign_copy(archive, tmp_path):
    """A copy of the campaign folder an archive was packed from (the session's folder untouched)."""
    folder = next(p for p in archive.parent.iterdir() if p.is_dir() and p.name.startswith("v1-"))
    copy = tmp_path / "runs" / "rental" / folder.name
    shutil.copytree(folder, copy)
    return copy


def test_archive_refuses_a_folder_whose_pass_predictions_were_rewritten(two_rentals, tmp_path):
    """The local launcher lets user code rewrite an earlier pass's files: packing finds it at once."""
    from lab.service.campaigns import make_archive

    copy = _campaign_copy(two_rentals[0], tmp_path)
    pred = next((copy / "passes").glob("*/predictions.jsonl"))
    lines = pred.read_text().splitlines()
    first = json.loads(lines[0])
    first["pred"] = first["pred"] + "-rewritten"
    pred.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(ArchiveError, match=r"the archive would not verify \(\d+ problem\(s\), first: .*nothing "
                                           "was written"):
        make_archive(copy)
    assert not list(copy.parent.glob("*.tar*"))


def test_archive_refuses_a_folder_whose_campaign_file_was_edited(two_rentals, tmp_path):
    from lab.service.campaigns import make_archive

    copy = _campaign_copy(two_rentals[0], tmp_path)
    f = copy / "campaign.toml"
    f.write_text(f.read_text().replace("tolerance = 0.05", "tolerance = 0.5"))
    with pytest.raises(ArchiveError, match=r"first: \[quality\] tolerance: 0.5 in campaign.toml, 0.05 in "
                                           r"campaign.lock.json"):
        make_archive(copy)
    assert not list(copy.parent.glob("*.tar*"))

