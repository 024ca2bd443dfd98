"""The engine is a declared variant field (issue 21): "transformers" by default, "vllm" beside
it; existing ids stay; a series over the engine is expressible; vLLM options are refused on a
transformers variant and out of range in one line. No model, no engine."""

from __future__ import annotations

import tomllib

import pytest

from lab.inputs.variants import ENGINES, Variant, VariantError, expand_series
from lab.orchestration.config import parse_config
from lab.orchestration.protocol import DEMO_CAMPAIGN, load_protocol

# Computed on main at b44749c (before the engine field) from a copy of its lab/ tree:
# `{v.name: v.variant_id for v in load_protocol(DEMO_CAMPAIGN).variants}`.
DEMO_IDS_ON_MAIN = {"batch/batch_size=1": "v-0f499dff33", "batch/batch_size=4": "v-8a39383628",
                    "batch/batch_size=8": "v-f578b09267", "bucketing/bucketing=True": "v-339a34327a"}


def test_the_demo_ids_are_those_of_main():
    variants = load_protocol(DEMO_CAMPAIGN).variants
    assert {v.name: v.variant_id for v in variants} == DEMO_IDS_ON_MAIN
    assert all(v.engine == ENGINES[0] == "transformers" for v in variants)
    # declaring the default engine is the same variant, same id
    assert Variant(batch_size=8, engine="transformers").variant_id == "v-f578b09267"


def test_a_vllm_variant_is_another_id_and_its_options_enter_it():
    base = Variant(batch_size=8)
    vllm = Variant(batch_size=8, engine="vllm")
    assert vllm.variant_id != base.variant_id
    assert vllm.config()["engine"] == "vllm" and "max_num_seqs" not in vllm.config()
    ids = {vllm.variant_id, Variant(batch_size=8, engine="vllm", max_num_seqs=4).variant_id,
           Variant(batch_size=8, engine="vllm", vllm_memory_fraction=0.2).variant_id}
    assert len(ids) == 3
    assert "vllm" in vllm.label and "transformers" not in base.label
    assert Variant.from_json(vllm.to_json()) == vllm


def test_a_series_over_the_engine_is_expressible():
    text = DEMO_CAMPAIGN.read_text() + '\n[[series]]\nname = "engine"\nfactor = "engine"\n' \
                                       'values = ["transformers", "vllm"]\n'
    cfg = parse_config(tomllib.loads(text))
    vs = expand_series(cfg.defaults, cfg.series)
    engine = [v for v in vs if "engine" in v.series.split("+")]
    assert [(v.name, v.engine) for v in engine] == [("batch/batch_size=1", "transformers"),
                                                     ("engine/engine=vllm", "vllm")]
    # the transformers row is the [defaults] variant (batch 1), already in the batch series: run once
    assert engine[0].variant_id == "v-0f499dff33" and engine[0].series == "batch+engine"
    assert engine[1].batch_size == 1 and engine[1].config().items() - engine[0].config().items() == {
        ("engine", "vllm")}


@pytest.mark.parametrize("kwargs, words", [
    ({"engine": "vLLM"}, "engine 'vLLM' unknown (did you mean 'vllm'?)"),
    ({"engine": "onnx"}, "engine 'onnx' unknown (use one of transformers, vllm)"),
    ({"max_num_seqs": 8}, "max_num_seqs is a vLLM option but engine = 'transformers'"),
    ({"vllm_memory_fraction": 0.1}, "vllm_memory_fraction is a vLLM option but engine = 'transformers'"),
    ({"engine": "vllm", "max_num_seqs": 0}, "max_num_seqs 0 must be an integer >= 1"),
    ({"engine": "vllm", "vllm_memory_fraction": 0.0}, "vllm_memory_fraction 0.0 must be in (0, 1]"),
    ({"engine": "vllm", "vllm_memory_fraction": 1.5}, "vllm_memory_fraction 1.5 must be in (0, 1]"),
    ({"engine": "vllm", "vllm_memory_fraction": True}, "vllm_memory_fraction = True has the wrong type"),
    ({"engine": "vllm", "cards": 2}, "engine vllm runs on one card per pass here"),
])
def test_a_bad_engine_option_is_one_line(kwargs, words):
    with pytest.raises(VariantError) as e:
        Variant(**kwargs)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_campaign_file_refuses_a_misspelt_engine_in_one_line():
    text = DEMO_CAMPAIGN.read_text().replace("[defaults]", '[defaults]\nengine = "vlm"', 1)
    with pytest.raises(ValueError, match="engine 'vlm' unknown") as e:
        parse_config(tomllib.loads(text))
    assert "\n" not in str(e.value)


def test_a_vllm_option_on_a_transformers_variant_names_the_variant_and_how_to_set_it():
    text = DEMO_CAMPAIGN.read_text()
    series = '[[series]]\nname = "engine"\nfactor = "engine"\nvalues = ["transformers", "vllm"]\n'
    cfg = parse_config(tomllib.loads(text + series + "vllm_memory_fraction = 0.2\n"))
    with pytest.raises(VariantError) as e:
        expand_series(cfg.defaults, cfg.series)
    msg = str(e.value)
    assert msg.startswith("variant engine/engine=transformers: vllm_memory_fraction = 0.2, fixed by series "
                          "'engine' for every value of engine, is a vLLM option but this variant's engine = "
                          "'transformers'"), msg
    assert 'a [[series]] of its own with engine = "vllm"' in msg and "values = [0.2]" in msg and "\n" not in msg
    # the way the message gives: a series of its own, the vLLM option reaching the vLLM variant only
    fixed = tomllib.loads(text + series + '[[series]]\nname = "vllm-memory"\nfactor = "vllm_memory_fraction"\n'
                          'values = [0.2]\nengine = "vllm"\n')
    cfg = parse_config(fixed)
    variants = expand_series(cfg.defaults, cfg.series)
    assert [(v.name, v.engine) for v in variants if v.vllm_memory_fraction == 0.2] == [
        ("vllm-memory/vllm_memory_fraction=0.2", "vllm")]
    assert all(v.vllm_memory_fraction is None for v in variants if v.engine == "transformers")
    with pytest.raises(ValueError) as d:  # [defaults]: every variant, transformers by default
        parse_config(tomllib.loads(text.replace("[defaults]", "[defaults]\nvllm_memory_fraction = 0.2", 1)))
    assert str(d.value).startswith("[defaults] vllm_memory_fraction = 0.2 is a vLLM option, and [defaults] "
                                   "applies to every variant, whose engine here is 'transformers' (the default); "
                                   'set vllm_memory_fraction only where engine = "vllm"'), str(d.value)
