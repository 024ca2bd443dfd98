"""A user's entry whose predict or settings_used returns what the protocol does not take is told,
in one line, what it returned and where (warm-up or measured window), never with a traceback of
the lab's own code (lab.passes.tasks.custom.CustomJob; trial items 5-8)."""

from __future__ import annotations

import pytest
from conftest import cut_corpus, demo_rows

from lab.inputs.variants import Variant
from lab.kinds.custom_kind import PREDICT_RETURNS
from lab.passes.spec import PassSpec
from lab.passes.tasks.custom import CustomJob, EntryFailed

ENTRY = '''
class Entry:
    def __init__(self, settings, device):
        pass

    def predict(self, texts):
        return {predict}

    def settings_used(self):
        return {used}
'''


def job_for(tmp_path, model_dir, predict: str = "['x' for _ in texts]", used: str = "{}", batch_size: int = 4):
    (tmp_path / "entry.py").write_text(ENTRY.format(predict=predict, used=used))
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 5, 3, 2)
    spec = PassSpec("t", "p001", Variant(batch_size=batch_size, device="cpu"), str(corpus), str(model_dir),
                    str(tmp_path), warmup_items=4,
                    extra={"task": {"kind": "custom", "entry": f"{tmp_path / 'entry.py'}:Entry"}})
    job = CustomJob(spec)
    job.load("cpu")
    return job


def refusal(call) -> EntryFailed:
    with pytest.raises(EntryFailed) as e:
        call()
    assert "\n" not in str(e.value) and "custom.py" not in str(e.value), str(e.value)
    return e.value


@pytest.mark.parametrize("predict, said", [
    ("[3 for _ in texts]", "predict returned int 3 at position 0 on batch 1 of the measured window"),
    ("None", "predict returned None on batch 1 of the measured window"),
    ("'sci.space'", "predict returned str 'sci.space' on batch 1 of the measured window"),
    ("len(texts)", "predict returned int 4 on batch 1 of the measured window"),
    ("['x'] * (len(texts) + 1)", "predict returned 5 value(s) for 4 texts on batch 1 of the measured window"),
])
def test_a_predict_return_that_is_not_one_str_per_text_is_named_as_what_it_is(tmp_path, model_dir, predict, said):
    job = job_for(tmp_path, model_dir, predict)
    e = refusal(lambda: job.run_window(demo_rows()[:8], "cpu"))
    assert str(e).startswith(said) and f"it must return {PREDICT_RETURNS}, one label per text" in str(e), str(e)
    assert e.items_done == 0


def test_the_second_batch_going_wrong_keeps_the_first_batchs_items(tmp_path, model_dir):
    job = job_for(tmp_path, model_dir, "['x'] * len(texts) if not hasattr(self, 'n') and setattr(self, 'n', 1) "
                                       "is None else [None] * len(texts)")
    e = refusal(lambda: job.run_window(demo_rows()[:8], "cpu"))
    assert str(e).startswith("predict returned None at position 0 on batch 2 of the measured window"), str(e)
    assert e.items_done == 4


@pytest.mark.parametrize("predict, said", [
    ("['x'] * (len(texts) + 1)", "predict returned 5 value(s) for 4 texts on warm-up batch 1;"),
    ("1 / 0", "predict raised on warm-up batch 1 (after 0 warm-up items): entry.py, line 7, in predict: "
              "ZeroDivisionError"),
])
def test_a_failure_in_the_warm_up_says_warm_up_and_counts_no_window_item(tmp_path, model_dir, predict, said):
    job = job_for(tmp_path, model_dir, predict)
    e = refusal(lambda: job.warm_up(demo_rows()[:4], "cpu"))
    assert str(e).startswith(said), str(e)
    assert e.items_done == 0


@pytest.mark.parametrize("used, said", [
    ("'fp32'", "settings_used() returned str 'fp32' after the warm-up; it must return a dict of setting name "
               "(str) -> value"),
    ("[('precision', 'fp32')]", "settings_used() returned list [('precision', 'fp32')] after the warm-up; it must "
                                "return a dict"),
    ("{1: 'fp32'}", "settings_used() returned the key 1 (int) after the warm-up; it must return a dict"),
    ("{}['nothing']", "settings_used() raised after the warm-up: entry.py, line 10, in settings_used: KeyError: "
                      "'nothing'"),
])
def test_a_settings_used_that_is_not_a_dict_of_settings_says_what_it_returned(tmp_path, model_dir, used, said):
    job = job_for(tmp_path, model_dir, used=used)
    e = refusal(lambda: job.observe(0))
    assert str(e).startswith(said), str(e)


def test_a_setting_the_entry_reports_against_the_declared_one_is_not_honoured(tmp_path, model_dir):
    from lab.passes.observed import NotHonoured

    job = job_for(tmp_path, model_dir, used="{'max_length': 999, 'batch_size': 4}")
    with pytest.raises(NotHonoured, match=r"^declared value not honoured: max_length 256 declared, the entry's "
                                          r"settings_used\(\) reported 999$"):
        job.observe(0)


def test_a_well_formed_entry_still_runs_its_window(tmp_path, model_dir):
    job = job_for(tmp_path, model_dir, "('x' for _ in texts)", used="{'precision': 'fp32'}")
    job.warm_up(demo_rows()[:4], "cpu")
    win = job.run_window(demo_rows()[:8], "cpu")
    assert win.items_done == 8 and win.pred_index == ["x"] * 8
    assert job.observe(0)["dtype"] == "float32"
