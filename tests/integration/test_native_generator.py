"""The native demo generator (``lab.demo.native_generator``, issue 36: an ``OPTForCausalLM`` that
vLLM and its server load natively) on the real product, with the transformers engine: a
generation campaign at batch 1 and batch 8 locks, runs, validates against the label names and
per id against batch 1 (OPT's positions come from the attention mask, so left padding must not
change an output), and its outputs are the ones the build recorded; the build's recorded exact
match is what the saved checkpoint gives. The model is built once (minutes on a loaded 2-core
machine) when `make model-gen-native` has not run."""

from __future__ import annotations

import json

import pytest
from test_generation_demo import check_recorded_figures
from test_task_generation import generation_campaign, lines_of


@pytest.fixture(scope="module")
def native_run(tmp_path_factory, native_gen_model_dir):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    d = tmp_path_factory.mktemp("native")
    f = generation_campaign(d, native_gen_model_dir, name="native")  # 10 demo items, batch 1 and 8
    lock(load_protocol(f))
    orch = Orchestrator.prepare(f, d / "runs", LocalLauncher())
    assert orch.run() == "finished"
    return orch


def test_a_generation_campaign_on_the_native_generator_validates(native_run, native_gen_model_dir):
    from lab.inputs.corpus import read_corpus
    from lab.passes.tasks.text_metrics import exact_match

    orch = native_run
    assert json.loads((native_gen_model_dir / "config.json").read_text())["architectures"] == ["OPTForCausalLM"]
    attempts = orch.journal.attempts()
    assert [a.status for a in attempts] == ["ok", "ok"], [a.notes for a in attempts]
    corpus = read_corpus(orch.proto.corpus_path)
    labels = [r["label"] for r in corpus]
    recorded = {o["id"]: o["output"] for o in map(json.loads, (native_gen_model_dir / "demo_outputs.jsonl")
                                                  .read_text().splitlines())}
    outputs = {}
    for a in attempts:
        res = json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())
        lines = lines_of(orch, a.pass_id)
        assert [x["id"] for x in lines] == [r["id"] for r in corpus]
        v = a.validation
        assert v.ids_match and v.format_ok and v.coverage_ok and v.corpus_accepted, v.reasons
        assert v.metric_name == "exact_match"
        assert v.metric == round(exact_match([x["output"] for x in lines], labels, "lowercase_space"), 6)
        assert res["output_tokens"] == sum(x["output_tokens"] for x in lines) > 0
        outputs[res["variant"]["name"]] = {x["id"]: x["output"] for x in lines}
    one, eight = outputs["batch/batch_size=1"], outputs["batch/batch_size=8"]
    assert eight == one and [a.validation.agreement_with_reference for a in attempts] == [1.0, 1.0]
    assert one == {i: recorded[i] for i in one}  # the build's own outputs (its batch of 32), per id
    assert len(set(one.values())) > 1  # not one constant answer
    print(f"\nnative generator campaign: exact match {attempts[0].validation.metric} on {len(corpus)} items, "
          f"outputs {sorted(set(one.values()))}")


def test_recorded_exact_match_is_the_native_checkpoints(native_gen_model_dir):
    """demo_model.json's exact match comes from the saved checkpoint, loaded with the Auto
    classes (no remote code), as for the BERT demo generator."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(native_gen_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(native_gen_model_dir), dtype=torch.float32).eval()
    assert type(model).__name__ == "OPTForCausalLM"
    info = check_recorded_figures(tok, model, native_gen_model_dir)
    assert info["architecture"].startswith("OPTForCausalLM") and info["build_s"] > 0
    print(f"\nnative generator: exact match {info['comparison_exact_match']}, built in {info['build_s']} s "
          f"({info['build_cpu_s']} s CPU)")
