"""compare of archives of different task kinds leads with that difference, in one readable line
(lab.compare.comparability.refuse_other_kinds; fixmsg item 5)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lab.compare.comparability import check_comparable
from lab.compare.comparison_records import WrittenSections
from lab.compare.evidence import CompareError, Evidence
from lab.inputs.manifest_record import Manifest, ManifestCampaign, ManifestCorpus, ManifestModel
from lab.orchestration.lock_record import CampaignLock, LockEntry
from lab.report.raw_row import raw_rows_of
from lab.report.summary import VariantSummary


def archive(name: str, kind: str | None, corpus: str, model: dict, quality: dict, task: dict | None = None,
            lock: dict | None = None, held_back: str = "") -> Evidence:
    """The fields check_comparable reads from one archive, nothing else. ``lock``: its own lock
    entry (task_sha256, task_files_sha256)."""
    campaign = WrittenSections(quality=quality, timing={"repetitions": 1},
                               task={"kind": kind, **(task or {})} if kind else {})
    manifest = Manifest(corpus=ManifestCorpus(sha256=corpus), model=ManifestModel(kind="local", files_sha256=model),
                        campaign=ManifestCampaign(protocol_sha256=f"proto-{name}"))
    return Evidence(path=Path(f"{name}.tar.gz"), name=name, manifest=manifest,
                    variants=(VariantSummary(variant_id="v1", label="v1"),),
                    raw_rows=raw_rows_of([{"pass_id": f"{name}-p1", "start_time": "t"}]),
                    campaign=campaign, lock=CampaignLock(versions=(LockEntry(sha256=f"proto-{name}", **(lock or {})),)),
                    corpus_card=None, files_checked=0, config=None, held_back=held_back)  # type: ignore[arg-type]


def test_different_task_kinds_lead_the_line_without_the_digests():
    model_a = {f"file{i}.bin": "a" * 64 for i in range(12)}
    model_b = {f"file{i}.bin": "b" * 64 for i in range(12)}
    emb = archive("emb", "embedding", "1" * 64, model_a, {"metric": "nn_accuracy", "threshold": 0.5})
    gen = archive("gen", "generation", "2" * 64, model_b, {"metric": "exact_match", "threshold": 0.1})
    with pytest.raises(CompareError) as e:
        check_comparable([emb, gen])
    msg = str(e.value)
    assert msg.startswith("not comparable: different task kinds: emb is embedding, gen is generation"), msg
    # the other differences named, digests without their values, the rules' values compactly
    assert "corpus sha256 differs" in msg and "model file sha256 differs (file0.bin and 11 more)" in msg, msg
    assert '[quality] metric: emb has "nn_accuracy", gen has "exact_match"' in msg, msg
    assert "[quality] threshold: emb has 0.5, gen has 0.1" in msg, msg
    assert "1" * 64 not in msg and "a" * 64 not in msg and "\n" not in msg and len(msg) < 400, msg


def test_an_absent_task_is_classification_and_one_kind_keeps_the_detailed_line():
    cls = archive("cls", None, "1" * 64, {"w.bin": "a" * 64}, {"metric": "accuracy"})
    emb = archive("emb", "embedding", "1" * 64, {"w.bin": "a" * 64}, {"metric": "nn_accuracy"})
    with pytest.raises(CompareError) as e:
        check_comparable([cls, emb])
    assert str(e.value).startswith("not comparable: different task kinds: cls is classification, emb is "
                                   'embedding; [quality] metric: cls has "accuracy", emb has "nn_accuracy"; '
                                   "compare only archives of one task kind"), str(e.value)
    other = archive("cls2", None, "1" * 64, {"w.bin": "a" * 64}, {"metric": "macro_f1"})
    with pytest.raises(CompareError) as e:
        check_comparable([cls, other])
    assert str(e.value).startswith("not comparable: [quality] metric differs"), str(e.value)


def test_a_classification_and_a_custom_task_with_its_own_metric_name_how_the_quality_rule_differs():
    """The trial's case (14a): the kinds lead, then the metric each archive is judged by, not 'differs too'."""
    cls = archive("cls", None, "1" * 64, {"w.bin": "a" * 64}, {"metric": "accuracy", "threshold": 0.3})
    cust = archive("cust", "custom", "1" * 64, {"w.bin": "a" * 64}, {"metric": "my_metric.py:f", "threshold": 0.3},
                   task={"entry": "my_entry.py:MyClf"},
                   lock={"task_sha256": "c" * 64, "task_files_sha256": {"entry": "e" * 64, "metric": "f" * 64}})
    with pytest.raises(CompareError) as e:
        check_comparable([cls, cust])
    msg = str(e.value)
    assert msg.startswith("not comparable: different task kinds: cls is classification, cust is custom; "), msg
    assert '[quality] metric: cls has "accuracy", cust has "my_metric.py:f"' in msg, msg
    assert "[quality] metric file sha256 differs" in msg and "f" * 64 not in msg, msg
    assert "differs too" not in msg and "[task]" not in msg and "\n" not in msg, msg


def custom(name: str, files: dict | None, joint: str = "j" * 64) -> Evidence:
    """A custom-task archive judged by the user's metric file; ``files``: its lock's
    task_files_sha256 ({role: sha256}), None for a lock written before that map."""
    return archive(name, "custom", "1" * 64, {"w.bin": "a" * 64}, {"metric": "m.py:score", "threshold": 0.3},
                   task={"entry": "e.py:E"},
                   lock={"task_sha256": joint, **({"task_files_sha256": files} if files is not None else {})})


def refusal(*archives) -> str:
    """The one line check_comparable refuses ``archives`` with."""
    with pytest.raises(CompareError) as e:
        check_comparable(list(archives))
    return str(e.value)


def test_only_the_metric_file_differing_is_named_under_quality_not_as_the_task_code():
    """14b: same entry file, another metric file: the line names the metric file, under [quality]."""
    a = custom("a", {"entry": "e" * 64, "file:util.py": "u" * 64, "metric": "1" * 64}, "j" * 64)
    b = custom("b", {"entry": "e" * 64, "file:util.py": "u" * 64, "metric": "2" * 64}, "k" * 64)
    msg = refusal(a, b)
    assert msg.startswith(f'not comparable: [quality] metric file sha256 differs: a has "{"1" * 64}", '
                          f'b has "{"2" * 64}"; compare only'), msg
    assert "[task]" not in msg and "code" not in msg, msg


def test_each_file_of_the_task_code_is_named_by_its_role():
    a = custom("a", {"entry": "e" * 64, "file:util.py": "u" * 64, "metric": "1" * 64}, "j" * 64)
    b = custom("b", {"entry": "d" * 64, "file:util.py": "v" * 64, "metric": "1" * 64}, "k" * 64)
    msg = refusal(a, b)
    assert f'[task] entry sha256 differs: a has "{"e" * 64}", b has "{"d" * 64}"' in msg, msg
    assert f'[task] file:util.py sha256 differs: a has "{"u" * 64}"' in msg and "[quality]" not in msg, msg
    same = custom("c", {"entry": "e" * 64, "file:util.py": "u" * 64, "metric": "1" * 64}, "j" * 64)
    assert check_comparable([a, same]).common_variants == ("v1",)


def test_an_archive_locked_before_the_per_file_map_is_compared_by_the_joint_digest():
    old = custom("old", None, "j" * 64)
    new = custom("new", {"entry": "e" * 64, "metric": "1" * 64}, "j" * 64)  # the same code, its map recorded
    assert check_comparable([old, new]).common_variants == ("v1",)
    other = custom("other", {"entry": "e" * 64, "metric": "2" * 64}, "k" * 64)
    with pytest.raises(CompareError) as e:
        check_comparable([old, other])
    assert str(e.value).startswith(f'not comparable: [task] code sha256 (entry, files and metric together) differs: '
                                   f'old has "{"j" * 64}", other has "{"k" * 64}"'), str(e.value)


def test_one_refusal_held_back_by_several_archives_keeps_its_subject_singular():
    """14c: 'A.tar.gz, B.tar.gz: its ...' named two archives with 'its'."""
    from lab.compare.decision import refuse_prerequisites

    text = "its [quality] metric m.py:score is your own function; give --metric-file FILE"
    held = [custom(n, None) for n in ("a", "b", "c")]
    held = [dataclasses.replace(ev, held_back=text) for ev in held]
    with pytest.raises(CompareError) as e:
        refuse_prerequisites(held, allow_partial=False)
    assert str(e.value) == f"a.tar.gz: {text}; the same for b.tar.gz and c.tar.gz", str(e.value)
    with pytest.raises(CompareError) as e:
        refuse_prerequisites(held[:1], allow_partial=False)
    assert str(e.value) == f"a.tar.gz: {text}", str(e.value)


def test_the_same_user_code_kept_in_another_folder_is_one_rule_and_other_code_is_not():
    """A new user's trial: the same entry (one sha256) run as "@repo/examples/e.py:E" on one rental
    and "code/e.py:E" on the other was refused ('[task] entry differs'); where the code lies is no
    part of the rule, its file's name, class or function, and sha256 are."""
    model = {"w.bin": "a" * 64}

    def own(name: str, entry: str, metric: str, code: str, files: list[str]) -> Evidence:
        roles = {"entry": code, "metric": "m" * 64, **{f"file:{f}": "f" * 64 for f in files}}
        return archive(name, "embedding", "1" * 64, model, {"metric": metric, "direction": "higher"},
                       task={"entry": entry, "files": files}, lock={"task_files_sha256": roles})

    a = own("a", "@repo/examples/e.py:E", "@repo/m.py:score", "c" * 64, ["@repo/examples/w.txt"])
    b = own("b", "code/e.py:E", "/home/me/m.py:score", "c" * 64, ["code/w.txt"])
    check_comparable([a, b])  # no refusal
    for other, words in ((own("c", "code/e.py:E", "m.py:score", "d" * 64, ["w.txt"]), "[task] entry sha256 differs"),
                         (own("d", "code/e.py:F", "m.py:score", "c" * 64, ["w.txt"]), "[task] entry differs"),
                         (own("e", "code/e.py:E", "m.py:other", "c" * 64, ["w.txt"]), "[quality] metric differs")):
        with pytest.raises(CompareError) as e:
            check_comparable([a, other])
        assert words in str(e.value), str(e.value)
