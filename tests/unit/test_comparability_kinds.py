"""compare of archives of different task kinds leads with that difference, in one readable line
(lab.compare.comparability.refuse_other_kinds; fixmsg item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.compare.comparability import check_comparable
from lab.compare.evidence import CompareError, Evidence


def archive(name: str, kind: str | None, corpus: str, model: dict, quality: dict) -> Evidence:
    """The fields check_comparable reads from one archive, nothing else."""
    campaign = {"quality": quality, "timing": {"repetitions": 1}, **({"task": {"kind": kind}} if kind else {})}
    return Evidence(path=Path(name), name=name, manifest={"corpus": {"sha256": corpus},
                                                          "model": {"kind": "local", "files_sha256": model}},
                    summary=[{"variant_id": "v1"}], raw_rows=[{"pass_id": f"{name}-p1", "start_time": "t"}],
                    campaign=campaign, lock={}, corpus_card=None, files_checked=0, config=None)  # type: ignore[arg-type]


def test_different_task_kinds_lead_the_line_without_the_digests():
    model_a = {f"file{i}.bin": "a" * 64 for i in range(12)}
    model_b = {f"file{i}.bin": "b" * 64 for i in range(12)}
    emb = archive("emb", "embedding", "1" * 64, model_a, {"metric": "nn_accuracy", "threshold": 0.5})
    gen = archive("gen", "generation", "2" * 64, model_b, {"metric": "exact_match", "threshold": 0.1})
    with pytest.raises(CompareError) as e:
        check_comparable([emb, gen])
    msg = str(e.value)
    assert msg.startswith("not comparable: different task kinds: emb is embedding, gen is generation"), msg
    assert "corpus sha256" in msg and "quality rule" in msg  # the other differences named, not their values
    assert "1" * 64 not in msg and "a" * 64 not in msg and "\n" not in msg and len(msg) < 300, msg


def test_an_absent_task_is_classification_and_one_kind_keeps_the_detailed_line():
    cls = archive("cls", None, "1" * 64, {"w.bin": "a" * 64}, {"metric": "accuracy"})
    emb = archive("emb", "embedding", "1" * 64, {"w.bin": "a" * 64}, {"metric": "nn_accuracy"})
    with pytest.raises(CompareError) as e:
        check_comparable([cls, emb])
    assert str(e.value).startswith("not comparable: different task kinds: cls is classification, emb is "
                                   "embedding; their quality rule differs too"), str(e.value)
    other = archive("cls2", None, "1" * 64, {"w.bin": "a" * 64}, {"metric": "macro_f1"})
    with pytest.raises(CompareError) as e:
        check_comparable([cls, other])
    assert str(e.value).startswith("not comparable: [quality] metric differs"), str(e.value)
