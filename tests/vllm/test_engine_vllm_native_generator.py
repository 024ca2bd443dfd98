"""The native demo generator (``lab.demo.native_generator``: OPTForCausalLM, issue 36) on the vLLM
engine, on the real product: it passes the lock's load probe (vLLM resolves OPTForCausalLM in
its own registry, loads the weights and generates), and a campaign with a series over the
engine (transformers, vllm) on a slice of the demo corpus gives the same output per id on both
engines (greedy, fp32), each the output the build recorded for that id.

Two engine starts (60-110 s each on a loaded 2-core machine): the lock's load probe and the
vLLM pass. Skipped, saying why, where the vLLM venv is absent or stale (`make vllm-env`). The
model is built once (minutes on a loaded 2-core machine) when `make model-gen-native` has not run. Figures are
printed: run with ``-s`` to read them.
"""

from __future__ import annotations

import json

import pytest
from conftest import cut_corpus, run_reported
from test_engine_vllm_campaign import SERIES, by_engine, report
from test_task_generation import generation_campaign, lines_of

from lab.engines import vllm_env

pytestmark = pytest.mark.skipif(not vllm_env.is_ready(), reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (CI does) to run the vLLM generation tests"))

BATCH = 8


def test_vllm_gives_the_transformers_outputs_of_the_native_generator(tmp_path, native_gen_model_dir):
    from lab.inputs.corpus import read_corpus

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 12, 8, 4)  # 24 items of every length bucket
    f = generation_campaign(tmp_path, native_gen_model_dir, corpus, name="nativevllm", values=(BATCH,))
    text = f.read_text()
    text = text[: text.index("[[series]]")] + SERIES + text[text.index("\n[task]"):]
    text = text.replace('reference_variant = "batch/batch_size=1"', 'reference_variant = "engine/engine=transformers"')
    f.write_text(text.replace("[defaults]\n", f"[defaults]\nbatch_size = {BATCH}\n"))
    orch = run_reported(f)  # the lock probes the engine: a refused model fails here, with vLLM's reason
    runs = by_engine(orch)
    assert [a.status for a, _ in runs.values()] == ["ok", "ok"], [a.notes for a, _ in runs.values()]
    (ta, tres), (va, vres) = runs["transformers"], runs["vllm"]
    assert vres["engine"]["name"] == "vllm" and vres["observed"]["engine"] == "vllm"
    t_lines, v_lines = lines_of(orch, ta.pass_id), lines_of(orch, va.pass_id)
    ids = [r["id"] for r in read_corpus(corpus)]
    assert [x["id"] for x in v_lines] == [x["id"] for x in t_lines] == ids
    t_by, v_by = {x["id"]: x for x in t_lines}, {x["id"]: x for x in v_lines}
    differ = [i for i in ids if t_by[i]["output"] != v_by[i]["output"]]
    assert not differ, [(i, t_by[i]["output"], v_by[i]["output"]) for i in differ]
    # the same tokens in and out, and the same cut, per id
    assert all((v_by[i]["input_tokens"], v_by[i]["output_tokens"], v_by[i]["stopped_by"])
               == (t_by[i]["input_tokens"], t_by[i]["output_tokens"], t_by[i]["stopped_by"]) for i in ids)
    val = va.validation
    assert val.reference_pass == ta.pass_id and val.corpus_accepted and val.agreement_with_reference == 1.0
    recorded = {o["id"]: o["output"] for o in map(json.loads, (native_gen_model_dir / "demo_outputs.jsonl")
                                                  .read_text().splitlines())}
    assert {i: v_by[i]["output"] for i in ids} == {i: recorded[i] for i in ids}
    assert len({v_by[i]["output"] for i in ids}) > 3  # not one constant answer
    report("native generator", items=len(ids), agreement=val.agreement_with_reference, exact_match=val.metric,
           reference_exact_match=val.reference_metric, engine_start_s=vres["phases_s"]["engine_start"],
           vllm_measured_s=vres["phases_s"]["measured"], transformers_measured_s=tres["phases_s"]["measured"],
           architecture=json.dumps(vres["engine"].get("architecture")),
           stopped_by=json.dumps(vres["generation"]["stopped_by"]))
