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


def test_a_manifest_without_its_catalog_record_is_named(rtx, tmp_path):
    """This format's manifest records the catalog it priced with (its copy, or why it was missing):
    one without the record, its copy dropped too, cannot trace its prices and is named."""
    _, files = rtx
    name = member(files, "/report/manifest.json")
    manifest = json.loads(files[name])
    del manifest["catalog"]
    files[name] = json.dumps(manifest).encode()
    del files[member(files, "/report/catalog.csv")]
    problems = verify(forged(tmp_path, files)).problems
    assert problems == ["report/manifest.json: no catalog record (its copy report/catalog.csv, or why the catalog "
                        "was missing when the report was built); the prices the archive states cannot be traced"], \
        problems


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


# ---- compare: the user's catalog prices; one campaign run is one rental ---------------------

def test_compare_prices_with_the_users_catalog_never_an_archives_forged_one(two_rentals, tmp_path):
    """One archive's report/catalog.csv forged (version 2099-12-31, b200 at 1.00) together with
    the manifest's sha256 of it, so the archive still verifies: the bundle's catalog prices every
    host, and the forged one is shown as that archive's own price only."""
    from conftest import WINDOW

    from lab.compare.decision import compare_archives

    files = read_members(two_rentals[1])
    name = member(files, "/report/catalog.csv")
    files[name] = files[name].decode().replace("2026-09-24", "2099-12-31").replace("2071.00", "1.00").encode()
    manifest_name = member(files, "/report/manifest.json")
    manifest = json.loads(files[manifest_name])
    manifest["catalog"]["sha256"] = hashlib.sha256(files[name]).hexdigest()
    files[manifest_name] = json.dumps(manifest, indent=1).encode()
    b200 = write_members(tmp_path / "B-newver.tar.gz", files)
    assert verify(b200).ok, verify(b200).problems
    c = compare_archives([two_rentals[0], b200], 1000, **WINDOW)
    assert c.catalog is not None
    assert c.catalog.version == "2026-09-24" and c.catalog.source == "the bundle's catalog", c.catalog
    line = next(x for x in c.path if x.startswith("priced with catalog version"))
    assert "the default; an archive's own catalog prices only that archive's budget" in line
    assert "B-newver's own catalog: 2099-12-31" in line  # found, shown, not chosen
    forged = [p for p in c.projections if p.gpu == "b200"]
    assert forged and all(p.decision_quote.committed_budget == 2071 for p in forged)
    assert all("price differs" in p.price_note and "2099-12-31" in p.price_note for p in forged)
    assert c.chosen is not None and c.chosen.gpu == "rtx-4090"


@pytest.fixture(scope="module")
def partial_and_final(tmp_path_factory, model_dir):
    """One campaign run (2 passes) archived labelled partial after its first pass, then again once
    finished: (partial archive, final archive)."""
    from conftest import cut_corpus, write_campaign

    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.service.campaigns import make_archive

    d = tmp_path_factory.mktemp("one-run")
    corpus = cut_corpus(d / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(d, model_dir, corpus, name="rental", repetitions=1, values=(1, 4))
    f.write_text(f.read_text() + '\n[cost]\ngpu = "rtx-4090"\ndays = 7\nlots = 1\n')
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, d / "runs", LocalLauncher())
    assert orch.run_slot(orch.pending()[0])["status"] == "ok"
    partial = make_archive(orch.dir, partial=True)
    assert orch.run() == "finished"
    return partial, make_archive(orch.dir)


def test_verify_says_an_archive_is_labelled_partial(partial_and_final, capsys):
    """verify's last line of a partial archive says so (a new user's trial: it printed only 'OK: 18
    files, 1 rows checked'); a final archive's line does not."""
    from lab.cli import main

    partial, final = partial_and_final
    assert main(["archive", "verify", str(partial)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("OK: ") and "; labelled partial (campaign not finished" in last, last
    assert main(["archive", "verify", str(final)]) == 0
    assert "partial" not in capsys.readouterr().out.strip().splitlines()[-1]


def test_a_partial_and_a_final_archive_of_one_run_are_one_rental(partial_and_final):
    from conftest import WINDOW

    from lab.compare.decision import CompareError, compare_archives

    partial, final = partial_and_final
    assert verify(partial).problems == [] and verify(final).ok
    with pytest.raises(CompareError) as err:
        compare_archives([final, partial], 1000, allow_partial=True, **WINDOW)
    msg = str(err.value)
    assert "\n" not in msg and "hold the same campaign's passes (1 pass(es) in both, first p001" in msg, msg
    assert final.name.removesuffix(".tar.gz") in msg and partial.name.removesuffix(".tar.gz") in msg
