"""scripts/bench.py (`make bench`) on the real demo model, tiny: a run writes its result atomically
(the classification and the embedding contenders) and leaves no temporary folder; a folder that
looks like a model but does not load is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO


def run(*args: str, tmp_dir, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_dir)}
    return subprocess.run([sys.executable, str(REPO / "scripts/bench.py"), *args], check=False, capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=timeout)


def test_tiny_run_writes_the_result_and_removes_its_temporary_folder(model_dir, tmp_path):
    tmp_dir = tmp_path / "tmp"
    tmp_dir.mkdir()
    out = tmp_path / "new" / "bench.json"
    r = run("--model", str(model_dir), "--items", "16", "--rounds", "1", "--threads", "1", "--out", str(out),
            tmp_dir=tmp_dir)
    assert r.returncode == 0, r.stderr
    res = json.loads(out.read_text())
    assert res["items"] == 16 and res["rounds"] == 1 and res["same_predictions"] is True
    assert set(res["seconds"]) == {"bare", "lab", "pipeline", "bucketed"}
    # the embedding contenders, same items: four vectors per item that agree (the same pooling
    # rule through four code paths), and the output says why encode is set against bucketing
    emb = res["embedding"]
    assert set(emb["seconds"]) == {"emb_bare", "emb_lab", "emb_bucketed", "st_encode"}
    assert all(len(v) == 1 for v in emb["seconds"].values())
    assert min(emb["worst_cosine_with_bare"].values()) > 0.9999, emb["worst_cosine_with_bare"]
    assert emb["emb_bucketed_over_encode"] > 0 and emb["emb_lab_over_bare"] > 0
    assert emb["padding_waste_bucketed"] < emb["padding_waste_longest"]
    assert "encode sorts by length on its own" in r.stdout and "emb_bucketed_over_encode" in r.stdout
    # the corpus subset's folder is gone (torch's own compile cache may stay: not the script's)
    assert [p.name for p in tmp_dir.iterdir() if not p.name.startswith("torchinductor")] == []
    assert list(out.parent.iterdir()) == [out]  # no .partial left


def test_a_folder_that_does_not_load_is_one_line_and_keeps_the_result(tmp_path, fake_model):
    """Past the cheap folder check (config.json, a safetensors header that parses: garbage
    weights are refused there, tests/unit/test_bench_inputs.py), the model load itself fails."""
    model = fake_model
    (model / "config.json").write_text('{"model_type": "bert", "max_position_embeddings": 512}')
    out = tmp_path / "bench.json"
    out.write_text('{"kept": true}\n')
    r = run("--model", str(model), "--items", "16", "--rounds", "1", "--out", str(out), tmp_dir=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"bench: --model {model} does not load (WeightsNotLoaded: ")
    assert "`make model`" in r.stderr
    assert out.read_text() == '{"kept": true}\n'
