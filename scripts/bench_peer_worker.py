"""One run of optimum-benchmark's inference scenario; runs in the peer venv, not the lab's.

Started by scripts/bench_peer.py with the peer venv's python (optimum-benchmark needs
transformers < 5; the lab's venv has transformers 5). Runs the scenario with its inline
launcher (the process launcher's parent busy-waits about 0.8 core, which on 2 cores halves
the worker's speed), the PyTorch backend on CPU, ``inter_op_num_threads`` = ``--threads``
(the option that calls torch.set_num_threads in optimum-benchmark 0.6.0), input shapes
batch_size x sequence_length (random token ids drawn by its input generator), latency
tracking only. Writes the scenario's report (BenchmarkReport.to_dict()) as JSON to ``--out``;
its ``forward.throughput.value`` (samples/s = batch_size / mean forward latency) is the
figure the caller compares.

    <peer venv>/bin/python scripts/bench_peer_worker.py --model DIR --batch 8 --sequence-length 128 \
        --threads 1 --iterations 12 --duration 0 --warmup-runs 10 --out report.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--sequence-length", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--iterations", type=int, required=True)
    ap.add_argument("--duration", type=int, default=0)
    ap.add_argument("--warmup-runs", type=int, default=10)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from optimum_benchmark import Benchmark, BenchmarkConfig, InferenceConfig, InlineConfig, PyTorchConfig

    backend = PyTorchConfig(model=a.model, device="cpu", task="text-classification", library="transformers",
                            inter_op_num_threads=a.threads, no_weights=False)
    scenario = InferenceConfig(latency=True, memory=False, energy=False, iterations=a.iterations,
                               duration=a.duration, warmup_runs=a.warmup_runs,
                               input_shapes={"batch_size": a.batch, "sequence_length": a.sequence_length})
    config = BenchmarkConfig(name=f"peer_b{a.batch}_s{a.sequence_length}_t{a.threads}", backend=backend,
                             scenario=scenario, launcher=InlineConfig(), log_report=False)
    report = Benchmark.launch(config)
    import torch

    out = {"report": report.to_dict(), "torch_num_threads": torch.get_num_threads(),
           "versions": {k: v for k, v in config.environment.items() if k.endswith("_version")}}
    with open(a.out, "w", encoding="utf-8") as fh:
        json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
