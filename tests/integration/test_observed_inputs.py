"""What silently changes a pass's outputs is observed, recorded and overridden or refused (issue 31,
part 2, the transformers engine and the host), each on a checkpoint built here: the demo models
copied with one file changed.

- a classifier / embedding model whose tokenizer_config.json says ``"padding_side": "left"``
  (conftest's left_padded_classifier and left_padded_embedding, which test_agreement_decides
  reads too): padded on the right by the lab, so batch 8 agrees with batch 1, and the side is
  recorded;
- a generator whose generation_config.json sets repetition_penalty, no_repeat_ngram_size,
  min_new_tokens and suppress_tokens = [eos]: the outputs are the unmodified checkpoint's, and
  the lock and the record name the file and its fields;
- a prompt holding the ``<s>`` the tokenizer adds itself: refused at lock in one line;
- ``ATEN_CPU_CAPABILITY=default``: recorded in the pass and the manifest's capability says DEFAULT.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from conftest import copy_with, cut_corpus, run_reported
from test_task_generation import generation_campaign

BAD_GENERATION = {"repetition_penalty": 1.8, "no_repeat_ngram_size": 2, "min_new_tokens": 8}


def results(orch) -> dict[int, dict]:
    """{declared batch size: result.json} of the campaign's passes."""
    out = {}
    for a in orch.journal.attempts():
        res = json.loads((orch.dir / "passes" / a.pass_id / "result.json").read_text())
        out[res["variant"]["batch_size"]] = res
    return out


def predictions(orch, res: dict) -> list[dict]:
    path = orch.dir / "passes" / res["pass_id"] / "predictions.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_left_padding_classifier_is_padded_right_and_agrees_with_batch_1(left_padded_classifier):
    orch = left_padded_classifier
    by_batch = results(orch)
    one, eight = (predictions(orch, by_batch[b]) for b in (1, 8))
    assert [(x["id"], x["pred"]) for x in eight] == [(x["id"], x["pred"]) for x in one]
    assert by_batch[8]["observed"]["padding_side"] == "right"
    for a in orch.journal.attempts():
        assert a.validation is not None and a.validation.corpus_accepted, a.validation
    with (orch.dir / "report" / "raw_table.csv").open(encoding="utf-8") as fh:
        rows = {int(r["batch_size"]): r for r in csv.DictReader(fh)}
    assert rows[8]["observed_padding_side"] == "right"


def test_every_pass_records_the_sha256_of_its_input_ids(left_padded_classifier):
    from transformers import AutoTokenizer

    from lab.inputs.corpus import read_corpus
    from lab.passes.inference import input_ids_digest, tokenize

    orch = left_padded_classifier
    tok = AutoTokenizer.from_pretrained(str(orch.proto.model_ref))
    ids, _ = tokenize([r["text"] for r in read_corpus(orch.proto.corpus_path)], tok, 128)
    for res in results(orch).values():
        assert res["observed"]["input_ids_sha256"] == input_ids_digest(ids)


def test_the_cpu_capability_and_its_variable_are_recorded_in_the_pass_and_the_manifest(left_padded_classifier):
    orch = left_padded_classifier
    for res in results(orch).values():
        assert res["environment"]["ATEN_CPU_CAPABILITY"] == "default"
        assert res["observed"]["cpu_capability"] == "DEFAULT"
    manifest = json.loads((orch.dir / "report" / "manifest.json").read_text())
    assert manifest["cpu"]["capability"] == "DEFAULT"
    assert manifest["environment"]["ATEN_CPU_CAPABILITY"] == "default"
    assert isinstance(manifest["cpu"]["isa_flags"], list)


def test_left_padding_embedding_model_is_padded_right_and_agrees_with_batch_1(left_padded_embedding):
    orch = left_padded_embedding
    by_batch = results(orch)
    assert by_batch[8]["observed"]["padding_side"] == "right"
    v = next(a.validation for a in orch.journal.attempts() if a.variant and a.variant.batch_size == 8)
    assert v is not None and v.agreement_worst is not None and v.agreement_worst > 0.9999, v


@pytest.fixture(scope="module")
def bad_generator(tmp_path_factory, gen_model_dir) -> Path:
    """The demo generator whose generation_config.json would garble every output: a repetition
    penalty, an n-gram ban, a minimum length and its eos suppressed."""
    eos = json.loads((gen_model_dir / "generation_config.json").read_text())["eos_token_id"]
    return copy_with(gen_model_dir, tmp_path_factory.mktemp("badgen") / "model", "generation_config.json",
                     {**BAD_GENERATION, "suppress_tokens": [eos]})


def test_a_checkpoint_generation_config_cannot_change_the_outputs(tmp_path_factory, gen_model_dir, bad_generator):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lab.inputs.corpus import read_corpus
    from lab.orchestration.protocol import load_protocol, lock_warnings
    from lab.passes.tasks.generation import rule_of
    from lab.passes.tasks.generation_core import generate_batch

    d = tmp_path_factory.mktemp("badgen_run")
    f = generation_campaign(d, bad_generator, corpus=cut_corpus(d / "corpus.jsonl", 3, 3, 2), values=(1, 8))
    warned = [w for w in lock_warnings(load_protocol(f)) if "generation_config.json" in w]
    assert len(warned) == 1 and all(k in warned[0] for k in (*BAD_GENERATION, "suppress_tokens")), warned
    orch = run_reported(f)
    rule = rule_of(orch.proto.task_extra()["task"])
    tok = AutoTokenizer.from_pretrained(str(gen_model_dir))
    plain = AutoModelForCausalLM.from_pretrained(str(gen_model_dir), dtype=torch.float32).eval()
    rows = read_corpus(orch.proto.corpus_path)
    expected = [g.text for g in generate_batch(tok, plain, "cpu", [r["text"] for r in rows], rule)]
    for res in results(orch).values():
        assert [x["output"] for x in predictions(orch, res)] == expected
        gen = res["generation"]
        assert gen["checkpoint_settings_not_applied"]["file"] == "generation_config.json"
        assert set(gen["checkpoint_settings_not_applied"]["fields"]) == {*BAD_GENERATION, "suppress_tokens"}
        assert gen["settings"]["repetition_penalty"] == 1.0 and gen["settings"]["suppress_tokens"] is None
        assert gen["settings"]["no_repeat_ngram_size"] == 0 and gen["settings"]["do_sample"] is False
        assert len(res["observed"]["input_ids_sha256"]) == 64
    assert results(orch)[8]["observed"]["padding_side"] == "left"


def test_a_prompt_holding_the_bos_the_tokenizer_adds_is_refused_at_lock(tmp_path, gen_model_dir):
    from test_task_generation import TASK

    from lab.orchestration.protocol import ProtocolError, load_protocol, lock

    f = generation_campaign(tmp_path, gen_model_dir, corpus=cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1),
                            task=TASK.replace('prompt = "{text}', 'prompt = "<s>{text}'))
    with pytest.raises(ProtocolError) as err:
        lock(load_protocol(f))
    line = str(err.value)
    assert "\n" not in line and "[1, 1, ...]" in line and "remove '<s>' from [task] prompt" in line, line


def test_a_corpus_text_holding_the_cls_the_tokenizer_adds_is_refused(model_dir):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from lab.inputs.variants import Variant
    from lab.kinds import task_kind
    from lab.orchestration.preflight import check_first_ids

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    proto = SimpleNamespace(task_kind="classification", kind=task_kind("classification"),
                            variants=[Variant(batch_size=1, max_length=128)])
    assert check_first_ids(proto, tok, {"a": "plain text", "b": "more text"}).ok
    refused = check_first_ids(proto, tok, {"a": "plain text", "b": "[CLS] text that holds it"})
    assert refused.ok is False and "'b'" in refused.detail and "'[CLS]' twice" in refused.detail, refused
    assert "remove '[CLS]' from the corpus text" in refused.detail
