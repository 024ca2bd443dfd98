"""The user's own code for a kind (``[task] entry`` beside embedding or generation): the kind as the
code runs it, the keys the campaign file may hold, and what ``embed`` may return."""

from __future__ import annotations

import numpy as np
import pytest

from lab.kinds import KINDS, task_kind
from lab.kinds.kind import ANY, TRANSFORMERS
from lab.orchestration.config import ConfigError


def test_a_kind_run_by_the_users_code_keeps_its_record_and_rule_and_drops_the_engine_facts():
    for name in ("embedding", "generation"):
        built_in, own = KINDS[name], task_kind(name, entry=True)
        assert own.by_entry and not built_in.by_entry
        assert (own.record, own.metrics, own.agreement_max_differing) == (
            built_in.record, built_in.metrics, built_in.agreement_max_differing)
        assert own.engines == (TRANSFORMERS,) and own.vllm_runner is None and own.architecture == ANY
        assert own.job == built_in.job and not own.lab_tokenizes and own.fixed_padding is None
        assert own.run_by_entry() is own
    assert task_kind("custom", entry=True) is KINDS["custom"]
    assert task_kind("classification", entry=True) is KINDS["classification"]  # refused by the config first
    with pytest.raises(ValueError):
        KINDS["classification"].run_by_entry()


def section(**table):
    from lab.orchestration.config import TaskSection, parse_section

    return parse_section(TaskSection, table, "task")


def test_entry_is_a_key_of_embedding_and_generation_and_refused_elsewhere_naming_who_takes_it():
    assert section(kind="embedding", entry="e.py:E").entry == "e.py:E"
    gen = section(kind="generation", prompt="{text}", max_new_tokens=4, entry="g.py:G", files=["w.bin"])
    assert gen.files == ("w.bin",)
    with pytest.raises(ConfigError, match=r'^\[task\] entry applies to kind = "embedding" or "custom" or '
                                          r'"generation" only; remove it'):
        section(kind="classification", entry="e.py:E")
    with pytest.raises(ConfigError, match=r"^\[task\] files lists the files an entry reads; declare entry"):
        section(kind="embedding", files=["w.bin"])
    with pytest.raises(ConfigError, match=r'is not "path/to/file.py:Name"'):
        section(kind="embedding", entry="e.py")


@pytest.mark.parametrize(("out", "said"), [
    (None, "None"),
    ([0.5, 0.5], "an array of shape (2,), not (texts, width)"),
    ([[1.0, 2.0]], "1 row(s) for 2 texts"),
    ([[1.0, float("nan")], [1.0, 2.0]], "a non-finite value in row 0"),
    ([["a", "b"], ["c", "d"]], "list that is no array of numbers"),
    ("ab", "str 'ab'"),
])
def test_what_embed_returns_is_named_when_it_is_no_vectors(out, said):
    from lab.passes.backends.entry_backend import vectors_refusal

    why, rows = vectors_refusal(out, 2, None)
    assert why.startswith(said) and rows == [], why


def test_embed_may_return_an_array_a_tensor_or_lists_of_one_width():
    import torch

    from lab.passes.backends.entry_backend import vectors_refusal

    for out in (np.ones((2, 3)), torch.ones(2, 3, dtype=torch.float16), [[1, 2, 3], [4, 5, 6]]):
        why, (arr,) = vectors_refusal(out, 2, None)
        assert why == "" and arr.shape == (2, 3) and arr.dtype == np.float32
    assert vectors_refusal(np.ones((2, 4)), 2, 3)[0] == "rows 4 wide after 3 wide ones"


def spec_of(task: dict | None, engine: str = "transformers"):
    from lab.inputs.variants import Variant
    from lab.passes.spec import PassSpec

    return PassSpec(campaign="c", pass_id="p", variant=Variant(engine=engine), corpus_path="x.jsonl", model_ref="m",
                    out_dir="/tmp", extra={"task": task} if task else {})


def test_the_lab_never_compiles_the_users_code_whatever_the_kind():
    """A job whose engine has a ``compile`` step gets a lab compile phase (lab.passes.sequence); the
    user's code (the entry engine) has none: the code compiles itself, if at all."""
    from lab.passes.tasks import job_for

    gen = {"kind": "generation", "prompt": "{text}", "max_new_tokens": 4}
    assert callable(job_for(spec_of({"kind": "embedding"})).compile)
    assert callable(job_for(spec_of(gen)).compile)
    for task in ({"kind": "custom", "entry": "e.py:E"}, {"kind": "embedding", "entry": "e.py:E"},
                 {**gen, "entry": "g.py:G"}):
        job = job_for(spec_of(task))
        assert job.compile is None and job.start_engine is None and type(job.engine).__name__ == "EntryEngine"
    assert job_for(spec_of(gen, "vllm")).compile is None  # vLLM compiles in its own start


def test_one_job_per_kind_whatever_the_engine_and_each_engine_holds_no_kind():
    """A kind's job is the same class on every engine; its engine is the registry's, given the
    kind's operation; no engine module names a kind (the kind's words live in lab.kinds)."""
    import ast
    import importlib
    import inspect

    from lab.kinds import KINDS
    from lab.passes import backends
    from lab.passes.tasks import job_for

    gen = {"kind": "generation", "prompt": "{text}", "max_new_tokens": 4}
    for task in ({"kind": "classification"}, {"kind": "embedding"}, gen):
        jobs = [job_for(spec_of(task, engine)) for engine in ("transformers", "vllm")]
        if task["kind"] != "classification":  # the custom kind is classification's by the user's code
            jobs.append(job_for(spec_of({**task, "entry": "e.py:E"})))
        assert len({type(j).__name__ for j in jobs}) == 1, jobs
        engines = ["TransformersEngine", "VllmEngine", "EntryEngine"][:len(jobs)]
        assert [type(j.engine).__name__ for j in jobs] == engines
        assert {j.engine.needs.operation for j in jobs} == {KINDS[task["kind"]].operation}
    for name, where in backends.ENGINES.items():
        tree = ast.parse(inspect.getsource(importlib.import_module(where.split(":")[0])))
        words = {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)}
        assert not words & set(KINDS), (name, words & set(KINDS))


def test_the_engines_a_variant_declares_are_one_list_and_each_has_a_backend():
    from lab.facts.constants import ENGINE_NAMES
    from lab.inputs.variants import ENGINES as VARIANT_ENGINES
    from lab.kinds.kind import TRANSFORMERS, VLLM
    from lab.passes.backends import ENGINES, ENTRY

    assert VARIANT_ENGINES is ENGINE_NAMES and (TRANSFORMERS, VLLM) == ENGINE_NAMES
    assert set(ENGINES) == {*ENGINE_NAMES, ENTRY}


def test_the_users_code_reports_a_setting_that_contradicts_the_variant_and_is_refused():
    """settings_used() is compared field by field: a max_length or batch size it reports other than
    declared fails the pass (the trial's LiarMaxLenGen: max_length 999 for 128, batch_size 77 for 4)."""
    from lab.inputs.variants import Variant
    from lab.passes.backends.entry_backend import contradictions

    declared = Variant(batch_size=4, max_length=128).to_json()
    said = contradictions(declared, {"max_length": 999, "batch_size": 77, "precision": "bf16", "padding": "x",
                                     "label": "mine", "cache": True})
    assert said == ["max_length 128 declared, the entry's settings_used() reported 999",
                    "batch_size 4 declared, the entry's settings_used() reported 77"]
    assert contradictions(declared, {"max_length": 128, "batch_size": 4}) == []
