"""Generation quality and accounting on hand-made cases, each expected value worked out by hand
(lab.passes.tasks.text_metrics; definitions in its docstring)."""

from __future__ import annotations

import pytest

from lab.passes.tasks.text_metrics import (
    MetricInputError,
    TokenCounts,
    agreement,
    exact_match,
    token_f1,
    token_f1_one,
)


def test_exact_match_after_the_declared_normalisation():
    outputs = [" Sci.Space\n", "rec.autos", "rec.sport  hockey", "alt.atheism"]
    refs = ["sci.space", "rec.autos", "rec.sport hockey", "talk.religion.misc"]
    # lowercase_space: 1 (case and outer space), 1, 1 (inner run collapsed), 0 -> 3/4
    assert exact_match(outputs, refs) == 0.75
    # none: only "rec.autos" is byte-equal -> 1/4
    assert exact_match(outputs, refs, normalisation="none") == 0.25


def test_unknown_normalisation_and_unpaired_inputs_are_one_line_errors():
    with pytest.raises(MetricInputError,
                       match="unknown normalisation 'lower'; use one of lowercase_space, none, squad"):
        exact_match(["a"], ["a"], normalisation="lower")
    with pytest.raises(MetricInputError, match="2 outputs for 1 references"):
        exact_match(["a", "b"], ["a"])
    with pytest.raises(MetricInputError, match="no items"):
        token_f1([], [])


def test_token_f1_squad_cases_by_hand():
    # "the cat sat" vs "a cat sat down": articles dropped -> [cat, sat] vs [cat, sat, down];
    # overlap 2, precision 2/2, recall 2/3, F1 = 2*1*(2/3)/(1+2/3) = 0.8
    assert token_f1_one("the cat sat", "a cat sat down") == pytest.approx(0.8)
    # punctuation removed and case folded: "Hello, World!" == "hello world" -> 1.0
    assert token_f1_one("Hello, World!", "hello world") == 1.0
    # repeated tokens count by multiplicity: [x, x, y] vs [x, y, y]: overlap x1 + y1 = 2,
    # precision 2/3, recall 2/3 -> F1 2/3
    assert token_f1_one("x x y", "x y y") == pytest.approx(2 / 3)
    assert token_f1_one("dog", "cat") == 0.0
    # no token on a side (only an article): 1 if both empty, else 0
    assert token_f1_one("the", "a") == 1.0
    assert token_f1_one("the", "cat") == 0.0
    assert token_f1(["the cat sat", "dog"], ["a cat sat down", "cat"]) == pytest.approx(0.4)


def test_agreement_per_id_and_ids_exact():
    ref = {"a": "sci.space", "b": "rec.autos", "c": "sci.med", "d": "misc.forsale"}
    var = {"a": "Sci.Space ", "b": "rec.autos", "c": "sci.crypt", "d": "misc.forsale"}
    got = agreement(var, ref)
    assert (got.share, got.items, got.differing_ids) == (0.75, 4, ("c",))
    assert agreement(var, ref, normalisation="none").differing_ids == ("a", "c")
    with pytest.raises(MetricInputError, match=r"1 missing, 0 extra, e\.g\. 'd'"):
        agreement({k: v for k, v in var.items() if k != "d"}, ref)


def test_token_counts_and_ratios():
    class Item:  # the two fields TokenCounts reads from a GeneratedItem
        def __init__(self, i, o):
            self.input_tokens, self.output_tokens = i, o

    counts = TokenCounts.of([Item(10, 3), Item(20, 5)])
    assert counts == TokenCounts(items=2, input_tokens=30, output_tokens=8)
    assert counts.items_per_s(4.0) == 0.5
    assert counts.output_tokens_per_s(4.0) == 2.0
    assert counts.per_item(3.0) == 1.5                          # e.g. USD 3 over 2 items
    assert counts.per_million_output_tokens(2.0) == 250_000.0   # USD 2 for 8 tokens
    with pytest.raises(MetricInputError, match="window_s must be > 0"):
        counts.items_per_s(0)
    with pytest.raises(MetricInputError, match="output_tokens must be > 0"):
        TokenCounts(items=1, input_tokens=1, output_tokens=0).per_million_output_tokens(1.0)
