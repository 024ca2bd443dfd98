"""Compare of two embedding archives (two real campaigns, "hosts" with 1 and 2 threads, the real
MiniLM encoder over a small slice of the corpus): the cross-host agreement is the per-id cosine
of the two hosts' vectors of the same variant (median, worst id), judged against the declared
[quality] tolerance and shown where classification's prediction agreement is; a vector moved on
one host is named beyond the tolerance; an embedding archive against a classification archive is
refused in one line."""

from __future__ import annotations

import csv
import dataclasses
import json

import numpy as np
import pytest
from conftest import cut_corpus, write_campaign

WINDOW = dict(window_start="2026-12-01T09:00+01:00", deadline="2026-12-05T09:00+01:00")
TASK = '\n[task]\nkind = "embedding"\npooling = "mean"\nnormalize = true\n'


def rental(folder, model_dir, corpus, threads: int, gpu: str, embedding: bool = True):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.service.campaigns import make_archive

    folder.mkdir()
    (folder / corpus.name).write_bytes(corpus.read_bytes())
    f = write_campaign(folder, model_dir, folder / corpus.name, name="emb", values=(1, 4), threshold=0.0)
    text = f.read_text().replace("threads = 1", f"threads = {threads}")
    if embedding:
        text = text.replace('metric = "accuracy"', 'metric = "nn_accuracy"') + TASK
    f.write_text(text + f'\n[cost]\ngpu = "{gpu}"\ndays = 7\nlots = 1\n')
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, folder / "runs", LocalLauncher())
    assert orch.run() == "finished"
    return make_archive(orch.dir)


@pytest.fixture(scope="module")
def archives(tmp_path_factory, model_dir) -> dict:
    d = tmp_path_factory.mktemp("cmp-emb")
    corpus = cut_corpus(d / "corpus.jsonl", 3, 2, 1)
    ids = [json.loads(line)["id"] for line in corpus.read_text().splitlines()]
    return {"ids": ids, "a": rental(d / "a", model_dir, corpus, 1, "rtx-4090"),
            "b": rental(d / "b", model_dir, corpus, 2, "b200"),
            "cls": rental(d / "cls", model_dir, corpus, 1, "rtx-4090", embedding=False)}


def test_two_embedding_hosts_agree_per_id_by_cosine_within_the_tolerance(archives, tmp_path):
    from lab.compare import compare_archives, compare_to_folder

    c = compare_archives([archives["a"], archives["b"]], 50000, allow_short=True, **WINDOW)
    assert len(c.agreements) == 2  # batch 1 and batch 4, one host pair
    for x in c.agreements:
        # the same encoder on the same CPU build: the same vectors, up to float16 storage
        assert x.ids == 6 and x.only_a == 0 and x.only_b == 0
        assert x.cosine_worst > 0.999 and x.cosine_median >= x.cosine_worst, x
        assert x.flips == 0 and x.within_tolerance and x.tolerance == 0.05
        assert x.worst_id in archives["ids"]
    same = next(line for line in c.path if line.startswith("same ML result"))
    assert same.startswith("same ML result: 2 of 2 host pair(s)")
    assert "the same ML result on B b200 (6 of 6 ids agree (per-id cosine median" in c.stands_on
    compare_to_folder([archives["a"], archives["b"]], 50000, tmp_path / "out", allow_short=True,
                                 **WINDOW)
    md = (tmp_path / "out" / "decision.md").read_text()
    assert "A rtx-4090 vs B b200: 6 of 6 ids agree (100.0 %) (per-id cosine median" in md
    rows = list(csv.DictReader(open(tmp_path / "out" / "compare.csv")))
    assert all("6 of 6 ids agree (per-id cosine median" in r["same_result"] and "within the agreement rule "
               "(every id at cosine >= 0.999) and the tolerance 0.05" in r["same_result"] for r in rows)


def test_a_vector_moved_on_one_host_is_named_beyond_the_tolerance(archives):
    from lab.compare.decision import compare_evidence
    from lab.compare.evidence import load_evidence

    a, b = load_evidence(archives["a"]), load_evidence(archives["b"])
    moved = {}
    for vid, (ids, vectors) in b.vectors.items():
        vec = vectors.copy()
        vec[2] = -vec[2]  # item 2 points the other way: cosine -1
        moved[vid] = (ids, vec)
        target = ids[2]
    c = compare_evidence([a, dataclasses.replace(b, vectors=moved)], 50000, allow_short=True, **WINDOW)
    for x in c.agreements:
        assert x.flips == 1 and x.worst_id == target and x.cosine_worst == pytest.approx(-1, abs=1e-3)
        assert not x.within_tolerance  # 1 of 6 ids flipped: 0.17 > 0.05
    assert "NOT the same ML result on B b200 (1 flip(s) of 6 ids (per-id cosine median" in c.stands_on
    same = next(line for line in c.path if line.startswith("same ML result"))
    assert same.startswith("same ML result: 0 of 2") and f"worst -1.000000 at id {target}" in same
    assert np.isfinite([x.cosine_median for x in c.agreements]).all()


def test_an_embedding_archive_and_a_classification_archive_are_refused_in_one_line(archives):
    from lab.compare import CompareError, compare_archives

    with pytest.raises(CompareError) as e:
        compare_archives([archives["a"], archives["cls"]], 50000, allow_short=True, **WINDOW)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("not comparable: different task kinds: "), msg
    assert " is embedding, " in msg and " is classification; " in msg, msg


def test_different_task_kinds_are_said_first_with_or_without_the_metric_file(archives, metric_rentals, tmp_path):
    """A new user's case (issue 20's story): an embedding archive (built-in nn_accuracy) and one judged
    by the user's own metric file. Without --metric-file compare asked for it; given it, the embedding
    archive refused it ("leave --metric-file out"): a circle. The whole set is refused first, in the
    one 'different task kinds' line, whatever the option; nothing is written."""
    import os
    import subprocess
    import sys

    from conftest import REPO

    from lab.compare import CompareError, compare_archives

    pair = [archives["a"], metric_rentals["rtx"]]
    lines = []
    for option in ({}, {"metric_file": metric_rentals["file"]}):
        with pytest.raises(CompareError) as e:
            compare_archives(pair, 1000, **option)
        lines.append(str(e.value))
    for msg in lines:
        assert "\n" not in msg and msg.startswith("not comparable: different task kinds: "), msg
        # the kinds in host order (when each archive was made), whichever fixture ran first
        assert " is embedding" in msg and " is classification" in msg and "--metric-file" not in msg, msg
    assert lines[0] == lines[1]
    r = subprocess.run([sys.executable, "-m", "lab.cli", "compare", *map(str, pair), "--load", "1000",
                        "--metric-file", str(metric_rentals["file"]), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, cwd=REPO, check=False, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 2 and r.stdout == "", r.stdout + r.stderr
    assert r.stderr.strip().splitlines() == [f"iteralab: error: {lines[1]}"], r.stderr
    assert not (tmp_path / "o").exists()
