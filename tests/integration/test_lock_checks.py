"""Issue 11 part 2: what the model and the host can do is checked at `protocol lock`, before
the first pass, with one line naming the model's (or host's) own figure; exit 2 in the CLI.

Real demo model (config + tokenizer, weights linked), real corpora cut from the demo corpus.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cut_corpus, write_campaign

from lab.facts.files import sha256_file
from lab.facts.host import iteralab_command
from lab.inputs.models import tokenizer_fingerprint
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.preflight import lock_checks
from lab.orchestration.protocol import ProtocolError, load_protocol, lock


def model_copy(tmp_path: Path, model_dir: Path, config_edit=None, tok_edit=None) -> Path:
    """The demo checkpoint with its config/tokenizer files edited; weights linked, not copied."""
    out = tmp_path / "model"
    out.mkdir()
    for f in model_dir.iterdir():
        if f.suffix == ".json":
            shutil.copyfile(f, out / f.name)
        else:
            (out / f.name).symlink_to(f)
    for name, edit in (("config.json", config_edit), ("tokenizer_config.json", tok_edit)):
        if edit:
            d = json.loads((out / name).read_text())
            edit(d)
            (out / name).write_text(json.dumps(d))
    return out


def cli_lock(f: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", "protocol", "lock", str(f)], capture_output=True,
                          text=True, cwd=REPO)


def refused(f: Path, message: str) -> str:
    with pytest.raises(ProtocolError, match=message) as e:
        lock(load_protocol(f))
    assert "\n" not in str(e.value) and not Path(str(f) .replace(".toml", ".lock.json")).exists()
    return str(e.value)


def test_demo_campaign_passes_every_check(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    checks = lock_checks(load_protocol(f))
    assert [c.name for c in checks] == ["corpus", "architecture", "attention", "labels", "tokens", "token ids",
                                         "max_length", "pad_token", "device", "projection rule"]
    assert all(c.ok for c in checks[:-1])
    # 1 repetition of 4 items: compare's projection rule can never be met, said at lock, not refused
    rule = checks[-1]
    assert rule.ok is None and rule.detail.startswith("warning: repetitions 1 < min_accepted_passes 3")
    assert "4 corpus items: a pass lasts 60 s only below 0.07 items/s" in rule.detail
    assert lock(load_protocol(f))["version"] == 1


def test_not_a_sequence_classification_checkpoint(tmp_path, model_dir):
    m = model_copy(tmp_path, model_dir, config_edit=lambda d: d.update(architectures=["BertModel"]))
    f = write_campaign(tmp_path, m, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    refused(f, r"declares architectures \['BertModel'\]; a sequence-classification checkpoint")


def test_integer_corpus_labels_against_named_model_labels(tmp_path, model_dir):
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    rows = [json.loads(x) for x in corpus.read_text().splitlines()]
    corpus.write_text("".join(json.dumps({**r, "label": str(i % 3)}) + "\n" for i, r in enumerate(rows)))
    f = write_campaign(tmp_path, model_dir, corpus)
    msg = refused(f, r"corpus label\(s\) '0', '1', '2' are not labels the model can produce "
                     r"\(its config id2label has 20: "
                     r"'alt.atheism'")
    r = cli_lock(f)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr


def test_max_length_over_the_model_limit(tmp_path, model_dir):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), max_length=1024)
    refused(f, "max_length 1024 exceeds the model's max_position_embeddings 512; declare max_length <= 512")


def test_tokenizer_without_padding_token_needs_a_declared_choice(tmp_path, model_dir):
    m = model_copy(tmp_path, model_dir, tok_edit=lambda d: d.update(pad_token=None))
    f = write_campaign(tmp_path, m, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    refused(f, r"has no padding token \(pad_token None\); declare \[model\] pad_token")
    f.write_text(f.read_text().replace("[model]\n", '[model]\npad_token = "<pad>"\n'))
    refused(f, r"\[model\] pad_token '<pad>' is not in the tokenizer's vocabulary \(30522 tokens\)")
    f.write_text(f.read_text().replace('pad_token = "<pad>"', 'pad_token = "[PAD]"'))
    v = lock(load_protocol(f))
    assert v["protocol"]["model"]["pad_token"] == "[PAD]"  # the choice is recorded in the lock
    # and the pass uses it: a real batch-8 pass pads with it and finishes
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    assert orch.run() == "finished"
    assert {a.status for a in orch.journal.attempts()} == {"ok"}


@pytest.mark.parametrize("device, message", [
    ("tpu", "device 'tpu' unknown; use auto, cpu, cuda, cuda:N or rocm"),
    ("cuda", r"device 'cuda' needs GPU index 0 but this host has 0 GPUs \(torch.cuda.device_count\(\)\)"),
    ("cuda:7", "device 'cuda:7' needs GPU index 7 but this host has 0 GPUs"),
])
def test_device_must_exist_on_this_host(tmp_path, model_dir, device, message):
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace('padding = "longest"', f'padding = "longest"\ndevice = "{device}"'))
    refused(f, message)


def test_gpu_count_on_a_one_gpu_host(tmp_path, model_dir, monkeypatch):
    import lab.orchestration.preflight as pf

    monkeypatch.setattr(pf, "gpu_count", lambda: (1, "torch.cuda.device_count()"))
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace('padding = "longest"', 'padding = "longest"\ndevice = "cuda:7"'))
    refused(f, r"device 'cuda:7' needs GPU index 7 but this host has 1 GPU \(torch.cuda.device_count\(\)\); "
               "use cuda:0 .. cuda:0")
    f.write_text(f.read_text().replace('device = "cuda:7"', 'device = "cuda:0"'))
    assert [c.ok for c in lock_checks(load_protocol(f)) if c.name == "device"] == [True]


def test_card_counted_with_another_tokenizer(tmp_path, model_dir):
    from transformers import AutoTokenizer

    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    card = tmp_path / "corpus_card.json"
    f = write_campaign(tmp_path, model_dir, corpus)
    f.write_text(f.read_text().replace(f'path = "{corpus.name}"', f'path = "{corpus.name}"\ncard = "corpus_card.json"'))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    described = {"comparison": {"file": corpus.name, "sha256": sha256_file(corpus)}}
    card.write_text(json.dumps({**described, "tokenizer": {"name": "gpt2 BPE", "fingerprint": "0" * 64}}))
    refused(f, r"corpus card corpus_card.json counted tokens with 'gpt2 BPE', not the model's tokenizer")
    card.write_text(json.dumps({**described, "tokenizer": {"name": "demo", "fingerprint": tokenizer_fingerprint(tok)}}))
    assert lock(load_protocol(f))["version"] == 1


SHOWN = re.escape(iteralab_command())  # the executable a hint names (works from the user's folder)


@pytest.mark.parametrize("card_text, message", [
    (None, rf"\[corpus\] card .*/corpus_card.json not found; rebuild it with `{SHOWN} corpus build --source "
           r"YOUR.jsonl --out \S+` or remove \[corpus\] card"),
    ('{"tokenizer": {}}', r"corpus card corpus_card.json has no comparison sha256 \(not written by "
                          rf"`{SHOWN} corpus build`\)"),
    ('{"comparison": {"sha256": "%s"}}' % ("ab" * 32), r"corpus card corpus_card.json describes another file "
                                                       r"\(sha256 abababababab...\), not \[corpus\] path c.jsonl"),
])
def test_a_card_that_does_not_describe_the_corpus_is_refused(tmp_path, model_dir, card_text, message):
    """A declared card that was missing or described another file was skipped in silence: no
    tokenizer check, bucket counts of another corpus on the Protocol screen, nothing archived."""
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus)
    f.write_text(f.read_text().replace(f'path = "{corpus.name}"', f'path = "{corpus.name}"\ncard = "corpus_card.json"'))
    if card_text is not None:
        (tmp_path / "corpus_card.json").write_text(card_text)
    refused(f, message)


def test_zero_token_text_in_a_hand_made_corpus(tmp_path, model_dir):
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    rows = [json.loads(x) for x in corpus.read_text().splitlines()]
    rows[2]["text"] = "\u200b\u200c\x01"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    f = write_campaign(tmp_path, model_dir, corpus)
    refused(f, rf"text of id '{rows[2]['id']}' gives 0 tokens with the model's tokenizer")


@pytest.mark.parametrize("damage, message", [
    ("removed", r"\[model\] path: .*/model: no weights \(model.safetensors or pytorch_model.bin\); build the demo "
                r"model with `make model`"),
    ("truncated", r"\[model\] path: .*/model: weights file model.safetensors unreadable \(Error while "
                  r"deserializing header: incomplete metadata, file not fully covered\); copy it again"),
])
def test_a_model_folder_whose_weights_cannot_load_is_refused_at_lock(tmp_path, model_dir, damage, message):
    """Config and tokenizer load, so the old check (transformers config + tokenizer) let the
    campaign lock and every pass failed at model load: the weights are checked at lock now."""
    m = model_copy(tmp_path, model_dir)
    weights = m / "model.safetensors"
    whole = weights.read_bytes()
    weights.unlink()
    if damage == "truncated":
        weights.write_bytes(whole[: len(whole) // 2])  # an interrupted copy
    f = write_campaign(tmp_path, m, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    refused(f, message)
    r = cli_lock(f)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("attention, message", [
    ("spda", r"variant batch/batch_size=1: attention 'spda' cannot be used with this model here \(ValueError: "
             r"Specified `attn_implementation=\"spda\"` is not supported"),
    ("flash_attention_2", r"attention 'flash_attention_2' cannot be used with this model here \(ImportError: "
                          r"FlashAttention2 has been toggled on, but it cannot be used .*\); declare attention = "
                          r"\"sdpa\" \(the default\) or \"eager\""),
])
def test_an_attention_the_model_cannot_use_is_refused_at_lock(tmp_path, model_dir, attention, message):
    """Every pass of such a variant failed at model load, after the lock and the schedule."""
    f = write_campaign(tmp_path, model_dir, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1))
    f.write_text(f.read_text().replace('padding = "longest"', f'padding = "longest"\nattention = "{attention}"'))
    refused(f, message)
    f.write_text(f.read_text().replace(f'attention = "{attention}"', 'attention = "eager"'))
    assert [c.detail for c in lock_checks(load_protocol(f)) if c.name == "attention"] == ["eager"]
