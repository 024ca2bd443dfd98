"""A checkpoint whose weights file does not hold the model's weights (another model's, renamed
keys) is a failure row with the reason, never a pass measured on randomly initialised weights:
transformers only logs the missing keys (lab.passes.inference.check_weights_loaded)."""
from __future__ import annotations

import shutil

import pytest
from conftest import cut_corpus, write_campaign

from lab.launchers.local import LocalLauncher
from lab.orchestration.orchestrator import Orchestrator
from lab.orchestration.protocol import load_protocol, lock

pytestmark = pytest.mark.slow


def test_weights_of_another_model_fail_the_pass_instead_of_running_random_weights(tmp_path, model_dir):
    from safetensors.torch import load_file, save_file

    m = tmp_path / "model"
    shutil.copytree(model_dir, m)
    weights = load_file(m / "model.safetensors")
    save_file({f"other.{k}": v for k, v in weights.items()}, m / "model.safetensors", metadata={"format": "pt"})
    f = write_campaign(tmp_path, m, cut_corpus(tmp_path / "c.jsonl", 2, 1, 1), values=(1,))
    lock(load_protocol(f))  # the folder looks complete: config, tokenizer, a readable weights file
    orch = Orchestrator.prepare(f, tmp_path / "runs", LocalLauncher())
    orch.run()
    [a] = orch.journal.attempts()
    assert a.status == "error" and a.items_completed == 0
    assert "WeightsNotLoaded" in a.notes and "does not hold this model's weights" in a.notes, a.notes
    assert "first: bert." in a.notes
