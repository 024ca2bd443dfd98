"""vLLM's own settings observed, not assumed (issue 31 part 2, issue 35 item 3), on the pinned vLLM.

The session's engine of the demo classifier (tests/conftest.py ``vllm_classifier``, shared with
test_engine_vllm.py) is read: the KV reservation under
``VLLM_CPU_KVCACHE_SPACE`` as vLLM set it (``kv_cache_memory_bytes``: this test fails when a vLLM
upgrade renames or drops the field), the OpenMP binding following the declared threads, prefix
caching off and read back from the engine. The lock-time probe (no engine: the import of vLLM and
its model config, ~10 s) refuses an embedding pooling vLLM would not apply, once per process.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from lab.engines import vllm_env
from lab.engines.vllm import reservation
from lab.inputs.variants import Variant

GIB = 1 << 30
needs_venv = pytest.mark.skipif(not vllm_env.is_ready(), reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (.ci/run does) to run the vLLM tests"))
pytestmark = [needs_venv]


@pytest.fixture(scope="module")
def engine(vllm_classifier):
    """The demo classifier's engine of the session (tests/conftest.py), started with
    VLLM_CPU_KVCACHE_SPACE=1 and threads = 1."""
    return vllm_classifier


def test_kv_reservation_binding_and_caching_are_read_from_the_engine(engine):
    ready = engine.ready
    # the KV cache as vLLM set it: 1 GiB from VLLM_CPU_KVCACHE_SPACE, never "sized itself"
    assert ready.memory["kv_cache_space_bytes"] == GIB, ready.memory
    mem = reservation(ready, "cpu")
    assert mem["kv_cache_bytes"] == GIB and "kv_cache_bytes" not in mem["reasons"], mem
    obs = engine.observed()
    # prefix caching: vLLM's default is on; the lab's default (off) read back from the engine
    assert ready.caching == {"prefix_caching": False} and obs["prefix_caching"] is False
    # the binding follows threads = 1: one CPU, the first this process may run on
    first = min(os.sched_getaffinity(0))
    assert obs["threads_bind"] == str(first), ready.binding
    assert obs["threads"] == 1, ready.binding
    bound = [p for p in ready.binding["processes"].values() if p["cpus"] == [first]]
    assert bound, ready.binding  # an engine process whose every thread runs on that CPU


def test_an_embedding_pooling_vllm_would_not_apply_is_refused_at_lock_once(model_dir):
    """Issue 35 item 3: the demo checkpoint as an embedding model with engine vllm and pooling
    mean: vLLM pools it CLS, so every pass would fail after its engine start; the lock refuses it
    in one line, naming CLS whole. The MiniLM encoder (sentence-transformers: mean) is accepted.
    The answer is kept for the process: a second lock asks vLLM nothing."""
    from lab.engines import vllm as engine_mod
    from lab.inputs.models import encoder_path
    from lab.kinds import task_kind
    from lab.orchestration.preflight import check_engine

    def proto(model):
        return SimpleNamespace(variants=[Variant(engine="vllm", max_length=128)], model_ref=str(model),
                               config=SimpleNamespace(model=SimpleNamespace(revision=None),
                                                      task=SimpleNamespace(pooling="mean", normalize=True)),
                               task_kind="embedding", kind=task_kind("embedding"))

    [check] = check_engine(proto(model_dir))
    assert check.ok is False
    assert "\n" not in check.detail and "vLLM pools CLS" in check.detail and "pooling mean" in check.detail
    [check] = check_engine(proto(encoder_path()))
    assert check.ok is True, check.detail
    calls = []
    real = engine_mod.probe_model
    engine_mod.probe_model = lambda *a, **k: calls.append(a) or real(*a, **k)
    try:
        t0 = time.perf_counter()
        [again] = check_engine(proto(model_dir))
    finally:
        engine_mod.probe_model = real
    assert again.ok is False and calls == [] and time.perf_counter() - t0 < 5
