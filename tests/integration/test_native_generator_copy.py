"""The native demo generator's construction (lab.demo.native_generator), on a tiny random BERT
decoder (no model file, seconds): the OPT copy computes the BERT layers' hidden states (its
layer 0 doing BERT's embedding LayerNorm), the training shortcut for OPT computes the OPT
model's own forward, and the check that guards the copy fails when the copy is wrong."""

from __future__ import annotations

import pytest

TEXTS = ["the bruins won 4-2 last night", "which scsi card works with a mac?", "god is real",
         "my car needs new brakes and tires", "encryption keys and the clipper chip"]


@pytest.fixture(scope="module")
def tiny():
    """(tokenizer, random BertLMHeadModel decoder of LAYERS layers, its OPT copy)."""
    import torch
    from transformers import BertConfig, BertLMHeadModel

    from lab.demo.generator import LAYERS, train_tokenizer
    from lab.demo.native_generator import opt_from_bert

    tok = train_tokenizer(TEXTS * 4)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, is_decoder=True, layer_norm_eps=1e-12,
                     initializer_range=0.2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    bert = BertLMHeadModel(cfg).eval()
    with torch.no_grad():  # a non-trivial embedding LayerNorm, so layer 0's second norm matters
        bert.bert.embeddings.LayerNorm.weight.uniform_(0.5, 1.5)
        bert.bert.embeddings.LayerNorm.bias.uniform_(-0.2, 0.2)
    return tok, bert, opt_from_bert(bert, tok).eval()


def test_the_opt_copy_computes_the_bert_layers(tiny):
    from lab.demo.generator import LAYERS
    from lab.demo.native_generator import check_prefix

    tok, bert, opt = tiny
    assert type(opt).__name__ == "OPTForCausalLM" and opt.config.architectures == ["OPTForCausalLM"]
    assert opt.config.num_hidden_layers == LAYERS + 1 and not opt.config.do_layer_norm_before
    assert not opt.config.tie_word_embeddings
    diff = check_prefix(bert, opt, tok, TEXTS)
    assert diff < 1e-4, diff


def test_a_copy_without_the_embedding_norm_is_refused(tiny):
    """What the check guards: with layer 0's second LayerNorm left at weight 1 and bias 0, the
    copy computes other hidden states, and check_prefix says so."""
    import copy

    import torch

    from lab.demo.native_generator import check_prefix

    tok, bert, opt = tiny
    wrong = copy.deepcopy(opt)
    with torch.no_grad():
        wrong.model.decoder.layers[0].final_layer_norm.weight.fill_(1.0)
        wrong.model.decoder.layers[0].final_layer_norm.bias.zero_()
    with pytest.raises(AssertionError, match="differ from MiniLM's by"):
        check_prefix(bert, wrong, tok, TEXTS)


def test_the_training_shortcut_is_the_opt_forward(tiny):
    """``OPT_DECODER.top_logits`` on the frozen prefix's output equals the OPT model's own
    logits at every answer position (``check_top_logits``, the build's own guard), and training
    updates only the top layer and the LM head."""
    from lab.demo.generator import check_top_logits, encode_examples, prefix_states
    from lab.demo.native_generator import OPT_DECODER

    tok, _, opt = tiny
    rows = [{"text": t, "label": lab} for t, lab in zip(TEXTS, ["rec.sport.hockey", "comp.sys.mac.hardware",
                                                                  "soc.religion.christian", "rec.autos",
                                                                  "sci.crypt"], strict=True)]
    examples = encode_examples(tok, rows)
    states = prefix_states(opt, examples, tok.pad_token_id, OPT_DECODER)
    assert check_top_logits(opt, examples, states, tok.pad_token_id, decoder=OPT_DECODER) < 1e-4
    trained = {id(p) for p in OPT_DECODER.trained(opt)}
    top = {id(p) for p in [*opt.model.decoder.layers[-1].parameters(), *opt.lm_head.parameters()]}
    assert trained == top and len(trained) < len(list(opt.parameters()))
