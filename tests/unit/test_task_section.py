"""[task] and a user's [quality] metric in the campaign file: strict parsing with one-line errors,
the user's code in the lock identity, and a user metric judged in its declared direction.
No model is loaded."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from conftest import cut_corpus, write_campaign

from lab.orchestration.config import parse_config
from lab.orchestration.protocol import ProtocolError, load_protocol
from lab.orchestration.validate import validate_pass

UNBUILT_MODEL = Path("/nonexistent/model-not-needed-to-parse")


def campaign(tmp_path, extra: str = "", edit=None) -> Path:
    f = write_campaign(tmp_path, UNBUILT_MODEL, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    text = f.read_text()
    if edit:
        text = text.replace(*edit)
    f.write_text(text + extra)
    return f


def test_absent_task_is_classification_with_unchanged_ids_and_pass_spec(tmp_path):
    plain = load_protocol(campaign(tmp_path))
    (tmp_path / "b").mkdir()
    explicit = load_protocol(campaign(tmp_path / "b", '\n[task]\nkind = "classification"\n'))
    assert plain.task_kind == explicit.task_kind == "classification"
    assert [v.variant_id for v in plain.variants] == [v.variant_id for v in explicit.variants]
    assert plain.task_extra() == {} and plain.task_files() == {}


@pytest.mark.parametrize("extra, edit, message", [
    ('\n[task]\nkind = "embeding"\n', None, "kind 'embeding' unknown; did you mean 'embedding'?"),
    ('\n[task]\nkind = "embedding"\npoolin = "mean"\n', None, "[task] unknown key 'poolin'; did you mean 'pooling'?"),
    ('\n[task]\nkind = "embedding"\npooling = "cls"\n', None, "pooling 'cls' is not implemented"),
    ('\n[task]\nkind = "embedding"\n', None, "metric 'accuracy' does not judge an embedding task"),
    ('\n[task]\nkind = "custom"\n', None, 'needs entry = "path/to/file.py:ClassName"'),
    ('\n[task]\nkind = "custom"\nentry = "model.py"\n', None, 'is not "path/to/file.py:Name"'),
    ('\n[task]\npooling = "mean"\n', None, 'pooling applies to kind = "embedding" only'),
    ("", ('metric = "accuracy"', 'metric = "m.py:score"'), "declare direction"),
    ('\n[task]\nkind = "embedding"\ncards = 2\n', None, "[task] unknown key 'cards'"),
])
def test_bad_task_section_one_line(tmp_path, extra, edit, message):
    with pytest.raises(ProtocolError) as e:
        load_protocol(campaign(tmp_path, extra, edit))
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("kind, tail", [
    ('""', "valid kinds: classification, custom, embedding, generation"),
    ('"regression"', "valid kinds: classification, custom, embedding, generation"),
    ('"generaton"', "did you mean 'generation'?"),
])
def test_an_unknown_kind_lists_the_kinds_once_or_names_the_nearest(tmp_path, kind, tail):
    """The trial's `kind = ""`: one clean line, the valid kinds listed once and called kinds."""
    with pytest.raises(ProtocolError) as e:
        load_protocol(campaign(tmp_path, f"\n[task]\nkind = {kind}\n"))
    assert str(e.value).endswith(f"[task] kind {tomllib.loads(f'k = {kind}')['k']!r} unknown; {tail}"), str(e.value)


@pytest.mark.parametrize("task, words", [
    ('kind = "embedding"\npooling = ""', "[task] pooling '' is not implemented; use 'mean'"),
    ('kind = "generation"\nprompt = "{text}"\nmax_new_tokens = 4\ndecoding = ""',
     "[task] decoding '' is not implemented; use \"greedy\""),
    ('kind = "generation"\nprompt = "{text}"\nmax_new_tokens = 4\nnormalisation = ""',
     "[task] unknown normalisation ''; use one of"),
])
def test_an_empty_enumerated_value_is_refused_not_read_as_the_default(tmp_path, task, words):
    """`pooling = ""` is a value the user wrote, not the key left out: refused like any unknown one."""
    metric = "nn_accuracy" if "embedding" in task else "exact_match"
    with pytest.raises(ProtocolError) as e:
        load_protocol(campaign(tmp_path, f"\n[task]\n{task}\n", ('metric = "accuracy"', f'metric = "{metric}"')))
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_pooling_beside_an_entry_is_the_name_the_entry_reads():
    """A new user's trial: pooling beside an entry accepted only "mean", though the lab pools
    nothing then (the entry does): the user could not declare the CLS pooling their code applies."""
    from lab.orchestration.config import TaskSection, parse_section

    base = {"kind": "embedding", "entry": "enc.py:Enc"}
    assert parse_section(TaskSection, {**base, "pooling": "cls"}, "task").pooling == "cls"
    assert parse_section(TaskSection, base, "task").pooling == "mean"  # the kind's default, handed to the entry
    with pytest.raises(Exception, match=r"pooling beside an entry is the name your code reads"):
        parse_section(TaskSection, {**base, "pooling": ""}, "task")
    with pytest.raises(Exception, match=r"pooling 'cls' is not implemented"):  # the lab's own pooling: mean only
        parse_section(TaskSection, {"kind": "embedding", "pooling": "cls"}, "task")


@pytest.mark.parametrize("kind, builtin", [("embedding", "nn_accuracy"), ("generation", "exact_match"),
                                           ("custom", "accuracy")])
def test_a_metric_refusal_suggests_only_what_the_next_check_accepts(tmp_path, kind, builtin):
    """A refused [quality] metric's "use ..." names only what the lock then accepts: the user's own
    "file.py:function" only for a kind that accepts it (fixmsg item 2)."""
    task = f'\n[task]\nkind = "{kind}"\n' + {"custom": 'entry = "e.py:C"\n',
                                               "generation": 'prompt = "{text}"\nmax_new_tokens = 4\n'}.get(kind, "")
    (tmp_path / "a").mkdir()
    with pytest.raises(ProtocolError) as e:
        load_protocol(campaign(tmp_path / "a", task, ('metric = "accuracy"', 'metric = "no_such_metric"')
                               if kind == "custom" else None))
    message = str(e.value)
    assert builtin in message and "\n" not in message, message
    offered = '"file.py:function"' in message.split(" use ", 1)[1]
    assert offered == (kind == "custom"), message
    if not offered:  # the user's own metric is then refused, and its refusal offers no other way out
        (tmp_path / "b").mkdir()
        with pytest.raises(ProtocolError) as e2:
            load_protocol(campaign(tmp_path / "b", task,
                                   ('metric = "accuracy"', 'metric = "m.py:f"\ndirection = "higher"')))
        assert "judges label outputs" in str(e2.value), str(e2.value)
        assert '"file.py:function"' not in str(e2.value).split(" use ", 1)[1], str(e2.value)


@pytest.mark.parametrize("edited", [("m.py",), ("entry.py",), ("entry.py", "m.py")])
def test_task_code_changed_since_lock_names_only_the_files_whose_sha256_changed(tmp_path, fake_model, edited):
    """The lock keeps each user file's sha256 (task_files_sha256): the refusal names the edited ones only;
    an entry locked before that map (only task_sha256) names them all (fixmsg item 1)."""
    from lab.orchestration.protocol import changed_task_files, lock, locked_version

    (tmp_path / "entry.py").write_text("class C:\n    def predict(self, texts):\n        return texts\n")
    (tmp_path / "m.py").write_text("def score(p, r):\n    return 0.5\n")
    f = write_campaign(tmp_path, fake_model, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "m.py:score"\ndirection = "lower"')
                 + '\n[task]\nkind = "custom"\nentry = "entry.py:C"\n')
    entry = lock(load_protocol(f), check=False)
    for name in edited:
        (tmp_path / name).write_text((tmp_path / name).read_text() + "# edited\n")
    with pytest.raises(ProtocolError) as e:
        locked_version(load_protocol(f))
    named = str(e.value).split("task code (", 1)[1].split(")", 1)[0].split(", ")
    assert sorted(Path(n).name for n in named) == sorted(edited), str(e.value)
    files = load_protocol(f).task_files()
    old = {k: v for k, v in entry.items() if k != "task_files_sha256"}
    assert changed_task_files(files, old, {}) == list(files.values())


def test_generation_refuses_at_lock_a_padding_its_job_never_applies(tmp_path):
    """A generation pass pads each batch on the left to its longest prompt: padding = "max_length" is
    refused when the file is loaded, in one line, not by every pass at run (fixmsg item 3)."""
    task = '\n[task]\nkind = "generation"\nprompt = "{text}"\nmax_new_tokens = 4\n'
    f = campaign(tmp_path, task, ('metric = "accuracy"', 'metric = "exact_match"'))
    assert {v.padding for v in load_protocol(f).variants} == {"longest"}
    f.write_text(f.read_text().replace('padding = "longest"', 'padding = "max_length"'))
    with pytest.raises(ProtocolError) as e:
        load_protocol(f)
    assert 'declares padding = "max_length"' in str(e.value) and 'declare padding = "longest"' in str(e.value)
    assert "\n" not in str(e.value)


USER_METRIC = ('metric = "accuracy"', 'metric = "m.py:score"\ndirection = "lower"')


@pytest.mark.parametrize("edit, message", [
    (("threshold = 0.2", "threshold = 55"), "[quality] threshold = 55 is outside [0, 1]"),
    (("tolerance = 0.05", "tolerance = 2"), "[quality] tolerance = 2 is outside [0, 1]"),
    (("threshold = 0.2", "threshold = nan"), "[quality] threshold = nan is not a finite number"),
    (('direction = "lower"', 'direction = "down"'), "[quality] direction = 'down' is not a direction; use"),
])
def test_quality_refusals_name_the_key_and_its_value(tmp_path, edit, message):
    """Each [quality] number refused names its key and value; a wrong direction reads as a wrong value,
    not a missing key (fixmsg item 4)."""
    f = campaign(tmp_path, "", USER_METRIC if "nan" in edit[1] or "direction" in edit[0] else None)
    f.write_text(f.read_text().replace(*edit))
    with pytest.raises(ProtocolError) as e:
        load_protocol(f)
    assert message in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_user_metric_threshold_is_any_finite_number_in_its_unit(tmp_path):
    f = campaign(tmp_path, "", USER_METRIC)
    f.write_text(f.read_text().replace("threshold = 0.2", "threshold = 55"))
    assert parse_config(tomllib.loads(f.read_text())).quality.threshold == 55


def test_indefinite_article_by_first_letter():
    from lab.orchestration.config import with_article

    assert [with_article(k) for k in ("embedding", "generation", "custom", "classification")] == [
        "an embedding", "a generation", "a custom", "a classification"]


def test_every_kind_may_declare_two_cards(tmp_path):
    """Multi-card passes merge by the task kind (lab.passes.multicard, tests/integration/test_multicard_kinds.py):
    the lock no longer refuses cards > 1 for embedding, generation or custom."""
    f = campaign(tmp_path, '\n[task]\nkind = "embedding"\n', ('metric = "accuracy"', 'metric = "nn_accuracy"'))
    f.write_text(f.read_text().replace("[defaults]\n", "[defaults]\ncards = 2\n"))
    proto = load_protocol(f)
    assert proto.task_kind == "embedding" and {v.cards for v in proto.variants} == {2}


def test_entry_and_metric_files_enter_the_lock_identity(tmp_path, fake_model):
    from lab.orchestration.identity import protocol_identity

    (tmp_path / "entry.py").write_text("class C:\n    def predict(self, texts):\n        return texts\n")
    (tmp_path / "m.py").write_text("def score(p, r):\n    return 0.5\n")
    f = write_campaign(tmp_path, fake_model, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace('metric = "accuracy"', 'metric = "m.py:score"\ndirection = "lower"')
                 + '\n[task]\nkind = "custom"\nentry = "entry.py:C"\n')
    proto = load_protocol(f)
    assert set(proto.task_files()) == {"entry", "metric"}
    assert proto.task_extra()["task"]["entry"] == f"{tmp_path / 'entry.py'}:C"
    before = protocol_identity(proto)
    (tmp_path / "m.py").write_text("def score(p, r):\n    return 0.25\n")
    after = protocol_identity(load_protocol(f))
    assert before["protocol_sha256"] == after["protocol_sha256"]  # the campaign text is the same
    assert before["task_sha256"] != after["task_sha256"] and before["sha256"] != after["sha256"]


def test_user_metric_is_judged_in_its_declared_direction(tmp_path):
    corpus = [{"id": f"i{k}", "label": "a" if k % 2 else "b", "bucket": "short"} for k in range(4)]
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"id": r["id"], "pred": "a", "prob": None}) + "\n" for r in corpus))

    def error_rate(predictions, references):
        return sum(p != r for p, r in zip(predictions, references, strict=True)) / len(references)

    q = {"metric": "m.py:error_rate", "threshold": 0.4, "tolerance": 0.0, "direction": "lower"}
    v = validate_pass(corpus, path, q, prob_required=False, metric_fn=error_rate)
    assert v.metric == 0.5 and v.threshold_ok is False and "0.5000 > threshold 0.4" in v.reasons[0]
    v = validate_pass(corpus, path, {**q, "threshold": 0.5}, prob_required=False, metric_fn=error_rate,
                      reference={r["id"]: r["label"] for r in corpus}, reference_metric=0.0)
    assert v.threshold_ok is True and v.tolerance_ok is False and "above the reference" in " ".join(v.reasons)
    # a line without prob is a format error for the built-in classification task
    assert not validate_pass(corpus, path, {**q, "metric": "accuracy", "direction": None}).format_ok

    def broken(predictions, references):
        raise KeyError("oops")

    v = validate_pass(corpus, path, q, prob_required=False, metric_fn=broken)
    assert v.metric is None and not v.corpus_accepted and any("metric function raised KeyError" in r
                                                              for r in v.reasons)


def test_a_declared_file_outside_the_entry_folder_is_refused_for_a_launcher_that_mounts_the_folder(tmp_path):
    from types import SimpleNamespace

    from lab.orchestration.orchestrator import Orchestrator

    code = tmp_path / "code"
    code.mkdir()
    (code / "entry.py").write_text("class C:\n    def predict(self, texts):\n        return texts\n")
    (code / "vocab.txt").write_text("a\n")
    (tmp_path / "elsewhere.txt").write_text("b\n")
    check = Orchestrator.check_entry_mount
    inside = load_protocol(campaign(tmp_path, '\n[task]\nkind = "custom"\nentry = "code/entry.py:C"\n'
                                              'files = ["code/vocab.txt"]\n'))
    check(SimpleNamespace(proto=inside, launcher=SimpleNamespace(name="docker")))  # mounted with its folder
    outside = load_protocol(campaign(tmp_path, '\n[task]\nkind = "custom"\nentry = "code/entry.py:C"\n'
                                               'files = ["code/vocab.txt", "elsewhere.txt"]\n'))
    with pytest.raises(ProtocolError, match=r"files elsewhere\.txt lies outside the entry.s folder") as e:
        check(SimpleNamespace(proto=outside, launcher=SimpleNamespace(name="docker")))
    assert "\n" not in str(e.value) and "--launcher local" in str(e.value)
    check(SimpleNamespace(proto=outside, launcher=SimpleNamespace(name="local")))  # the host sees every path
