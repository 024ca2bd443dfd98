"""The generation step on the real demo generator (issue 20's Must-show for generation):
batched greedy outputs equal unbatched ones per id at fp32 with left padding; right padding
is refused or fixed; stop strings end the output; token counts are the tokens really fed and
generated; the build's recorded exact match is what the saved checkpoint gives."""

from __future__ import annotations

import json

import pytest
from conftest import COMPARISON

from lab.demo.generator import demo_rule
from lab.inputs.corpus import read_corpus
from lab.passes.tasks.generation_core import GenerationRule, PaddingError, generate_batch, generate_padded
from lab.passes.tasks.text_metrics import TokenCounts, exact_match


@pytest.fixture(scope="session")
def generator(gen_model_dir):
    """(tokenizer, model) loaded the way a campaign would: Auto classes, no remote code, fp32."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gen_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(gen_model_dir), dtype=torch.float32).eval()
    assert type(model).__name__ == "BertLMHeadModel" and model.config.is_decoder
    return tok, model


@pytest.fixture(scope="session")
def items() -> list[dict]:
    """40 comparison items of every length bucket (short first, long last), so that a batch
    of 8 mixes lengths and needs padding."""
    rows = read_corpus(COMPARISON)
    by = {b: [r for r in rows if r["bucket"] == b] for b in ("short", "medium", "long")}
    picked = by["short"][:16] + by["medium"][:16] + by["long"][:8]
    return sorted(picked, key=lambda r: r["id"])  # mixed lengths within each batch


def run(tok, model, rows, rule, batch):
    out = []
    for s in range(0, len(rows), batch):
        out += generate_batch(tok, model, "cpu", [r["text"] for r in rows[s:s + batch]], rule)
    return {r["id"]: g for r, g in zip(rows, out, strict=True)}


def test_batched_greedy_equals_unbatched_per_id(generator, items):
    tok, model = generator
    rule = demo_rule()
    one = run(tok, model, items, rule, batch=1)
    eight = run(tok, model, items, rule, batch=8)
    assert eight == one  # text, input tokens and output tokens, per id
    widths = {len(tok(p)["input_ids"]) for p in [rule.prompt.replace("{text}", r["text"][:40]) for r in items]}
    assert len(widths) > 1  # the batches really were padded
    assert len({g.text for g in one.values()}) > 3  # not one constant answer


def test_right_padding_is_fixed_or_refused(generator, items):
    import torch

    tok, model = generator
    rule = demo_rule()
    rows = items[:8]
    left = run(tok, model, rows, rule, batch=8)
    tok.padding_side = "right"  # a tokenizer declaring right padding cannot change the outputs
    try:
        assert run(tok, model, rows, rule, batch=8) == left
        prompts = [rule.prompt.replace("{text}", r["text"]) for r in rows]
        enc = tok(prompts, padding=True, truncation=True, max_length=80, return_tensors="pt")
        assert (enc["attention_mask"][:, -1] == 0).any()  # right-padded indeed
        with pytest.raises(PaddingError, match="is right-padded"):
            generate_padded(tok, model, enc["input_ids"], enc["attention_mask"], rule)
        # what the refusal prevents: the same right-padded batch through generate directly
        # gives other text for the shorter rows (the silent wrong output)
        with torch.inference_mode():
            raw = model.generate(**enc, max_new_tokens=rule.max_new_tokens, do_sample=False)
        width = enc["input_ids"].shape[1]
        right_texts = [tok.decode(r[width:], skip_special_tokens=True) for r in raw]
        enc_left = [tok(p, truncation=True, max_length=80)["input_ids"] for p in prompts]
        padded_rows = [i for i, e in enumerate(enc_left) if len(e) < width]
        assert padded_rows
        unpadded = []
        for i in padded_rows:
            with torch.inference_mode():
                alone = model.generate(torch.tensor([enc_left[i]]), max_new_tokens=rule.max_new_tokens,
                                       do_sample=False)
            unpadded.append(tok.decode(alone[0, len(enc_left[i]):], skip_special_tokens=True))
        assert [right_texts[i] for i in padded_rows] != unpadded
    finally:
        tok.padding_side = "left"


def test_stop_strings_end_the_output(generator, items):
    tok, model = generator
    base = demo_rule()
    full = run(tok, model, items, base, batch=8)
    dotted = GenerationRule(prompt=base.prompt, max_new_tokens=base.max_new_tokens, stop=("\n", "."),
                            max_text_tokens=base.max_text_tokens)
    cut = run(tok, model, items, dotted, batch=8)
    checked = 0
    for i, g in cut.items():
        assert "." not in g.text
        assert g.text == full[i].text.split(".")[0]
        assert g.output_tokens <= full[i].output_tokens
        if "." in full[i].text:
            # " comp" + "." : the tokens up to and including the one writing the stop string
            assert g.output_tokens == len(tok(g.text + ".", add_special_tokens=False)["input_ids"])
            checked += 1
    assert checked > 10


def test_token_counts_are_the_tokens_fed_and_generated(generator, items):
    import torch

    tok, model = generator
    rule = demo_rule()
    got = run(tok, model, items[:8], rule, batch=8)
    for r in items[:8]:
        g = got[r["id"]]
        full = tok(rule.prompt.replace("{text}", r["text"]), verbose=False)["input_ids"]
        cut_prompt = tok(rule.prompt.replace("{text}", _cut(tok, r["text"], rule)))["input_ids"]
        assert g.input_tokens == len(cut_prompt)
        if r["bucket"] != "short":
            assert g.input_tokens < len(full)  # the text was cut to max_text_tokens
        with torch.inference_mode():
            alone = model.generate(torch.tensor([cut_prompt]), max_new_tokens=rule.max_new_tokens, do_sample=False)
        new = alone[0, len(cut_prompt):].tolist()
        assert tok.decode(new[:g.output_tokens], skip_special_tokens=True) == g.text
        assert tok.eos_token_id not in new[:g.output_tokens - 1]
        if g.output_tokens < rule.max_new_tokens:
            assert new[g.output_tokens - 1] == tok.eos_token_id  # counted up to and including the eos
    short = run(tok, model, items[:8], GenerationRule(prompt=rule.prompt, max_new_tokens=2,
                                                      max_text_tokens=rule.max_text_tokens), batch=8)
    assert {g.output_tokens for g in short.values()} == {2}
    assert TokenCounts.of(list(short.values())).output_tokens == 16


def _cut(tok, text, rule):
    enc = tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    offsets = enc["offset_mapping"]
    return text if len(offsets) <= rule.max_text_tokens else text[:offsets[rule.max_text_tokens - 1][1]]


def test_recorded_exact_match_is_the_saved_checkpoints(generator, gen_model_dir):
    """demo_model.json's figure and per-item outputs come from the saved checkpoint: a sample of
    ids regenerated from the folder gives the recorded outputs, and the recorded outputs give
    the recorded exact match against the gold labels."""
    check_recorded_figures(*generator, gen_model_dir)


def check_recorded_figures(tok, model, folder) -> dict:
    """Assert that ``folder``'s demo_model.json exact match is what its demo_outputs.jsonl gives
    against the comparison corpus's labels, well above the majority class, and that every 50th
    id regenerated from the loaded ``model`` (batch 8) gives the recorded output. Returns the
    demo_model.json dict."""
    info = json.loads((folder / "demo_model.json").read_text())
    recorded = [json.loads(line) for line in (folder / "demo_outputs.jsonl").read_text().splitlines()]
    rows = {r["id"]: r for r in read_corpus(COMPARISON)}
    assert [o["id"] for o in recorded] == list(rows)
    em = exact_match([o["output"] for o in recorded], [rows[o["id"]]["label"] for o in recorded])
    assert round(em, 4) == info["comparison_exact_match"]
    assert em > 3 * info["comparison_majority_rate"]  # a real measurement, far from the majority class
    sample = recorded[::50]
    again = run(tok, model, [rows[o["id"]] for o in sample], demo_rule(), batch=8)
    assert [again[o["id"]].text for o in sample] == [o["output"] for o in sample]
    return info
