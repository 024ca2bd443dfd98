"""The engine interface's records with no model (lab.passes.backends): how a window accounts an
answer by the way its engine ran the batch, and how a server pass's answered requests become the
kind's operation's answer (lab.passes.tasks.server_job.served_answer)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lab.passes.backends import Answer, Batch
from lab.passes.inference import WindowResult


def window(lengths: list[int]) -> WindowResult:
    n = len(lengths)
    return WindowResult([f"i{k}" for k in range(n)], [None] * n, [None] * n, [None] * n, 0, 0, 0, 0, 0,
                        tokens_kept=list(lengths), tokens_total=list(lengths))


def test_a_window_accounts_a_padded_a_packed_and_an_opaque_batch_each_as_it_ran():
    import torch

    padded = window([3, 5])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    padded.count_answer([0, 1], Answer(values=[], shape=(2, 5), masks=(mask,)), 5)
    assert (padded.items_done, padded.real_tokens, padded.padded_tokens, padded.batches_at_max_length) == (2, 8, 10, 1)
    assert padded.padding_side() == "right" and not padded.packed

    packed = window([3, 5])
    packed.count_answer([0, 1], Answer(values=[], packed=True, max_running=2), 5)
    assert (packed.items_done, packed.real_tokens, packed.padded_tokens, packed.max_running) == (2, 8, 8, 2)
    assert packed.packed and packed.attention_pairs == 9 + 25

    opaque = window([3, 5, 4])
    opaque.count_answer([0, 2], Answer(values=[]), 5)
    opaque.count_answer([1], Answer(values=[]), 5)
    assert (opaque.items_done, opaque.batches, opaque.largest_batch, opaque.real_tokens) == (3, 2, 2, 12)
    assert opaque.padded_tokens == 0 and not opaque.packed  # the user's code pads as it likes: not counted


def test_a_batch_names_its_place_for_a_failure_line():
    assert Batch([0], [[1]], ["a"], 3, 8).place == "batch 3 of the measured window"
    assert Batch([0], [[1]], ["a"], 1, 0, warm_up=True).place == "warm-up batch 1"


def served(rid: str, answer=None, text: str = "", tokens: int = 0):
    return SimpleNamespace(id=rid, answer=answer, output_text=text, input_tokens=4, output_tokens=tokens)


def test_served_answers_become_the_operations_answer_and_a_bad_one_is_named():
    from lab.passes.tasks.generation_core import GenerationRule
    from lab.passes.tasks.server_job import SERVER_STOP, served_answer

    rule = GenerationRule(prompt="{text}", max_new_tokens=4)
    gen = served_answer("generate", [served("a", text="x", tokens=4), served("b", text="y", tokens=1)], rule)
    assert [g.stopped_by for g in gen.values] == ["max_new_tokens", SERVER_STOP] and gen.packed
    cls = served_answer("classify", [served("a", [0.1, 0.9]), served("b", [float("nan"), 0.2]), served("c")], None)
    assert cls.values[0] == (1, pytest.approx(0.9)) and cls.nonfinite == (1, 2)
    emb = served_answer("embed", [served("a", [0.6, 0.8]), served("b", [1.0, 0.0])], None)
    assert emb.values.shape == (2, 2) and emb.norms is None and np.allclose(emb.values[0], [0.6, 0.8])
    with pytest.raises(ValueError, match="the server's vector for id b has shape"):
        served_answer("embed", [served("a", [0.6, 0.8]), served("b", [1.0, 0.0, 0.0])], None)
