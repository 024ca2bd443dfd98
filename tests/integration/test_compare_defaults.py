"""A rule left to its defaults and the same rule written out are one rule for compare: two rentals
of one campaign, one file leaving out [timing] seed, rotation and process and [quality] subgroups,
the other writing their default values (as lab/defaults/demo.toml does), are comparable; a value
written away from its default still makes them not comparable, named."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from conftest import WINDOW, cut_corpus, run_rental


def without_defaults(text: str) -> str:
    return text.replace("seed = 0\n", "")


def with_defaults(text: str) -> str:
    return (text.replace("seed = 0\n", 'seed = 0\nrotation = "cyclic"\nprocess = "fresh"\n')
            .replace("tolerance = 0.05\n", 'tolerance = 0.05\nsubgroups = "buckets"\n'))


def test_defaults_written_out_or_left_out_are_one_rule(tmp_path, model_dir):
    from lab.compare.comparability import check_comparable
    from lab.compare.decision import compare_archives
    from lab.compare.evidence import CompareError, read_evidence
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    pair = []
    for key, gpu, edit in (("a", "rtx-4090", without_defaults), ("b", "b200", with_defaults)):
        sub = tmp_path / key
        sub.mkdir()
        (sub / "corpus.jsonl").write_bytes(corpus.read_bytes())
        pair.append(run_rental(sub, model_dir, sub / "corpus.jsonl", threads=1, gpu=gpu, repetitions=1,
                               values=(1,), edit=edit))
    a, b = (read_evidence(p) for p in pair)
    assert "seed" not in a.campaign.timing and b.campaign.timing["rotation"] == "cyclic"
    check_comparable([a, b])  # no CompareError
    assert compare_archives(pair, 1000, **WINDOW).chosen is not None
    seeded = msgspec.structs.replace(b.campaign, timing={**b.campaign.timing, "seed": 1})
    config = dataclasses.replace(b.config, timing=dataclasses.replace(b.config.timing, seed=1))
    with pytest.raises(CompareError, match=r"\[timing\] seed differs: .* has 0, .* has 1"):
        check_comparable([a, dataclasses.replace(b, campaign=seeded, config=config)])
