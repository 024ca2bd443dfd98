"""Guards a user meets: one orchestrator per campaign, corpus changed after lock, a GPU
variant with no GPU, unreadable archives, bad corpus sizes."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import tarfile

import pytest
from conftest import cut_corpus, write_campaign

from lab.evidence.archive import ArchiveError, verify
from lab.inputs.corpus import BuildSpec, CorpusError, build_corpus
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import CampaignBusy, Orchestrator
from lab.orchestration.protocol import ProtocolError, load_protocol, lock, locked_version


def test_second_orchestrator_is_refused(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    with open(orch.dir / "orchestrator.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running orchestrator holds it
        with pytest.raises(CampaignBusy, match="another orchestrator"):
            Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher()).run()
    assert orch.journal.attempts() == []  # nothing ran twice


def test_corpus_changed_after_lock_is_refused(tmp_path, model_dir):
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus)
    v1 = lock(load_protocol(f))
    corpus.write_text(corpus.read_text().replace('"text": "', '"text": "edited ', 1))
    with pytest.raises(ProtocolError, match="changed since lock"):
        locked_version(load_protocol(f))
    v2 = lock(load_protocol(f))
    assert v2["version"] == 2 and v2["protocol_sha256"] == v1["protocol_sha256"] and v2["sha256"] != v1["sha256"]
    assert v2["corpus_sha256"] != v1["corpus_sha256"]  # same text, other corpus: another identity


def test_gpu_variant_without_gpu_blocks_after_one_pass(tmp_path, model_dir):
    """Lock refuses it on this host (tests/integration/test_lock_checks.py); a file locked on a GPU host
    and run here still blocks after one pass (check=False stands for that other host)."""
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), repetitions=2)
    f.write_text(f.read_text().replace('padding = "longest"', 'padding = "longest"\ndevice = "cuda"'))
    with pytest.raises(ProtocolError, match="needs GPU index 0 but this host has 0 GPUs"):
        lock(load_protocol(f))
    lock(load_protocol(f), check=False)
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert orch.run() == "blocked"
    [a] = orch.journal.attempts()
    assert a.status == "error" and "DeviceUnavailable" in a.notes and "torch sees no GPU" in a.notes


def test_unreadable_archives_are_one_line_errors(tmp_path):
    with pytest.raises(ArchiveError, match="no such file"):
        verify(tmp_path / "missing.tar.gz")
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"garbage")
    with pytest.raises(ArchiveError, match=r"not a readable tar\.gz"):
        verify(garbage)


def test_pass_folder_without_row_fails_verification(small_campaign, tmp_path):
    from lab.service.campaigns import make_archive

    good = make_archive(small_campaign.dir)
    bad = tmp_path / "bad.tar.gz"
    with tarfile.open(good) as src, tarfile.open(bad, "w:gz") as dst:
        members = src.getmembers()
        files = {m.name: src.extractfile(m).read() for m in members if m.isfile()}
        table = next(n for n in files if n.endswith("report/raw_table.csv"))
        rows = list(csv.reader(io.StringIO(files[table].decode())))
        files[table] = "".join(",".join(r) + "\n" for r in rows[:-1]).encode()  # drop the last row
        sums = next(n for n in files if n.endswith("SHA256SUMS"))
        import hashlib
        top = sums.split("/")[0]
        files[sums] = "".join(f"{hashlib.sha256(d).hexdigest()}  {n[len(top) + 1:]}\n"
                              for n, d in files.items() if n != sums).encode()
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            dst.addfile(info, io.BytesIO(data))
    v = verify(bad)
    assert not v.ok and any("raw table has no row" in p for p in v.problems)


def test_bad_corpus_sizes_are_refused(tmp_path):
    src = tmp_path / "s.jsonl"
    src.write_text(json.dumps({"id": "a", "text": "x", "label": "l"}) + "\n")
    with pytest.raises(CorpusError, match="--short -3"):
        build_corpus(src, tmp_path / "o", None, {}, BuildSpec(sizes={"short": -3, "medium": 1, "long": 1}))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CorpusError, match="not a folder"):
        build_corpus(src, tmp_path / "afile", None, {}, BuildSpec())
