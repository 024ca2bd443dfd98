"""Generation on the vLLM engine (issue 21), on the real product: a campaign with a series over
the engine (transformers, vllm) for a generation task, run by the orchestrator and the local
launcher, validated per id against the transformers reference; and the lock's load probe,
which refuses the demo generator for vLLM.

The demo generator (BertLMHeadModel) cannot run in the pinned vLLM: vLLM resolves it through
its transformers back-end (TransformersForCausalLM), whose engine then finds no parameter for
BERT's LM head weights (``cls.*``) and does not start. The campaign therefore runs a model vLLM
runs natively: a small GPT-2 (GPT2LMHeadModel, 2 layers, width 128) with seeded random weights
and the demo generator's tokenizer, built in a second here. Its text means nothing (exact match
against the label names is about 0, threshold 0), but both engines run the same fp32 weights on
the same token ids, so per-id agreement of their greedy outputs is a real measurement.

Two engine starts in all (60-110 s each on a loaded 2-core machine): the lock's load probe and
the vLLM pass (repetitions = 1, 10 items); one more for the demo generator's refusal. Skipped,
saying why, where the vLLM venv is absent or stale (`make vllm-env` builds it). Figures are
printed: run with ``-s`` to read them.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import cut_corpus, run_reported
from test_engine_vllm_campaign import SERIES, by_engine, raw_rows, report
from test_task_generation import generation_campaign, lines_of

from lab.engines import vllm_env

pytestmark = pytest.mark.skipif(not vllm_env.is_ready(), reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (CI does) to run the vLLM generation tests"))


@pytest.fixture(scope="module")
def small_gpt2(tmp_path_factory, gen_model_dir):
    """A GPT2LMHeadModel vLLM runs natively: seeded random fp32 weights (initializer_range 0.2,
    so greedy steps are rarely near-ties), the demo generator's tokenizer and special ids. The
    (tied) output rows of the eos and of the newline token are doubled, so that some outputs end
    at the eos, some at the stop string and some at max_new_tokens: all three cuts of the stop
    rule are exercised on both engines."""
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    out = tmp_path_factory.mktemp("gpt2")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(gen_model_dir / name, out / name)
    from transformers import AutoTokenizer

    newline = AutoTokenizer.from_pretrained(str(out))("\n", add_special_tokens=False)["input_ids"]
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=4096, n_positions=256, n_embd=128, n_layer=2, n_head=4, bos_token_id=1,
                     eos_token_id=2, pad_token_id=0, initializer_range=0.2)
    model = GPT2LMHeadModel(cfg)
    with torch.no_grad():
        model.lm_head.weight[[2, *newline]] *= 2.0
    model.save_pretrained(out)
    GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def generation_run(tmp_path_factory, small_gpt2):
    d = tmp_path_factory.mktemp("vllm-gen")
    corpus = cut_corpus(d / "corpus.jsonl", 5, 3, 2)
    f = generation_campaign(d, small_gpt2, corpus, name="vllmgen", values=(4,))
    text = f.read_text()
    text = text[: text.index("[[series]]")] + SERIES + text[text.index("\n[task]"):]
    text = text.replace('reference_variant = "batch/batch_size=1"', 'reference_variant = "engine/engine=transformers"')
    f.write_text(text.replace("[defaults]\n", "[defaults]\nbatch_size = 4\n"))
    return run_reported(f)


def test_generation_series_over_the_engine(generation_run):
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.text_metrics import exact_match

    orch = generation_run
    runs = by_engine(orch)
    assert [a.status for a, _ in runs.values()] == ["ok", "ok"], [a.notes for a, _ in runs.values()]
    (ta, tres), (va, vres) = runs["transformers"], runs["vllm"]
    t_lines, v_lines = lines_of(orch, ta.pass_id), lines_of(orch, va.pass_id)
    ids = [r["id"] for r in read_corpus(orch.proto.corpus_path)]
    assert [x["id"] for x in v_lines] == [x["id"] for x in t_lines] == ids
    # the same prompt token ids went to both engines (the lab's one tokenize)
    assert [x["input_tokens"] for x in v_lines] == [x["input_tokens"] for x in t_lines]
    # judged by the protocol's rule against the transformers reference, per id, not bit equality
    val = va.validation
    assert val.reference_pass == ta.pass_id and val.corpus_accepted, val.reasons
    assert abs(val.gap_to_reference) <= val.tolerance
    same = [t["id"] for t, v in zip(t_lines, v_lines, strict=True) if t["output"] == v["output"]]
    assert val.agreement_with_reference == pytest.approx(len(same) / len(ids), abs=1e-6)
    # exact match computed from the outputs, by the lab's metric
    labels = [r["label"] for r in read_corpus(orch.proto.corpus_path)]
    assert val.metric == round(exact_match([x["output"] for x in v_lines], labels, "lowercase_space"), 6)
    # output tokens per item by the lab's one stop rule: equal where the outputs agree
    t_by, v_by = {x["id"]: x for x in t_lines}, {x["id"]: x for x in v_lines}
    assert all(v_by[i]["output_tokens"] == t_by[i]["output_tokens"] and v_by[i]["stopped_by"] == t_by[i]["stopped_by"]
               for i in same)
    assert vres["output_tokens"] == sum(x["output_tokens"] for x in v_lines) > 0
    # phases apart, what vLLM was asked and what it scheduled
    ph = vres["phases_s"]
    assert ph["engine_start"] > 0 and ph["measured"] > 0 and ph["measured"] < ph["engine_start"], ph
    eng = vres["engine"]
    assert eng["name"] == "vllm" and eng["scheduler"]["max_model_len"] == 128 + 16
    s = eng["sampling"]
    assert s["temperature"] == 0.0 and s["sampling_type"] == "GREEDY" and s["max_tokens"] == 16
    assert s["stop"] == ["\n"] and s["include_stop_str_in_output"] is True
    # vLLM's own finish reasons against the lab's cut: a stop string or the eos is vLLM's "stop",
    # the token limit its "length"; the demo slice meets all three cuts
    stopped, finish = vres["generation"]["stopped_by"], eng["finish_reasons"]
    assert set(tres["generation"]["stopped_by"]) == {"stop", "eos", "max_new_tokens"}, tres["generation"]
    assert finish.get("stop", 0) == stopped.get("stop", 0) + stopped.get("eos", 0), (finish, stopped)
    assert finish.get("length", 0) == stopped.get("max_new_tokens", 0) and sum(finish.values()) == len(ids)
    obs = vres["observed"]
    assert obs["engine"] == "vllm" and obs["padding"].startswith("packed") and obs["batch_size"] == 4
    assert obs["max_running"] is not None and 1 <= obs["max_running"] <= 4
    assert vres["generation"]["rule_sha256"] == tres["generation"]["rule_sha256"]
    assert vres["generation"]["padding"].startswith("none: vLLM packs")
    assert vres["engine_memory"]["of"] == "host RAM"
    row = raw_rows(orch)
    assert float(row["vllm"]["output_tokens_per_s"]) == pytest.approx(vres["output_tokens"] / ph["measured"], rel=1e-3)
    assert float(row["vllm"]["engine_start_s"]) == ph["engine_start"] and row["transformers"]["engine_start_s"] == ""
    differ = [i for i in ids if i not in same]
    report("generation", agreement=val.agreement_with_reference, differing_ids=len(differ), items=len(ids),
           exact_match=val.metric, reference_exact_match=val.reference_metric,
           stopped_by=json.dumps(vres["generation"]["stopped_by"]), vllm_finish=json.dumps(eng["finish_reasons"]),
           output_tokens=vres["output_tokens"], reference_output_tokens=tres["output_tokens"],
           engine_start_s=ph["engine_start"], vllm_measured_s=ph["measured"],
           transformers_measured_s=tres["phases_s"]["measured"], max_running=obs["max_running"],
           first_differing=json.dumps([(t_by[i]["output"], v_by[i]["output"]) for i in differ[:2]]))


def test_the_demo_generator_is_refused_for_vllm_at_lock(tmp_path, gen_model_dir):
    """Resolving is not loading: the probe starts the engine and generates a token, and the
    pinned vLLM cannot load the BERT decoder; the refusal is one line naming the cause."""
    from lab.orchestration.preflight import check_engine, first_refusal
    from lab.orchestration.protocol import load_protocol

    f = generation_campaign(tmp_path, gen_model_dir, cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace("[defaults]\n", '[defaults]\nengine = "vllm"\n'))
    refusal = first_refusal(check_engine(load_protocol(f)))
    assert refusal is not None and refusal.name == "engine"
    assert refusal.detail.startswith("engine vllm: model demo-gen-20ng declares architectures ['BertLMHeadModel']")
    assert "as a generate model (loading it failed; the engine's log: ValueError: There is no module or " \
        "parameter named 'cls'" in refusal.detail and "\n" not in refusal.detail
    report("demo generator refused", detail=refusal.detail)
