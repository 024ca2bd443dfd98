"""The native demo generator: the demo generator's recipe in an architecture vLLM loads natively.

The demo generator (``lab.demo.generator``) is a ``BertLMHeadModel``, which the pinned vLLM
cannot load (it resolves it to its transformers back-end, which finds no parameter for BERT's
LM head). This one is an ``OPTForCausalLM``, in vLLM's own model registry (``opt``) and in
transformers, so both engines and vLLM's OpenAI-compatible server load it with no remote code.

Why OPT: with ``do_layer_norm_before = False`` an OPT layer is a post-LayerNorm layer with
biased q/k/v/out projections and a two-layer MLP, which is exactly a BERT layer; its positions
are learned (table offset by 2); ``activation_function = "gelu"`` is BERT's erf GELU. So
MiniLM-L6's layers are copied as they are, and the features the demo generator trains on are
MiniLM's (measured by ``check_prefix``). Two differences, handled here:

- BERT normalises the embeddings (word + position + token type 0, then LayerNorm); OPT adds
  word and position embeddings with no LayerNorm. Layer 0 of this model does that
  normalisation only: its attention and MLP weights are zero (each adds 0 to the residual),
  its first LayerNorm has weight 1 and bias 0 (normalises), its second carries MiniLM's
  embedding LayerNorm (renormalises the unit-variance vector and applies MiniLM's scale and
  shift). MiniLM's layers follow as layers 1 to ``LAYERS``. Token type 0's embedding is added
  to the position table.
- OPT's LayerNorm eps is 1e-5 (transformers and vLLM both hard-code it) against MiniLM's 1e-12:
  the frozen layers' outputs differ from MiniLM's by about 1e-4 (``check_prefix`` bounds it).

The LM head is OPT's: one untied linear layer with no bias, starting from the token embeddings
(the BERT generator's head has a dense+GELU+LayerNorm transform and a bias first). Training is
``lab.demo.generator``'s, unchanged: tokenizer, prompt, answer format, seed, epochs; only the
top layer and the LM head are trained, the layers below computed once.
"""

from __future__ import annotations

from pathlib import Path

from lab.demo.generator import LAYERS, Decoder, attend_at, build_demo_generator, build_model

ARCHITECTURE = "OPTForCausalLM"
POSITION_OFFSET = 2  # OPT's learned position table starts at row 2 (transformers and vLLM alike)
PREFIX_ATOL = 1e-3  # frozen layers' output against MiniLM's: measured 8e-5 (eps 1e-5 against 1e-12)


def opt_config(bert_config, tok):
    """The ``OPTConfig`` of the native generator: ``LAYERS`` + 1 post-LayerNorm layers of MiniLM's
    width, heads, MLP size and activation; untied head; the tokenizer's special ids."""
    from transformers import OPTConfig

    b = bert_config
    return OPTConfig(vocab_size=len(tok), hidden_size=b.hidden_size, word_embed_proj_dim=b.hidden_size,
                     num_hidden_layers=LAYERS + 1, ffn_dim=b.intermediate_size,
                     num_attention_heads=b.num_attention_heads, max_position_embeddings=b.max_position_embeddings,
                     do_layer_norm_before=False, activation_function=b.hidden_act, enable_bias=True,
                     dropout=b.hidden_dropout_prob, attention_dropout=b.attention_probs_dropout_prob,
                     tie_word_embeddings=False,
                     pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     architectures=[ARCHITECTURE])


def opt_from_bert(bert, tok):
    """An ``OPTForCausalLM`` computing what ``bert`` (``lab.demo.generator.build_model``'s
    untrained ``BertLMHeadModel``) computes up to its last layer: layer 0 normalises the
    embeddings (module docstring), layers 1.. are ``bert``'s; the LM head starts from the token
    embeddings. Raises AssertionError when ``bert`` has not ``LAYERS`` layers."""
    import torch
    from transformers import OPTForCausalLM

    assert len(bert.bert.encoder.layer) == LAYERS, len(bert.bert.encoder.layer)
    model = OPTForCausalLM(opt_config(bert.config, tok))
    dec, emb = model.model.decoder, bert.bert.embeddings
    with torch.no_grad():
        dec.embed_tokens.weight.copy_(emb.word_embeddings.weight)
        dec.embed_positions.weight.zero_()
        dec.embed_positions.weight[POSITION_OFFSET:].copy_(emb.position_embeddings.weight
                                                           + emb.token_type_embeddings.weight[0])
        norm = dec.layers[0]
        for p in [*norm.self_attn.parameters(), *norm.fc1.parameters(), *norm.fc2.parameters()]:
            p.zero_()
        norm.self_attn_layer_norm.weight.fill_(1.0)
        norm.self_attn_layer_norm.bias.zero_()
        norm.final_layer_norm.load_state_dict(emb.LayerNorm.state_dict())
        for src, dst in zip(bert.bert.encoder.layer, dec.layers[1:], strict=True):
            att = src.attention
            for a, b in ((att.self.query, dst.self_attn.q_proj), (att.self.key, dst.self_attn.k_proj),
                         (att.self.value, dst.self_attn.v_proj), (att.output.dense, dst.self_attn.out_proj),
                         (att.output.LayerNorm, dst.self_attn_layer_norm), (src.intermediate.dense, dst.fc1),
                         (src.output.dense, dst.fc2), (src.output.LayerNorm, dst.final_layer_norm)):
                b.load_state_dict(a.state_dict())
        model.lm_head.weight.copy_(emb.word_embeddings.weight)
    return model


def check_prefix(bert, model, tok, texts: list[str], atol: float = PREFIX_ATOL) -> float:
    """Max |difference| between ``bert``'s last hidden state and ``model``'s (the OPT copy) on
    ``texts`` (right-padded, padding excluded); raises AssertionError above ``atol`` (the copy
    would then not compute MiniLM's features)."""
    import torch

    enc = tok(texts, padding="longest", padding_side="right", return_tensors="pt")
    with torch.inference_mode():
        want = bert.bert(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
        got = model.model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    diff = float((want - got)[enc["attention_mask"].bool()].abs().max())
    assert diff <= atol, f"the OPT copy's hidden states differ from MiniLM's by {diff} (bound {atol})"
    return diff


PROBE_TEXTS = ("Re: which SCSI card works with a Mac IIci?\nNewsgroup: comp.sys.mac.hardware",
               "The Bruins won 4-2 last night.")


def build_native(tok, src: Path):
    """The untrained native generator: the BERT generator's untrained model (``build_model``:
    MiniLM's layers, the BPE embeddings) copied into OPT (``opt_from_bert``), checked against it
    (``check_prefix``)."""
    bert = build_model(tok, src).eval()
    model = opt_from_bert(bert, tok)
    check_prefix(bert, model.eval(), tok, list(PROBE_TEXTS))
    return model


def frozen_prefix(model):
    """An ``OPTModel`` sharing the model's embeddings and all layers but the top one: what
    training keeps fixed (its ``last_hidden_state`` is the top layer's input; post-LayerNorm
    layers have no final norm)."""
    from torch import nn
    from transformers import OPTModel

    cfg = model.config.__class__(**{**model.config.to_dict(), "num_hidden_layers": LAYERS})
    prefix = OPTModel(cfg)
    dec = model.model.decoder
    prefix.decoder.embed_tokens = dec.embed_tokens
    prefix.decoder.embed_positions = dec.embed_positions
    prefix.decoder.layers = nn.ModuleList(dec.layers[:-1])
    return prefix.eval()


def top_logits(model, hidden, query_pos):
    """Logits (B, P, vocab) of the top OPT layer and the LM head at positions ``query_pos`` (B, P)
    of ``hidden`` (B, T, H), the top layer's input: ``OPTDecoderLayer``'s post-LayerNorm forward
    at those positions (``lab.demo.generator.top_logits``'s contract)."""
    import torch.nn.functional as F

    top = model.model.decoder.layers[-1]
    att = top.self_attn
    ctx, hq = attend_at(hidden, query_pos, lambda x: att.q_proj(x) * att.scaling, att.k_proj, att.v_proj,
                        att.num_heads, att.dropout if model.training else 0.0, scale=1.0)
    a = top.self_attn_layer_norm(hq + F.dropout(att.out_proj(ctx), top.dropout, model.training))
    f = top.fc2(top.activation_fn(top.fc1(a)))
    return model.lm_head(top.final_layer_norm(a + F.dropout(f, top.dropout, model.training)))


def trained_parameters(model) -> list:
    """What training updates: the top layer and the LM head."""
    return [*model.model.decoder.layers[-1].parameters(), *model.lm_head.parameters()]


OPT_DECODER = Decoder(build=build_native, prefix=frozen_prefix, top_logits=top_logits, trained=trained_parameters,
                      describe=f"{ARCHITECTURE} (post-LayerNorm, 1 embedding-norm layer + {LAYERS} layers of "
                               "MiniLM-L6, untied LM head without bias)")


def build_native_generator(tuning_path: str | Path, comparison_path: str | Path, out_dir: str | Path,
                           log=print) -> dict:
    """``lab.demo.generator.build_demo_generator`` with ``OPT_DECODER``: the same files in
    ``out_dir`` (config.json, generation_config.json, model.safetensors, the tokenizer,
    demo_model.json with the measured exact match, demo_outputs.jsonl); returns the provenance
    dict. Raises AssertionError when the OPT copy does not compute MiniLM's features
    (``check_prefix``) or the training shortcut not the saved model's forward."""
    return build_demo_generator(tuning_path, comparison_path, out_dir, log=log, decoder=OPT_DECODER)
