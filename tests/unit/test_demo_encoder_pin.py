"""The demo encoder's weights are checked against a pinned sha256 before the demo model is built
(issue 18 part 7): the installed bytes pass, a tampered copy is refused in one line naming both
digests, before anything is loaded or written."""

from __future__ import annotations

import shutil
import tomllib

import pytest
from conftest import REPO

import lab.inputs.models
from lab.demo.model import (
    ENCODER_VERSION,
    ENCODER_WEIGHTS_SHA256,
    EncoderWeightsChanged,
    build_demo_model,
    check_encoder_weights,
)
from lab.facts.errors import UserError
from lab.facts.files import sha256_file
from lab.inputs.models import ENCODER_PACKAGE, encoder_path


@pytest.fixture(scope="module")
def tampered(tmp_path_factory):
    """A copy of the installed encoder folder whose weights differ by one byte."""
    folder = tmp_path_factory.mktemp("encoder") / "model"
    shutil.copytree(encoder_path(), folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights.write_bytes(bytes(data))
    return folder


def test_the_pin_is_the_version_pyproject_installs():
    demo = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["demo"]
    assert f"{ENCODER_PACKAGE}=={ENCODER_VERSION}" in demo


def test_the_installed_weights_match_the_pin():
    assert check_encoder_weights(encoder_path()) == ENCODER_WEIGHTS_SHA256


def test_a_tampered_copy_is_refused_in_one_line_naming_both_digests(tampered):
    found = sha256_file(tampered / "model.safetensors")
    with pytest.raises(EncoderWeightsChanged) as e:
        check_encoder_weights(tampered)
    msg = str(e.value)
    assert "\n" not in msg and isinstance(e.value, UserError)
    assert ENCODER_WEIGHTS_SHA256["model.safetensors"] in msg and found in msg
    assert "make env" in msg


def test_missing_weights_are_refused(tmp_path):
    with pytest.raises(EncoderWeightsChanged, match="found missing"):
        check_encoder_weights(tmp_path)


def test_build_demo_model_refuses_tampered_weights_before_writing(tampered, tmp_path, monkeypatch):
    monkeypatch.setattr(lab.inputs.models, "encoder_path", lambda: tampered)
    out = tmp_path / "demo-model"
    with pytest.raises(EncoderWeightsChanged):
        build_demo_model(REPO / "demo" / "corpus" / "tuning.jsonl", out)
    assert not out.exists()
