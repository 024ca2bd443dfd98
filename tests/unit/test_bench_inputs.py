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


def test_bench_validation_does_not_judge_the_goal_for_another_size():
    r = run(VALIDATION, "--items", "200", "--rounds", "1", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "goal not judged: 200 items, the goal is for 1,000,000" in r.stdout
    rows = [ln for ln in r.stdout.split("median of", 1)[1].splitlines() if ln.startswith("this ")]
    assert len(rows) == 2 and all(ln.endswith(" not judged") for ln in rows), rows


def test_goal_verdict_is_judged_only_at_one_million():
    assert bench_validation.goal_verdict(1_000_000, {"corpus": 2.0, "shuffled": 2.9}) == "met"
    assert bench_validation.goal_verdict(1_000_000, {"corpus": 2.0, "shuffled": 3.1}) == "NOT met"
    assert bench_validation.goal_verdict(999_999, {"corpus": 0.1, "shuffled": 0.1}) == "not judged"


def test_bench_validation_fails_loudly_when_a_validation_rejects(tmp_path):
    """A checkout whose validate_pass rejects every pass, timed as --baseline: no timing is reported."""
    shutil.copytree(REPO / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "lab" / "validate.py", "a", encoding="utf-8") as fh:
        fh.write("\n\n_real_validate_pass = validate_pass\n\n\ndef validate_pass(*a, **k):\n"
                 "    import msgspec\n    v = _real_validate_pass(*a, **k)\n"
                 "    return msgspec.structs.replace(v, corpus_accepted=False,\n"
                 "                               reasons=['forced rejection for the test'])\n")
    r = run(VALIDATION, "--items", "100", "--rounds", "1", "--baseline", str(tmp_path), timeout=120)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "REJECTED" in r.stderr and "forced rejection for the test" in r.stderr
    assert "median of" not in r.stdout and "Traceback" not in r.stderr
