"""Bad input to the benchmark scripts (scripts/bench.py, bench_validation.py; bench_peer.py in
test_bench_peer.py): one line on stderr saying what is wrong and the fix, exit 2, before any heavy
import or model load, and the previous result file left as it was.

The scripts run as real subprocesses. ``heavy_poisoned`` puts first on PYTHONPATH a ``torch`` and a
``transformers`` whose import exits with a marker: a check that ran after a heavy import would
show the marker instead of its own line, so the order "checks first" is tested, not assumed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "scripts" / "bench.py"
VALIDATION = REPO / "scripts" / "bench_validation.py"
KEPT = '{"kept": true}\n'
sys.path.insert(0, str(REPO / "scripts"))
import bench_validation  # noqa: E402


@pytest.fixture()
def heavy_poisoned(tmp_path) -> Path:
    d = tmp_path / "poison"
    for name in ("torch", "transformers"):
        (d / name).mkdir(parents=True)
        (d / name / "__init__.py").write_text(f"raise SystemExit('HEAVY IMPORT {name} before the argument checks')\n")
    return d


def run(script: Path, *args: str, pythonpath: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    path = os.pathsep.join(str(p) for p in (pythonpath, REPO) if p)
    return subprocess.run([sys.executable, str(script), *args], check=False, capture_output=True, text=True,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": path, "COLUMNS": "400"}, timeout=timeout)


def one_line(r: subprocess.CompletedProcess, prefix: str, words: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith(prefix) and words in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "HEAVY IMPORT" not in r.stderr + r.stdout


@pytest.mark.parametrize("args, words", [
    (["--threads", "0"], "--threads 0 must be an integer >= 1"),
    (["--threads", "-2"], "--threads -2 must be an integer >= 1"),
    (["--items", "0"], "--items 0 must be an integer >= 1"),
    (["--rounds", "0"], "--rounds 0 must be an integer >= 1"),
    (["--batch", "-1"], "--batch -1 must be an integer >= 1"),
    (["--max-length", "0"], "--max-length 0 must be an integer >= 8"),
    (["--max-length", "-5"], "--max-length -5 must be an integer >= 8"),
    (["--max-length", "1000"], "--max-length 1000 exceeds the model's max_position_embeddings 512"),
    (["--items", "abc"], "invalid int value: 'abc'"),
])
def test_bench_bad_option_one_line_exit_2_result_kept(tmp_path, heavy_poisoned, fake_model, args, words):
    out = tmp_path / "bench.json"
    out.write_text(KEPT)
    r = run(BENCH, "--model", str(fake_model), *args, "--out", str(out), pythonpath=heavy_poisoned)
    one_line(r, "bench: ", words)
    assert out.read_text() == KEPT


@pytest.mark.parametrize("model, words", [
    ("/nonexistent", "no model there (not a folder)"),
    ("{tmp}", "not a model folder (no config.json)"),
    ("{tmp}/cfg_only", "no weights"),
    ("{tmp}/bad_json", "config.json unreadable (JSONDecodeError)"),
    ("{tmp}/truncated", "weights file model.safetensors unreadable (Error while deserializing header: "
                        "incomplete metadata, file not fully covered)"),
    ("{tmp}/garbage", "weights file model.safetensors unreadable (Error while deserializing header"),
    ("{tmp}/sharded", "model.safetensors.index.json names 1 missing shard(s), first model-00002-of-00002.safetensors"),
])
def test_bench_not_a_model_folder_names_make_model(tmp_path, heavy_poisoned, fake_model, model, words):
    (tmp_path / "cfg_only").mkdir()
    (tmp_path / "cfg_only" / "config.json").write_text("{}")
    (tmp_path / "bad_json").mkdir()
    (tmp_path / "bad_json" / "config.json").write_text("{not json")
    whole = (fake_model / "model.safetensors").read_bytes()
    for name, weights in (("truncated", whole[:-8]), ("garbage", b"not a safetensors file")):
        shutil.copytree(fake_model, tmp_path / name)
        (tmp_path / name / "model.safetensors").write_bytes(weights)
    shutil.copytree(fake_model, tmp_path / "sharded")
    (tmp_path / "sharded" / "model.safetensors").rename(tmp_path / "sharded" / "model-00001-of-00002.safetensors")
    (tmp_path / "sharded" / "model.safetensors.index.json").write_text(
        '{"weight_map": {"w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}}')
    r = run(BENCH, "--model", model.format(tmp=tmp_path), "--out", str(tmp_path / "b.json"), pythonpath=heavy_poisoned)
    one_line(r, "bench: --model ", words)
    assert "`make model`" in r.stderr


@pytest.mark.parametrize("out, words", [
    ("/proc/x.json", "cannot write in /proc"),
    ("{tmp}", "is a folder; give a file path"),
    ("{tmp}/a_file/x.json", "a_file is a file, not a folder"),
])
def test_bench_unwritable_out_is_found_before_the_run(tmp_path, heavy_poisoned, fake_model, out, words):
    (tmp_path / "a_file").write_text(KEPT)
    r = run(BENCH, "--model", str(fake_model), "--out", out.format(tmp=tmp_path), pythonpath=heavy_poisoned)
    one_line(r, "bench: --out ", words)
    assert (tmp_path / "a_file").read_text() == KEPT
    assert not list(tmp_path.glob(".write-probe-*"))  # the probe file is removed


def test_bench_help_describes_every_option_with_its_default(heavy_poisoned):
    r = run(BENCH, "--help", pythonpath=heavy_poisoned)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split("options:", 1)[1].split())
    for option, default in [("--items", "400"), ("--batch", "8"), ("--max-length", "256"), ("--rounds", "8"),
                            ("--threads", "2"), ("--model", "demo-minilm-20ng"), ("--out", "bench.json")]:
        after = text.split(f"{option} {option.strip('-').upper().replace('-', '_')}", 1)[1].split(" --", 1)[0]
        assert "(default:" in after and default in after, (option, after)


@pytest.mark.parametrize("args, words", [
    (["--rounds", "0"], "--rounds 0 must be an integer >= 1"),
    (["--rounds", "-1"], "--rounds -1 must be an integer >= 1"),
    (["--items", "0"], "--items 0 must be an integer >= 1"),
    (["--items", "-5"], "--items -5 must be an integer >= 1"),
    (["--rounds", "x"], "invalid int value: 'x'"),
])
def test_bench_validation_bad_option_one_line_exit_2(args, words):
    one_line(run(VALIDATION, *args), "bench-validation: ", words)


def test_goal_verdict_is_judged_only_at_one_million():
    assert bench_validation.goal_verdict(1_000_000, {"corpus": 2.0, "shuffled": 2.9}) == "met"
    assert bench_validation.goal_verdict(1_000_000, {"corpus": 2.0, "shuffled": 3.1}) == "NOT met"
    assert bench_validation.goal_verdict(999_999, {"corpus": 0.1, "shuffled": 0.1}) == "not judged"


SERVE = REPO / "scripts" / "bench_serve.py"


@pytest.mark.parametrize("args, words", [
    (["--items", "0"], "--items 0 must be an integer >= 1"),
    (["--rounds", "0"], "--rounds 0 must be an integer >= 1"),
    (["--rate", "0"], "--rate 0.0 must be a number of requests per second > 0"),
    (["--rate", "inf"], "--rate inf must be a number of requests per second > 0"),
    (["--rate", "fast"], "invalid float value: 'fast'"),
])
def test_bench_serve_bad_option_one_line_exit_2_result_kept(tmp_path, heavy_poisoned, args, words):
    out = tmp_path / "serve.json"
    out.write_text(KEPT)
    r = run(SERVE, *args, "--out", str(out), pythonpath=heavy_poisoned)
    one_line(r, "bench_serve: ", words)
    assert out.read_text() == KEPT
