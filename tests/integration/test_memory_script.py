"""scripts/memory_lab.py as the user runs it: environment check, table, plot, JSON/CSV; the notebook runs."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts/memory_lab.py"
NOTEBOOK = REPO / "scripts/memory_lab.ipynb"

pytestmark = pytest.mark.slow


def run(*args, timeout=300):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_tiny_grid_prints_estimate_vs_observed_and_writes_plot_json_csv(tmp_path):
    png, js, cs = tmp_path / "m.png", tmp_path / "m.json", tmp_path / "m.csv"
    p = run("--device", "cpu", "--batches", "1,2", "--lengths", "32,64", "--threads", "2",
            "--plot", str(png), "--json", str(js), "--csv", str(cs), "--budget-bytes", "4e9")
    assert p.returncode == 0, p.stderr
    assert "torch_build=cpu" in p.stdout and "device=cpu" in p.stdout
    assert "error_%" in p.stdout and "estimate error: min" in p.stdout
    assert "largest batch" in p.stdout and "margin 10% kept free" in p.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    data = json.loads(js.read_text())
    assert [(r["batch_size"], r["seq_len_tokens"]) for r in data["rows"]] == [(1, 32), (2, 32), (1, 64), (2, 64)]
    for r in data["rows"]:
        o = r["observation"]
        assert o["process_peak_rss_bytes"] > 0 and o["peak_allocated_bytes"] is None
        assert "CPU" in o["reasons"]["peak_reserved_bytes"]
        assert r["comparison"]["observed_counter"] == "process_rss_rise_bytes"
        assert isinstance(r["comparison"]["error_fraction"], float)
    assert data["feasibility"]["long"]["seq_len_tokens"] == 512 and data["budget_bytes"] == 4_000_000_000
    rows = list(csv.DictReader(cs.open()))
    assert len(rows) == 4 and rows[0]["peak_allocated_bytes"] == ""     # empty cell, not 0


@pytest.mark.parametrize("args, message", [
    (["--model", "/nonexistent/model"], "make model"),
    (["--device", "cuda"], "torch sees no GPU"),
    (["--lengths", "1024"], "max_position_embeddings"),
])
def test_environment_problems_exit_2_with_one_line_reason(args, message):
    import torch

    if args[:2] == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("a GPU is visible here: the no-GPU message cannot be produced")
    p = run("--batches", "1", "--plot", "/dev/null", *args)
    assert p.returncode == 2, (p.stdout, p.stderr)
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("memory_lab: ") and message in last


def test_notebook_runs_top_to_bottom_on_the_venv_kernel(tmp_path, monkeypatch):
    import nbclient
    import nbformat

    # a kernelspec pointing at this interpreter, found first through JUPYTER_PATH
    spec = tmp_path / "kernels" / "iteralab-memory"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "iteralab venv", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=240, kernel_name="iteralab-memory",
                            resources={"metadata": {"path": str(REPO / "scripts")}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    text = "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert not [o for o in outputs if o.output_type == "error"]
    assert f"torch {__import__('torch').__version__}" in text
    assert "activation_bytes vs process_rss_rise_bytes" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)
    assert "batch 4: RSS peak" in text and "then batch 1" in text
    assert "reason='OOM in 1 of 2 passes; long items completed 37/100'" in text  # a Feasibility record
    assert "largest batch" in text
