"""scripts/gpu_check.sh: one line and exit 2 without a GPU; the campaigns it runs on a GPU load."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest
from conftest import REPO


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this host has nvidia-smi: the check would run")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_2():
    t0 = time.monotonic()
    p = subprocess.run(["bash", str(REPO / "scripts/gpu_check.sh")], capture_output=True, text=True, check=False,
                       timeout=60)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("gpu_check: no CUDA GPU"), p.stderr
    assert p.stdout == ""  # the diagnosis is an error line: stderr, not stdout
    assert time.monotonic() - t0 < 10


def test_help_prints_a_usage_text_and_runs_nothing():
    p = subprocess.run(["bash", str(REPO / "scripts/gpu_check.sh"), "--help"], capture_output=True, text=True,
                       check=False, timeout=30)
    assert p.returncode == 0, p.stderr
    assert "usage: bash scripts/gpu_check.sh" in p.stdout and "out of GPU memory" in p.stdout
    assert "exits 2" in p.stdout and "no CUDA GPU" not in p.stdout + p.stderr  # no check ran
    assert "GPU_CHECK_REPETITIONS" in p.stdout and "set -uo" not in p.stdout  # the header, all of it, and no code


def test_an_unknown_argument_is_one_line_exit_2():
    p = subprocess.run(["bash", str(REPO / "scripts/gpu_check.sh"), "--cuda"], capture_output=True, text=True,
                       check=False, timeout=30)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "unknown argument --cuda" in p.stderr and "--help" in p.stderr


def test_prepared_campaigns_load_and_size_the_oom_batch(tmp_path, model_dir):
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    from lab.orchestration.protocol import load_protocol

    f = tmp_path / "demo_cuda.toml"
    f.write_text(gpu_check.campaign_text("gpu-check-demo-cuda", 2))
    proto = load_protocol(f)
    assert {v.device for v in proto.variants} == {"cuda"}
    assert {v.precision for v in proto.variants} == {"fp32", "bf16"}
    assert proto.timing["repetitions"] == 2
    total = 2 * 2**30  # a 2 GiB card keeps the test corpus small
    proto = load_protocol(gpu_check.oom_campaign(tmp_path, total))
    [v] = proto.variants
    assert v.max_length == 512 and v.bucketing and v.device == "cuda"
    assert v.batch_size * 512 * 1536 * 4 >= 2 * total  # a batch of long items needs twice the card
    n = len((tmp_path / "oom_corpus.jsonl").read_text().splitlines())
    assert n >= 2 * v.batch_size  # the short half completes before the long half fails


def test_the_vllm_series_campaign_loads_with_an_engine_series(tmp_path, model_dir):
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_check

    from lab.orchestration.protocol import load_protocol

    f = tmp_path / "vllm_cuda.toml"
    f.write_text(gpu_check.vllm_campaign_text("gpu-check-vllm-cuda"))
    proto = load_protocol(f)
    assert sorted(v.engine for v in proto.variants) == ["transformers", "vllm"]
    assert {(v.device, v.batch_size) for v in proto.variants} == {("cuda", 8)}
    assert proto.timing["repetitions"] == 1
    assert proto.reference.engine == "transformers"
    rows = [{"engine": "transformers", "status": "ok", "corpus_accepted": True},
            {"engine": "vllm", "status": "ok", "corpus_accepted": True, "engine_start_s": 61.0,
             "observed_max_running": 8, "engine_reserved_of": "host RAM", "engine_reserved_bytes": 1}]
    assert gpu_check.vllm_problems(rows) == [
        "vLLM row lacks engine_start_s, observed_max_running or a device-memory reservation"]
    rows[1]["engine_reserved_of"] = "device memory"
    assert gpu_check.vllm_problems(rows) == []

