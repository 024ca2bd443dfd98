"""Classification and embedding served (issue 36): a server campaign of each kind on the real
product, an offline reference variant (transformers) and one server variant at a low rate on
vLLM's server: the demo classifier answers at ``/classify`` (its class probabilities), the MiniLM
encoder at ``/v1/embeddings`` (its pooled vector), each request's prompt the lab's token ids. The
answers are kept per request (``served.jsonl``), become the kind's own predictions (labels; rows
of vectors.npy) and are judged against the offline reference by the kind's agreement rule; the
objective is an end-to-end latency bound (a pooled answer comes whole), its figures re-derived
from the records equal the load generator's own, and the archive verifies.

Time: per campaign one offline pass on 40 items, one server start and one generator start (about
a minute of CPU each on the 2-core machine) and 20 s of arrivals. Skipped, saying why, where the
vLLM venv is absent or stale (`make vllm-env`). Figures are printed: run with ``-s``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import cut_corpus, run_reported, write_campaign

from lab.engines import vllm_env

pytestmark = pytest.mark.skipif(not vllm_env.is_ready(), reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (CI does) to run the pooled server tests"))

RATE = 2.0  # req/s: a 50 ms bound on the generator's lag (lab.facts.constants.GENERATOR_LAG_SHARE)
PER_LABEL = (16, 12, 12)  # 40 items: one request each
SCENARIO = ('\n[scenario]\nkind = "server"\ne2el_s = 0.5\nshare = 0.9\nmax_concurrency = 8\nwarmup_requests = 2\n'
            'peak_rate = 10\naverage_rate = 2\n')
MAX_NUM_SEQS, MAX_BATCHED_TOKENS = 4, 1024  # the server's settings, declared: observed from its /server_info
EMBEDDING = '\n[task]\nkind = "embedding"\npooling = "mean"\nnormalize = true\n'


def pooled_campaign(folder, model, kind: str):
    corpus = cut_corpus(folder / "corpus.jsonl", *PER_LABEL)
    f = write_campaign(folder, model, corpus, name=f"serve-{kind}", repetitions=1, values=(8,), threshold=0.0)
    text = f.read_text()
    served = (f'[[series]]\nname = "served"\nfactor = "request_rate"\nvalues = [{RATE}]\nengine = "vllm"\n'
              f'max_num_seqs = {MAX_NUM_SEQS}\nmax_num_batched_tokens = {MAX_BATCHED_TOKENS}\n\n')
    text = text.replace("[[series]]", served + "[[series]]", 1)
    text = text.replace('reference_variant = "batch/batch_size=1"', 'reference_variant = "batch/batch_size=8"')
    if kind == "embedding":
        text = text.replace('metric = "accuracy"', 'metric = "nn_accuracy"') + EMBEDDING
    f.write_text(text + SCENARIO)
    return f


@pytest.fixture(scope="module", params=["classification", "embedding"])
def pooled_run(request, tmp_path_factory, model_dir):
    from lab.inputs.models import encoder_path
    from lab.service.campaigns import make_archive

    kind = request.param
    d = tmp_path_factory.mktemp(f"serve-{kind}")
    orch = run_reported(pooled_campaign(d, model_dir if kind == "classification" else encoder_path(), kind))
    return kind, orch, make_archive(orch.dir)


@pytest.fixture(scope="module")
def second_pooled(pooled_run, tmp_path_factory, model_dir):
    """The same kind's campaign run again, as a second rental to compare (neither declares a package:
    compare judges the served answers, nothing is priced)."""
    from lab.inputs.models import encoder_path
    from lab.service.campaigns import make_archive

    kind = pooled_run[0]
    d = tmp_path_factory.mktemp(f"serve-{kind}-b")
    return make_archive(run_reported(pooled_campaign(d, model_dir if kind == "classification" else encoder_path(),
                                                     kind)).dir)


def test_two_rentals_served_answers_compare_by_the_kinds_rule(pooled_run, second_pooled, tmp_path):
    """compare of two rentals' pooled server archives, without --load: the served variant's answers
    are compared per id by the kind's rule (labels; embeddings by cosine, never as labels), the
    serving part decides and decision.md says so."""
    from lab.compare import compare_to_folder

    kind, _, archive = pooled_run
    c, paths = compare_to_folder([archive, second_pooled], None, tmp_path / "cmp", allow_short=True)
    s = c.serving
    assert s is not None and len(s.agreements) == 1, s
    x = s.agreements[0]
    assert x.result.same and x.result.check.ids == sum(PER_LABEL) and x.result.check.differing == 0, x.text()
    if kind == "embedding":
        assert x.result.cosine_median is not None and x.result.check.lowest_cosine >= 0.999, x.text()
        assert "cosine median" in x.text()
    md = paths["decision"].read_text()
    assert f"- Served outputs, {x.text()}" in md and "**Decision: none.**" not in md
    assert c.decided == (s.chosen is not None) and "serving_csv" in paths
    print(f"\n[pooled server] {kind}, two rentals: {x.text()}")


def test_a_served_classifier_or_encoder_is_judged_like_its_kind_and_verifies(pooled_run, model_dir, tmp_path):
    from lab.engines.serving_figures import ServedRequest, figures, percentiles, tool_percentiles, verdict
    from lab.engines.vllm_load import RESULT_NAME
    from lab.evidence.archive import verify
    from lab.facts.constants import SERVED_FILE
    from lab.passes.spec import PassSpec
    from lab.passes.tasks.server_job import LOAD_DIR, ServerJob

    kind, orch, archive = pooled_run
    by_rate = {a.variant.request_rate: a for a in orch.journal.attempts()}
    assert sorted(by_rate, key=lambda r: -1 if r is None else r) == [None, RATE]
    ref, served = by_rate[None], by_rate[RATE]
    assert ref.status == "ok" and served.status == "ok", (ref.notes, served.notes)
    val = served.validation
    assert val is not None and val.reference_pass == ref.pass_id and val.corpus_accepted, val
    folder = orch.dir / "passes" / served.pass_id
    res = json.loads((folder / "result.json").read_text())
    assert res["engine"]["name"] == "vllm-server" and res["items_completed"] == sum(PER_LABEL)
    # the server's declared settings are what it says it runs (a contradiction fails the pass)
    obs = res["observed"]
    assert (obs["max_num_seqs"], obs["max_num_batched_tokens"]) == (MAX_NUM_SEQS, MAX_BATCHED_TOKENS), obs
    assert obs["dtype"] == "float32" and obs["compile"] is False, obs
    recs = [ServedRequest(**json.loads(x)) for x in (folder / SERVED_FILE).read_text().splitlines()]
    preds = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines()]
    assert [r.id for r in recs] == [p["id"] for p in preds] and all(r.answered and r.answer for r in recs)
    # each kept answer is its prediction: the label of its largest probability, or its row of vectors
    if kind == "classification":
        labels = json.loads((model_dir / "config.json").read_text())["id2label"]
        assert [labels[str(int(np.argmax(r.answer)))] for r in recs] == [p["pred"] for p in preds]
        assert val.agreement_with_reference >= 0.99, val  # the offline vLLM pass's floor (test_engine_vllm_campaign)
    else:
        vectors = np.load(folder / "vectors.npy")  # float16, as every embedding pass stores them
        assert vectors.shape == (sum(PER_LABEL), 384)
        assert np.array_equal(vectors, np.asarray([r.answer for r in recs], dtype=np.float32).astype(vectors.dtype))
        assert val.agreement_with_reference >= 0.9999 and val.agreement_worst >= 0.999, val
    # a pooled answer comes whole: no output token, no TPOT; the objective bounds its latency
    serving = res["serving"]
    assert all(r.output_tokens == 0 and r.ttft_s == r.e2el_s for r in recs)
    objective = ServerJob(PassSpec.read(folder / "pass.json")).objective()
    assert [b.metric for b in objective.bounds] == ["e2el"]
    f = figures(recs, serving["figures"]["duration_s"], RATE, objective)
    assert f.percentiles_s["tpot"][99.0] is None and f.output_tokens_per_s == 0
    assert f.percentiles_s["e2el"][99.0] == pytest.approx(serving["figures"]["percentiles_s"]["e2el"]["99.0"],
                                                         rel=1e-9)
    tool = json.loads((folder / LOAD_DIR / RESULT_NAME).read_text())
    assert tool["completed"] == sum(PER_LABEL) and tool["failed"] == 0
    assert percentiles(recs)["e2el"] == pytest.approx(tool_percentiles(tool)["e2el"], rel=1e-9)
    assert f.achieved_rate == pytest.approx(tool["request_throughput"], rel=1e-9)
    v = verdict(recs, objective)
    assert v.holds == serving["verdict"]["holds"] and len(v.checks) == 2  # the bound and the share
    assert verify(archive).ok, verify(archive).problems
    # a kept answer that is not its prediction: verify names the pass (lab.evidence.served)
    from test_archive_evidence import member, read_members, write_members

    files = read_members(archive)
    name = member(files, f"/passes/{served.pass_id}/{SERVED_FILE}")
    lines = files[name].decode().splitlines()
    first = json.loads(lines[0])
    first["answer"] = [x / 2 for x in first["answer"]]  # another vector; the same class at half its probability
    files[name] = ("\n".join([json.dumps(first), *lines[1:]]) + "\n").encode()
    problems = verify(write_members(tmp_path / "forged.tar.gz", files)).problems
    assert any(p.startswith(f"pass {served.pass_id}: ") and "prediction(s) are not the served output of their "
               f"request (first: id {first['id']})" in p for p in problems), problems
    print(f"\n[pooled server] {kind}: {len(recs)} requests at {RATE:g} req/s, achieved {f.achieved_rate:.3f} "
          f"req/s, e2el p50 {f.percentiles_s['e2el'][50.0]:.4f} s, p99 {f.percentiles_s['e2el'][99.0]:.4f} s, "
          f"agreement {val.agreement_with_reference}, verdict "
          f"{'holds' if v.holds else 'fails: ' + '; '.join(v.failed)}")
