"""requirements.lock is the runtime a rental runs; requirements-dev.lock adds what only tests and
maintainers need (issue 18 part 7). The pass images install subsets of the runtime only."""

from __future__ import annotations

import re
import tomllib

from conftest import REPO, pins
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

DEV_TOOLS = {"pytest", "pytest-asyncio", "pytest-textual-snapshot", "pytest-timeout", "ruff", "mypy",
             "import-linter", "grimp", "nbclient", "nbformat", "ipykernel", "tornado", "syrupy"}
# Wheels only a vendor image needs (the CUDA runtime libraries, triton; setuptools, which torch's
# wheel metadata names and a venv already holds).
IMAGE_ONLY = re.compile(r"^(cuda-|nvidia-(?!ml-py)|triton$|setuptools$)")


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_runtime_lock_holds_no_test_or_maintainer_tool():
    runtime = pins(REPO / "requirements.lock")
    assert len(runtime) > 40  # the whole resolved runtime, not a stub
    assert not DEV_TOOLS & set(runtime), sorted(DEV_TOOLS & set(runtime))


def test_the_dev_lock_adds_to_the_runtime_without_repeating_it():
    text = (REPO / "requirements-dev.lock").read_text()
    assert text.splitlines().count("-r requirements.lock") == 1
    dev, runtime = pins(REPO / "requirements-dev.lock"), pins(REPO / "requirements.lock")
    assert set(dev) >= DEV_TOOLS, sorted(DEV_TOOLS - set(dev))
    assert not set(dev) & set(runtime), sorted(set(dev) & set(runtime))


def test_pyproject_pins_sit_in_the_lock_of_their_side():
    runtime, dev = pins(REPO / "requirements.lock"), pins(REPO / "requirements-dev.lock")
    p = project()
    for side, reqs in ((runtime, p["dependencies"] + p["optional-dependencies"]["demo"]),
                       (dev, p["optional-dependencies"]["test"])):
        for r in map(Requirement, reqs):
            name, (spec,) = canonicalize_name(r.name), r.specifier
            assert side.get(name) == spec.version, (r.name, spec.version, side.get(name))


def test_pass_images_install_only_the_runtime_at_its_versions():
    runtime = pins(REPO / "requirements.lock")
    for vendor in ("cpu", "cuda", "rocm"):
        image = pins(REPO / "images" / f"requirements-{vendor}.txt")
        assert image, vendor
        assert not DEV_TOOLS & set(image), (vendor, sorted(DEV_TOOLS & set(image)))
        extra = sorted(n for n in image if n not in runtime and not IMAGE_ONLY.match(n))
        assert not extra, (vendor, extra)
        for name, version in image.items():
            if name in runtime:  # torch's local build tag (+cpu) aside, the same version
                assert version.split("+")[0] == runtime[name], (vendor, name, version, runtime[name])
        dockerfile = (REPO / "images" / vendor / "Dockerfile").read_text()
        assert f"images/requirements-{vendor}.txt" in dockerfile and "requirements-dev" not in dockerfile
        assert "requirements.lock" not in dockerfile.split("COPY", 1)[1]


def test_the_cuda_images_vllm_venv_is_hashed_and_shares_the_images_torch():
    path = REPO / "images" / "requirements-cuda-vllm.txt"
    vllm, image = pins(path), pins(REPO / "images" / "requirements-cuda.txt")
    assert "vllm" in vllm and len(vllm) > 100  # the whole resolved set, not a stub
    assert path.read_text().count("--hash=sha256:") == len(vllm)
    # the same torch build and CUDA runtime wheels as the lab's venv in the image; cuda-bindings
    # (Python bindings, no runtime) may differ: cuda-python, which flashinfer needs, pins ~=13.4.4
    shared = [n for n in image if n == "torch" or (IMAGE_ONLY.match(n) and n != "cuda-bindings")]
    assert "torch" in shared and len(shared) > 10
    assert {n: vllm.get(n) for n in shared} == {n: image[n] for n in shared}
    assert "images/requirements-cuda-vllm.txt" in (REPO / "images" / "cuda" / "Dockerfile").read_text()
