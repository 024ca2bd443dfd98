"""vLLM as an engine (issue 21), on the real thing: the pinned vLLM in its own venv, the demo
classifier and the MiniLM encoder, real engine processes.

Each engine takes 35-40 s to start on a 2-core machine, so each model's engine is started once:
the classifier's for the session (tests/conftest.py ``vllm_classifier``, shared with
test_vllm_observed.py), the encoder's for the module. Skipped, saying why, where the vLLM venv is absent or stale
(`make vllm-env` builds it; .ci/run does). Figures (engine start, per-item time against
transformers on the same ids, the memory reservation) are printed: run with ``-s`` to read them.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, VLLM_MAX_MODEL_LEN, demo_rows, wait_until

from lab.engines import vllm_env
from lab.engines.vllm import VllmClient, VllmSettings
from lab.inputs.variants import Variant

N_ITEMS = 200  # comparison items per check: enough for a 99 % agreement rule to mean something
MAX_LENGTH = VLLM_MAX_MODEL_LEN  # the session's vLLM classifier (tests/conftest.py)
VENV_READY = vllm_env.is_ready()
needs_venv = pytest.mark.skipif(not VENV_READY, reason=(
    f"the vLLM venv {vllm_env.venv_dir()} is absent or older than requirements-vllm.txt; run "
    "`make vllm-env` (.ci/run does) to run the vLLM engine tests"))


def rows() -> list[dict]:
    return demo_rows()[:N_ITEMS]


def token_ids(tok) -> list[list[int]]:
    from lab.passes.inference import tokenize

    return tokenize([r["text"] for r in rows()], tok, MAX_LENGTH)[0]


def report(what: str, **figures) -> None:
    print(f"\n[vllm] {what}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


@pytest.fixture(scope="module")
def references(model_dir):
    """transformers' answers on the same token ids (their times are reported, not asserted: the
    session's classifier engine may already be idle beside them): {"classify": (argmax ids, s),
    "embed": (vectors, s)}."""
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

    from lab.inputs.models import encoder_path
    from lab.passes.inference import pad_batch

    if not VENV_READY:
        pytest.skip("no vLLM venv")
    out = {}
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = token_ids(tok)
    model = AutoModelForSequenceClassification.from_pretrained(str(model_dir)).eval()
    variant = Variant(batch_size=8, max_length=MAX_LENGTH)
    top: list[int] = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, N_ITEMS, variant.batch_size):
            top += model(**pad_batch(tok, ids[i:i + variant.batch_size], variant)).logits.argmax(-1).tolist()
    out["classify"] = (top, time.perf_counter() - t0)
    tok = AutoTokenizer.from_pretrained(str(encoder_path()))
    ids = token_ids(tok)
    model = AutoModel.from_pretrained(str(encoder_path())).eval()
    vectors = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, N_ITEMS, 8):
            enc = tok.pad({"input_ids": ids[i:i + 8]}, return_attention_mask=True, return_tensors="pt")
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            vectors.append(torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1))
    out["embed"] = (torch.cat(vectors), time.perf_counter() - t0)
    return out


@pytest.fixture(scope="module")
def classifier(vllm_classifier, model_dir):
    """The demo classifier in vLLM (the session's engine, tests/conftest.py): (client, tokenizer)."""
    from transformers import AutoTokenizer

    ready = vllm_classifier.ready
    report("classifier engine", setup_s=f"{ready.setup_s:.1f}", engine_start_s=f"{ready.engine_start_s:.1f}",
           import_s=f"{ready.import_s:.1f}", memory=json.dumps(ready.memory), scheduler=json.dumps(ready.scheduler),
           rss_bytes=json.dumps(ready.rss_bytes))
    return vllm_classifier, AutoTokenizer.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """The MiniLM encoder (lab.inputs.models.encoder_path) in vLLM's embed runner: (client, path)."""
    from lab.inputs.models import encoder_path

    path = encoder_path()
    log = tmp_path_factory.mktemp("vllm") / "encoder.log"
    client = VllmClient(VllmSettings(model=str(path), dtype="float32", max_model_len=MAX_LENGTH,
                                     enforce_eager=True, gpu_memory_utilization=0.1), log_path=log)
    ready = client.start()
    report("encoder engine", engine_start_s=f"{ready.engine_start_s:.1f}", pooling=json.dumps(ready.pooling),
           memory=json.dumps(ready.memory))
    yield client, path
    client.close()


@needs_venv
def test_classifier_agrees_with_transformers_on_the_same_ids(references, classifier):
    client, tok = classifier
    ids = token_ids(tok)
    out = client.classify(ids)
    assert len(out.rows) == N_ITEMS
    assert all(math.isclose(sum(p), 1.0, rel_tol=1e-4) for p in out.rows)  # probabilities per item
    vllm_top = [max(range(len(p)), key=p.__getitem__) for p in out.rows]
    ref_top, ref_s = references["classify"]
    agree = sum(a == b for a, b in zip(vllm_top, ref_top, strict=True)) / N_ITEMS
    report("classify", items=N_ITEMS, agreement=f"{agree:.3f}", vllm_ms_per_item=f"{1e3 * out.infer_s / N_ITEMS:.2f}",
           transformers_batch8_ms_per_item=f"{1e3 * ref_s / N_ITEMS:.2f}", max_running=out.max_running,
           steps=out.steps)
    assert agree >= 0.99, f"vLLM and transformers agree on {agree:.1%} of {N_ITEMS} ids, under 99 %"
    # what vLLM scheduled: its own batches, at most max_num_seqs sequences per step, not batch_size
    limit = client.ready.scheduler["max_num_seqs"]
    assert out.max_running is not None and 1 <= out.max_running <= min(limit, N_ITEMS) and out.steps >= 1
    seen = client.observed()
    assert seen["engine"] == "vllm" and seen["dtype"] == "float32" and seen["max_model_len"] == MAX_LENGTH
    assert seen["vllm_memory_fraction"] == 0.1 and seen["compile"] is False
    assert seen["max_num_seqs"] >= 1 and seen["max_num_batched_tokens"] >= MAX_LENGTH


@needs_venv
def test_an_item_over_max_model_len_is_refused_before_vllm(classifier):
    client, _ = classifier
    with pytest.raises(ValueError, match=f"item 1 has {MAX_LENGTH + 1} tokens, over max_model_len {MAX_LENGTH}"):
        client.classify([[101, 102], [101] * (MAX_LENGTH + 1)])
    assert len(client.classify([[101, 2023, 102]]).rows) == 1  # the engine is still there


@needs_venv
def test_embeddings_match_mean_pooled_normalised_transformers_vectors(references, encoder):
    import torch
    from transformers import AutoTokenizer

    client, path = encoder
    assert client.ready is not None
    pooling = client.ready.pooling or {}
    assert "MEAN" in str(pooling.get("pooling_type") or pooling.get("seq_pooling_type")).upper(), pooling
    out = client.embed(token_ids(AutoTokenizer.from_pretrained(str(path))))
    ref, ref_s = references["embed"]
    cosines = torch.nn.functional.cosine_similarity(torch.tensor(out.rows), ref, dim=-1).tolist()
    norms = [math.sqrt(sum(x * x for x in v)) for v in out.rows]
    report("embed", items=N_ITEMS, min_cosine=f"{min(cosines):.5f}",
           vllm_ms_per_item=f"{1e3 * out.infer_s / N_ITEMS:.2f}",
           transformers_batch8_ms_per_item=f"{1e3 * ref_s / N_ITEMS:.2f}", dim=len(out.rows[0]))
    assert len(cosines) == N_ITEMS and min(cosines) >= 0.99, f"lowest cosine {min(cosines):.4f}"
    assert all(abs(n - 1) < 1e-3 for n in norms)  # vLLM normalised them, as the checkpoint declares


# ---- lock refusals --------------------------------------------------------------------------

def protocol_for(tmp_path: Path, model: Path):
    """The demo campaign plus a series over the engine, on ``model``."""
    from lab.orchestration.protocol import DEMO_CAMPAIGN, load_protocol

    demo_path = 'path = "@repo/.cache/models/demo-minilm-20ng"'
    assert demo_path in DEMO_CAMPAIGN.read_text()
    text = DEMO_CAMPAIGN.read_text().replace(demo_path, f"path = {json.dumps(str(model))}", 1)
    text += '\n[[series]]\nname = "engine"\nfactor = "engine"\nvalues = ["transformers", "vllm"]\n'
    out = tmp_path / "campaign.toml"
    out.write_text(text)
    return load_protocol(out, relative_to=DEMO_CAMPAIGN.parent)


@needs_venv
def test_lock_accepts_the_demo_classifier_for_vllm(tmp_path, model_dir):
    from lab.orchestration.preflight import check_engine

    proto = protocol_for(tmp_path, model_dir)
    assert [v.engine for v in proto.variants].count("vllm") == 1
    [check] = check_engine(proto)
    assert check.ok is True and "engine/engine=vllm" in check.detail


@needs_venv
def test_lock_refuses_an_architecture_the_pinned_vllm_does_not_run(tmp_path, model_dir):
    from lab.orchestration.preflight import check_engine

    model = tmp_path / "model"
    model.mkdir()
    for f in model_dir.iterdir():
        (model / f.name).symlink_to(f)
    cfg = json.loads((model_dir / "config.json").read_text())
    (model / "config.json").unlink()
    # a transformers architecture (transformers builds it) that vLLM's registry does not list:
    # the probe asks vLLM, the test only checks that the answer is a one-line refusal naming it
    cfg["architectures"] = [UNSUPPORTED]
    (model / "config.json").write_text(json.dumps(cfg))
    [check] = check_engine(protocol_for(tmp_path, model))
    assert check.ok is False
    assert f"declares architectures ['{UNSUPPORTED}'], none of which vLLM" in check.detail
    assert "\n" not in check.detail and 'declare engine = "transformers"' in check.detail


UNSUPPORTED = "CanineForSequenceClassification"


def test_lock_refuses_a_vllm_variant_whose_environment_cannot_be_built(tmp_path, monkeypatch, model_dir):
    """No index to install from (PIP_NO_INDEX, no find-links): the venv cannot be built; the
    lock's check says so in one line, and leaves no half-built venv."""
    from lab.orchestration.preflight import check_engine, first_refusal

    venv = tmp_path / "vllm-venv"
    monkeypatch.setenv(vllm_env.VENV_ENV, str(venv))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    checks = check_engine(protocol_for(tmp_path, model_dir))
    refusal = first_refusal(checks)
    assert refusal is not None and refusal.name == "engine"
    assert refusal.detail.startswith(f"engine vllm: the vLLM environment {venv} could not be built "
                                     "(install requirements-vllm.txt failed")
    assert "run `make vllm-env`" in refusal.detail and "\n" not in refusal.detail
    assert not venv.exists()


def test_a_campaign_without_a_vllm_variant_never_asks_for_the_venv(tmp_path, monkeypatch):
    from lab.orchestration.preflight import check_engine
    from lab.orchestration.protocol import DEMO_CAMPAIGN, load_protocol

    monkeypatch.setenv(vllm_env.VENV_ENV, str(tmp_path / "none"))
    assert check_engine(load_protocol(DEMO_CAMPAIGN)) == []
    assert not (tmp_path / "none").exists()


def test_a_stale_stamp_is_not_ready(tmp_path):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / ".installed").write_text("0" * 64 + "\n")
    assert not vllm_env.is_ready(venv)
    (venv / ".installed").write_text(__import__("lab.facts.files", fromlist=["x"]).sha256_file(vllm_env.REQUIREMENTS))
    assert vllm_env.is_ready(venv)


def test_the_requirements_file_follows_its_environment_variable(tmp_path, monkeypatch):
    # the CUDA image's venv is stamped with images/requirements-cuda-vllm.txt, not requirements-vllm.txt
    from lab.facts.files import REPO_ROOT, sha256_file

    cuda_req = REPO_ROOT / "images" / "requirements-cuda-vllm.txt"
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / ".installed").write_text(sha256_file(cuda_req) + "\n")
    assert not vllm_env.is_ready(venv)  # default: the CPU host's file, another sha256
    monkeypatch.setenv(vllm_env.REQUIREMENTS_ENV, str(cuda_req))
    assert vllm_env.requirements_file() == cuda_req and vllm_env.is_ready(venv)
    monkeypatch.setenv(vllm_env.REQUIREMENTS_ENV, str(tmp_path / "missing.txt"))
    assert not vllm_env.is_ready(venv)
    with pytest.raises(vllm_env.VllmEnvError, match=r"missing\.txt"):
        vllm_env.ensure_vllm_env(build_if_missing=False)
    # an image without a vLLM venv (no requirements file there): one line, nothing built
    monkeypatch.setenv(vllm_env.VENV_ENV, str(tmp_path / "none"))
    with pytest.raises(vllm_env.VllmEnvError, match=r"cannot be built here: .*missing\.txt is missing") as err:
        vllm_env.ensure_vllm_env(build_if_missing=True)
    assert "\n" not in str(err.value) and not (tmp_path / "none").exists()


def test_a_venv_folder_that_cannot_be_written_is_refused_in_one_line(tmp_path, monkeypatch):
    # the CUDA image built with WITH_VLLM=0: /opt/vllm-venv under a folder the pass user cannot
    # write. Tests may run as root, who writes anywhere, so a file stands where the venv's parent
    # folder would be: the same OSError path
    locked = tmp_path / "opt"
    locked.mkdir()
    (locked / "file").write_text("")
    monkeypatch.setenv(vllm_env.VENV_ENV, str(locked / "file" / "vllm-venv"))
    with pytest.raises(vllm_env.VllmEnvError, match=r"cannot be built here \(") as err:
        vllm_env.ensure_vllm_env(build_if_missing=True)
    assert "\n" not in str(err.value)


# ---- no engine left behind --------------------------------------------------------------------

PARENT = textwrap.dedent("""
    import json, sys
    from lab.engines.vllm import VllmClient, settings_for
    from lab.inputs.variants import Variant
    client = VllmClient(settings_for(Variant(engine="vllm"), sys.argv[1], "cpu"))
    client.start()
    print(json.dumps({"worker": client.proc.pid}), flush=True)
    while True:  # mid-run: classify until killed
        client.classify([[101] + [2023] * 200 + [102]] * 64)
""")


def engine_processes(worker: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(worker)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


@needs_venv
def test_a_pass_killed_mid_run_leaves_no_engine_process(tmp_path, model_dir):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(model_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=open(tmp_path / "parent.log", "w"), text=True)
    try:
        line = parent.stdout.readline()
        assert line, (tmp_path / "parent.log").read_text()[-2000:]
        worker = json.loads(line)["worker"]
        procs = engine_processes(worker)
        assert len(procs) >= 2, "the worker and vLLM's engine core"  # else the test proves nothing
        assert all(os.getpgid(p.pid) == worker for p in procs)  # one group, the worker's
        time.sleep(3)  # well inside a classify call
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        wait_until(lambda: not alive(procs), 30, "every engine process gone after its parent was killed",
                   detail=lambda: str([(p.pid, p.name()) for p in alive(procs)]))
    finally:
        parent.kill()


@needs_venv
def test_close_kills_the_whole_group(encoder):
    """Last in the module: it closes the encoder's engine (the fixture's own close is then a no-op)."""
    client, _ = encoder
    assert client.proc is not None
    procs = engine_processes(client.proc.pid)
    assert len(procs) >= 2, "the worker and vLLM's engine core"
    client.close()
    wait_until(lambda: not alive(procs), 30, "the closed engine's processes gone")
    client.close()  # idempotent
