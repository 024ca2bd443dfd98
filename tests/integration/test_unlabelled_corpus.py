"""A corpus without labels on the real product, for each task kind (the user's own entry too):
`corpus build --no-labels` draws it by bucket only; a campaign judged by [quality] metric =
"agreement" locks, runs batch 1 (the reference variant) and batch 8, judges each pass against
the reference variant's first valid pass, reports (the decision note says the reference's own
figure holds by definition), archives and verifies; a forged agreement is refused by verify,
recomputed from the passes' files. Small slices of the demo corpus keep it fast on 2 cores."""

from __future__ import annotations

import csv
import hashlib
import io
import json

import numpy as np
import pytest
from conftest import REPO, demo_rows, run_reported, write_campaign
from test_archive_evidence import edit_raw_table, member, read_members, write_members
from test_task_generation import TASK as GENERATION_TASK

TASKS = {"classification": "", "embedding": '\n[task]\nkind = "embedding"\npooling = "mean"\nnormalize = true\n',
         "generation": GENERATION_TASK,
         "custom": f'\n[task]\nkind = "custom"\nentry = "{REPO}/examples/custom_classifier.py:DemoClassifier"\n'}


def unlabelled_corpus(folder, tokenizer=None):
    """`corpus build --no-labels` over the demo texts without their labels: 5 short, 3 medium, 2 long
    (tokens counted by ``tokenizer``'s model folder, default the demo encoder's)."""
    from lab.cli import main

    rows = demo_rows()
    src = folder / "source.jsonl"
    src.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in rows[:400]))
    assert main(["corpus", "build", "--source", str(src), "--out", str(folder / "corpus"), "--no-labels",
                 "--short", "5", "--medium", "3", "--long", "2",
                 *(["--tokenizer", str(tokenizer)] if tokenizer else [])]) == 0
    return folder / "corpus" / "comparison.jsonl"


@pytest.fixture(scope="module", params=sorted(TASKS))
def unlabelled_run(request, tmp_path_factory, model_dir, gen_model_dir):
    from lab.service.campaigns import make_archive

    kind = request.param
    d = tmp_path_factory.mktemp(f"unlabelled-{kind}")
    corpus = unlabelled_corpus(d, gen_model_dir if kind == "generation" else None)
    f = write_campaign(d, gen_model_dir if kind == "generation" else model_dir, corpus, name=f"nolab-{kind}",
                       threshold=0.9)
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "agreement"')
                 .replace("[corpus]\n", f'[corpus]\ncard = "{corpus.parent / "corpus_card.json"}"\n') + TASKS[kind])
    orch = run_reported(f)
    return kind, orch, make_archive(orch.dir)


def test_the_corpus_is_built_without_labels_and_by_bucket(tmp_path):
    path = unlabelled_corpus(tmp_path)
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(rows) == 10 and all(r["label"] is None for r in rows)
    assert [sum(r["bucket"] == b for r in rows) for b in ("short", "medium", "long")] == [5, 3, 2]
    card = json.loads((path.parent / "corpus_card.json").read_text())
    assert card["comparison"]["labels"] is False and card["comparison"]["counts"]["long"] == {"(no label)": 2}


@pytest.mark.parametrize("counts", [["--items", "48"], ["--short", "6", "--medium", "4", "--long", "2"]])
def test_without_labels_the_same_source_seed_and_counts_draw_the_labelled_draws_items(tmp_path, counts):
    """Issue 35: `--no-labels --items 48` drew other texts than the labelled draw of the same source
    (stratified by bucket alone); the labels the source carries stratify both draws, then are dropped."""
    from lab.cli import main

    src = tmp_path / "source.jsonl"
    src.write_text("".join(json.dumps({"id": r["id"], "text": r["text"], "label": r["label"]}) + "\n"
                           for r in demo_rows()[:400]))
    drawn = {}
    for name, flags in (("labelled", []), ("unlabelled", ["--no-labels"])):
        assert main(["corpus", "build", "--source", str(src), "--out", str(tmp_path / name), "--tuning", "8",
                     *counts, *flags]) == 0
        drawn[name] = {f: [json.loads(x) for x in (tmp_path / name / f).read_text().splitlines()]
                       for f in ("comparison.jsonl", "tuning.jsonl")}
    for f in ("comparison.jsonl", "tuning.jsonl"):
        with_labels, without = drawn["labelled"][f], drawn["unlabelled"][f]
        assert [(r["id"], r["text"], r["bucket"]) for r in without] == \
            [(r["id"], r["text"], r["bucket"]) for r in with_labels]
        assert all(r["label"] is None for r in without) and all(r["label"] for r in with_labels)


def test_each_pass_is_judged_by_its_agreement_with_the_reference_variants_first_pass(unlabelled_run):
    kind, orch, _ = unlabelled_run
    attempts = orch.journal.attempts()
    assert [a.status for a in attempts] == ["ok", "ok"]
    ref = next(a for a in attempts if a.variant.batch_size == 1)
    other = next(a for a in attempts if a.variant.batch_size == 8)
    assert ref.validation.reference_pass == other.validation.reference_pass == ref.pass_id
    assert ref.validation.metric == 1.0 and ref.validation.corpus_accepted  # itself, by definition
    v = other.validation
    assert v.metric_name == "agreement", v
    if kind == "embedding":  # the lowest id's cosine is judged, the median reported beside it
        assert v.metric == v.agreement_worst <= v.agreement_with_reference, v
    else:
        assert v.metric == v.agreement_with_reference, v
    assert v.metric >= 0.9 and v.corpus_accepted, v.reasons  # batch 8 gives batch 1's predictions
    assert set(v.metric_by_bucket) == {"short", "medium", "long"} and v.gap_to_reference is None
    if kind == "embedding":
        assert v.agreement_worst > 0.999 and v.agreement_worst_id is not None
    raw = list(csv.DictReader((orch.dir / "report" / "raw_table.csv").open()))
    notes = {r["pass_id"]: r["notes"] for r in raw}
    assert "the reference pass:" in notes[ref.pass_id] and "with itself is 1 by definition" in notes[ref.pass_id]
    assert f"against reference pass {ref.pass_id}" in notes[other.pass_id]
    note = (orch.dir / "report" / "decision_note.md").read_text()
    assert "**Quality rule.** Agreement with the reference variant" in note
    assert "agrees with itself by definition" in note and "no reference answers were compared" in note


def test_the_archive_verifies_and_a_forged_agreement_is_refused(unlabelled_run, tmp_path):
    from lab.evidence.archive import verify

    kind, orch, archive = unlabelled_run
    assert verify(archive).ok, verify(archive).problems
    other = next(a for a in orch.journal.attempts() if a.variant.batch_size == 8)
    ref = other.validation.reference_pass
    pid = other.pass_id

    # labels written into the archived gold labels of a corpus locked without any: the card says otherwise
    files = read_members(archive)
    gold = member(files, "/report/gold_labels.jsonl")
    files[gold] = "".join(json.dumps({**json.loads(x), "label": "alt.atheism"}) + "\n"
                          for x in files[gold].decode().splitlines()).encode()
    bad = verify(write_members(tmp_path / "labels.tar.gz", files))
    assert "report/gold_labels.jsonl: has labels, while corpus_card.json says the corpus has none" in bad.problems
    assert any("differ from corpus_card.json's counts" in p for p in bad.problems), bad.problems

    # the raw table alone claims a better agreement: recomputed from the two passes' files
    files = read_members(archive)
    edit_raw_table(files, lambda rows: [r.update(metric_short="0.5") for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: metric_short 0.5 in the raw table")
               and f"recomputed from its predictions and reference pass {ref}'s" in p for p in bad.problems), \
        bad.problems

    # the pass's predictions replaced (hashes made consistent): its agreement drops, the claim stays
    files = read_members(archive)
    pred = member(files, f"/passes/{pid}/predictions.jsonl")
    if kind == "embedding":
        vec = member(files, f"/passes/{pid}/vectors.npy")
        arr = np.load(io.BytesIO(files[vec]))
        buf = io.BytesIO()
        np.save(buf, -arr, allow_pickle=False)  # every vector the other way: cosine -1 per id
        files[vec] = buf.getvalue()
        res = member(files, f"/passes/{pid}/result.json")
        files[res] = json.dumps({**json.loads(files[res]), "vectors_sha256": hashlib.sha256(files[vec]).hexdigest()}
                                ).encode()
    else:
        key = "output" if kind == "generation" else "pred"
        lines = [json.loads(x) for x in files[pred].decode().splitlines()]
        others = sorted({x[key] for x in lines})
        for x in lines:  # another answer for every id
            x[key] = "forged" if kind == "generation" else next(o for o in others + ["comp.graphics"] if o != x[key])
        files[pred] = "".join(json.dumps(x) + "\n" for x in lines).encode()
        digest = hashlib.sha256(files[pred]).hexdigest()
        res = member(files, f"/passes/{pid}/result.json")
        files[res] = json.dumps({**json.loads(files[res]), "predictions_sha256": digest}).encode()
        edit_raw_table(files, lambda rows: [r.update(predictions_sha256=digest) for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged2.tar.gz", files))
    assert not bad.ok
    assert any(p.startswith(f"pass {pid}: metric ") and "recomputed from its predictions and reference pass" in p
               for p in bad.problems), bad.problems
    assert any(p.startswith(f"pass {pid}: marked accepted, but its recomputed metric") for p in bad.problems), \
        bad.problems
    if kind == "embedding":  # the journal's worst id is recomputed too, not only the judged figure
        assert any(p.startswith(f"pass {pid}: worst id ") and "in the journal" in p and "at -1.0 recomputed" in p
                   for p in bad.problems), bad.problems


def test_a_pass_judged_before_the_reference_existed_is_judged_once_it_does(unlabelled_run):
    """Rotation may run batch 8 before the reference variant: that pass is validated without a
    reference (not accepted, "not computed yet"); the reference's first pass then judges it at once."""
    from lab.orchestration.orchestrator import Reference

    kind, orch, _ = unlabelled_run
    attempts = orch.journal.attempts()
    ref = next(a for a in attempts if a.variant.batch_size == 1).pass_id
    other = next(a for a in attempts if a.variant.batch_size == 8).pass_id
    before = orch.validate_attempt(other, Reference(None, None, ""))
    assert not before.corpus_accepted and before.metric is None and not before.reference_pass
    assert before.verdict_short() == "rejected: reference", kind  # waiting for it, not below its threshold
    said: list[str] = []
    orch.echo = said.append
    orch.judge_waiting(ref)
    after = next(a for a in orch.journal.attempts() if a.pass_id == other).validation
    assert after.corpus_accepted and after.reference_pass == ref and after.metric >= 0.9
    assert said == [f"pass {other} judged against reference pass {ref}: {after.verdict()}"]


def test_two_rentals_judged_by_agreement_compare_and_show_the_same_vectors(tmp_path, model_dir):
    """Compare prices two unlabelled embedding rentals and says whether they gave the same vectors
    (the cross-host per-id cosine), each host's quality being its agreement with its own reference."""
    from lab.compare import compare_archives
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.service.campaigns import make_archive

    corpus = unlabelled_corpus(tmp_path)
    archives = []
    for host, gpu, threads in (("a", "rtx-4090", 1), ("b", "b200", 2)):
        d = tmp_path / host
        d.mkdir()
        f = write_campaign(d, model_dir, corpus, name="nolab", values=(1, 4), threshold=0.9)
        f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "agreement"')
                     .replace("threads = 1", f"threads = {threads}") + TASKS["embedding"]
                     + f'\n[cost]\ngpu = "{gpu}"\ndays = 7\nlots = 1\n')
        lock(load_protocol(f))
        orch = Orchestrator.prepare(f, d / "runs", LocalLauncher())
        assert orch.run() == "finished"
        archives.append(make_archive(orch.dir))
    c = compare_archives(archives, 50000, allow_short=True, window_start="2026-12-01T09:00+01:00",
                         deadline="2026-12-05T09:00+01:00")
    assert len(c.agreements) == 2
    assert all(x.ids == 10 and x.cosine_worst > 0.999 and x.within_tolerance for x in c.agreements), \
        c.agreements
    assert all(p.metric_name == "agreement" and p.metric_median >= 0.9 for p in c.projections), c.projections
    texts = [p.quality_text() for p in c.projections]
    assert all("with this host's reference" in t and "gap" not in t for t in texts), texts
    assert sum("1 by definition" in t for t in texts) == 2, texts  # the reference variant, on each host


def test_a_reference_variant_that_never_passes_ends_with_the_fix_not_a_wait(tmp_path, model_dir):
    """A reference variant whose every pass fails (the user's entry cannot start at batch 1): the
    campaign's end says no reference pass came and how to go on (fix it, or another
    reference_variant), not "not computed yet"."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    (tmp_path / "entry.py").write_text(
        "class OneLabel:\n"
        "    def __init__(self, settings, device):\n"
        "        if settings['batch_size'] == 1:\n"
        "            raise RuntimeError('this entry cannot run one item at a time')\n"
        "    def predict(self, texts):\n"
        "        return ['alt.atheism'] * len(texts)\n")
    f = write_campaign(tmp_path, model_dir, unlabelled_corpus(tmp_path), name="noref", threshold=0.9)
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "agreement"')
                 + f'\n[task]\nkind = "custom"\nentry = "{tmp_path / "entry.py"}:OneLabel"\n')
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    ref_id = orch.proto.reference.variant_id
    assert all(a.status != "ok" for a in orch.journal.attempts() if a.variant_id == ref_id)
    other = next(a for a in orch.journal.attempts() if a.variant_id != ref_id)
    assert other.status == "ok" and not other.validation.corpus_accepted
    assert any(r.startswith("the reference variant has no valid pass: agreement not computed; fix what fails it, "
                            "or name another [quality] reference_variant") for r in other.validation.reasons), \
        other.validation.reasons
    assert not any("yet" in r for r in other.validation.reasons), other.validation.reasons


def test_a_custom_entry_with_its_own_model_and_labels_runs_and_is_judged(tmp_path, model_dir, gen_model_dir):
    """The user's code brings its own model and its own label names (a new user's trial: the lab
    asked for a ...ForSequenceClassification checkpoint and refused 'x' / 'y' as 'not a known
    label'). [model] names the demo generator (a causal LM: its tokenizer forms the buckets);
    the entry answers 'short-text' or 'long-text' by length. Judged by agreement, it locks, runs
    batch 1 and 8, is accepted and verifies; on a labelled corpus the same outputs are wrong
    labels, counted in the accuracy, not a format failure."""
    from conftest import cut_corpus

    from lab.evidence.archive import verify
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock
    from lab.report.build import build_report
    from lab.service.campaigns import make_archive

    (tmp_path / "entry.py").write_text(
        "class ByLength:\n"
        "    def __init__(self, settings, device):\n"
        "        self.cut = 400\n"
        "    def predict(self, texts):\n"
        "        return ['long-text' if len(t) > self.cut else 'short-text' for t in texts]\n")
    task = f'\n[task]\nkind = "custom"\nentry = "{tmp_path / "entry.py"}:ByLength"\n'
    f = write_campaign(tmp_path, gen_model_dir, unlabelled_corpus(tmp_path, gen_model_dir), name="ownlabels",
                       threshold=0.9)
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "agreement"') + task)
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert orch.run() == "finished"
    attempts = orch.journal.attempts()
    assert [a.status for a in attempts] == ["ok", "ok"]
    assert all(a.validation.format_ok and a.validation.corpus_accepted for a in attempts), \
        [a.validation.reasons for a in attempts]
    preds = {json.loads(x)["pred"] for a in attempts
             for x in (orch.dir / "passes" / a.pass_id / "predictions.jsonl").read_text().splitlines()}
    assert preds == {"long-text", "short-text"}
    build_report(orch.dir)
    v = verify(make_archive(orch.dir))
    assert v.ok, v.problems

    labelled = tmp_path / "labelled"
    labelled.mkdir()
    f = write_campaign(labelled, gen_model_dir, cut_corpus(labelled / "corpus.jsonl", 5, 3, 2), name="ownlabels2",
                       values=(1,), threshold=0.0)
    f.write_text(f.read_text() + task)
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, labelled / "runs", LocalLauncher())
    assert orch.run() == "finished"
    [a] = orch.journal.attempts()
    assert a.status == "ok" and a.validation.format_ok and a.validation.metric == 0.0, a.validation
