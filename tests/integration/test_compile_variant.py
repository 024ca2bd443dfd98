"""compile = true: its own phase covering the window's batch shapes, recompilations counted, failures are rows.

Real passes (python -m lab.passes.runner) on the real demo model; torch.compile on CPU
builds C++ with the host compiler, so each test takes a minute or more on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, cut_corpus

from lab.inputs.variants import Variant
from lab.passes.spec import PassSpec

pytestmark = pytest.mark.slow


def _run_pass(tmp_path, model_dir, name, compile_, env=None, corpus=None, padding="longest", bucketing=False):
    out = tmp_path / name
    out.mkdir()
    v = Variant(batch_size=4, max_length=128, device="cpu", compile=compile_, padding=padding, bucketing=bucketing)
    spec = PassSpec(campaign="t", pass_id=name, variant=v, model_ref=str(model_dir),
                    corpus_path=str(corpus), out_dir=str(out), warmup_items=2, threads=2)
    spec.write(out / "pass.json")
    proc = subprocess.run([sys.executable, "-m", "lab.passes.runner", str(out / "pass.json")],
                          cwd=REPO, capture_output=True, text=True, check=False, timeout=900,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    res = json.loads((out / "result.json").read_text())
    preds = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()] \
        if (out / "predictions.jsonl").is_file() else []
    return proc, res, preds


@pytest.mark.parametrize("padding, bucketing", [("max_length", False), ("longest", True)])
def test_compile_phase_covers_the_short_final_batch(tmp_path, model_dir, padding, bucketing):
    """11 items, batch 4, warm-up of 2 items: the window runs batches of 4, 4 and 3 items; before
    the fix the compile phase saw one 2-item batch and dynamo compiled again inside the window
    (the last short batch; with "longest" every new length too) and the warm-up compiled too."""
    corpus = cut_corpus(tmp_path / "c.jsonl", 4, 4, 3)
    _, eager, eager_preds = _run_pass(tmp_path, model_dir, "eager", False, corpus=corpus,
                                      padding=padding, bucketing=bucketing)
    proc, res, preds = _run_pass(tmp_path, model_dir, "compiled", True, corpus=corpus,
                                 padding=padding, bucketing=bucketing)
    assert proc.returncode == 0, proc.stderr[-2000:]
    print({k: res.get(k) for k in ("phases_s", "compile_shapes", "compile_frames", "recompiles_warmup",
                                   "recompiles_measured", "graph_breaks_measured", "utilization")},
          {"eager_phases_s": eager["phases_s"], "eager_utilization": eager.get("utilization")})
    assert res["status"] == "ok" and res["phases_s"]["compile"] > 0 and res["batches"] == 3
    # the window's full and short batch, then the warm-up's batch of 2 items: all in the compile phase
    assert res["compile_shapes"] == ([[4, 128], [3, 128], [2, 128]] if padding == "max_length"
                                     else [[4, "dynamic"], [3, "dynamic"], [2, "dynamic"]])
    assert res["compile_frames"] >= 1
    assert res["recompiles_warmup"] == 0 and res["recompiles_measured"] == 0
    assert "compile" not in eager["phases_s"] and "recompiles_measured" not in eager
    assert [p["pred"] for p in preds] == [p["pred"] for p in eager_preds]
    assert [p["prob"] for p in preds] == pytest.approx([p["prob"] for p in eager_preds], abs=1e-4)


def test_compile_failure_is_a_failure_row_with_the_reason(tmp_path, model_dir):
    corpus = cut_corpus(tmp_path / "c.jsonl", 2, 1, 1)
    proc, res, preds = _run_pass(tmp_path, model_dir, "nocc", True, corpus=corpus,
                                 env={"CXX": "/bin/false", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "ind")})
    assert proc.returncode == 4
    assert res["status"] == "error" and res["error"]
    assert "compile" not in res["phases_s"] and "measured" not in res["phases_s"]
    assert res["items_completed"] == 0 and preds == []
    events = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert any(e["event"] == "phase" and e.get("phase") == "compile" and e["state"] == "start" for e in events)
    assert any(e["event"] == "error" for e in events)
