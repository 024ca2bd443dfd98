"""Multi-card passes for every task kind (issue 20): embedding, generation and custom campaigns
whose series varies ``cards`` over 1 and 2 lock, run (torchrun workers on CPU, one thread each),
validate, report, archive and verify; the 2-card pass gives what the 1-card pass gives per id
(embedding: the cosine of each item's vectors; generation: outputs and token counts; custom:
labels), and its self metric is the kind's own over the merged lines; its truncation per
bucket is the 1-card pass's (each card's per-item token counts merged, whatever the kind). An
embedding pass's cards each keep their own vector shard, the merge copies them into one
vectors.npy in corpus order, and verify refuses a shard or a merge edited consistently
(SHA256SUMS re-hashed). Small slices of the demo corpus keep it fast on 2 cores.
"""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
from conftest import REPO, run_reported
from test_archive_evidence import member, read_members, write_members
from test_multicard import _campaign, run_on_two_hosts
from test_task_generation import TASK as GENERATION

EMBEDDING = '\n[task]\nkind = "embedding"\npooling = "mean"\nnormalize = true\n'
CUSTOM = f'\n[task]\nkind = "custom"\nentry = "{REPO / "examples" / "custom_classifier.py"}:DemoClassifier"\n'


def _run(folder, model, name: str, metric: str, task: str, items=(4, 3, 3)):
    """The campaign ``name`` (cards 1 and 2, batch 4, threshold 0) run, reported and archived."""
    from lab.service.campaigns import make_archive

    f = _campaign(folder, model, name, (1, 2), items=items)
    f.write_text(f.read_text().replace('metric = "accuracy"', f'metric = "{metric}"')
                 .replace("threshold = 0.2", "threshold = 0.0") + task)
    orch = run_reported(f)
    by_cards = {a.variant.cards: a for a in orch.journal.attempts()}
    assert set(by_cards) == {1, 2}
    return orch, by_cards, make_archive(orch.dir)


def _lines(orch, attempt) -> list[dict]:
    return [json.loads(x) for x in (orch.dir / "passes" / attempt.pass_id / "predictions.jsonl")
            .read_text().splitlines()]


def _result(orch, attempt) -> dict:
    return json.loads((orch.dir / "passes" / attempt.pass_id / "result.json").read_text())


def _accepted_and_verified(orch, by_cards, archive) -> None:
    from lab.evidence.archive import verify

    for a in by_cards.values():
        v = a.validation
        assert a.status == "ok" and v.ids_match and v.format_ok and v.corpus_accepted, v.reasons
    corpus_ids = [r["id"] for r in map(json.loads, orch.proto.corpus_path.read_text().splitlines())]
    assert [x["id"] for x in _lines(orch, by_cards[2])] == corpus_ids  # merged in corpus order, every id once
    res = _result(orch, by_cards[2])
    assert res["cards_observed"] == 2 and [c["items_total"] for c in res["per_card"]] == [5, 5]
    v = verify(archive)
    assert v.ok, v.problems


def _same_truncation(orch, by_cards, claimed: bool = True) -> dict:
    """The 2-card pass's truncation per bucket is the 1-card pass's on the same items (the
    cards' per-item counts merged, CardRecord tokens_kept/tokens_total), some items cut, and the
    raw table shows both (``claimed`` False, a custom entry's: both cells empty with the reason,
    the entry cuts its texts itself); returns the figures."""
    import csv

    one, two = (_result(orch, by_cards[c])["truncated_by_bucket"] for c in (1, 2))
    assert set(two) == {"short", "medium", "long"} and two == one, (one, two)
    assert all(two[b]["fraction"] is not None for b in two) and two["long"]["fraction"] > 0, two
    cards_dir = orch.dir / "passes" / by_cards[2].pass_id / "cards"
    recs = [json.loads(p.read_text()) for p in sorted(cards_dir.glob("card?.json"))]
    assert sorted(p for r in recs for p in r["positions"]) == list(range(10))
    assert all(len(r["tokens_kept"]) == len(r["tokens_total"]) == len(r["positions"]) for r in recs)
    rows = {r["cards"]: r for r in csv.DictReader((orch.dir / "report" / "raw_table.csv").open(encoding="utf-8"))}
    for b in ("short", "medium", "long"):
        if claimed:
            assert float(rows["2"][f"truncated_{b}"]) == float(rows["1"][f"truncated_{b}"]) == two[b]["fraction"], b
        else:
            assert rows["2"][f"truncated_{b}"] == rows["1"][f"truncated_{b}"] == "", b
    if not claimed:
        from lab.report.raw_table import ENTRY_CUTS_NOTE

        assert all(ENTRY_CUTS_NOTE in rows[c]["notes"] for c in ("1", "2"))
    return two


@pytest.fixture(scope="module")
def embedding_cards(tmp_path_factory, model_dir):
    return _run(tmp_path_factory.mktemp("emb-cards"), model_dir, "embcards", "nn_accuracy", EMBEDDING)


def test_two_card_embedding_merges_the_shards_into_the_one_card_vectors(embedding_cards):
    from lab.passes.tasks.embedding_metrics import cosine_agreement, load_vectors

    orch, by_cards, archive = embedding_cards
    _accepted_and_verified(orch, by_cards, archive)
    vecs, lines = {}, {}
    for cards, a in by_cards.items():
        pdir = orch.dir / "passes" / a.pass_id
        data = (pdir / "vectors.npy").read_bytes()
        res = _result(orch, a)
        assert res["vectors_sha256"] == hashlib.sha256(data).hexdigest() and res["vectors_path"] == "vectors.npy"
        vecs[cards], lines[cards] = load_vectors(data), _lines(orch, a)
        assert [x["row"] for x in lines[cards]] == list(range(10)) and res["vectors_shape"] == [10, 384]
    two = by_cards[2]
    res = _result(orch, two)
    assert res["pooling"] == _result(orch, by_cards[1])["pooling"]
    assert res.get("self_accuracy") is None and _result(orch, by_cards[1]).get("self_accuracy") is None  # as 1 card
    # per id, the merged vectors are the one-card pass's (other batches: padding differs, pooling masks it)
    at_one = {x["id"]: x["row"] for x in lines[1]}
    one = vecs[1][[at_one[x["id"]] for x in lines[2]]]
    cos = cosine_agreement(vecs[2], one)
    assert cos.min() > 0.999, cos
    # each card wrote its own shard; the merged rows are those shards' rows, bit for bit
    cards_dir = orch.dir / "passes" / two.pass_id / "cards"
    merged_at = {x["id"]: k for k, x in enumerate(lines[2])}
    for c in res["per_card"]:
        rec = json.loads((cards_dir / f"card{c['card']}.json").read_text())
        shard_bytes = (cards_dir / f"card{c['card']}.vectors.npy").read_bytes()
        assert rec["vectors_path"] == f"card{c['card']}.vectors.npy"
        assert rec["vectors_sha256"] == hashlib.sha256(shard_bytes).hexdigest()
        shard = load_vectors(shard_bytes)
        card_pred = cards_dir / f"card{c['card']}.predictions.jsonl"
        card_lines = [json.loads(x) for x in card_pred.read_text().splitlines()]
        assert len(card_lines) == len(shard) == 5
        for x in card_lines:
            assert np.array_equal(vecs[2][merged_at[x["id"]]], shard[x["row"]])
    assert two.validation.metric == pytest.approx(by_cards[1].validation.metric, abs=0.11)


def test_two_card_embedding_counts_truncation_per_bucket_as_one_card(embedding_cards):
    orch, by_cards, _ = embedding_cards
    _same_truncation(orch, by_cards)  # max_length 128: the demo's long items are cut


def test_two_hosts_over_loopback_gather_the_vector_shards(embedding_cards, tmp_path):
    """The 2-card embedding pass over two torchrun "hosts" (separate processes and pass folders,
    127.0.0.1): rank 0's host receives the other card's record, lines and vector shard, merges
    them, and its vectors are the one-host pass's per id."""
    from lab.passes.tasks.embedding_metrics import cosine_agreement, load_vectors

    orch, by_cards, _ = embedding_cards
    one_host = orch.dir / "passes" / by_cards[2].pass_id
    spec = json.loads((one_host / "pass.json").read_text())
    dirs = run_on_two_hosts(spec, tmp_path)
    merged = [pd for pd in dirs if (pd / "result.json").is_file()]
    assert len(merged) == 1
    result = json.loads((merged[0] / "result.json").read_text())
    assert result["status"] == "ok" and result["cards_observed"] == 2
    gathered = [json.loads(p.read_text()) for p in (merged[0] / "cards").glob("card*.json")]
    other = [r for r in gathered if r.get("written_by") == "rank 0 (gathered)"]
    assert len(other) == 1  # the other host's card: its record, lines and shard came over
    shard = (merged[0] / "cards" / other[0]["vectors_path"]).read_bytes()
    assert hashlib.sha256(shard).hexdigest() == other[0]["vectors_sha256"]
    two_hosts, ids = load_vectors((merged[0] / "vectors.npy").read_bytes()), _lines_at(merged[0])
    one = load_vectors((one_host / "vectors.npy").read_bytes())
    assert ids == _lines_at(one_host)  # corpus order, every id once
    assert cosine_agreement(two_hosts, one).min() > 0.9999  # 2 threads per worker here, 1 on one host


def _lines_at(pass_dir) -> list[str]:
    return [json.loads(x)["id"] for x in (pass_dir / "predictions.jsonl").read_text().splitlines()]


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def test_verify_refuses_an_edited_vector_shard_or_merge(embedding_cards, tmp_path):
    from lab.evidence.archive import verify
    from lab.passes.tasks.embedding_metrics import load_vectors

    _, by_cards, archive = embedding_cards
    pid = by_cards[2].pass_id
    files = read_members(archive)
    shard_name = member(files, f"/passes/{pid}/cards/card1.vectors.npy")
    rec_name = member(files, f"/passes/{pid}/cards/card1.json")
    shard = load_vectors(files[shard_name]).copy()
    shard[0] = -shard[0]

    files[shard_name] = _npy(shard)  # the shard alone edited: its record's sha256 no longer holds
    bad = verify(write_members(tmp_path / "shard.tar.gz", files))
    assert any(f"pass {pid}: card 1's vectors sha256 differs" in p for p in bad.problems), bad.problems

    rec = json.loads(files[rec_name])  # and its record re-hashed: the merge is no longer the shards'
    files[rec_name] = json.dumps({**rec, "vectors_sha256": hashlib.sha256(files[shard_name]).hexdigest()}).encode()
    bad = verify(write_members(tmp_path / "shard-rehashed.tar.gz", files))
    assert any(f"pass {pid}: its vectors.npy is not the merge of its cards' vector shards" in p
               and "1 row(s) differ" in p for p in bad.problems), bad.problems

    files = read_members(archive)  # the merged vectors edited, result.json re-hashed: refused from the shards
    vec_name = member(files, f"/passes/{pid}/vectors.npy")
    res_name = member(files, f"/passes/{pid}/result.json")
    merged = load_vectors(files[vec_name]).copy()
    merged[[0, 1]] = merged[[1, 0]]
    files[vec_name] = _npy(merged)
    res = json.loads(files[res_name])
    files[res_name] = json.dumps({**res, "vectors_sha256": hashlib.sha256(files[vec_name]).hexdigest()}).encode()
    bad = verify(write_members(tmp_path / "merge.tar.gz", files))
    assert any(f"pass {pid}: its vectors.npy is not the merge of its cards' vector shards" in p
               and "2 row(s) differ" in p for p in bad.problems), bad.problems


def test_two_card_generation_writes_the_one_card_outputs_and_tokens(tmp_path, gen_model_dir):
    orch, by_cards, archive = _run(tmp_path, gen_model_dir, "gencards", "exact_match", GENERATION)
    _accepted_and_verified(orch, by_cards, archive)
    one, two = (_lines(orch, by_cards[c]) for c in (1, 2))
    assert two == one  # output, input and output tokens, stopped_by: per id, in corpus order
    r1, r2 = _result(orch, by_cards[1]), _result(orch, by_cards[2])
    assert r2["output_tokens"] == r1["output_tokens"] == sum(x["output_tokens"] for x in two) > 0
    assert r2["input_tokens"] == r1["input_tokens"] and r2["generation"] == r1["generation"]
    assert r2["self_accuracy"] == r1["self_accuracy"] is not None  # exact match, the kind's own rule
    assert by_cards[2].validation.metric == by_cards[1].validation.metric
    # truncation is the prompt's text cut at max_text_tokens (64): the lines carry no token counts
    assert not any("tokens_kept" in x for x in two)
    _same_truncation(orch, by_cards)


def test_two_card_custom_entry_gives_the_one_card_labels(tmp_path, model_dir):
    orch, by_cards, archive = _run(tmp_path, model_dir, "customcards", "accuracy", CUSTOM)
    _accepted_and_verified(orch, by_cards, archive)
    one, two = ({x["id"]: x["pred"] for x in _lines(orch, by_cards[c])} for c in (1, 2))
    assert two == one
    r1, r2 = _result(orch, by_cards[1]), _result(orch, by_cards[2])
    assert r2["entry"] == r1["entry"] and r2["entry_settings"]["model_path"] == r1["entry_settings"]["model_path"]
    # a custom entry's pass reads the corpus without its labels (issue 34: the entry never has them
    # within reach), so neither pass scores itself; the orchestrator's validation does
    assert r2.get("self_accuracy") is None and r1.get("self_accuracy") is None
    _same_truncation(orch, by_cards, claimed=False)  # the lab's tokenizer at max_length 128: recorded, not claimed
    # dynamo's counters read in each card's process, summed; the example entry compiles nothing
    assert r2["compile_phase"] == r1["compile_phase"] and r2["recompiles_measured"] == r1["recompiles_measured"] == 0
    assert r2["compile_frames"] == r1["compile_frames"] == 0
