"""The lock's identity covers the content the protocol depends on, and secrets never get locked
(real demo model, tiny real corpora, real pass processes, CLI as a real process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, cut_corpus, write_campaign


def test_same_text_over_other_corpora_locks_apart_and_runs_apart(model_dir, tmp_path, runs_root):
    from lab.launchers.local import LocalLauncher
    from lab.orchestration.orchestrator import Orchestrator
    from lab.orchestration.protocol import load_protocol, lock

    orchs = []
    for folder, sizes in (("a", (2, 1, 1)), ("b", (3, 1, 0))):
        (tmp_path / folder).mkdir()
        corpus = cut_corpus(tmp_path / folder / "corpus.jsonl", *sizes)
        f = write_campaign(tmp_path / folder, model_dir, corpus, name="same", values=(1,))
        v = lock(load_protocol(f))
        assert v["corpus_sha256"] and v["model_sha256"] and v["protocol_sha256"] != v["sha256"]
        orch = Orchestrator.prepare(f, runs_root, LocalLauncher())
        assert orch.run() == "finished"
        orchs.append(orch)
    a, b = orchs
    assert a.dir != b.dir  # same campaign text, same name: still two protocol versions
    texts = [(tmp_path / x / "same.toml").read_text() for x in ("a", "b")]
    assert texts[0] == texts[1]
    for orch, items in ((a, 4), (b, 4)):
        [att] = orch.journal.attempts()
        assert att.status == "ok" and att.items_completed == items
        assert att.validation.corpus_accepted, att.validation.reasons
    lock_a = json.loads((a.dir / "campaign.lock.json").read_text())["versions"][0]
    assert lock_a["corpus_sha256"] == json.loads((a.dir / "protocol_version.json").read_text())["corpus_sha256"]
    assert lock_a["corpus_sha256"] != json.loads((b.dir / "protocol_version.json").read_text())["corpus_sha256"]


@pytest.mark.parametrize("line,place", [('token = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"', "model.token"),
                                        ('revision = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"', "model.revision"),
                                        ('api_key = "abc123"', "model.api_key")])
def test_secret_looking_value_is_refused_at_lock(model_dir, tmp_path, line, place):
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model_dir, corpus, name="sec")
    text = f.read_text().replace(f'[model]\npath = "{model_dir}"', f'[model]\npath = "{model_dir}"\n{line}')
    assert text != f.read_text()
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "lab.cli", "protocol", "lock", str(f)], capture_output=True,
                       text=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert place in r.stderr and "looks like a secret" in r.stderr
    value = line.split('"')[1]
    assert value not in r.stderr + r.stdout
    assert not f.with_suffix(".lock.json").exists()


def test_ordinary_campaign_has_no_secret_looking_value():
    import tomllib

    from lab.orchestration.identity import secret_looking
    from lab.orchestration.protocol import DEMO_CAMPAIGN

    assert secret_looking(tomllib.loads(DEMO_CAMPAIGN.read_text())) == []
    assert secret_looking({"model": {"tokenizer": "x", "max_tokens": 3, "pad_token": "[PAD]"}}) == []


def test_a_model_file_changed_after_lock_is_named(model_dir, tmp_path):
    """The lock keeps each model file's sha256 beside the joint fingerprint, so the refusal names
    the file that changed (it said only "model files"); a lock entry without the map still refuses."""
    from lab.facts.errors import ProtocolError
    from lab.orchestration.identity import InputsChanged, InputWatch
    from lab.orchestration.protocol import load_protocol, lock, locked_version

    model = tmp_path / "model"
    model.mkdir()
    for p in model_dir.iterdir():  # links, except the file this test edits
        if p.is_file() and p.name != "config.json":
            (model / p.name).symlink_to(p)
    (model / "config.json").write_text((model_dir / "config.json").read_text())
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 2, 1, 1)
    f = write_campaign(tmp_path, model, corpus, name="named", values=(1,))
    v = lock(load_protocol(f), check=False)
    assert "config.json" in v["model_files_sha256"] and "model.safetensors" in v["model_files_sha256"]
    (model / "config.json").write_text((model_dir / "config.json").read_text() + "\n")
    proto = load_protocol(f)
    with pytest.raises(ProtocolError, match=r"model files \(config.json\) changed since lock") as e:
        locked_version(proto)
    assert "model.safetensors" not in str(e.value)
    with pytest.raises(InputsChanged, match=r"model files \(config.json\) in .* changed since lock"):
        InputWatch(proto, v)
    old = {k: x for k, x in v.items() if k != "model_files_sha256"}  # a lock written before the map
    with pytest.raises(InputsChanged, match=r"model files in .* changed since lock"):
        InputWatch(proto, old)
