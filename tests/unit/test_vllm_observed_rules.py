"""The pure rules behind vLLM's observed settings (issue 31 part 2, issue 35 item 3): the thread
binding handed to vLLM, the threads read back, the pooling comparison of lock and pass, prefix
caching as a declared option, and failure texts never cut inside a word."""

from __future__ import annotations

import pytest

from lab.engines.vllm import bound_threads, pooling_mismatch, probe_cache_key, settings_for, thread_binding
from lab.facts.errors import ELLIPSIS, UserError, clip
from lab.inputs.variants import Variant, VariantError
from lab.passes.observed import NotHonoured, require_honoured


def test_the_binding_follows_the_declared_threads():
    assert thread_binding(0) == {}  # none declared: vLLM's own binding, recorded
    assert thread_binding(2, {3, 1, 2}) == {"VLLM_CPU_OMP_THREADS_BIND": "1,2", "OMP_NUM_THREADS": "2"}
    with pytest.raises(UserError, match=r"threads 3 declared.*2 CPU"):
        thread_binding(3, {0, 1})


def test_the_threads_vllm_used_are_the_cpus_of_the_bound_process():
    binding = {"processes": {"1": {"cpus": [0, 1]}, "2": {"cpus": [0]}, "3": {"cpus": []}}}
    assert bound_threads(binding) == 1
    assert bound_threads({"processes": {}}) is None and bound_threads({}) is None


def test_prefix_caching_is_a_declared_vllm_option_off_by_default():
    model = "/models/m"
    assert settings_for(Variant(engine="vllm"), model, "cpu").prefix_caching is False
    assert settings_for(Variant(engine="vllm", prefix_caching=True), model, "cpu").prefix_caching is True
    with pytest.raises(VariantError, match="prefix_caching is a vLLM option"):
        Variant(prefix_caching=True)
    # a new field leaves existing ids valid: the default is not in the id
    assert Variant(engine="vllm").variant_id == Variant(engine="vllm", prefix_caching=None).variant_id
    assert Variant(engine="vllm").variant_id != Variant(engine="vllm", prefix_caching=True).variant_id


def test_threads_reach_vllm_on_cpu_only():
    assert settings_for(Variant(engine="vllm"), "/m", "cpu", threads=2).threads == 2
    assert settings_for(Variant(engine="vllm"), "/m", "cuda:0", threads=2).threads == 0


def test_prefix_caching_read_back_must_match_the_declaration():
    obs = {"engine": "vllm", "threads": 1, "threads_declared": 1, "prefix_caching": True}
    with pytest.raises(NotHonoured, match="prefix_caching False declared, vLLM's enable_prefix_caching True"):
        require_honoured(Variant(engine="vllm"), obs, "cpu")
    require_honoured(Variant(engine="vllm", prefix_caching=True), obs, "cpu")


def test_the_lock_and_the_pass_compare_pooling_one_way():
    cls = {"pooling_type": None, "use_activation": None, "seq_pooling_type": "CLS"}
    assert pooling_mismatch("mean", True, cls) == ("pooling mean normalize True declared, vLLM pools CLS "
                                                   "(normalize not said)")
    assert pooling_mismatch("mean", True, {"seq_pooling_type": "MEAN", "use_activation": "True"}) == ""
    assert "pools MEAN (normalize true)" in pooling_mismatch("mean", False, {"pooling_type": "MEAN",
                                                                             "normalize": "True"})
    assert "vLLM pools unknown" in pooling_mismatch("mean", True, None)


def test_the_probe_key_changes_with_the_model_and_the_question(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    a = probe_cache_key(tmp_path, "pooling", None, "float32")
    assert a == probe_cache_key(tmp_path, "pooling", None, "float32")
    assert a != probe_cache_key(tmp_path, "pooling", None, "bfloat16")
    (tmp_path / "config.json").write_text('{"architectures": []}')
    assert a != probe_cache_key(tmp_path, "pooling", None, "float32")


def test_a_failure_text_is_never_cut_inside_a_word():
    # issue 35 item 3: "NotHonoured ... 'seq_pooling_type': 'C" cut mid-word
    text = "NotHonoured: declared value not honoured: " + "pooling {'seq_pooling_type': 'CLS'} " * 20
    out = clip(text, 300)
    assert len(out) <= 300 and out.endswith(ELLIPSIS)
    kept = out.removesuffix(ELLIPSIS).split()
    assert all(w in text.split() for w in kept)  # every kept word whole
    assert clip("short  text\nhere", 300) == "short text here"
    assert clip("x" * 50, 10) == "x" * 8 + ELLIPSIS  # one word longer than the limit


def test_the_probe_key_changes_with_the_venv_that_answers(tmp_path, monkeypatch):
    """An answer from one vLLM venv never stands for another one, nor for a venv not built yet
    (the lock must still find that it cannot be built: tests/vllm/test_engine_vllm.py)."""
    from lab.engines import vllm_env

    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    built = tmp_path / "built"
    built.mkdir()
    (built / vllm_env.STAMP_NAME).write_text("abc\n")
    monkeypatch.setenv(vllm_env.VENV_ENV, str(built))
    a = probe_cache_key(model, "pooling", None, "float32")
    monkeypatch.setenv(vllm_env.VENV_ENV, str(tmp_path / "absent"))
    assert probe_cache_key(model, "pooling", None, "float32") != a
    monkeypatch.setenv(vllm_env.VENV_ENV, str(built))
    (built / vllm_env.STAMP_NAME).write_text("def\n")  # rebuilt from other requirements
    assert probe_cache_key(model, "pooling", None, "float32") != a
