"""`make bench`: the lab's measured window side by side with what a user would run instead.

One process, one model, the same items and batch size; rounds alternate the order of the
contenders (round r starts at contender r mod 4), so no contender is always first:
- bare:      read the corpus, tokenize each batch (padding longest, truncation), forward
             under inference_mode, argmax to the host: the least a loop can do;
- lab:       the pass runner's measured window (lab.passes.inference.run_batches) with its
             progress events (to /dev/null), peak-memory reset/read and synchronization;
- pipeline:  transformers' pipeline("text-classification") with the same batch size and
             truncation: what a user would pick instead;
- bucketed:  the lab's window with length bucketing (a declared variant of the protocol).
Throughput ratios use the median seconds over rounds: lab_over_bare (goal >= 0.97) and
bucketed_over_pipeline (goal >= 1.2). Padding waste is the fraction of fed token positions
that are padding. Writes runs/bench.json and prints a table.

    .venv/bin/python scripts/bench.py [--items 400] [--batch 8] [--rounds 8] [--threads 2]

Every option is checked before the model loads; bad input is one line on stderr, exit 2, and
the previous result file is left as it was.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bench_args  # noqa: E402  (scripts/bench_args.py: the argument checks shared by the bench scripts)

CONTENDERS = ("bare", "lab", "pipeline", "bucketed")
GOALS = {"lab_over_bare": 0.97, "bucketed_over_pipeline": 1.2}


def bare(ctx):
    import torch

    rows = [json.loads(line) for line in Path(ctx["path"]).read_text(encoding="utf-8").splitlines()]
    preds = []
    with torch.inference_mode():
        for s in range(0, len(rows), ctx["batch"]):
            enc = ctx["tok"]([r["text"] for r in rows[s:s + ctx["batch"]]], padding="longest",
                             truncation=True, max_length=ctx["max_length"], return_tensors="pt")
            logits = ctx["model"](input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
            preds.extend(logits.argmax(-1).tolist())
    return preds, None


def _lab(ctx, bucketing: bool):
    from lab.inputs.corpus import read_corpus
    from lab.memory.peaks import PeakTracker
    from lab.passes.events import EventWriter
    from lab.passes.inference import run_batches, synchronize
    from lab.inputs.variants import Variant

    with open(os.devnull, "w") as sink:
        ev = EventWriter(sink)
        tracker = PeakTracker("cpu")
        tracker.reset()
        synchronize("cpu")
        t0 = time.perf_counter()
        rows = read_corpus(ctx["path"])
        win = run_batches(rows, ctx["tok"], ctx["model"], "cpu",
                          Variant(batch_size=ctx["batch"], padding="longest",
                                  max_length=ctx["max_length"], bucketing=bucketing),
                          lambda d: ev.progress(d, len(rows), d / (time.perf_counter() - t0)))
        synchronize("cpu")
        tracker.read()
    return win.pred_index, win


def lab(ctx):
    return _lab(ctx, False)


def bucketed(ctx):
    return _lab(ctx, True)


def pipeline(ctx):
    rows = [json.loads(line) for line in Path(ctx["path"]).read_text(encoding="utf-8").splitlines()]
    out = ctx["pipe"]([r["text"] for r in rows], batch_size=ctx["batch"], truncation=True,
                      max_length=ctx["max_length"])
    label2id = ctx["model"].config.label2id
    return [label2id[o["label"]] for o in out], None


def machine() -> dict:
    import torch

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__, "device": "cpu", "load_average_1m_start": os.getloadavg()[0]}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, all checked before any heavy import or model load (UsageError: one line)."""
    ap = bench_args.parser("bench", __doc__)
    ap.add_argument("--items", type=int, default=400,
                    help="items taken evenly from demo/corpus/comparison.jsonl (fewer if the corpus is smaller)")
    ap.add_argument("--batch", type=int, default=8, help="batch size in items, the same for every contender")
    ap.add_argument("--max-length", type=int, default=256,
                    help="truncation length in tokens (>= 8, at most the model's max_position_embeddings)")
    ap.add_argument("--rounds", type=int, default=8, help="timed rounds; each runs every contender once")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (torch.set_num_threads)")
    ap.add_argument("--model", default=str(REPO / ".cache/models/demo-minilm-20ng"),
                    help="local transformers sequence-classification checkpoint folder")
    ap.add_argument("--out", default=str(REPO / "runs/bench.json"),
                    help="result file (JSON); replaced only once the run is complete")
    a = ap.parse_args(argv)
    bench_args.require_at_least(a, 1, "items", "batch", "rounds", "threads")
    bench_args.check_variant_and_files(a, padding="longest", bucketing=True)  # the lab's own rule, in one place
    return a


def main(argv: list[str] | None = None) -> int:
    return bench_args.run("bench", lambda: parse_args(argv), measure)


def measure(a: argparse.Namespace, tmp: Path) -> int:
    """Load, warm up, run the rounds; writes ``a.out`` atomically. Returns the exit status."""
    import torch
    from transformers import pipeline as hf_pipeline

    from lab.passes.inference import load_model

    torch.set_num_threads(a.threads)
    rows = [json.loads(x) for x in (REPO / "demo/corpus/comparison.jsonl").read_text(encoding="utf-8").splitlines()]
    step = max(1, len(rows) // a.items)
    subset = rows[::step][: a.items]
    path = tmp / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in subset))
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # the reason is our one line; transformers' load report is not
    hf_logging.disable_progress_bar()
    try:
        tok, model = load_model(a.model, "fp32", "cpu")
    except Exception as e:  # config.json present but the checkpoint does not load
        first = (str(e).splitlines() or [""])[0][:160]
        print(f"bench: --model {a.model} does not load ({type(e).__name__}: {first}); give a transformers "
              "sequence-classification checkpoint folder (`make model` builds the demo one)", file=sys.stderr)
        return 2
    pipe = hf_pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    ctx = {"path": path, "tok": tok, "model": model, "pipe": pipe, "batch": a.batch, "max_length": a.max_length}
    fns = {"bare": bare, "lab": lab, "pipeline": pipeline, "bucketed": bucketed}
    info = machine()
    print(f"items {len(subset)}, batch {a.batch}, padding longest, max_length {a.max_length}, "
          f"threads {a.threads}, {info['cpu']} ({info['cores']} cores), load {info['load_average_1m_start']:.2f}")
    windows = {}
    for name in CONTENDERS:  # one untimed run each: first-call costs stay out of the rounds
        _, windows[name] = fns[name](ctx)
    seconds = {n: [] for n in CONTENDERS}
    orders = []
    preds_ref, differing = None, {n: 0 for n in CONTENDERS}
    print(f"{'round':>5} " + " ".join(f"{n + '_s':>11}" for n in CONTENDERS) + "  order")
    for r in range(a.rounds):
        order = CONTENDERS[r % 4:] + CONTENDERS[:r % 4]
        orders.append(list(order))
        for name in order:
            t0 = time.perf_counter()
            preds, _ = fns[name](ctx)
            seconds[name].append(time.perf_counter() - t0)
            preds_ref = preds_ref or preds
            differing[name] = max(differing[name], sum(p != q for p, q in zip(preds, preds_ref, strict=True)))
        print(f"{r + 1:>5} " + " ".join(f"{seconds[n][-1]:>11.3f}" for n in CONTENDERS) + "  " + ">".join(order))
    med = {n: statistics.median(seconds[n]) for n in CONTENDERS}
    print("median " + " ".join(f"{med[n]:>11.3f}" for n in CONTENDERS))
    waste = {k: 1 - windows[k].real_tokens / windows[k].padded_tokens for k in ("lab", "bucketed")}
    res = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {**info, "load_average_1m_end": os.getloadavg()[0], "threads": a.threads},
        "model": a.model, "items": len(subset), "batch_size": a.batch, "padding": "longest",
        "max_length": a.max_length, "rounds": a.rounds, "orders": orders,
        "seconds": {n: [round(s, 6) for s in seconds[n]] for n in CONTENDERS},
        "median_s": {n: round(med[n], 6) for n in CONTENDERS},
        "items_per_s": {n: round(len(subset) / med[n], 4) for n in CONTENDERS},
        "lab_over_bare": round(med["bare"] / med["lab"], 4),
        "bucketed_over_pipeline": round(med["pipeline"] / med["bucketed"], 4),
        "bucketed_over_lab": round(med["lab"] / med["bucketed"], 4),
        "goals": GOALS,
        "real_tokens": windows["lab"].real_tokens,
        "fed_positions_longest": windows["lab"].padded_tokens,
        "fed_positions_bucketed": windows["bucketed"].padded_tokens,
        "padding_waste_longest": round(waste["lab"], 6),
        "padding_waste_bucketed": round(waste["bucketed"], 6),
        "same_predictions": not any(differing.values()),
        "differing_predictions": differing,
    }
    res["goals_met"] = {k: res[k] >= g for k, g in GOALS.items()}
    out = a.out
    try:
        bench_args.write_json_atomic(out, res)
    except OSError as e:
        print(f"bench: could not write {out} ({e}); the previous file, if any, is unchanged", file=sys.stderr)
        return 1
    print("items/s: " + ", ".join(f"{n} {res['items_per_s'][n]:.2f}" for n in CONTENDERS))
    print(f"lab_over_bare {res['lab_over_bare']:.3f} (goal >= 0.97: {res['goals_met']['lab_over_bare']}); "
          f"bucketed_over_pipeline {res['bucketed_over_pipeline']:.3f} "
          f"(goal >= 1.2: {res['goals_met']['bucketed_over_pipeline']})")
    print(f"padding waste: longest {res['padding_waste_longest']:.3f}, bucketed "
          f"{res['padding_waste_bucketed']:.3f} ({res['real_tokens']} real tokens; fed "
          f"{res['fed_positions_longest']} vs {res['fed_positions_bucketed']}); same predictions: "
          f"{res['same_predictions']}; load {res['machine']['load_average_1m_end']:.2f}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
