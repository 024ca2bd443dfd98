"""open_generation_window makes each prompt once: the texts it returns are the ones it tokenized,
so an engine that sends text (the server pass) and one that sends ids (vLLM offline, transformers)
work from the same prompts, and no caller cuts and templates the items a second time."""

import re

from lab.passes.tasks.generation import open_generation_window
from lab.passes.tasks.generation_core import GenerationRule, prompts_for


class WordTokenizer:
    """A fast-tokenizer stand-in: one id per word, offsets by character, a BOS id 1 as a special
    token; counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, text, add_special_tokens=True, return_offsets_mapping=False, verbose=False):
        self.calls += 1
        words = list(re.finditer(r"\S+", text))
        out = {"input_ids": ([1] if add_special_tokens else []) + [len(m.group()) + 2 for m in words]}
        if return_offsets_mapping:
            out["offset_mapping"] = [m.span() for m in words]
        return out


ROWS = [{"id": "a", "text": "one two three four five"}, {"id": "b", "text": "six"},
        {"id": "c", "text": "seven eight nine"}]


def test_the_prompts_returned_are_the_ones_tokenized_once_each():
    rule = GenerationRule(prompt="Topic of: {text}\nAnswer:", max_new_tokens=4, max_text_tokens=2)
    tok = WordTokenizer()
    opened = open_generation_window(ROWS, tok, rule, bucketing=False)
    # per item: one cut, one tokenization of the prompt, one of the uncut prompt (tokens_total)
    assert tok.calls == 3 * len(ROWS)
    assert opened.prompts == prompts_for(WordTokenizer(), [r["text"] for r in ROWS], rule)
    assert opened.prompts[0] == "Topic of: one two\nAnswer:"
    assert opened.seqs == [WordTokenizer()(p)["input_ids"] for p in opened.prompts]
    assert opened.win.tokens_kept == [len(s) for s in opened.seqs]
    assert opened.win.tokens_total[0] > opened.win.tokens_kept[0]


def test_without_a_cut_each_item_is_tokenized_once():
    rule = GenerationRule(prompt="{text}", max_new_tokens=4)
    tok = WordTokenizer()
    win, prompts, seqs, order = open_generation_window(ROWS, tok, rule, bucketing=True)
    assert tok.calls == len(ROWS)
    assert prompts == [r["text"] for r in ROWS]
    assert sorted(order) == [0, 1, 2] and win.generated == [None, None, None]
    assert win.tokens_total == win.tokens_kept == [len(s) for s in seqs]
