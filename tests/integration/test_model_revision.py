"""[model] revision of a hub model is what is loaded, locked and recorded (not the cache's main).

A fake local Hugging Face cache (HF_HUB_CACHE, offline) holds the demo model as repo
``org/name`` in two snapshots: ``main`` (its tokenizer says model_max_length 64, below the
campaign's max_length 128, so a lock on main is refused) and ``rev2`` (the demo tokenizer,
and weights whose classifier bias makes one class win every item). A campaign pinning
``revision = <rev2>`` must lock on rev2's tokenizer, run its single-card pass (runner) and its
two-card pass (torchrun workers) on rev2's weights, and hash/record rev2's files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, cut_corpus

from lab.facts.files import sha256_file
from lab.orchestration.identity import model_fingerprint
from lab.orchestration.protocol import load_protocol, read_lock

CAMPAIGN = """
[campaign]
name = "pinned"
question = "Which configuration processes all my documents at the lowest committed budget?"

[corpus]
path = "c.jsonl"

[model]
id = "org/name"
revision = "{revision}"

[quality]
metric = "accuracy"
threshold = 0.0
reference_variant = "cards/cards=1"
tolerance = 1.0

[timing]
warmup_items = 1
warmup_passes = 1
repetitions = 1
seed = 0
threads = 2

[defaults]
max_length = 128
batch_size = 4

[[series]]
name = "cards"
factor = "cards"
values = [1, 2]
"""


def _commit(word: str) -> str:
    return hashlib.sha1(word.encode()).hexdigest()


def fake_hub_cache(root: Path, model: Path, winner: int) -> tuple[Path, Path]:
    """(main snapshot, rev2 snapshot) of repo org/name in a cache laid out as huggingface_hub's."""
    import numpy
    from safetensors import safe_open
    from safetensors.numpy import save_file

    repo = root / "models--org--name"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(_commit("main"))
    main, rev2 = repo / "snapshots" / _commit("main"), repo / "snapshots" / _commit("rev2")
    for snap in (main, rev2):
        snap.mkdir(parents=True)
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            (snap / name).symlink_to(model / name)
    (main / "model.safetensors").symlink_to(model / "model.safetensors")
    tok_cfg = json.loads((model / "tokenizer_config.json").read_text())
    (main / "tokenizer_config.json").unlink()
    (main / "tokenizer_config.json").write_text(json.dumps({**tok_cfg, "model_max_length": 64}))
    with safe_open(str(model / "model.safetensors"), framework="numpy") as h:
        tensors = {k: h.get_tensor(k) for k in h.keys()}  # noqa: SIM118 (a safetensors handle, not a dict)
        metadata = h.metadata()
    bias = tensors["classifier.bias"].copy()
    bias[winner] += numpy.float32(1e4)
    tensors["classifier.bias"] = bias
    save_file(tensors, str(rev2 / "model.safetensors"), metadata=metadata)
    return main, rev2


def _cli(*args, env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=900, check=False)


@pytest.fixture(scope="module")
def pinned_campaign(tmp_path_factory, model_dir):
    d = tmp_path_factory.mktemp("revision")
    corpus = cut_corpus(d / "c.jsonl", 2, 1, 1)
    gold = {json.loads(line)["label"] for line in corpus.read_text().splitlines()}
    id2label = {int(k): v for k, v in json.loads((model_dir / "config.json").read_text())["id2label"].items()}
    winner = next(i for i in sorted(id2label) if id2label[i] not in gold)  # a class no item has
    main, rev2 = fake_hub_cache(d / "hub", model_dir, winner)
    f = d / "pinned.toml"
    f.write_text(CAMPAIGN.format(revision=rev2.name))
    env = {**os.environ, "HF_HUB_CACHE": str(d / "hub"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "ITERALAB_RUNS": str(d / "runs"), "PYTHONPATH": str(REPO)}
    env.pop("HF_HOME", None)
    out = {"dir": d, "file": f, "env": env, "main": main, "rev2": rev2, "winner": id2label[winner]}
    out["lock"] = _cli("protocol", "lock", f, env=env)
    if out["lock"].returncode == 0:
        out["run"] = _cli("campaign", "run", f, "--launcher", "local", env=env)
        out["report"] = _cli("report", f, env=env)
    return out


def test_lock_reads_the_pinned_snapshot_and_hashes_its_files(pinned_campaign):
    c = pinned_campaign
    assert c["lock"].returncode == 0, c["lock"].stderr[-2000:]  # main's tokenizer (model_max_length 64) is refused
    v = read_lock(c["file"])[-1]
    assert v["model_sha256"] == model_fingerprint(str(c["rev2"]))  # the files that are loaded
    assert v["model_sha256"] != model_fingerprint(str(c["main"]))
    assert load_protocol(c["file"]).config.model.revision == c["rev2"].name


def test_main_snapshot_is_refused_at_lock(pinned_campaign, tmp_path):
    """Control: the same campaign unpinned locks on main and is refused by main's tokenizer,
    so the pinned lock above passing means its tokenizer came from rev2."""
    c = pinned_campaign
    f = tmp_path / "pinned.toml"
    (tmp_path / "c.jsonl").write_text((c["dir"] / "c.jsonl").read_text())
    f.write_text(c["file"].read_text().replace(f'revision = "{c["rev2"].name}"\n', ""))
    r = _cli("protocol", "lock", f, env={**c["env"], "ITERALAB_RUNS": str(tmp_path / "runs")})
    assert r.returncode == 2 and "tokenizer model_max_length 64" in r.stderr, r.stderr[-2000:]


def test_every_pass_runs_the_pinned_snapshot(pinned_campaign):
    c = pinned_campaign
    assert c["lock"].returncode == 0, c["lock"].stderr[-2000:]
    assert c["run"].returncode == 0, c["run"].stderr[-2000:]
    camp = next(p.parent for p in (c["dir"] / "runs" / "pinned").glob("*/journal.sqlite"))
    passes = sorted((camp / "passes").iterdir())
    specs = [json.loads((p / "pass.json").read_text()) for p in passes]
    assert sorted(s["variant"]["cards"] for s in specs) == [1, 2]  # the runner and the torchrun workers
    for p, s in zip(passes, specs, strict=True):
        assert s["extra"]["revision"] == c["rev2"].name
        preds = [json.loads(line)["pred"] for line in (p / "predictions.jsonl").read_text().splitlines()]
        # rev2's classifier bias makes a class no item has win every item; main's weights never do
        assert len(preds) == 4 and set(preds) == {c["winner"]}, (p.name, preds)


def test_manifest_records_the_resolved_snapshot(pinned_campaign):
    c = pinned_campaign
    assert c["lock"].returncode == 0, c["lock"].stderr[-2000:]
    assert c["report"].returncode == 0, c["report"].stderr[-2000:]
    camp = next(p.parent for p in (c["dir"] / "runs" / "pinned").glob("*/journal.sqlite"))
    model = json.loads((camp / "report" / "manifest.json").read_text())["model"]
    assert model["kind"] == "hub" and model["id"] == "org/name" and model["revision"] == c["rev2"].name
    assert model["commit"] == c["rev2"].name
    assert model["files_sha256"]["model.safetensors"] == sha256_file(c["rev2"] / "model.safetensors")
    assert model["files_sha256"]["model.safetensors"] != sha256_file(c["main"] / "model.safetensors")
