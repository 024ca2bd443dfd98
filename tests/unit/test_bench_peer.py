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
    (["--rounds", "0"], "--rounds 0 must be an integer >= 1"),
    (["--threads", "0"], "--threads 0 must be an integer >= 1"),
    (["--threads", "-2"], "--threads -2 must be an integer >= 1"),
    (["--items", "0"], "--items 0 must be an integer >= 1"),
    (["--warmup-runs", "-1"], "--warmup-runs -1 must be an integer >= 0"),
    (["--batch", "x"], "invalid int value: 'x'"),
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


def test_missing_peer_venv_names_make_bench_peer(tmp_path, fake_model, monkeypatch):
    """The peer venv's own python missing: build it with `make bench-peer`."""
    monkeypatch.setattr(bench_peer, "PEER_VENV", tmp_path / "venv")
    a = bench_peer.parse_args(["--model", str(fake_model), "--peer-python", str(tmp_path / "venv/bin/python"),
                               "--out", str(tmp_path / "o.json")])
    with pytest.raises(bench_peer.UsageError, match=r"run `make bench-peer`.*needs PyPI"):
        bench_peer.check_prerequisites(a)


def test_a_missing_python_outside_the_peer_venv_says_where_to_point(tmp_path, fake_model):
    r = run("--model", str(fake_model), "--peer-python", str(tmp_path / "elsewhere/python"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "is missing; point --peer-python at the peer venv's python" in r.stderr


def test_a_python_without_optimum_benchmark_outside_the_venv_is_not_told_to_delete_it(tmp_path, fake_model):
    """The lab's own python (like /usr/bin/python3) lacks optimum-benchmark: point at the peer venv's
    python; never 'delete' a folder that is not the project's peer venv."""
    r = run("--model", str(fake_model), "--peer-python", sys.executable)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "cannot import optimum_benchmark" in r.stderr and "ModuleNotFoundError" in r.stderr
    assert "delete" not in r.stderr and "point --peer-python at the peer venv's python" in r.stderr


def test_a_broken_peer_venv_is_named_for_deletion(tmp_path, fake_model, monkeypatch):
    """Inside the peer venv (its bin/python a link to a python without optimum-benchmark, as a venv's
    is): delete that venv and rebuild it."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setattr(bench_peer, "PEER_VENV", venv)
    a = bench_peer.parse_args(["--model", str(fake_model), "--peer-python", str(venv / "bin/python"),
                               "--out", str(tmp_path / "o.json")])
    with pytest.raises(bench_peer.UsageError, match=f"delete {venv} and run `make bench-peer` again"):
        bench_peer.check_prerequisites(a)


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text("#!/bin/sh\n"), "is not executable"),
    (lambda p: p.mkdir(), "is not a file"),
    (lambda p: (p.write_text("not a program"), p.chmod(0o755)), "does not run as a python (OSError)"),
])
def test_a_peer_python_that_is_not_a_program_is_one_line(tmp_path, fake_model, make, words):
    peer = tmp_path / "peer"
    make(peer)
    r = run("--model", str(fake_model), "--peer-python", str(peer))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "point --peer-python" in r.stderr


def test_a_length_beyond_the_model_positions_is_refused_up_front(tmp_path, fake_model):
    r = run("--model", str(fake_model), "--lengths", "128,1000", "--peer-python", sys.executable)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--lengths 1000 exceeds the model's max_position_embeddings 512" in r.stderr


@pytest.mark.parametrize("out, words", [
    ("/proc/x.json", "cannot write in /proc"),
    ("{tmp}", "is a folder"),
    ("{tmp}/a_file/x.json", "is a file, not a folder"),
])
def test_an_unwritable_out_is_found_before_the_run(tmp_path, fake_model, out, words):
    (tmp_path / "a_file").write_text('{"kept": true}\n')
    r = run("--out", out.format(tmp=tmp_path), "--model", str(fake_model))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and words in r.stderr, r.stderr
    assert (tmp_path / "a_file").read_text() == '{"kept": true}\n'


def test_round_order_agrees_with_the_docstring():
    """Rounds are printed and written from 1; the docstring's parity names those numbers."""
    assert bench_peer.round_order(1) == ("peer", "lab") and bench_peer.round_order(2) == ("lab", "peer")
    assert "odd rounds peer>lab, even rounds lab>peer" in " ".join(bench_peer.__doc__.split())


def test_ci_and_make_test_do_not_reach_the_peer_venv():
    """`make test`/`test-fast` and .ci/run never create or use the peer venv."""
    make = subprocess.run(["make", "-n", "-B", "test", "test-fast", "lint"], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=60)
    assert make.returncode == 0, make.stderr
    assert "bench-peer" not in make.stdout and "bench_peer" not in make.stdout
    assert "bench-peer" not in (REPO / ".ci" / "run").read_text()
