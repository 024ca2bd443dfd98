"""A 2-card pass in one real container: the same torchrun entry point inside (issue 14).

Uses the CPU image (``images/pins.env`` CPU_IMAGE, or ``ITERALAB_TEST_IMAGE``), which must
be built from this tree's lab code (scripts/ci_docker.sh rebuilds it when lab/ changes).
Skipped with the reason only when no engine answers. Containers are labelled
``iteralab.test`` and removed.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from conftest import MODEL, cut_corpus
from lab.launchers.docker import DockerLauncher, read_pins
from lab.launchers.local import LocalLauncher
from lab.passes.spec import PassSpec
from lab.variants import Variant

TEST_LABEL = "iteralab.test"


@pytest.fixture(scope="module")
def client():
    docker = pytest.importorskip("docker")
    try:
        c = docker.from_env(timeout=60)
        c.ping()
    except Exception as exc:
        pytest.skip(f"no Docker engine reachable ({type(exc).__name__}: {exc}); run scripts/ci_docker.sh")
    yield c
    for ctr in c.containers.list(all=True, filters={"label": TEST_LABEL}):
        ctr.remove(force=True)


def _spec(folder: Path, corpus: Path, model: Path, variant: Variant, pass_id: str) -> tuple[PassSpec, Path]:
    d = folder / pass_id
    d.mkdir(parents=True)
    spec = PassSpec(campaign=f"iteralab-test-{uuid.uuid4().hex[:8]}", pass_id=pass_id, variant=variant.to_json(),
                    corpus_path=str(corpus), model_ref=str(model), out_dir=str(d), warmup_items=2, threads=2)
    spec.write(d / "pass.json")
    return spec, d


@pytest.mark.docker
def test_two_card_pass_in_one_container_matches_one_card(client, tmp_path):
    image = os.environ.get("ITERALAB_TEST_IMAGE") or read_pins()["CPU_IMAGE"]
    try:
        client.images.get(image)
    except Exception:
        pytest.fail(f"image {image} is not built; run `bash scripts/ci_docker.sh` first")
    model = tmp_path / "model"
    shutil.copytree(MODEL, model)
    for p in [tmp_path, model, *model.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    corpus = cut_corpus(tmp_path / "corpus.jsonl", 6, 4, 2)
    corpus.chmod(0o644)
    one_spec, one_dir = _spec(tmp_path, corpus, model, Variant(batch_size=4, max_length=128, device="cpu"), "one")
    LocalLauncher().launch(one_spec, one_dir, lambda line: None)
    two_spec, two_dir = _spec(tmp_path, corpus, model, Variant(batch_size=4, max_length=128, device="cpu", cards=2),
                              "two")
    launcher = DockerLauncher(image, "cpu", labels={TEST_LABEL: "multicard"}, client=client,
                              timeout_s=300)
    lines: list[str] = []
    outcome = launcher.launch(two_spec, two_dir, lines.append)
    assert outcome.exit_code == 0, (two_dir / "log.txt").read_text()[-3000:]
    assert outcome.container_id and "container" in outcome.isolation
    res = json.loads((two_dir / "result.json").read_text())
    assert res["status"] == "ok" and res["cards_observed"] == 2 and res["threads"] == [1, 1]
    assert [c["items_total"] for c in res["per_card"]] == [6, 6] and len(res["devices"]) == 2
    assert "torch.distributed.run" in next(json.loads(x)["command"] for x in lines if '"launch"' in x)

    def preds(d: Path) -> dict:
        return {r["id"]: r["pred"] for r in map(json.loads, (d / "predictions.jsonl").read_text().splitlines())}
    assert preds(two_dir) == preds(one_dir) and len(preds(two_dir)) == 12
    assert not client.containers.list(all=True, filters={"label": f"{TEST_LABEL}=multicard"})
