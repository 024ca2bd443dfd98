"""Instrumentation cost of the measured window, measured side by side in one run.

Compares, on the same model, batch size and items, in one process and alternating order:
- bare: read the corpus, tokenize each batch with padding, forward, argmax, copy to host;
- lab:  the pass runner's measured window (lab.passes.inference.run_batches) with its
        progress events (to /dev/null), peak-memory reset/read and device synchronization.
Prints each round's durations, the medians and the ratio lab / bare (goal: <= 1.03).

    .venv/bin/python scripts/bench_instrumentation.py [--items 300] [--batch 8] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def bare(path, tok, model, batch, max_length):
    import torch

    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    preds = []
    with torch.inference_mode():
        for s in range(0, len(rows), batch):
            enc = tok([r["text"] for r in rows[s:s + batch]], padding="longest", truncation=True,
                      max_length=max_length, return_tensors="pt")
            logits = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
            preds.extend(logits.argmax(-1).tolist())
    return preds


def lab(path, tok, model, batch, max_length):
    from lab.corpus import read_corpus
    from lab.memory.peaks import PeakTracker
    from lab.passes.events import EventWriter
    from lab.passes.inference import run_batches, synchronize

    ev = EventWriter(open(os.devnull, "w"))
    tracker = PeakTracker("cpu")
    tracker.reset()
    synchronize("cpu")
    t0 = time.perf_counter()
    rows = read_corpus(path)
    win = run_batches(rows, tok, model, "cpu",
                      {"batch_size": batch, "padding": "longest", "max_length": max_length},
                      lambda d: ev.progress(d, len(rows), d / (time.perf_counter() - t0)))
    synchronize("cpu")
    tracker.read()
    return win.pred_index


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model", default=str(REPO / ".cache/models/demo-minilm-20ng"))
    a = ap.parse_args()
    import tempfile

    import torch

    from lab.passes.inference import load_model

    torch.set_num_threads(a.threads)
    rows = [json.loads(x) for x in open(REPO / "demo/corpus/comparison.jsonl", encoding="utf-8")]
    step = max(1, len(rows) // a.items)
    subset = rows[::step][: a.items]
    path = Path(tempfile.mkdtemp()) / "bench.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in subset))
    tok, model = load_model(a.model, "fp32", "cpu")
    lab(path, tok, model, a.batch, a.max_length)  # warm-up both paths once
    bare(path, tok, model, a.batch, a.max_length)
    times = {"bare": [], "lab": []}
    same = True
    print(f"items {len(subset)}, batch {a.batch}, max_length {a.max_length}, threads {a.threads}, cpu")
    print(f"{'round':>5} {'bare_s':>9} {'lab_s':>9} {'lab/bare':>9}")
    for r in range(a.rounds):
        order = ("bare", "lab") if r % 2 == 0 else ("lab", "bare")
        got = {}
        for name in order:
            fn = bare if name == "bare" else lab
            t0 = time.perf_counter()
            got[name] = fn(path, tok, model, a.batch, a.max_length)
            times[name].append(time.perf_counter() - t0)
        same &= got["bare"] == got["lab"]
        print(f"{r + 1:>5} {times['bare'][-1]:>9.3f} {times['lab'][-1]:>9.3f} "
              f"{times['lab'][-1] / times['bare'][-1]:>9.3f}")
    mb, ml = statistics.median(times["bare"]), statistics.median(times["lab"])
    print(f"median {mb:>8.3f} {ml:>9.3f} {ml / mb:>9.3f}")
    print(f"throughput items/s: bare {len(subset) / mb:.2f}, lab {len(subset) / ml:.2f}; "
          f"instrumentation cost {100 * (ml / mb - 1):+.1f}% (goal <= +3%); same predictions: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
