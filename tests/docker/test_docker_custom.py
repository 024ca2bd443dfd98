"""A custom task's entry through the Docker launcher (issue 20: Docker passes work for every
kind): the entry's folder is mounted read-only at lab.launchers.docker.C_TASK, the pass imports
the entry from there, and the container's predictions equal the host's per id; nothing else of
the user's is mounted (a declared file outside that folder is refused at run start in one line:
tests/unit/test_task_section.py). An embedding campaign in a container gives the host's vectors,
a generation campaign the host's outputs."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import DOCKER_TEST_LABELS, REPO, custom_campaign

from lab.facts.host import read_pins
from lab.launchers.docker import C_TASK, DockerLauncher
from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock


def predictions(orch) -> dict[str, str]:
    (a,) = orch.journal.attempts()
    lines = (orch.dir / "passes" / a.pass_id / "predictions.jsonl").read_text().splitlines()
    return {r["id"]: r["pred"] for r in map(json.loads, lines)}


def in_container_and_on_host(f, docker_client, runs_root) -> dict:
    """{"docker": Orchestrator, "local": Orchestrator}: the locked campaign ``f`` run to the end in
    the CPU image and on the host, each in its own runs folder under ``runs_root``."""
    image = read_pins()["CPU_IMAGE"]
    runs = {}
    for name, launcher in (("docker", DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=docker_client)),
                           ("local", LocalLauncher())):
        orch = Orchestrator.prepare(f, runs_root / f"runs-{name}", launcher)
        assert orch.run() == "finished"
        runs[name] = orch
    return runs


@pytest.mark.docker
def test_custom_entry_runs_in_a_container_with_the_hosts_predictions(docker_client, tmp_path, model_dir):
    image = read_pins()["CPU_IMAGE"]
    try:
        docker_client.images.get(image)
    except Exception:
        pytest.fail(f"image {image} is not built; run `bash scripts/ci_docker.sh` first")
    code = tmp_path / "code"  # the user's own folder, outside the bundle
    code.mkdir()
    shutil.copyfile(REPO / "examples" / "custom_classifier.py", code / "custom_classifier.py")
    f = custom_campaign(tmp_path, model_dir, "code/custom_classifier.py:DemoClassifier", values=(1,))
    lock(load_protocol(f))
    docker = DockerLauncher(image, "cpu", labels=DOCKER_TEST_LABELS, client=docker_client)
    in_container = Orchestrator.prepare(f, tmp_path / "runs-docker", docker)
    assert in_container.run() == "finished"
    (a,) = in_container.journal.attempts()
    assert a.status == "ok" and a.launcher == "docker", a.notes
    assert a.validation.corpus_accepted, a.validation.reasons
    spec = json.loads((in_container.dir / "passes" / a.pass_id / "pass.container.json").read_text())
    assert spec["extra"]["task"]["entry"] == f"{C_TASK}/custom_classifier.py:DemoClassifier"
    on_host = Orchestrator.prepare(f, tmp_path / "runs-local", LocalLauncher())
    assert on_host.run() == "finished"
    assert predictions(in_container) == predictions(on_host) and len(predictions(on_host)) == 10


@pytest.mark.docker
def test_embedding_passes_run_in_a_container_with_the_hosts_vectors(docker_client, tmp_path, model_dir):
    import numpy as np
    from test_task_embedding import embedding_campaign

    f = embedding_campaign(tmp_path, model_dir)  # batch 1 and batch 8, one pass each
    lock(load_protocol(f))
    runs = in_container_and_on_host(f, docker_client, tmp_path)
    for a in runs["docker"].journal.attempts():
        assert a.status == "ok" and a.launcher == "docker", a.notes
        assert a.validation.corpus_accepted, a.validation.reasons
    def vectors(orch):
        out = {}
        for a in orch.journal.attempts():
            d = orch.dir / "passes" / a.pass_id
            ids = [json.loads(x)["id"] for x in (d / "predictions.jsonl").read_text().splitlines()]
            out[a.variant_id] = dict(zip(ids, np.load(d / "vectors.npy", allow_pickle=False), strict=True))
        return out
    host, ctr = vectors(runs["local"]), vectors(runs["docker"])
    assert host.keys() == ctr.keys() and len(host) == 2
    for vid in host:
        assert host[vid].keys() == ctr[vid].keys() and len(host[vid]) == 10
        cos = [float(np.dot(host[vid][i].astype(np.float32), ctr[vid][i].astype(np.float32))) for i in host[vid]]
        assert min(cos) > 0.9999, (vid, min(cos))  # normalised vectors, the same torch build in both


@pytest.mark.docker
def test_generation_passes_run_in_a_container_with_the_hosts_outputs(docker_client, tmp_path, gen_model_dir):
    """The demo generator in the CPU image: the same outputs, token counts and stop reasons per
    id as on the host (greedy decoding, fp32, the same torch build in both)."""
    from test_task_generation import generation_campaign, lines_of

    f = generation_campaign(tmp_path, gen_model_dir, values=(1,))
    lock(load_protocol(f))
    outputs = {}
    for name, orch in in_container_and_on_host(f, docker_client, tmp_path).items():
        (a,) = orch.journal.attempts()
        assert a.status == "ok" and a.launcher == name, a.notes
        assert a.validation.ids_match and a.validation.format_ok, a.validation.reasons
        outputs[name] = {x["id"]: (x["output"], x["output_tokens"], x["stopped_by"]) for x in lines_of(orch, a.pass_id)}
    assert outputs["docker"] == outputs["local"] and len(outputs["local"]) >= 10
