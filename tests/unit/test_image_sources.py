"""A pass image built from another version of the lab is refused before any pass runs (a
new-user trial: a bundle updated after `make images` crashed all 20 demo passes, each on a
pass spec the image's older code could not read). The image carries the lab sources' sha256 as
a label (lab.facts.files.lab_sources_sha256); lab.launchers.docker.check_image_sources compares."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import REPO

from lab.facts.files import lab_sources_sha256
from lab.launchers.docker import LAB_SHA256_LABEL, ImageOutdated, check_image_sources


def test_the_digest_follows_every_source_file_and_ignores_bytecode(tmp_path):
    shutil.copytree(REPO / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    base = lab_sources_sha256(tmp_path)
    assert base == lab_sources_sha256(REPO)
    (tmp_path / "lab" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "lab" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    assert lab_sources_sha256(tmp_path) == base
    with (tmp_path / "lab" / "inputs" / "variants.py").open("a") as fh:
        fh.write("\n# one more line\n")
    assert lab_sources_sha256(tmp_path) != base
    # the build scripts call it with the system python, before any venv exists
    out = subprocess.run([sys.executable, "-m", "lab.facts.files"], cwd=tmp_path, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == lab_sources_sha256(tmp_path)


def test_an_image_of_other_sources_or_unlabelled_is_refused_with_the_fix():
    check_image_sources("iteragpu-lab-cpu:x", {LAB_SHA256_LABEL: lab_sources_sha256()})  # this bundle's
    for labels, said in (({LAB_SHA256_LABEL: "0" * 64}, "lab sources 000000000000"),
                         ({}, "no lab sources label")):
        with pytest.raises(ImageOutdated) as e:
            check_image_sources("iteragpu-lab-cpu:x", labels)
        msg = str(e.value)
        assert "\n" not in msg and said in msg and lab_sources_sha256()[:12] in msg and "make images" in msg


def test_auto_never_falls_back_silently_on_an_outdated_image(monkeypatch):
    from lab.launchers import docker as docker_launcher
    from lab.service.campaigns import CampaignError, make_launcher

    def outdated(**_kw):
        raise ImageOutdated("image iteragpu-lab-cpu:x was built from another version of the lab")

    monkeypatch.setattr(docker_launcher.DockerLauncher, "from_environment", staticmethod(outdated))
    for kind in ("auto", "docker"):
        with pytest.raises(CampaignError, match=r"another version of the lab.*--launcher local") as e:
            make_launcher(kind)
        # the fix as `make up` takes it (a user trial met this on a fresh clone, on a host holding an
        # older image, with only the CLI's option named)
        assert "`ITERALAB_LAUNCHER=local make up`" in str(e.value) and "\n" not in str(e.value)
