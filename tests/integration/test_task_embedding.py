"""Embedding task on the real product: a campaign locks, runs batch 1 and batch 8 (the lab's own
batches over the real MiniLM encoder), validates from the vectors, reports, archives and
verifies; a consistent forgery of a metric in the archive is refused by verify; a pass that runs
out of host memory is a failure row that keeps the vectors of the items it completed."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import numpy as np
import pytest
from conftest import as_limit_above, cut_corpus, run_reported, write_campaign
from test_archive_evidence import edit_raw_table, member, read_members, write_members

TASK = '\n[task]\nkind = "embedding"\npooling = "mean"\nnormalize = true\n'


def embedding_campaign(folder, model_dir):
    corpus = cut_corpus(folder / "corpus.jsonl", 5, 3, 2)
    f = write_campaign(folder, model_dir, corpus, name="emb", repetitions=1, values=(1, 8), threshold=0.0)
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "nn_accuracy"') + TASK)
    return f


@pytest.fixture(scope="module")
def embedding_run(tmp_path_factory, model_dir):
    from lab.service.campaigns import make_archive

    d = tmp_path_factory.mktemp("emb")
    f = embedding_campaign(d, model_dir)
    orch = run_reported(f)
    return orch, make_archive(orch.dir)


def test_embedding_passes_store_vectors_and_validate_from_them(embedding_run):
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.embedding_metrics import load_vectors, nn_accuracy

    orch, _ = embedding_run
    attempts = orch.journal.attempts()
    assert [a.status for a in attempts] == ["ok", "ok"]
    corpus = read_corpus(orch.proto.corpus_path)
    for a in attempts:
        pdir = orch.dir / "passes" / a.pass_id
        res = json.loads((pdir / "result.json").read_text())
        data = (pdir / "vectors.npy").read_bytes()
        assert res["vectors_sha256"] == hashlib.sha256(data).hexdigest()
        vec = load_vectors(data)
        assert vec.shape == (len(corpus), 384) and res["vectors_shape"] == [len(corpus), 384]
        assert np.allclose(np.linalg.norm(vec.astype(np.float32), axis=1), 1.0, atol=2e-3)  # normalised
        assert res["pooling"]["rule"] == "mean" and res["pooling"]["normalize"] is True
        lines = [json.loads(x) for x in (pdir / "predictions.jsonl").read_text().splitlines()]
        assert [x["id"] for x in lines] == [r["id"] for r in corpus] and [x["row"] for x in lines] == list(range(10))
        v = a.validation
        assert v.ids_match and v.format_ok and v.coverage_ok and v.corpus_accepted, v.reasons
        assert v.metric_name == "nn_accuracy"
        assert v.metric == round(nn_accuracy(vec, [r["label"] for r in corpus]), 6)
        assert set(v.metric_by_bucket) == {"short", "medium", "long"}
        # batch 8 pads where batch 1 does not; mean pooling over the mask keeps the vectors
        assert v.agreement_with_reference > 0.9999 and v.agreement_worst > 0.999, v
        assert v.agreement_worst_id in {r["id"] for r in corpus}
        assert res["observed"]["batch_size"] == min(res["variant"]["batch_size"], 10)


def test_embedding_archive_verifies_and_a_forged_metric_is_refused(embedding_run, tmp_path):
    from lab.evidence.archive import verify

    _, archive = embedding_run
    v = verify(archive)
    assert v.ok, v.problems
    files = read_members(archive)
    vec_name = member(files, "/vectors.npy")
    pid = vec_name.split("/")[-2]
    raw = files[member(files, "/report/raw_table.csv")].decode()
    row = next(r for r in csv.DictReader(io.StringIO(raw)) if r["pass_id"] == pid)
    assert row["metric_name"] == "nn_accuracy" and row["metric"]
    worst = [r for r in csv.DictReader(io.StringIO(raw)) if "worst id" in r["notes"]]
    assert len(worst) == 2 and all("median per-id cosine" in r["notes"] for r in worst)  # reported per pass

    # vectors that put every item next to one of its own label (a perfect score), hashed anew
    gold = [json.loads(x) for x in files[member(files, "/report/gold_labels.jsonl")].decode().splitlines()]
    names = sorted({g["label"] for g in gold})
    forged = np.zeros((len(gold), 384), np.float16)
    for k, g in enumerate(gold):
        forged[k, names.index(g["label"])] = 1.0
    buf = io.BytesIO()
    np.save(buf, forged, allow_pickle=False)
    files[vec_name] = buf.getvalue()
    digest = hashlib.sha256(files[vec_name]).hexdigest()
    res = member(files, f"/passes/{pid}/result.json")
    files[res] = json.dumps({**json.loads(files[res]), "vectors_sha256": digest}).encode()
    edit_raw_table(files, lambda rows: [r.update(metric="1.0") for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged.tar.gz", files))
    assert not bad.ok
    assert any(p.startswith(f"pass {pid}: metric 1.0 in the raw table") and "in the journal" in p
               for p in bad.problems), bad.problems

    # the raw table's metric alone changed (the vectors untouched): recomputed from the vectors
    files = read_members(archive)
    edit_raw_table(files, lambda rows: [r.update(metric="0.99") for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged2.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: metric 0.99 in the raw table") and "recomputed from its vectors" in p
               for p in bad.problems), bad.problems


def test_compare_refuses_an_embedding_and_a_classification_archive_in_one_line(embedding_run, small_campaign):
    from lab.compare.comparability import check_comparable
    from lab.compare.evidence import CompareError, load_evidence
    from lab.service.campaigns import make_archive

    _, emb = embedding_run
    cls = make_archive(small_campaign.dir)
    with pytest.raises(CompareError) as exc:
        check_comparable([load_evidence(cls), load_evidence(emb)])
    msg = str(exc.value)
    assert msg.startswith(f"not comparable: different task kinds: {load_evidence(cls).name} is classification, "
                          f"{load_evidence(emb).name} is embedding"), msg
    assert "[quality] metric: " in msg and "differs too" not in msg and "\n" not in msg, msg


def test_a_vector_turned_around_is_found_by_the_reported_agreement_too(embedding_run, tmp_path):
    """A label-metric campaign reports its per-id cosine with the reference (not judged by it):
    verify recomputes that figure and the journal's worst id from both passes' vectors."""
    from lab.evidence.archive import verify

    orch, archive = embedding_run
    ref = next(a for a in orch.journal.attempts() if a.variant.batch_size == 1).pass_id
    pid = next(a for a in orch.journal.attempts() if a.pass_id != ref).pass_id
    files = read_members(archive)
    vec = member(files, f"/passes/{pid}/vectors.npy")
    arr = np.load(io.BytesIO(files[vec]))
    arr[3] = -arr[3]
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    files[vec] = buf.getvalue()
    res = member(files, f"/passes/{pid}/result.json")
    files[res] = json.dumps({**json.loads(files[res]), "vectors_sha256": hashlib.sha256(files[vec]).hexdigest()}
                            ).encode()
    bad = verify(write_members(tmp_path / "turned.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: worst id ") and f"recomputed from its vectors and reference pass {ref}'s"
               in p for p in bad.problems), bad.problems


@pytest.mark.slow
def test_an_embedding_pass_out_of_memory_keeps_the_vectors_it_completed(tmp_path, model_dir, one_malloc_arena):
    """Batch 8 on long items at max_length 512 exceeds an address-space limit that batch 1 fits
    in (calibrated from batch 1's own VmPeak, as for the classifier in test_engine_failures): the
    row is an OOM with the items completed, and their lines and vectors are on disk, hashed."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.passes.tasks.embedding_metrics import load_vectors
    from lab.report.raw_table import raw_rows

    corpus = cut_corpus(tmp_path / "c.jsonl", 8, 0, 16)  # 8 short first, then 16 long
    f = write_campaign(tmp_path, model_dir, corpus, name="embfail", values=(1, 8), threshold=0.0, max_length=512)
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "nn_accuracy"') + TASK)
    lock(load_protocol(f))
    free = Orchestrator.prepare(f, tmp_path / "free", LocalLauncher())
    assert free.run() == "finished"
    peaks = {a.variant.batch_size: a.result.process_peak_vm_bytes for a in free.journal.attempts()}
    assert peaks[8] > peaks[1], peaks
    orch = Orchestrator.prepare(f, tmp_path / "limited",
                                LocalLauncher(address_space_limit_bytes=as_limit_above(peaks[1]), timeout_s=300))
    orch.run()
    rows = {r["batch_size"]: r for r in raw_rows(orch.journal.attempts(), "t", 1, orch.dir)}
    assert rows[1]["status"] == "ok" and rows[1]["items_completed"] == 24
    b8 = rows[8]
    assert b8["status"] == "oom" and b8["exit_code"] == 3, (b8["status"], b8["notes"])
    assert b8["corpus_accepted"] is False, b8
    assert b8["items_completed"] in (8, 16) and b8["measured_s"] is None, b8
    pdir = orch.dir / b8["predictions_path"].rsplit("/", 1)[0]
    res = json.loads((pdir / "result.json").read_text())
    lines = [json.loads(x) for x in (pdir / "predictions.jsonl").read_text().splitlines()]
    data = (pdir / "vectors.npy").read_bytes()
    assert len(lines) == b8["items_completed"] and [x["row"] for x in lines] == list(range(len(lines)))
    assert res["vectors_sha256"] == hashlib.sha256(data).hexdigest()
    vec = load_vectors(data)
    assert vec.shape == (len(lines), 384)
    # the vectors kept are the ones batch 1 computed for the same items (padding is masked out)
    ok_dir = orch.dir / rows[1]["predictions_path"].rsplit("/", 1)[0]
    ok_vec = load_vectors((ok_dir / "vectors.npy").read_bytes())
    cos = (vec.astype(np.float64) * ok_vec[: len(lines)].astype(np.float64)).sum(axis=1)
    assert cos.min() > 0.999, cos
    assert len(orch.journal.attempts()) == 2  # never retried with a smaller batch
