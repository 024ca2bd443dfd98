"""Generation task on the real product: a campaign over the demo generator locks, runs batch 1,
batch 8 and batch 8 bucketed (the lab's own batches, left-padded by the lab), validates the outputs against the
gold labels' names (exact match after the declared normalisation, token F1 beside it) and per id
against the reference variant, reports input and output tokens per pass, archives and verifies;
a consistent forgery of the metric is refused by verify; a pass that fails after 6 items keeps
them. Small slices of the demo corpus keep it fast on 2 cores."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
from decimal import Decimal

import msgspec
import pytest
from conftest import cut_corpus, run_reported, write_campaign
from test_archive_evidence import edit_raw_table, member, read_members, write_members

from lab.report.decision_note import generation_costs
from lab.report.raw_row import raw_rows_of

TASK = ('\n[task]\nkind = "generation"\nprompt = "{text}\\nNewsgroup:"\nmax_text_tokens = 64\n'
        'max_new_tokens = 16\nstop = ["\\n"]\ndecoding = "greedy"\nnormalisation = "lowercase_space"\n')
COST = '\n[cost]\ngpu = "rtx-4090"\ndays = 7\nlots = 1\n'
BUCKETING = '\n[[series]]\nname = "bucketing"\nfactor = "bucketing"\nvalues = [true]\nbatch_size = 8\n'


def generation_campaign(folder, model_dir, corpus=None, task=TASK, values=(1, 8), name="gen", max_length=128):
    corpus = corpus or cut_corpus(folder / "corpus.jsonl", 5, 3, 2)
    f = write_campaign(folder, model_dir, corpus, name=name, repetitions=1, values=values, threshold=0.0,
                       max_length=max_length)
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "exact_match"') + task + COST)
    return f


def lines_of(orch, pass_id: str) -> list[dict]:
    return [json.loads(x) for x in (orch.dir / "passes" / pass_id / "predictions.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def gen_run(tmp_path_factory, gen_model_dir):
    from lab.service.campaigns import make_archive

    d = tmp_path_factory.mktemp("gen")
    f = generation_campaign(d, gen_model_dir)
    f.write_text(f.read_text() + BUCKETING)  # batch 1, batch 8, and batch 8 sorted by prompt length
    orch = run_reported(f)
    return orch, make_archive(orch.dir)


def test_generation_passes_write_outputs_and_validate_against_the_label_names(gen_run):
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.generation import rule_of
    from lab.passes.tasks.text_metrics import exact_match, token_f1

    orch, _ = gen_run
    attempts = orch.journal.attempts()
    assert [a.status for a in attempts] == ["ok", "ok", "ok"]
    corpus = read_corpus(orch.proto.corpus_path)
    labels = [r["label"] for r in corpus]
    outputs = {}
    for a in attempts:
        res = json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())
        lines = lines_of(orch, a.pass_id)
        assert [x["id"] for x in lines] == [r["id"] for r in corpus]
        assert all(x["stopped_by"] in ("stop", "eos", "max_new_tokens") and x["input_tokens"] > 0 for x in lines)
        assert res["input_tokens"] == sum(x["input_tokens"] for x in lines)
        assert res["output_tokens"] == sum(x["output_tokens"] for x in lines) > 0
        rule = rule_of(orch.proto.task_extra()["task"])
        assert res["generation"]["rule"] == json.loads(json.dumps(rule.to_json()))
        assert res["generation"]["rule_sha256"] == rule.digest()
        assert res["generation"]["normalisation"] == "lowercase_space"
        assert res["observed"]["batch_size"] == min(res["variant"]["batch_size"], 10)
        assert res["observed"]["padding"].startswith("longest")
        texts = [x["output"] for x in lines]
        v = a.validation
        assert v.ids_match and v.format_ok and v.coverage_ok and v.corpus_accepted, v.reasons
        assert v.metric_name == "exact_match"
        assert v.metric == round(exact_match(texts, labels, "lowercase_space"), 6)
        assert v.second_metric_name == "token_f1" and v.second_metric == round(token_f1(texts, labels), 6)
        assert set(v.metric_by_bucket) == {"short", "medium", "long"}
        outputs[res["variant"]["name"]] = {x["id"]: (x["output"], x["output_tokens"]) for x in lines}
        if res["variant"]["bucketing"]:
            assert res["observed"]["bucketing"] == "sorted by token count"
    # batched greedy at fp32, left-padded by the lab, equals unbatched per id, through the product
    one = outputs["batch/batch_size=1"]
    assert outputs["batch/batch_size=8"] == one and outputs["bucketing/bucketing=True"] == one
    assert len({t for t, _ in one.values()}) > 1  # not one constant answer
    assert [a.validation.agreement_with_reference for a in attempts] == [1.0, 1.0, 1.0]


def test_raw_table_has_input_and_output_tokens_per_pass_and_the_note_prices_them(gen_run):
    orch, _ = gen_run
    rows = list(csv.DictReader((orch.dir / "report" / "raw_table.csv").open(encoding="utf-8")))
    assert len(rows) == 3
    for r in rows:
        res = json.loads((orch.dir / "passes" / r["pass_id"] / "result.json").read_text())
        assert int(r["output_tokens"]) == res["output_tokens"] and int(r["input_tokens"]) == res["input_tokens"]
        assert float(r["output_tokens_per_s"]) == pytest.approx(res["output_tokens"] / res["phases_s"]["measured"],
                                                                rel=1e-3)
        assert "token_f1" in r["notes"] and "not a generation pass" not in r["notes"]
    note = (orch.dir / "report" / "decision_note.md").read_text()
    assert note.count("- Cost per item: ") == 3 and "per million output tokens: " in note, note


def test_a_classification_row_says_why_its_token_cells_are_empty(small_campaign):
    rows = list(csv.DictReader((small_campaign.dir / "report" / "raw_table.csv").open(encoding="utf-8")))
    assert rows and all(r["output_tokens"] == "" and "not a generation pass" in r["notes"] for r in rows)


def test_generation_archive_verifies_and_a_forged_metric_is_refused(gen_run, tmp_path):
    from lab.evidence.archive import verify

    _, archive = gen_run
    v = verify(archive)
    assert v.ok, v.problems
    files = read_members(archive)
    pred = member(files, "/predictions.jsonl")
    pid = pred.split("/")[-2]

    # every output replaced by its gold label's name (a perfect score), hashed anew everywhere
    gold = {g["id"]: g["label"] for g in map(json.loads, files[member(files, "/report/gold_labels.jsonl")]
                                             .decode().splitlines())}
    forged = [{**x, "output": " " + gold[x["id"]]} for x in map(json.loads, files[pred].decode().splitlines())]
    files[pred] = "".join(json.dumps(x) + "\n" for x in forged).encode()
    digest = hashlib.sha256(files[pred]).hexdigest()
    res = member(files, f"/passes/{pid}/result.json")
    files[res] = json.dumps({**json.loads(files[res]), "predictions_sha256": digest}).encode()
    edit_raw_table(files, lambda rows: [r.update(metric="1.0", predictions_sha256=digest)
                                        for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged.tar.gz", files))
    assert not bad.ok
    assert any(p.startswith(f"pass {pid}: metric 1.0 in the raw table") and "in the journal" in p
               for p in bad.problems), bad.problems

    # the raw table's metric alone changed (the outputs untouched): recomputed from the outputs
    files = read_members(archive)
    edit_raw_table(files, lambda rows: [r.update(metric="0.99") for r in rows if r["pass_id"] == pid])
    bad = verify(write_members(tmp_path / "forged2.tar.gz", files))
    assert any(p.startswith(f"pass {pid}: metric 0.99 in the raw table") and "recomputed from its outputs" in p
               for p in bad.problems), bad.problems


def drop_columns(files, names):
    name = member(files, "/report/raw_table.csv")
    rows = list(csv.DictReader(io.StringIO(files[name].decode())))
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=[c for c in rows[0] if c not in names], extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    files[name] = out.getvalue().encode()


def test_an_archive_without_the_token_columns_is_named_whatever_its_kind(gen_run, small_campaign, tmp_path):
    """This format's raw table holds the generation columns for every kind: a classification
    archive (its cells empty, no text generated) without them is named, as a generation archive
    (its cells filled) is."""
    from lab.evidence.archive import verify
    from lab.report.raw_table import GENERATED
    from lab.service.campaigns import make_archive

    files = read_members(make_archive(small_campaign.dir))  # classification: no text generated
    drop_columns(files, GENERATED)
    old = verify(write_members(tmp_path / "old.tar.gz", files))
    assert any("columns differ" in p and "output_tokens" in p for p in old.problems), old.problems
    files = read_members(gen_run[1])  # a generation archive must hold them
    drop_columns(files, GENERATED)
    bad = verify(write_members(tmp_path / "gen.tar.gz", files))
    assert any("columns differ" in p and "output_tokens" in p for p in bad.problems), bad.problems


def test_an_archive_without_a_column_empty_for_its_passes_is_named(small_campaign, tmp_path):
    """Any column of this format, even one empty for every pass of the archive (here the engine's
    CPU time, empty for a transformers pass), is required: one left out is named, as a column that
    re-derives a value is."""
    from lab.evidence.archive import verify
    from lab.service.campaigns import make_archive

    files = read_members(make_archive(small_campaign.dir))
    assert {r["engine_cpu_time_s"] for r in csv.DictReader(io.StringIO(files[member(
        files, "/report/raw_table.csv")].decode()))} == {""}
    drop_columns(files, ("engine_cpu_time_s",))
    old = verify(write_members(tmp_path / "old.tar.gz", files))
    assert [p for p in old.problems if "columns differ" in p] == [
        "report/raw_table.csv: columns differ from the ones the report writes (missing: engine_cpu_time_s; "
        "extra: none)"], old.problems
    files = read_members(make_archive(small_campaign.dir))
    drop_columns(files, ("cpu_time_s",))  # measured for every pass: an archive cannot leave it out
    bad = verify(write_members(tmp_path / "bad.tar.gz", files))
    assert any("columns differ" in p and "cpu_time_s" in p for p in bad.problems), bad.problems


def test_compare_refuses_generation_archives_of_another_prompt_or_decoding_rule(gen_run):
    from lab.compare.comparability import check_comparable
    from lab.compare.evidence import CompareError, load_evidence
    _, archive = gen_run
    ev = load_evidence(archive)
    other_rows = raw_rows_of([{**r.cells, "pass_id": r.pass_id + "-b"} for r in ev.raw_rows])  # another rental's
    for key, value in (("prompt", "{text}\nGroup:"), ("max_new_tokens", 8), ("stop", (".",)),
                       ("normalisation", "none")):
        # the campaign file written with another value, as read_evidence reads it: as written and typed
        written = msgspec.structs.replace(ev.campaign, task={**ev.campaign.task, key: value})
        config = dataclasses.replace(ev.config, task=dataclasses.replace(ev.config.task, **{key: value}))
        other = dataclasses.replace(ev, name="other", raw_rows=other_rows, campaign=written, config=config)
        with pytest.raises(CompareError) as exc:
            check_comparable([ev, other])
        msg = str(exc.value)
        assert f"[task] {key} differs" in msg and "\n" not in msg, msg


def test_compare_of_generation_rentals_shows_output_tokens_priced_as_each_campaigns_note(gen_run, tmp_path):
    """Issue 17: two rentals' generation archives compared at a load of one corpus (each archive's own
    package covers it) show, per host and configuration, the output tokens, output tokens/s and the cost
    per item and per million output tokens, in compare.csv, decision.md and the printed decision: the
    same figures as the campaign's own decision note (one division, lab.report.decision_note)."""
    import re

    from lab.compare.decision import compare_evidence
    from lab.compare.evidence import load_evidence
    from lab.compare.tables import comparison_table, write_comparison

    orch, archive = gen_run
    ev = load_evidence(archive)
    other = dataclasses.replace(ev, name="other",
                                raw_rows=raw_rows_of([{**r.cells, "pass_id": r.pass_id + "-b"} for r in ev.raw_rows]))
    corpus_items = ev.variants[0].items_total
    c = compare_evidence([ev, other], corpus_items, allow_short=True, window_start="2026-12-01T09:00+00:00",
                         deadline="2026-12-05T09:00+00:00")
    rows = comparison_table(c).to_dict("records")
    by_id = {v.variant_id: v for v in ev.variants}
    assert len(rows) == 2 * len(ev.variants)
    for r in rows:
        v = by_id[r["variant_id"]]
        assert r["output_tokens"] == v.output_tokens > 0 and r["output_tokens_at_load"] == v.output_tokens
        assert r["output_tokens_per_s_median"] == pytest.approx(v.output_tokens_per_s_median, abs=1e-4)
        assert r["cost_per_item"] > 0 and r["cost_per_million_output_tokens"] > 0 and not r["tokens_note"]
    note = (orch.dir / "report" / "decision_note.md").read_text()
    md = (write_comparison(c, tmp_path / "cmp")["decision"]).read_text()
    costs = re.compile(r"[Cc]ost per item:? (\S+ \w+); per million output tokens:? (\S+ \w+) \(")
    assert costs.findall(md) and costs.findall(note), (md, note)
    # one division (generation_costs): compare's at the load it was asked, the note's at the load its
    # package processes at the slowest pass's throughput (issue 35 item 4), never over one corpus
    for p in c.projections:
        assert p.sizing is not None and (p.cost_per_item, p.cost_per_million_output_tokens) == generation_costs(
            p.sizing.quote.committed_budget, corpus_items, p.output_tokens_at_load)
    at_load = re.compile(r"Cost per item: (\S+) USD; per million output tokens: (\S+) USD \(at the package's load: "
                         r"(\d+) items, (\d+) output tokens")
    for per_item, per_million, items, out_tokens in at_load.findall(note):
        budget = Decimal(re.search(r"committed budget (\S+) USD", note).group(1).replace(",", ""))
        assert (Decimal(per_item), f"{float(per_million.replace(',', '')):.2f}") == (
            generation_costs(budget, int(items), int(out_tokens))[0],
            f"{float(generation_costs(budget, int(items), int(out_tokens))[1]):.2f}")
    tokens = re.compile(r"- Output tokens: (.*?)\.?\n")
    assert set(tokens.findall(md)) == set(tokens.findall(note)) and tokens.findall(md), (md, note)
    decision = next(line for line in c.path if line.startswith("decision: "))
    assert f"{c.chosen.output_tokens} output tokens projected" in decision and "per million output tokens" in decision
    with (tmp_path / "cmp" / "compare.csv").open(encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert {"output_tokens", "output_tokens_per_s_median", "cost_per_item",
            "cost_per_million_output_tokens"} <= set(header)


def test_a_failure_after_6_items_keeps_them(tmp_path, gen_model_dir):
    """The 7th item's prompt (the text whole: max_text_tokens = 0) passes the model's 512
    positions: the pass fails there, with the 6 items before it written, and names the cut that fits
    (the lock refuses such a corpus first: the test below; its checks are skipped here)."""
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 5, 3, 2)
    rows = [json.loads(x) for x in corpus.read_text().splitlines()]
    rows[6]["text"] = " ".join([rows[-1]["text"]] * 12)  # thousands of tokens
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    f = generation_campaign(tmp_path, gen_model_dir, corpus, task=TASK.replace("max_text_tokens = 64",
                                                                              "max_text_tokens = 0"),
                            values=(1,), name="genfail", max_length=512)  # warm-up: the first 2 items
    lock(load_protocol(f), check=False)  # the lock's own check refuses that prompt: here the pass's guard is tested
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    a = orch.journal.attempts()[0]
    assert a.status != "ok" and a.items_completed == 6, a
    res = json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())
    assert "passes the model's 512 positions; set max_text_tokens to at most" in res["error"], res["error"]
    lines = lines_of(orch, a.pass_id)
    assert [x["id"] for x in lines] == [r["id"] for r in rows[:6]]  # the items completed are kept
    assert res["output_tokens"] == sum(x["output_tokens"] for x in lines)


@pytest.mark.parametrize("task, words", [
    (TASK + "temperature = 0.7\n", "unknown key 'temperature'"),
    (TASK.replace('decoding = "greedy"', 'decoding = "sample"'), "decoding 'sample' is not implemented"),
    (TASK.replace("{text}", "no text field"), "must hold {text} exactly once"),
    (TASK.replace("max_new_tokens = 16\n", ""), "needs prompt (with {text}) and max_new_tokens"),
    (TASK.replace('"lowercase_space"', '"casefold"'), "unknown normalisation 'casefold'"),
    ('\n[task]\nkind = "embedding"\nprompt = "{text}"\n', 'prompt applies to kind = "generation" only'),
])
def test_a_generation_task_that_cannot_be_used_is_refused_in_one_line(tmp_path, gen_model_dir, task, words):
    from lab.orchestration.protocol import ProtocolError, load_protocol

    f = generation_campaign(tmp_path, gen_model_dir, task=task)
    if "embedding" in task:
        f.write_text(f.read_text().replace('"exact_match"', '"nn_accuracy"'))
    with pytest.raises(ProtocolError) as exc:
        load_protocol(f)
    assert words in str(exc.value) and "\n" not in str(exc.value), str(exc.value)


def test_a_vllm_generation_variant_loads_and_runs_on_the_vllm_engine(tmp_path, gen_model_dir):
    # generation on vLLM is no longer refused when the campaign loads; whether the pinned vLLM
    # runs the model is the lock's probe (tests/vllm/test_engine_vllm_generation.py)
    from lab.orchestration.protocol import load_protocol
    from lab.passes.backends.vllm_backend import VllmEngine
    from lab.passes.tasks import job_for

    f = generation_campaign(tmp_path, gen_model_dir)
    f.write_text(f.read_text().replace("[defaults]\n", '[defaults]\nengine = "vllm"\n'))
    proto = load_protocol(f)
    assert {v.engine for v in proto.variants} == {"vllm"}
    spec = type("Spec", (), {"variant": proto.variants[0], "extra": proto.task_extra()})()
    job = job_for(spec)
    assert job.kind == "generation" and isinstance(job.engine, VllmEngine)
    assert job.engine.needs.rule.max_new_tokens == 16 and job.engine.needs.rule.stop == ("\n",)


def test_prompt_and_decoding_rule_are_in_the_lock_identity(tmp_path, gen_model_dir):
    from lab.orchestration.identity import protocol_identity
    from lab.orchestration.protocol import load_protocol

    f = generation_campaign(tmp_path, gen_model_dir)
    base = protocol_identity(load_protocol(f))["sha256"]
    for old, new in (("Newsgroup:", "Group:"), ("max_new_tokens = 16", "max_new_tokens = 8"),
                     ('stop = ["\\n"]', 'stop = ["."]'), ('"lowercase_space"', '"squad"')):
        g = tmp_path / f"v{len(new)}.toml"
        g.write_text(f.read_text().replace(old, new))
        assert protocol_identity(load_protocol(g))["sha256"] != base, new


def test_the_demo_generation_campaign_locks(tmp_path, gen_model_dir):
    from conftest import REPO

    from lab.orchestration.protocol import load_protocol, lock

    f = tmp_path / "campaign-generation.toml"  # a copy: the lock file is written beside it
    f.write_text((REPO / "demo" / "campaign-generation.toml").read_text())
    proto = load_protocol(f)
    lock(proto)
    assert proto.task_kind == "generation" and proto.config.quality.metric == "exact_match"
    assert {v.name for v in proto.variants} == {"batch/batch_size=1", "batch/batch_size=8",
                                                "bucketing/bucketing=True"}


def test_max_new_tokens_past_the_models_positions_are_refused_at_lock_with_the_fix_that_works(tmp_path, gen_model_dir):
    """The trial's `max_new_tokens = 100000000` on the demo generator: refused at lock, naming the
    model's positions and the largest max_new_tokens the prompt template leaves room for (not a
    cut of the text, which cannot help); a max_new_tokens that fits only with a shorter text is
    refused naming max_text_tokens; the largest value named for each locks."""
    import re

    from transformers import AutoConfig, AutoTokenizer

    from lab.orchestration.protocol import ProtocolError, load_protocol, lock

    positions = AutoConfig.from_pretrained(gen_model_dir).max_position_embeddings
    template = len(AutoTokenizer.from_pretrained(gen_model_dir)("\nNewsgroup:")["input_ids"])
    whole_text = TASK.replace("max_text_tokens = 64\n", "")  # the longest prompt: the whole longest text

    def refusal(folder, task):
        folder.mkdir()
        with pytest.raises(ProtocolError) as e:
            lock(load_protocol(generation_campaign(folder, gen_model_dir, task=task)))
        return str(e.value)

    alone = refusal(tmp_path / "a", TASK.replace("max_new_tokens = 16", "max_new_tokens = 100000000"))
    assert re.search(rf"\[task\] max_new_tokens 100000000 with the prompt of id '[^']+' \(\d+ tokens\) passes the "
                     rf"model's {positions} positions; lower max_new_tokens to at most {positions - template - 1}$",
                     alone), alone
    most = positions - template - 64 - 8  # room for the 64-token cut, not for the whole longest text
    cut = refusal(tmp_path / "b", whole_text.replace("max_new_tokens = 16", f"max_new_tokens = {most}"))
    fit = re.search(r"set max_text_tokens to at most (\d+) \(the template holds \d+ tokens\) or a lower "
                    r"max_new_tokens$", cut)
    assert fit, cut
    (tmp_path / "c").mkdir()
    task = whole_text.replace("max_new_tokens = 16", f"max_new_tokens = {most}").replace(
        "[task]\n", f"[task]\nmax_text_tokens = {fit[1]}\n")
    assert lock(load_protocol(generation_campaign(tmp_path / "c", gen_model_dir, task=task)))["version"] == 1
