"""What a custom entry's ``predict`` may return (issue 35 item 7: a numpy array of str was
accepted while the README, now docs/task-custom.md, said only a list of str): the rule and its words agree."""

from __future__ import annotations

import numpy as np

from lab.kinds.custom_kind import PREDICT_RETURNS
from lab.passes.tasks.custom import predict_refusal


def test_any_sequence_of_str_is_accepted_and_read_once():
    for out in (["a", "b"], ("a", "b"), np.array(["a", "b"]), (x for x in ["a", "b"])):
        why, labels = predict_refusal(out, 2)
        assert why == "" and labels == ["a", "b"] and all(isinstance(x, str) for x in labels)
    assert "numpy array of str" in PREDICT_RETURNS and "tuple" in PREDICT_RETURNS


def test_anything_else_is_named_as_what_it_is():
    assert predict_refusal(np.array([1, 2]), 2)[0].endswith("at position 0")
    assert predict_refusal("ab", 2)[0] != ""
    assert predict_refusal(["a"], 2)[0] == "1 value(s) for 2 texts"
    assert predict_refusal(None, 2)[0] == "None"
