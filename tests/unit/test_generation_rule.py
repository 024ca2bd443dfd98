"""The generation task's declared rule (a frozen record with a content digest) and the padding
guards of lab.passes.tasks.generation_core, without a model."""

from __future__ import annotations

import pytest
import torch

from lab.passes.tasks.generation_core import (
    GenerationRule,
    GenerationRuleError,
    PaddingError,
    _finished_length,
    pad_left,
    pad_token_id,
    require_left_padded,
    require_positions,
)


def test_rule_digest_is_stable_and_follows_every_field():
    rule = GenerationRule(prompt="{text}\nNewsgroup:", max_new_tokens=16, stop=("\n",), max_text_tokens=64)
    same = GenerationRule.from_json(rule.to_json())
    assert same == rule and same.digest() == rule.digest() and len(rule.digest()) == 64
    changed = [GenerationRule(prompt="{text}\nGroup:", max_new_tokens=16, stop=("\n",), max_text_tokens=64),
               GenerationRule(prompt="{text}\nNewsgroup:", max_new_tokens=17, stop=("\n",), max_text_tokens=64),
               GenerationRule(prompt="{text}\nNewsgroup:", max_new_tokens=16, stop=(), max_text_tokens=64),
               GenerationRule(prompt="{text}\nNewsgroup:", max_new_tokens=16, stop=("\n",), max_text_tokens=0)]
    assert len({r.digest() for r in changed} | {rule.digest()}) == 5
    with pytest.raises(AttributeError):
        rule.max_new_tokens = 3  # type: ignore[misc]


def test_bad_rules_are_one_line_errors():
    with pytest.raises(GenerationRuleError, match=r"prompt must hold \{text\} exactly once \(it holds it 0 times\)"):
        GenerationRule(prompt="Answer:", max_new_tokens=4)
    with pytest.raises(GenerationRuleError, match="it holds it 2 times"):
        GenerationRule(prompt="{text} {text}", max_new_tokens=4)
    with pytest.raises(GenerationRuleError, match="max_new_tokens must be an integer >= 1, not 0"):
        GenerationRule(prompt="{text}", max_new_tokens=0)
    with pytest.raises(GenerationRuleError, match="stop strings must not be empty"):
        GenerationRule(prompt="{text}", max_new_tokens=4, stop=("",))
    with pytest.raises(GenerationRuleError, match="Object contains unknown field `temperature`"):
        GenerationRule.from_json({"prompt": "{text}", "max_new_tokens": 4, "temperature": 0.7})
    with pytest.raises(GenerationRuleError, match=r"Invalid enum value 'sample' - at `\$.decoding`"):
        GenerationRule.from_json({"prompt": "{text}", "max_new_tokens": 4, "decoding": "sample"})
    with pytest.raises(GenerationRuleError, match="generation rule: max_new_tokens must be an integer >= 1"):
        GenerationRule.from_json({"prompt": "{text}", "max_new_tokens": -1})
    # other braces are plain text, not format fields
    assert GenerationRule(prompt='{"q": "{text}"}', max_new_tokens=1).prompt.count("{") == 2


def test_pad_left_and_the_right_padding_guard():
    ids, mask = pad_left([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    require_left_padded(mask)  # no error
    right = torch.tensor([[1, 1, 1], [1, 0, 0]])
    with pytest.raises(PaddingError, match="batch row 1 is right-padded") as e:
        require_left_padded(right)
    assert "\n" not in str(e.value)


def test_no_declared_pad_token_is_refused():
    class Tok:
        pad_token_id = None

    class Model:
        class generation_config:  # noqa: N801 - the attribute name transformers uses
            pad_token_id = None

    with pytest.raises(PaddingError, match="declares no pad token"):
        pad_token_id(Tok(), Model())
    Model.generation_config.pad_token_id = 3
    assert pad_token_id(Tok(), Model()) == 3


def test_output_token_count_stops_at_eos_or_at_the_stop_string():
    pieces = {1: "ab", 2: "c\n", 3: "de", 9: ""}  # 9 = eos, decoded as nothing

    def decode(toks):
        return "".join(pieces[t] for t in toks if t != 9)

    # eos at position 2: 3 tokens counted (eos included), the padding after it not
    assert _finished_length([1, 3, 9, 0, 0], {9}, (), decode) == (3, "abde", "eos")
    # the stop string completes inside token 2 (position 1): 2 tokens, text cut before "\n"
    assert _finished_length([1, 2, 3, 9], {9}, ("\n",), decode) == (2, "abc", "stop")
    # neither: every token counts
    assert _finished_length([1, 3], {9}, ("\n",), decode) == (2, "abde", "max_new_tokens")


def test_a_prompt_past_the_models_positions_is_refused():
    rule = GenerationRule(prompt="{text}", max_new_tokens=16)
    require_positions([[1] * 496], rule, 512)  # 496 + 16 = 512 fits
    require_positions([[1] * 5000], rule, None)  # no limit known
    with pytest.raises(GenerationRuleError, match="item 1 of the batch: its prompt has 497 tokens, and with "
                                                  "max_new_tokens 16 that passes the model's 512 positions"):
        require_positions([[1] * 10, [1] * 497], rule, 512)


def test_build_demo_gen_refuses_a_missing_corpus_in_one_line(tmp_path, capsys):
    import lab.cli

    rc = lab.cli.main(["model", "build-demo-gen", "--out", str(tmp_path / "m"),
                       "--tuning", str(tmp_path / "none.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert f"--tuning {tmp_path / 'none.jsonl'}: no such file" in err
    assert not (tmp_path / "m").exists()


def test_one_stop_rule_cuts_any_engines_ids():
    # vLLM returns a row's ids without padding, ending at the eos or at the token that completed
    # a stop string; transformers' rows carry padding after they finish: one rule cuts both alike
    from lab.passes.tasks.generation_core import GeneratedItem, finish_generated

    pieces = {1: "ab", 2: "c\n", 3: "de", 9: "", 0: ""}  # 9 = eos, 0 = pad, decoded as nothing

    class Tok:
        def decode(self, toks, skip_special_tokens=True):
            return "".join(pieces[t] for t in toks)

    rule = GenerationRule(prompt="{text}", max_new_tokens=4, stop=("\n",))
    padded = finish_generated(Tok(), [1, 3, 9, 0], 5, [9], rule)
    packed = finish_generated(Tok(), [1, 3, 9], 5, [9], rule)
    assert padded == packed == GeneratedItem(text="abde", input_tokens=5, output_tokens=3, stopped_by="eos")
    assert finish_generated(Tok(), [1, 2], 5, [9], rule) == GeneratedItem("abc", 5, 2, "stop")


def words(text, verbose=False):
    """A tokenizer of one token per word and a leading bos, as the lab calls one."""
    return {"input_ids": [0] + [1] * len(text.split())}


def test_a_positions_refusal_names_the_knob_that_can_fix_it():
    """The trial's max_new_tokens 100000000 on 512 positions: no cut of the text helps, so the fix
    is a lower max_new_tokens (the template's own tokens and one of text left room); a long text
    with a fitting max_new_tokens is cut with max_text_tokens, to the room actually left."""
    too_many = GenerationRule(prompt="{text}\nAnswer in one word:", max_new_tokens=100_000_000)
    with pytest.raises(GenerationRuleError, match=r"passes the model's 512 positions; lower max_new_tokens to at "
                                                  r"most 506$"):  # 512 - 5 template tokens - 1 of text
        require_positions([[1] * 40], too_many, 512, words)
    fits = GenerationRule(prompt="{text}\nAnswer in one word:", max_new_tokens=16)
    with pytest.raises(GenerationRuleError, match=r"; set max_text_tokens to at most 491 \(the template holds 5 "
                                                  r"tokens\) or a lower max_new_tokens$"):
        require_positions([[1] * 600], fits, 512, words)
