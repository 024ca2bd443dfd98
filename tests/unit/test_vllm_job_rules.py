"""The vLLM pass's rules that need no engine (issue 21): which job a vLLM variant gets, what its
window counts, how its observation is judged, what the lock refuses, how its reservation decides
feasibility and what the raw table says about it."""

from __future__ import annotations

import pytest

from lab.facts.errors import ProtocolError
from lab.inputs.variants import Variant, VariantError
from lab.memory.estimate import EncoderShape, activation_bytes_per_item
from lab.memory.feasibility import reservation_fits
from lab.passes.backends.vllm_backend import VllmEngine
from lab.passes.inference import WindowResult
from lab.passes.observed import PACKED, NotHonoured, require_honoured
from lab.passes.spec import PassSpec
from lab.passes.tasks import job_for

MINILM = EncoderShape(384, 12, 1536, 6, 22_720_916, "sdpa")
GIB = 2**30


def spec(variant: Variant, kind: str | None = None) -> PassSpec:
    return PassSpec(campaign="c", pass_id="p", variant=variant, corpus_path="x.jsonl", model_ref="m",
                    out_dir="/tmp", extra={"task": {"kind": kind}} if kind else {})


def test_a_vllm_variant_gets_the_kinds_job_on_the_vllm_engine():
    job = job_for(spec(Variant(engine="vllm")))
    assert type(job).__name__ == "ClassificationJob" and isinstance(job.engine, VllmEngine)
    job = job_for(spec(Variant(engine="vllm"), "embedding"))
    assert type(job).__name__ == "EmbeddingJob" and isinstance(job.engine, VllmEngine)
    assert job.engine.needs.operation == "embed" and job.engine.needs.pooling == "mean"
    assert type(job_for(spec(Variant())).engine).__name__ == "TransformersEngine"
    with pytest.raises(ValueError, match="engine vllm runs task kinds classification, embedding"):
        job_for(spec(Variant(engine="vllm"), "custom"))


def test_a_packed_call_counts_real_tokens_and_the_items_sent():
    win = WindowResult(["a", "b", "c"], [None] * 3, [None] * 3, [None] * 3, 0, 0, 0, 0, 0)
    lengths = [5, 9, 3]
    win.count_packed_call([0, 1], lengths, 2)
    win.count_packed_call([2], lengths, None)
    assert (win.items_done, win.batches, win.real_tokens, win.padded_tokens) == (3, 2, 17, 17)
    assert win.attention_pairs == 25 + 81 + 9 and win.largest_batch == 2 and win.max_running == 2


def observed(**extra) -> dict:
    return {"dtype": "float32", "device": "cpu", "threads": 1, "threads_declared": 1, "compile": False,
            "engine": "vllm", "attention": "vLLM's own backend", **extra}


def test_packed_honours_longest_and_the_attention_field_is_not_vllms():
    v = Variant(engine="vllm", batch_size=4)
    require_honoured(v, observed(padding=PACKED, batch_size=4, window_items=10), "cpu")
    with pytest.raises(NotHonoured, match="batch_size 4 declared, the largest batch the model received held 2"):
        require_honoured(v, observed(padding=PACKED, batch_size=2, window_items=10), "cpu")
    with pytest.raises(NotHonoured, match="engine vllm declared, the pass ran transformers"):
        require_honoured(v, {**observed(), "engine": "transformers"}, "cpu")
    # a transformers pass reporting packed padding would contradict its declared padding
    with pytest.raises(NotHonoured, match="padding longest declared"):
        require_honoured(Variant(padding="longest"), {**observed(padding="mixed (1 of 2 batches at max_length)"),
                                                      "engine": "transformers", "attention": "sdpa"}, "cpu")


def test_max_length_padding_is_refused_for_vllm_in_one_line():
    with pytest.raises(VariantError) as e:
        Variant(engine="vllm", padding="max_length")
    assert "vLLM packs sequences without padding" in str(e.value) and "\n" not in str(e.value)


def test_a_vllm_variant_of_a_custom_task_is_refused_at_load(tmp_path, fake_model):
    from conftest import cut_corpus, write_campaign

    from lab.orchestration.protocol import load_protocol

    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, fake_model, corpus)
    entry = tmp_path / "entry.py"
    entry.write_text("class Job:\n    pass\n")
    text = f.read_text().replace("[defaults]\n", '[defaults]\nengine = "vllm"\n')
    f.write_text(text + '\n[task]\nkind = "custom"\nentry = "entry.py:Job"\n')
    with pytest.raises(ProtocolError) as e:
        load_protocol(f)
    assert 'declares engine = "vllm", which runs classification, embedding, generation tasks in this lab, not custom' \
        in str(e.value)
    assert "\n" not in str(e.value)


def test_the_reservation_decides_a_vllm_variants_feasibility():
    r = reservation_fits(MINILM, "fp32", 24 * GIB, 0.1, 256)
    assert r.reserved_bytes == -(-24 * GIB * 1 // 10)  # ceil(budget x fraction), vLLM's own rule
    assert r.needed_bytes == MINILM.n_params * 4 + activation_bytes_per_item(MINILM, "fp32", 256)
    assert r.fits
    tiny = reservation_fits(MINILM, "fp32", 100 * 2**20, 0.5, 256)  # 50 MiB cannot hold 91 MB of weights
    assert not tiny.fits
    with pytest.raises(ValueError):
        reservation_fits(MINILM, "fp32", GIB, 0.0, 256)


def test_the_raw_table_states_the_vllm_scopes():
    from lab.passes.records import Observed
    from lab.report.raw_table import COLUMNS, engine_notes

    assert {"engine", "engine_start_s", "observed_max_running", "engine_reserved_bytes"} <= set(COLUMNS)
    notes = engine_notes(Variant(engine="vllm", compile=False),
                         _result(observed=Observed(batch_size=8, max_running=5, max_num_seqs=256,
                                                   max_num_batched_tokens=4096),
                                 engine={"scheduler": {"enforce_eager": True}},
                                 engine_memory={"fraction": 0.1, "of": "host RAM", "reasons": {"kv_cache_bytes": "x"}}))
    text = " | ".join(notes)
    # what was declared and what vLLM ran, from the record (not a fixed sentence)
    assert "compile = false was declared, vLLM ran enforce_eager true" in text
    compiled = " | ".join(engine_notes(Variant(engine="vllm", compile=True),
                                       _result(engine={"scheduler": {"enforce_eager": False}})))
    assert "compile = true was declared, vLLM ran enforce_eager false" in compiled
    assert "vLLM did not record its enforce_eager" in " | ".join(engine_notes(Variant(engine="vllm"), _result()))
    assert "batch_size 8 is the most items the lab sent vLLM per call; vLLM ran at most 5" in text
    assert "fraction 0.1 of host RAM" in text and "never added to peak_allocated_bytes" in text
    assert "empty kv_cache_bytes cell: x" in text


# ---- generation on vLLM -------------------------------------------------------------------------

GEN_TASK = {"kind": "generation", "prompt": "{text}\nNewsgroup:", "max_new_tokens": 16, "stop": ["\n"]}


def test_a_generation_variant_asks_vllm_for_greedy_with_room_for_its_tokens():
    from lab.engines.vllm import settings_for

    v = Variant(engine="vllm", max_length=128)
    pooled = settings_for(v, "m", "cpu")
    assert (pooled.runner, pooled.max_model_len, pooled.max_new_tokens, pooled.stop) == ("pooling", 128, None, ())
    gen = settings_for(v, "m", "cpu", max_new_tokens=16, stop=("\n",))
    # max_length is the longest prompt; vLLM's max_model_len holds it and the generated tokens
    assert (gen.runner, gen.max_model_len, gen.max_new_tokens, gen.stop) == ("generate", 144, 16, ("\n",))


def test_a_generation_variant_gets_the_vllm_job_and_runner():
    from lab.kinds import KINDS

    v = Variant(engine="vllm", max_length=128)
    assert [KINDS[k].vllm_runner for k in ("classification", "embedding", "generation")] == \
        ["pooling", "pooling", "generate"]
    job = job_for(PassSpec(campaign="c", pass_id="p", variant=v, corpus_path="x.jsonl", model_ref="m",
                           out_dir="/tmp", extra={"task": GEN_TASK}))
    assert type(job).__name__ == "GenerationJob" and isinstance(job.engine, VllmEngine)
    assert job.engine.needs.rule.stop == ("\n",) and job.engine.needs.operation == "generate"


def ready_client(settings):
    """A client whose engine reported ready (no process: the checks before a call need none)."""
    from lab.engines.vllm import Ready, VllmClient

    client = VllmClient(settings)
    client.ready = Ready(import_s=0.0, engine_start_s=0.0, architecture=[], pooling=None,
                         scheduler={"max_model_len": settings.max_model_len}, memory={}, versions={},
                         setup_s=0.0, rss_bytes={})
    return client


def test_generate_refuses_a_prompt_without_room_for_max_new_tokens_before_vllm():
    from lab.engines.vllm import settings_for

    client = ready_client(settings_for(Variant(engine="vllm", max_length=8), "m", "cpu", max_new_tokens=4))
    with pytest.raises(ValueError, match=r"item 1 has 9 prompt tokens, and with max_new_tokens 4 that passes "
                                         r"max_model_len 12; vLLM would end it there"):
        client.generate([[1] * 8, [1] * 9])
    pooled = ready_client(settings_for(Variant(engine="vllm", max_length=8), "m", "cpu"))
    with pytest.raises(RuntimeError, match="generate\\(\\) on an engine started with runner 'pooling'"):
        pooled.generate([[1]])


def test_vllm_sampling_is_recorded_as_vllm_holds_it():
    from lab.engines.vllm_worker import Op, Reply, _sampling

    assert (Op.GENERATE, Reply.GENERATED) == ("generate", "generated")
    assert _sampling(None) is None

    class Greedy:  # the attributes vLLM's SamplingParams has; an enum for its sampling type
        temperature, max_tokens, stop = 0.0, 16, ["\n"]
        sampling_type = type("T", (), {"name": "GREEDY"})()

    assert _sampling(Greedy()) == {"temperature": 0.0, "max_tokens": 16, "stop": ["\n"], "sampling_type": "GREEDY"}


def _result(**fields):
    """A vLLM pass's record with only what the note reads besides the always-written fields."""
    from lab.passes.records import PassResult, Phases

    return PassResult(pass_id="p", campaign="c", variant={"engine": "vllm"}, start_time="t0", end_time="t1",
                      status="ok", error="", phases_s=Phases(), items_total=8, items_completed=8,
                      predictions_path="predictions.jsonl", exit_code=0, **fields)
