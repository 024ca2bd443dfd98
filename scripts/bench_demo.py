"""`make bench-demo`: the demo campaign as `make demo` runs it, timed, and its figures printed.

Runs the offline demo campaign headless (lab.service.campaigns.run_demo: lock, 20 passes in
rotated order, report, archive) into a fresh runs folder (``--runs``, default a temporary one:
an earlier demo campaign is never resumed), then prints the wall time, each variant's figures
from the campaign's own summary (report/summary.csv: durations in the order they ran, median,
items per second, the metric's median, passes accepted, utilization), the Decision's first
lines, and what `iteralab archive verify` says of the archive. The figures are the product's
own, printed as it wrote them; nothing is re-timed here.

    .venv/bin/python scripts/bench_demo.py [--runs FOLDER]

Exit 0 when every pass finished and the archive verifies; 1 otherwise (the output says which);
2 for bad usage (one line).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "scripts"))
import bench_args  # noqa: E402  (scripts/bench_args.py: the argument checks shared by the bench scripts)

COLUMNS = {"label": "variant", "durations_s": "durations, s (order run)", "median_s": "median s",
           "items_per_s_median": "items/s", "metric_median": "metric", "accepted_passes": "accepted",
           "utilization_median": "utilization"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = bench_args.parser("bench_demo", __doc__)
    ap.add_argument("--runs", default=None, help="an empty or new folder for the campaign (default: a temporary one)")
    a = ap.parse_args(argv)
    if a.runs is not None and Path(a.runs).exists() and (not Path(a.runs).is_dir() or any(Path(a.runs).iterdir())):
        raise bench_args.UsageError(f"--runs {a.runs} is not an empty folder; give a new one so that no earlier "
                                    "campaign is resumed")
    return a


def table(summary: Path) -> str:
    """The summary's compared columns as a Markdown table (read with pandas)."""
    import pandas as pd

    df = pd.read_csv(summary)[list(COLUMNS)].rename(columns=COLUMNS)
    df["median s"] = df["median s"].map("{:.2f}".format)
    df["items/s"] = df["items/s"].map("{:.1f}".format)
    df["utilization"] = df["utilization"].map(lambda u: "" if pd.isna(u) else f"{u:.1%}")
    df["durations, s (order run)"] = df["durations, s (order run)"].map(
        lambda s: ", ".join(f"{float(x):.2f}" for x in str(s).split()))
    rows = [list(df.columns), ["---"] * len(df.columns), *df.astype(str).values.tolist()]
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def main(argv: list[str] | None = None) -> int:
    try:
        a = parse_args(argv)
    except bench_args.UsageError as e:
        print(f"bench_demo: {e}", file=sys.stderr)
        return 2
    runs = Path(a.runs) if a.runs else Path(tempfile.mkdtemp(prefix="bench-demo-"))
    os.environ["ITERALAB_RUNS"] = str(runs)
    from lab.evidence.archive import verify
    from lab.service.campaigns import run_demo

    t0 = time.perf_counter()
    r = run_demo("local", echo=None)
    wall = time.perf_counter() - t0
    print(f"demo campaign: {r['finished']} of {r['planned']} passes finished, {r['accepted']} accepted, "
          f"{wall:.0f} s wall (lock, passes, report, archive; the demo model already built)")
    summary = Path(r["dir"]) / "report" / "summary.csv"
    if summary.is_file():
        print(table(summary))
    decision = Path(r["dir"]) / "report" / "decision_note.md"
    if decision.is_file():
        lines = [x for x in decision.read_text(encoding="utf-8").splitlines() if x.strip()][:4]
        print("\n".join(["decision note, first lines:", *lines]))
    if r["archive"] is None:
        print(f"no archive: {r['line']}")
        return 1
    v = verify(r["archive"])
    print(f"archive verify: {'OK' if v.ok else 'FAILED'}, {v.files_checked} files, {v.rows_checked} rows"
          + ("" if v.ok else "; " + "; ".join(v.problems[:3])))
    return 0 if v.ok and r["finished"] == r["planned"] else 1


if __name__ == "__main__":
    sys.exit(main())
