"""A pass in the CUDA image (images/cuda), run on CPU through the lab's own launcher (issue 21
part 7): PyPI's torch 2.13.0 is a CUDA build, and a CUDA build of torch runs on CPU, so the
image's whole pass path (runner, lab sources, tokenizer, torch, predictions) is checked on a
host without a GPU.

Skipped, with the reason, when no engine answers or when the image is not built: CI does not
build it (images/README.md says why); `bash scripts/build_cuda_local.sh` builds it on a host
without NVIDIA's registry. An image built by hand from other lab sources is skipped with the
fix (DockerLauncher.from_environment would refuse it for a campaign, as
tests/unit/test_image_sources.py checks); rebuild it to run these tests.

The image's vLLM venv (/opt/vllm-venv, images/requirements-cuda-vllm.txt; issue 21 part 2) is
checked as far as a host without a GPU allows: it is found ready by the lab's own stamp check,
``import vllm`` works, and the lab's architecture probe says the demo classifier is supported.
No vLLM pass runs here: vLLM's CUDA build needs a GPU for an engine (images/README.md).
"""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import DOCKER_TEST_LABELS, REPO, pins
from test_docker_launcher import CORPUS, make_spec, model_dir, run_pass, stratified_30, subset

from lab.facts.host import read_pins
from lab.inputs.variants import Variant
from lab.launchers.docker import DockerLauncher, ImageOutdated, check_image_sources
from lab.launchers.local import LocalLauncher
from lab.passes.events import EXIT_OK

__all__ = ["model_dir"]  # the demo model, copied world-readable (a fixture of test_docker_launcher)

# What the image's lab process reports about its vLLM venv: the lab's own functions, no network.
VLLM_CHECK = """
import json, subprocess, sys
import transformers
from lab.engines import vllm_env
from lab.engines.vllm import probe_model
py = vllm_env.ensure_vllm_env(build_if_missing=False)
mods = "vllm, torch, transformers, numpy, torchvision, torchaudio, torchcodec"
versions = subprocess.run([str(py), "-P", "-c", f"import json, {mods}; from vllm import LLM; print(json.dumps("
                           f"{{m.__name__: m.__version__ for m in ({mods})}}))"],
                          capture_output=True, text=True, check=True).stdout
print(json.dumps({"venv": str(vllm_env.venv_dir()), "python": str(py), "ready": vllm_env.is_ready(),
                  "venv_versions": json.loads(versions), "lab_transformers": transformers.__version__,
                  "probe": probe_model(sys.argv[1], build_if_missing=False)}))
"""


@pytest.fixture(scope="module")
def cuda_image(docker_client):
    tag = read_pins()["CUDA_IMAGE"]
    try:
        image = docker_client.images.get(tag)
    except Exception:
        pytest.skip(f"image {tag} is not built on this host (CI does not build it: images/README.md); "
                    "build it with `bash scripts/build_cuda_local.sh`")
    # CI never builds this image, so one found here was built by hand from some earlier lab
    # sources; the launcher's refusal of it is tested in tests/unit/test_image_sources.py.
    try:
        check_image_sources(tag, image.labels or {})
    except ImageOutdated as exc:
        pytest.skip(f"{exc} (CI does not build it: images/README.md)")
    return tag


@pytest.mark.docker
def test_cpu_pass_in_the_cuda_image(docker_client, cuda_image, model_dir, tmp_path):
    launcher = DockerLauncher.from_environment(image=cuda_image, vendor="cpu", labels=DOCKER_TEST_LABELS)
    assert launcher.image.labels.get("iteralab.kind") == "cuda"
    rows = stratified_30([json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()])
    corpus = subset(tmp_path / "corpus30.jsonl", rows)
    spec, pass_dir = make_spec(tmp_path, corpus, model_dir, f"iteralab-test-{uuid.uuid4().hex[:8]}",
                               Variant(batch_size=4, device="cpu"), "p001-cuda-image-cpu")
    outcome, lines, events = run_pass(launcher, spec, pass_dir)

    assert outcome.exit_code == EXIT_OK, (outcome, lines[-5:])
    assert outcome.isolation.startswith(f"container {cuda_image}")
    assert [e["event"] for e in events][-1] == "result"
    result = json.loads((pass_dir / "result.json").read_text())
    assert result["status"] == "ok" and result["items_completed"] == 30 and result["device"] == "cpu"
    # torch in the image is PyPI's CUDA build (its version carries the CUDA tag), run on CPU here
    assert "+cu" in result["torch_version"], result["torch_version"]
    assert result["self_accuracy"] is not None and 0.0 <= result["self_accuracy"] <= 1.0
    preds = [json.loads(x) for x in (pass_dir / "predictions.jsonl").read_text().splitlines()]
    assert [p["id"] for p in preds] == [r["id"] for r in rows]
    assert not docker_client.containers.list(all=True, filters={"id": outcome.container_id})

    # the same pass on the host (torch 2.13.0+cpu, the local launcher) predicts the same labels
    host_spec, host_dir = make_spec(tmp_path / "host", corpus, model_dir, spec.campaign,
                                    Variant(batch_size=4, device="cpu"), "p002-host")
    host_outcome, host_lines, _ = run_pass(LocalLauncher(), host_spec, host_dir)
    assert host_outcome.exit_code == EXIT_OK, (host_outcome, host_lines[-5:])
    host_result = json.loads((host_dir / "result.json").read_text())
    host_preds = [json.loads(x) for x in (host_dir / "predictions.jsonl").read_text().splitlines()]
    assert [p["pred"] for p in preds] == [p["pred"] for p in host_preds]
    assert result["self_accuracy"] == host_result["self_accuracy"]
    print(f"cuda image {cuda_image}: torch {result['torch_version']}, 30 items, "
          f"self_accuracy {result['self_accuracy']:.4f}, measured {result['phases_s']}")


def run_in_image(docker_client, image: str, command: list[str], volumes: dict | None = None) -> tuple[int, str]:
    """(exit code, stdout + stderr) of ``command`` in a fresh container of ``image``, no network."""
    ctr = docker_client.containers.run(image, command, detach=True, network_disabled=True,
                                       volumes=volumes or {}, labels=DOCKER_TEST_LABELS)
    try:
        code = ctr.wait(timeout=600)["StatusCode"]
        return code, ctr.logs().decode("utf-8", "replace")
    finally:
        ctr.remove(force=True)


@pytest.fixture(scope="module")
def vllm_venv(docker_client, cuda_image):
    """The image's ITERALAB_VLLM_VENV; skip, saying why, when the image was built without it."""
    env = dict(e.split("=", 1) for e in docker_client.images.get(cuda_image).attrs["Config"]["Env"])
    venv = env.get("ITERALAB_VLLM_VENV")
    code, _ = run_in_image(docker_client, cuda_image, ["test", "-x", f"{venv}/bin/python"]) if venv else (1, "")
    if code != 0:
        pytest.skip(f"image {cuda_image} has no vLLM venv ({venv or 'ITERALAB_VLLM_VENV unset'}): built with "
                    "CUDA_VLLM=0 or before images/requirements-cuda-vllm.txt; rebuild with "
                    "`bash scripts/build_cuda_local.sh`")
    return venv


@pytest.mark.docker
def test_the_cuda_images_vllm_venv_imports_vllm_and_supports_the_demo_model(docker_client, cuda_image,
                                                                            vllm_venv, model_dir):
    code, out = run_in_image(docker_client, cuda_image, ["python", "-c", VLLM_CHECK, "/models/demo"],
                             volumes={str(model_dir): {"bind": "/models/demo", "mode": "ro"}})
    assert code == 0, out[-2000:]
    report = json.loads(out.strip().splitlines()[-1])
    want, lab = pins(REPO / "images" / "requirements-cuda-vllm.txt"), pins(REPO / "images" / "requirements-cuda.txt")
    assert report["ready"] and report["python"] == f"{vllm_venv}/bin/python", report
    # the venv holds the pinned vLLM and its own transformers; the lab's venv keeps the lab's
    # (torchvision, torchaudio and torchcodec included: PyPI's CUDA builds import beside vllm)
    versions = report["venv_versions"]
    assert {m: v.split("+")[0] for m, v in versions.items()} == {m: want[m] for m in versions}, report
    assert len(versions) == 7 and all("+cu" in versions[m] for m in ("torch", "torchvision", "torchaudio")), report
    assert report["lab_transformers"] == lab["transformers"] != want["transformers"], report
    # the lab's architecture probe, run in that venv: vLLM resolves the demo classifier
    probe = report["probe"]
    assert probe["vllm"] == want["vllm"] and probe["resolved"], probe
    assert probe["architectures"] == json.loads((model_dir / "config.json").read_text())["architectures"], probe
    print(f"cuda image {cuda_image}: vLLM venv {vllm_venv}, versions {report['venv_versions']}, "
          f"probe {probe}")
