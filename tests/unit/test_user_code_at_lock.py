"""The lock's check of the user's code ([task] entry, files, [quality] metric = "file.py:function",
lab.orchestration.preflight.check_user_code, each imported in a fresh process) refuses in one line
what every pass would fail on: a metric that is a class or cannot take (predictions, references),
an entry that is not a class or whose constructor or predict cannot take the protocol's
arguments, and a folder where a file belongs (trial items 9, 10, 12). Nothing is built or called.
No model is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import cut_corpus, write_campaign

from lab.orchestration.preflight import check_user_code
from lab.orchestration.protocol import ProtocolError, load_protocol

UNBUILT_MODEL = Path("/nonexistent/model-not-needed-to-parse")

CODE = {
    "entry.py": ("class Fine:\n    def __init__(self, settings, device):\n        pass\n\n"
                 "    def predict(self, texts):\n        return ['x' for _ in texts]\n\n\n"
                 "class NoArgs:\n    def __init__(self):\n        pass\n\n"
                 "    def predict(self, texts):\n        return texts\n\n\n"
                 "class NoTexts:\n    def __init__(self, settings, device):\n        pass\n\n"
                 "    def predict(self):\n        return []\n\n\n"
                 "def factory(settings, device):\n    return Fine(settings, device)\n"),
    "my_metric.py": ("def score(predictions, references):\n    return 0.5\n\n\n"
                     "def onearg(predictions):\n    return 0.5\n\n\n"
                     "class Scorer:\n    def __init__(self, predictions, references):\n        pass\n"),
}


def campaign(tmp_path, entry="entry.py:Fine", metric="my_metric.py:score", files=None) -> Path:
    for name, text in CODE.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "folder.py").mkdir(exist_ok=True)
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    task = f'\n[task]\nkind = "custom"\nentry = "{entry}"\n' + (f"files = {files}\n" if files else "")
    f.write_text(f.read_text().replace('metric = "accuracy"', f'metric = "{metric}"\ndirection = "higher"') + task)
    return f


def refusals(f: Path) -> list[str]:
    return [c.detail for c in check_user_code(load_protocol(f)) if c.ok is False]


def test_a_well_formed_entry_and_metric_pass_the_lock_check(tmp_path):
    assert refusals(campaign(tmp_path, files='["c.jsonl"]')) == []


@pytest.mark.parametrize("entry, metric, said", [
    ("entry.py:Fine", "my_metric.py:onearg", "[quality] metric my_metric.py:onearg: onearg(predictions, references) "
                                              "cannot take 2 positional argument(s): it is (predictions)"),
    ("entry.py:Fine", "my_metric.py:Scorer", "[quality] metric my_metric.py:Scorer is a class; metric names a "
                                              "function"),
    ("entry.py:Fine", "entry.py:Fine", "[quality] metric entry.py:Fine is a class; metric names a function"),
    ("entry.py:NoArgs", "my_metric.py:score", "[task] entry entry.py:NoArgs: NoArgs(settings, device) cannot take "
                                               "2 positional argument(s): it is ()"),
    ("entry.py:NoTexts", "my_metric.py:score", "[task] entry entry.py:NoTexts: NoTexts.predict(texts) cannot take"),
    ("entry.py:factory", "my_metric.py:score", "[task] entry entry.py:factory is a function, not a class; entry "
                                                "names a class"),
    ("folder.py:Fine", "my_metric.py:score", "folder.py is a folder; give the Python file in it"),
    ("entry.py:Fine", "folder.py:score", "folder.py is a folder; give the Python file in it"),
])
def test_user_code_every_pass_would_fail_on_is_refused_at_lock_in_one_line(tmp_path, entry, metric, said):
    found = refusals(campaign(tmp_path, entry, metric))
    assert len(found) == 1 and said in found[0] and "\n" not in found[0], found


def test_a_folder_in_task_files_is_named_as_a_folder_not_as_missing(tmp_path):
    found = refusals(campaign(tmp_path, files='["."]'))
    assert len(found) == 1 and "[task] files '.':" in found[0], found
    assert "is a folder; list the files the entry reads, one by one" in found[0] and "not found" not in found[0]


@pytest.mark.parametrize("key, value, said", [
    ("entry", "model.py", "give the Python file and the class it defines"),
    ("metric", "my_metric.py:", "give the Python file and the function it defines"),
])
def test_a_reference_not_file_colon_name_says_what_that_key_names(tmp_path, key, value, said):
    f = campaign(tmp_path, **{key: value})
    with pytest.raises(ProtocolError) as e:
        load_protocol(f)
    assert said in str(e.value) and "class or function" not in str(e.value), str(e.value)


@pytest.mark.parametrize("metric", ["accuracy", "agreement"])
@pytest.mark.parametrize("direction", ["higher", "lower"])
def test_direction_is_refused_for_every_built_in_metric(tmp_path, metric, direction):
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace('metric = "accuracy"', f'metric = "{metric}"\ndirection = "{direction}"'))
    with pytest.raises(ProtocolError) as e:
        load_protocol(f)
    assert f"[quality] direction = '{direction}' is for your own metric" in str(e.value), str(e.value)
    assert "remove direction" in str(e.value) and "\n" not in str(e.value)
