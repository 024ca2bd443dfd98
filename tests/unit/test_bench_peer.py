"""scripts/bench_peer.py (`make bench-peer`) without the peer install: argument errors and
missing prerequisites (one line, exit 2, nothing written lost) and the parsing of a real
optimum-benchmark report.

fixtures/optimum_benchmark_0.6.0_inference_b8_s128_t1.json is the unedited output of one real
run of scripts/bench_peer_worker.py on 2026-11-30 (peer venv from
scripts/bench_peer_requirements.txt: optimum-benchmark 0.6.0, transformers 4.57.6, torch
2.13.0+cpu) on the demo model: batch 8, sequence length 128, 1 thread, 2 warm-up runs,
5 iterations, inline launcher, on the shared 2-core development machine (loaded, niced).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "bench_peer.py"
CAPTURE = Path(__file__).resolve().parent / "fixtures" / "optimum_benchmark_0.6.0_inference_b8_s128_t1.json"
sys.path.insert(0, str(REPO / "scripts"))
import bench_peer  # noqa: E402


def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, str(SCRIPT), *args], check=False, capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=timeout)


@pytest.fixture()
def fake_model(tmp_path) -> Path:
    """A folder that passes the model check only (config.json present): the peer check comes next."""
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    return d


def test_real_capture_parses_to_its_forward_throughput():
    data = json.loads(CAPTURE.read_text())
    got = bench_peer.parse_peer_report(data, batch=8)
    fwd = data["report"]["forward"]
    assert got["samples_per_s"] == fwd["throughput"]["value"]
    assert got["forward_count"] == 5 == len(fwd["latency"]["values"])
    assert got["samples_per_s"] == pytest.approx(8 / (sum(fwd["latency"]["values"]) / 5), rel=1e-9)
    assert got["torch_num_threads"] == 1
    assert data["versions"]["optimum_benchmark_version"] == "0.6.0"


@pytest.mark.parametrize("damage, words", [
    (lambda d: d["report"].pop("forward"), "no forward"),
    (lambda d: d["report"]["forward"].update(throughput=None), "no forward"),
    (lambda d: d["report"]["forward"]["throughput"].update(unit="tokens/s"), "tokens/s"),
    (lambda d: d["report"]["forward"]["throughput"].update(value=1.0), "is not batch 8"),
])
def test_a_report_without_the_compared_figure_is_refused(damage, words):
    data = copy.deepcopy(json.loads(CAPTURE.read_text()))
    damage(data)
    with pytest.raises(bench_peer.PeerReportError, match=words):
        bench_peer.parse_peer_report(data, batch=8)


def test_batch_mismatch_between_report_and_request_is_refused():
    with pytest.raises(bench_peer.PeerReportError, match="is not batch 4"):
        bench_peer.parse_peer_report(json.loads(CAPTURE.read_text()), batch=4)


@pytest.mark.parametrize("args, words", [
    (["--items", "20", "--batch", "8"], "not a multiple of --batch 8"),
    (["--lengths", "128,abc"], "not a comma-separated list"),
    (["--lengths", "4"], "8 tokens or more"),
    (["--rounds", "0"], "--rounds must be >= 1"),
    (["--threads", "0"], "--threads must be >= 1"),
])
def test_bad_arguments_one_line_exit_2_and_the_previous_result_kept(tmp_path, args, words):
    out = tmp_path / "bench_peer.json"
    out.write_text('{"kept": true}\n')
    r = run(*args, "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("bench-peer: ") and words in r.stderr, r.stderr
    assert out.read_text() == '{"kept": true}\n'


def test_missing_model_names_make_model(tmp_path):
    r = run("--model", str(tmp_path / "absent"), "--peer-python", str(tmp_path / "absent-python"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "`make model`" in r.stderr, r.stderr


def test_missing_peer_venv_names_make_bench_peer(tmp_path, fake_model):
    r = run("--model", str(fake_model), "--peer-python", str(tmp_path / "venv/bin/python"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "`make bench-peer`" in r.stderr and "needs PyPI" in r.stderr


def test_a_peer_venv_without_optimum_benchmark_is_named(tmp_path, fake_model):
    """The lab's own python is a python without optimum-benchmark: the probe must say so."""
    r = run("--model", str(fake_model), "--peer-python", sys.executable)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot import optimum_benchmark" in r.stderr and "ModuleNotFoundError" in r.stderr


def test_ci_and_make_test_do_not_reach_the_peer_venv():
    """`make test`/`test-fast` and .ci/run never create or use the peer venv."""
    make = subprocess.run(["make", "-n", "-B", "test", "test-fast", "lint"], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=60)
    assert make.returncode == 0, make.stderr
    assert "bench-peer" not in make.stdout and "bench_peer" not in make.stdout
    assert "bench-peer" not in (REPO / ".ci" / "run").read_text()
