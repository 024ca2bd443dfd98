"""Validation at scale: seconds and peak RSS to validate one pass of N predictions.

Builds, in a temporary folder, a synthetic corpus of N items (20 classes, the three length
buckets) and a predictions file in the runner's format (about 60 % correct), then
validates it with each metric through ``lab.validate.validate_pass`` (ids, format,
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


def write_inputs(folder: Path, n: int) -> None:
    """corpus.jsonl (id, label, bucket) and predictions.jsonl (id, pred, prob), shuffled order."""
    rnd = random.Random(20260924)
    buckets = ["short"] * 6 + ["medium"] * 3 + ["long"]
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as c, \
            open(folder / "predictions.jsonl", "w", encoding="utf-8") as p:
        for i in range(n):
            gold = CLASSES[i % 20]
            c.write(json.dumps({"id": f"test/{gold}/{i}", "label": gold, "bucket": buckets[i % 10]}) + "\n")
        for i in rnd.sample(range(n), n):
            gold = CLASSES[i % 20]
            pred = gold if rnd.random() < 0.6 else rnd.choice(CLASSES)
            p.write(json.dumps({"id": f"test/{gold}/{i}", "pred": pred,
                                "prob": round(rnd.random(), 6)}, ensure_ascii=False) + "\n")


def child(folder: Path, metric: str) -> dict:
    """Runs in a fresh process: load corpus and reference, then time validate_pass."""
    from lab.validate import read_prediction_columns, validate_pass

    corpus = [json.loads(line) for line in open(folder / "corpus.jsonl", encoding="utf-8")]
    ref_cols = read_prediction_columns(folder / "predictions.jsonl", set(CLASSES))
    reference = dict(zip(ref_cols.ids, (ref_cols.classes[c] for c in ref_cols.pred)))
    del ref_cols
    rss_before = _status_bytes("VmRSS")
    t0 = time.perf_counter()
    v = validate_pass(corpus, folder / "predictions.jsonl",
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
    ap.add_argument("--child", nargs=2, metavar=("FOLDER", "METRIC"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(Path(a.child[0]), a.child[1])))
        return 0
    folder = Path(tempfile.mkdtemp(prefix="bench-validation-"))
    write_inputs(folder, a.items)
    size = (folder / "predictions.jsonl").stat().st_size
    print(f"{a.items:,} predictions ({size / 2**20:.1f} MiB), 20 classes, {a.rounds} round(s), "
          "one fresh process per metric and round")
    print(f"{'metric':<9} {'round':>5} {'seconds':>8} {'rss_before_MiB':>15} {'peak_rss_MiB':>13} {'value':>9}")
    worst = {}
    for metric in ("accuracy", "macro_f1"):
        secs = []
        for r in range(a.rounds):
            out = subprocess.run([sys.executable, __file__, "--child", str(folder), metric],
                                 capture_output=True, text=True, check=True)
            res = json.loads(out.stdout.strip().splitlines()[-1])
            secs.append(res["seconds"])
            print(f"{metric:<9} {r + 1:>5} {res['seconds']:>8.3f} {res['rss_before_bytes'] / 2**20:>15.1f} "
                  f"{res['peak_rss_bytes'] / 2**20:>13.1f} {res['metric']:>9.6f}")
        worst[metric] = statistics.median(secs)
    verdict = all(s < 3.0 for s in worst.values())
    print("median seconds: " + ", ".join(f"{m} {s:.3f}" for m, s in worst.items())
          + f"; goal < 3 s each: {'met' if verdict else 'NOT met'}")
    for f in folder.iterdir():
        f.unlink()
    folder.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
