"""compile = true: its own phase, recompilations in the window counted, failures are rows.

Real passes (python -m lab.passes.runner) on the real demo model; torch.compile on CPU
builds C++ with the host compiler, so each test takes a minute or more on 2 cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import REPO, cut_corpus

from lab.passes.spec import PassSpec
from lab.variants import Variant

pytestmark = pytest.mark.slow


def _run_pass(tmp_path, model_dir, name, compile_, env=None, corpus=None):
    out = tmp_path / name
    out.mkdir()
    v = Variant(batch_size=4, max_length=128, device="cpu", compile=compile_)
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


def test_compiled_pass_times_compile_apart_and_counts_recompilations(tmp_path, model_dir):
    corpus = cut_corpus(tmp_path / "c.jsonl", 3, 2, 1)  # 6 items: batches of 4 and 2, lengths differ
    _, eager, eager_preds = _run_pass(tmp_path, model_dir, "eager", False, corpus=corpus)
    proc, res, preds = _run_pass(tmp_path, model_dir, "compiled", True, corpus=corpus)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert res["status"] == "ok" and res["phases_s"]["compile"] > 0
    assert "compile" not in eager["phases_s"] and "recompiles_measured" not in eager
    # warm-up compiled one shape (2 items); the window meets new ones: dynamo compiles again
    assert res["recompiles_measured"] >= 1 and res["graph_breaks_measured"] >= 0
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
