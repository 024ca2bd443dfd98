"""Validation at scale: seconds and peak RSS to validate one pass of N predictions.

Builds, in a temporary folder, a synthetic corpus of N items (20 classes, the three length
buckets) and two predictions files in the runner's format (about 60 % correct): one in
corpus order (what the pass runner writes) and one shuffled (the worst case: every id
is looked up), then validates each with each metric through ``lab.validate.validate_pass`` (ids, format,
coverage, metric, per-bucket metrics, agreement with a reference), one fresh child
process per metric so that each peak RSS is its own. Goal (issue 13): under 3 s per
metric for 1,000,000 predictions, memory not growing beyond the ids and labels.

    .venv/bin/python scripts/bench_validation.py [--items 1000000] [--rounds 3]

Prints, per metric, the seconds of each round, their median, the child's RSS before
validation (corpus and reference already in memory) and its peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CLASSES = [f"group.{i:02d}" for i in range(20)]


def _status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


ORDERS = ("corpus", "shuffled")


def write_inputs(folder: Path, n: int) -> None:
    """corpus.jsonl (id, label, bucket) and predictions_{corpus,shuffled}.jsonl (id, pred, prob)."""
    rnd = random.Random(20260924)
    buckets = ["short"] * 6 + ["medium"] * 3 + ["long"]
    lines = []
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as c:
        for i in range(n):
            gold = CLASSES[i % 20]
            c.write(json.dumps({"id": f"test/{gold}/{i}", "label": gold, "bucket": buckets[i % 10]}) + "\n")
            pred = gold if rnd.random() < 0.6 else rnd.choice(CLASSES)
            lines.append(json.dumps({"id": f"test/{gold}/{i}", "pred": pred,
                                     "prob": round(rnd.random(), 6)}, ensure_ascii=False) + "\n")
    (folder / "predictions_corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    rnd.shuffle(lines)
    (folder / "predictions_shuffled.jsonl").write_text("".join(lines), encoding="utf-8")


def child(folder: Path, metric: str, order: str) -> dict:
    """Runs in a fresh process: load corpus and reference, then time validate_pass."""
    from lab.validate import read_prediction_columns, validate_pass

    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        corpus = [json.loads(line) for line in fh]
    preds = folder / f"predictions_{order}.jsonl"
    ref_cols = read_prediction_columns(folder / "predictions_corpus.jsonl", set(CLASSES))
    reference = dict(zip(ref_cols.ids, (ref_cols.classes[c] for c in ref_cols.pred)))
    del ref_cols
    rss_before = _status_bytes("VmRSS")
    t0 = time.perf_counter()
    v = validate_pass(corpus, preds,
                      {"metric": metric, "threshold": 0.5, "tolerance": 0.01},
                      set(CLASSES), reference, 0.6)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "rss_before_bytes": rss_before, "peak_rss_bytes": _status_bytes("VmHWM"),
            "metric": v.metric, "by_bucket": v.metric_by_bucket, "accepted": v.corpus_accepted,
            "agreement": v.agreement_with_reference}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", nargs=3, metavar=("FOLDER", "METRIC", "ORDER"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(Path(a.child[0]), a.child[1], a.child[2])))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="bench-validation-"))
    write_inputs(folder, a.items)
    size = (folder / "predictions_corpus.jsonl").stat().st_size
    print(f"{a.items:,} predictions ({size / 2**20:.1f} MiB), 20 classes, {a.rounds} round(s), "
          "one fresh process per metric and round")
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'order':<9} {'metric':<9} {'round':>5} {'seconds':>8} {'rss_before_MiB':>15} "
          f"{'peak_rss_MiB':>13} {'value':>9}")
    med = {}
    for order in ORDERS:
        for metric in ("accuracy", "macro_f1"):
            secs = []
            for r in range(a.rounds):
                out = subprocess.run([sys.executable, __file__, "--child", str(folder), metric, order],
                                     capture_output=True, text=True, check=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                secs.append(res["seconds"])
                print(f"{order:<9} {metric:<9} {r + 1:>5} {res['seconds']:>8.3f} "
                      f"{res['rss_before_bytes'] / 2**20:>15.1f} {res['peak_rss_bytes'] / 2**20:>13.1f} "
                      f"{res['metric']:>9.6f}")
            med[(order, metric)] = statistics.median(secs)
    for order in ORDERS:
        ok = all(med[(order, m)] < 3.0 for m in ("accuracy", "macro_f1"))
        print(f"median seconds, {order} order: " + ", ".join(f"{m} {med[(order, m)]:.3f}" for m in
                                                             ("accuracy", "macro_f1"))
              + f"; goal < 3 s each: {'met' if ok else 'NOT met'}")
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
