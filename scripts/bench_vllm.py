"""`make bench`, vLLM contender: the lab's vLLM window against vLLM's own offline call, and
vLLM against transformers, on the same items, printed side by side in one run.

One vLLM engine (lab.engines.vllm.VllmClient, the pinned vLLM in its venv), started once,
outside every timing; rounds alternate the order of the contenders (round r starts at
contender r mod 3):
- vllm_lab:     the measured window of a vLLM pass (lab.passes.tasks.job.KindJob.run_window on the vLLM engine
                after reading the corpus file): read, tokenize with the lab's rule, send the ids
                in calls of ``--batch`` items, argmax and probability to the host;
- vllm_offline: vLLM's own offline call (``LLM.classify``) on the same token ids, all items
                in one call, timed inside the vLLM process (the worker's ``infer_s``): what a
                user of vLLM alone would time, without reading, tokenizing or the lab's calls;
- transformers: the transformers pass's window (lab.passes.tasks.classification.run_batches) on the same
                items, batch and truncation, in this process at ``--threads`` threads.
Ratios from the medians over rounds: ``lab_over_offline`` = offline s / lab s (1.0: the lab's
window costs nothing over vLLM's call) and ``vllm_over_transformers`` = transformers s /
vllm_lab s (above 1: vLLM is faster). The engine runs on the cores vLLM's CPU backend binds
(its log says which); an idle engine's threads can slow the transformers contender: the
machine's load is recorded at both ends. Writes runs/bench_vllm.json.

Skipped, exit 0 with one line saying why, when the vLLM venv is absent or stale (`make
vllm-env` builds it). Every option is checked before any model or engine loads: bad input is
one line on stderr, exit 2, and the previous result file is left as it was.

    .venv/bin/python scripts/bench_vllm.py [--items 200] [--batch 8] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bench  # noqa: E402  (scripts/bench.py: the machine facts, in one place)
import bench_args  # noqa: E402  (scripts/bench_args.py: the argument checks shared by the bench scripts)

CONTENDERS = ("vllm_lab", "vllm_offline", "transformers")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, all checked before any heavy import or engine start (UsageError: one line)."""
    ap = bench_args.parser("bench_vllm", __doc__)
    ap.add_argument("--items", type=int, default=200,
                    help="items taken evenly from demo/corpus/comparison.jsonl (fewer if the corpus is smaller)")
    ap.add_argument("--batch", type=int, default=8, help="items per call (vLLM) and per batch (transformers)")
    ap.add_argument("--max-length", type=int, default=256, help="truncation length in tokens (>= 8)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds; each runs every contender once")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads of the transformers contender")
    ap.add_argument("--model", default=str(REPO / ".cache/models/demo-minilm-20ng"),
                    help="local transformers sequence-classification checkpoint folder")
    ap.add_argument("--out", default=str(REPO / "runs/bench_vllm.json"),
                    help="result file (JSON); replaced only once the run is complete")
    a = ap.parse_args(argv)
    bench_args.require_at_least(a, 1, "items", "batch", "rounds", "threads")
    a.variant = bench_args.check_variant_and_files(a, engine="vllm")  # the lab's own rule, in one place
    return a


def main(argv: list[str] | None = None) -> int:
    return bench_args.run("bench_vllm", lambda: parse_args(argv), measure)


def measure(a: argparse.Namespace, tmp: Path) -> int:
    """Start the engine, warm up, run the rounds; writes ``a.out`` atomically. Returns the exit
    status (0 with one line when skipped: no vLLM venv)."""
    import os

    from lab.engines import vllm_env

    if not vllm_env.is_ready():
        print(f"bench_vllm: skipped: the vLLM venv {vllm_env.venv_dir()} is absent or older than "
              "requirements-vllm.txt; run `make vllm-env` to bench the vLLM contender")
        return 0

    import torch

    from lab.inputs.corpus import read_corpus
    from lab.passes.inference import load_model, tokenize
    from lab.passes.spec import PassSpec
    from lab.passes.tasks import job_for
    from lab.passes.tasks.classification import run_batches

    torch.set_num_threads(a.threads)
    rows = [json.loads(x) for x in (REPO / "demo/corpus/comparison.jsonl").read_text(encoding="utf-8").splitlines()]
    subset = rows[:: max(1, len(rows) // a.items)][: a.items]
    path = tmp / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in subset))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the table is the output; transformers' load report is not
    hf_logging.disable_progress_bar()
    tok, model = load_model(a.model, "fp32", "cpu")
    spec = PassSpec(campaign="bench", pass_id="bench-vllm", variant=a.variant, corpus_path=str(path),
                    model_ref=a.model, out_dir=str(tmp), threads=a.threads)
    job = job_for(spec)  # the kind's job on the vLLM engine
    job.load("cpu")
    t0 = time.perf_counter()
    job.start_engine("cpu", tmp)
    start_s = time.perf_counter() - t0
    ids = tokenize([r["text"] for r in subset], tok, a.max_length)[0]
    plain = a.variant.__class__(batch_size=a.batch, max_length=a.max_length)
    offline_preds: list = []

    def vllm_lab():
        return job.run_window(read_corpus(str(path)), "cpu").pred_index

    def vllm_offline():
        out = job.engine.client.classify(ids)
        offline_preds[:] = [max(range(len(p)), key=p.__getitem__) for p in out.rows]
        return out.infer_s

    def transformers():
        return run_batches(read_corpus(str(path)), tok, model, "cpu", plain).pred_index

    fns = {"vllm_lab": vllm_lab, "vllm_offline": vllm_offline, "transformers": transformers}
    info = bench.machine()
    print(f"items {len(subset)}, batch {a.batch}, max_length {a.max_length}, transformers threads {a.threads}, "
          f"{info['cpu']} ({info['cores']} cores), load {info['load_average_1m_start']:.2f}, "
          f"engine start {start_s:.1f} s (set-up, not timed below)")
    try:
        preds = {n: fns[n]() for n in CONTENDERS}  # one untimed run each: first-call costs stay out
        seconds: dict = {n: [] for n in CONTENDERS}
        orders = []
        print(f"{'round':>5} " + " ".join(f"{n + '_s':>15}" for n in CONTENDERS) + "  order")
        for r in range(a.rounds):
            order = CONTENDERS[r % 3:] + CONTENDERS[:r % 3]
            orders.append(list(order))
            for name in order:
                t = time.perf_counter()
                got = fns[name]()
                took = time.perf_counter() - t
                seconds[name].append(got if name == "vllm_offline" else took)  # vLLM's own clock
                if name != "vllm_offline":
                    preds[name] = got
            print(f"{r + 1:>5} " + " ".join(f"{seconds[n][-1]:>15.3f}" for n in CONTENDERS) + "  " + ">".join(order))
    finally:
        job.close()
    med = {n: statistics.median(seconds[n]) for n in CONTENDERS}
    same = sum(p == q for p, q in zip(preds["vllm_lab"], preds["transformers"], strict=True))
    res = {"date": datetime.now(UTC).isoformat(timespec="seconds"),
           "machine": {**info, "load_average_1m_end": os.getloadavg()[0], "threads": a.threads},
           "model": a.model, "items": len(subset), "batch_size": a.batch, "max_length": a.max_length,
           "rounds": a.rounds, "orders": orders, "engine_start_s": round(start_s, 3),
           "engine": job.fields.get("engine"),
           "seconds": {n: [round(s, 6) for s in seconds[n]] for n in CONTENDERS},
           "median_s": {n: round(med[n], 6) for n in CONTENDERS},
           "items_per_s": {n: round(len(subset) / med[n], 4) for n in CONTENDERS},
           "lab_over_offline": round(med["vllm_offline"] / med["vllm_lab"], 4),
           "vllm_over_transformers": round(med["transformers"] / med["vllm_lab"], 4),
           "same_predictions_vllm_lab_vs_offline": preds["vllm_lab"] == offline_preds,
           "agreement_vllm_vs_transformers": round(same / len(subset), 6)}
    try:
        bench_args.write_json_atomic(a.out, res)
    except OSError as e:
        print(f"bench_vllm: could not write {a.out} ({e}); the previous file, if any, is unchanged", file=sys.stderr)
        return 1
    print("median " + " ".join(f"{med[n]:>15.3f}" for n in CONTENDERS))
    print("items/s: " + ", ".join(f"{n} {res['items_per_s'][n]:.2f}" for n in CONTENDERS))
    print(f"lab_over_offline {res['lab_over_offline']:.3f} (vLLM's own call / the lab's vLLM window); "
          f"vllm_over_transformers {res['vllm_over_transformers']:.3f} (transformers window / vLLM window); "
          f"agreement vLLM vs transformers {res['agreement_vllm_vs_transformers']:.4f}; "
          f"load {res['machine']['load_average_1m_end']:.2f}; wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
