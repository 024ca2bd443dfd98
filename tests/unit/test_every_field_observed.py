"""No declared setting is silently ignored: every field of Variant that says what runs has an
observation that contradicts it raising NotHonoured (lab.passes.observed.require_honoured),
naming the field. ``cards`` is checked by lab.passes.multicard (cards that reported against
cards declared); the name fields say what a variant is called, not what runs.

Adding a field to Variant without an observation rule fails
``test_every_variant_field_has_an_observation_rule``."""
from __future__ import annotations

from dataclasses import fields, replace

import msgspec
import pytest

from lab.inputs.variants import NAME_FIELDS, Variant
from lab.passes.observed import NOT_OBSERVABLE, NotHonoured, require_honoured
from lab.passes.records import Observed

CHECKED_ELSEWHERE = {"cards": "lab.passes.multicard: cards_observed against cards declared"}
DECLARED = Variant(batch_size=4, precision="bf16", padding="longest", max_length=64, bucketing=True,
                   device="cpu", compile=False, attention="sdpa", quantization="none")
HONOURED = {"dtype": "bfloat16", "device": "cpu", "attention": "sdpa", "threads_declared": 2, "threads": 2,
            "compile": False, "quantization": "none", "padding": "longest", "max_tokens": 60,
            "bucketing": "sorted by token count", "batch_size": 4, "window_items": 10}
CONTRADICTIONS = {  # field: (observed values that contradict DECLARED, words of the reason)
    "batch_size": ({"batch_size": 1}, "batch_size 4 declared, the largest batch the model received held 1 of 10"),
    "precision": ({"dtype": "float32"}, "precision bf16 declared, weights loaded as float32"),
    "padding": ({"padding": "max_length"}, "padding longest declared, batches padded: max_length"),
    "max_length": ({"max_tokens": 65}, "max_length 64 declared, an item kept 65 tokens"),
    "bucketing": ({"bucketing": "corpus order"}, "bucketing True declared, processing order: corpus order"),
    "device": ({"device": "cuda:0"}, "device cpu asked, weights on cuda:0"),
    "compile": ({"compile": True}, "compile False declared, compiled module: True"),
    "attention": ({"attention": "eager"}, "attention sdpa declared, the model reports eager"),
    "quantization": ({"quantization": "int8"}, "quantization none declared, weights are int8"),
    "engine": ({"engine": "vllm"}, "engine transformers declared, the pass ran vllm"),
}
VLLM = replace(DECLARED, engine="vllm", max_num_seqs=8, vllm_memory_fraction=0.1, max_num_batched_tokens=512)
VLLM_HONOURED = {**HONOURED, "engine": "vllm", "max_num_seqs": 8, "vllm_memory_fraction": 0.1,
                 "prefix_caching": False, "max_num_batched_tokens": 512}
VLLM_CONTRADICTIONS = {  # the vLLM options, declared on a vLLM variant
    "max_num_seqs": ({"max_num_seqs": 256}, "max_num_seqs 8 declared, vLLM scheduled at most 256 sequences"),
    "vllm_memory_fraction": ({"vllm_memory_fraction": 0.92}, "vllm_memory_fraction 0.1 declared, vLLM "
                                                               "reserved 0.92 of the memory"),
    "prefix_caching": ({"prefix_caching": True}, "prefix_caching False declared, vLLM's enable_prefix_caching True"),
    "max_num_batched_tokens": ({"max_num_batched_tokens": 2048}, "max_num_batched_tokens 512 declared, vLLM "
                                                                   "schedules at most 2048 tokens in one step"),
}
SERVED = replace(DECLARED, engine="vllm", batch_size=1, bucketing=False, request_rate=4.0)
SERVED_HONOURED = {**HONOURED, "engine": "vllm", "batch_size": NOT_OBSERVABLE, "bucketing": "corpus order",
                   "request_rate": 3.9, "generator_lag_p99_s": 0.02, "request_schedule": "replayed"}
SERVER_CONTRADICTIONS = {  # a server pass's factor (lab.passes.tasks.server_job)
    "request_rate": ({"generator_lag_p99_s": 0.05},
                     "request_rate 4 req/s declared, the load generator released requests late (lag p99 0.0500 s "
                     "> 0.0250 s, 10% of the mean gap)"),
}


def test_every_variant_field_has_an_observation_rule():
    runs = {f.name for f in fields(Variant)} - set(NAME_FIELDS)
    ruled = set(CONTRADICTIONS) | set(VLLM_CONTRADICTIONS) | set(SERVER_CONTRADICTIONS)
    assert runs - set(CHECKED_ELSEWHERE) == ruled, \
        "a Variant field without an observation in require_honoured (lab/passes/observed.py) is silently ignorable"


def test_the_honoured_observation_passes():
    require_honoured(DECLARED, HONOURED, "cpu")
    short = {**HONOURED, "batch_size": 3, "window_items": 3}  # fewer items than one batch: all in one
    require_honoured(DECLARED, short, "cpu")


@pytest.mark.parametrize("field_name", sorted(CONTRADICTIONS))
def test_a_contradicted_field_is_named(field_name):
    change, words = CONTRADICTIONS[field_name]
    with pytest.raises(NotHonoured, match="declared value not honoured: ") as e:
        require_honoured(DECLARED, {**HONOURED, **change}, "cpu")
    assert words in str(e.value)


def test_a_vllm_observation_that_honours_its_options_passes():
    require_honoured(VLLM, VLLM_HONOURED, "cpu")
    with pytest.raises(NotHonoured, match="engine vllm declared, the pass ran transformers"):
        require_honoured(VLLM, {k: v for k, v in VLLM_HONOURED.items() if k != "engine"}, "cpu")


@pytest.mark.parametrize("field_name", sorted(VLLM_CONTRADICTIONS))
def test_a_contradicted_vllm_option_is_named(field_name):
    change, words = VLLM_CONTRADICTIONS[field_name]
    with pytest.raises(NotHonoured, match="declared value not honoured: ") as e:
        require_honoured(VLLM, {**VLLM_HONOURED, **change}, "cpu")
    assert words in str(e.value)


@pytest.mark.parametrize("field_name", ["max_num_seqs", "max_num_batched_tokens", "vllm_memory_fraction"])
def test_a_vllm_option_the_engine_did_not_report_is_named_as_unreported(field_name):
    """A server that gave no value (a /server_info call that timed out) fails the declared option
    saying so, not 'scheduled at most None'."""
    seen = {k: v for k, v in VLLM_HONOURED.items() if k != field_name}
    with pytest.raises(NotHonoured, match=f"{field_name} .* declared, vLLM did not report it") as e:
        require_honoured(VLLM, seen, "cpu")
    assert "None" not in str(e.value)


def test_a_server_pass_whose_generator_kept_its_schedule_passes():
    require_honoured(SERVED, SERVED_HONOURED, "cpu")
    with pytest.raises(NotHonoured, match="schedule could not be replayed, so its lag is unknown"):
        require_honoured(SERVED, {**SERVED_HONOURED, "generator_lag_p99_s": None, "request_schedule": "unknown"}, "cpu")


@pytest.mark.parametrize("field_name", sorted(SERVER_CONTRADICTIONS))
def test_a_contradicted_server_factor_is_named(field_name):
    change, words = SERVER_CONTRADICTIONS[field_name]
    with pytest.raises(NotHonoured, match="declared value not honoured: ") as e:
        require_honoured(SERVED, {**SERVED_HONOURED, **change}, "cpu")
    assert words in str(e.value)


@pytest.mark.parametrize("change, words", [
    ({"dtype": "bfloat16"}, "precision fp32 declared, the entry's settings_used() reported bfloat16"),
    ({"device": "cuda:0"}, "device cpu asked, the entry's settings_used() reported device cuda:0"),
    ({"padding": "max_length"}, "padding longest declared, the entry's settings_used() reported max_length"),
])
def test_a_custom_entry_contradiction_says_what_the_entry_reported(change, words):
    """Custom code: the lab never saw its weights or batches, only its settings_used() (fixmsg item 6)."""
    declared = replace(DECLARED, precision="fp32")
    seen = {**HONOURED, "dtype": "float32", "reported_by_entry": ", ".join(sorted(change)), **change}
    with pytest.raises(NotHonoured) as e:
        require_honoured(declared, seen, "cpu")
    assert words in str(e.value) and "weights" not in str(e.value) and "batches padded" not in str(e.value)
    # a multi-card pass checks each card's typed record (lab.passes.multicard): the same words after it
    card = msgspec.convert(seen, Observed).to_json()
    with pytest.raises(NotHonoured) as e:
        require_honoured(declared, card, "cpu")
    assert words in str(e.value) and "weights" not in str(e.value)


def test_every_key_the_check_reads_survives_the_typed_record():
    """The typed Observed drops a key it does not declare (old archives decode), so a key
    require_honoured reads but Observed lacks is lost on the multi-card path, where each card's
    record is checked after decoding: the custom entry's contradiction read "weights loaded as"."""
    custom = {"reported_by_entry": "precision"}
    for seen in (HONOURED, VLLM_HONOURED, SERVED_HONOURED, custom):
        assert set(seen) <= set(Observed.__struct_fields__), set(seen) - set(Observed.__struct_fields__)
