"""Summary per variant: raw durations, median, min, max, successes, failures (seed: "Presenta
le cinque durate grezze, la loro mediana, il minimo e il massimo, con il numero di successi
e di fallimenti"). No p95 from five passes.

"Does not distinguish" (seed: "Se la dispersione osservata è paragonabile allo scarto tra le
mediane, la serie non distingue ancora le opzioni"): judged per pair of variants of one series
by :func:`lab.report.distinguish.compare_durations` (non-overlapping ranges, or an exact
Mann-Whitney rank test with its p-value), so one slow pass cannot flag a variant against
everything. Each variant lists the verdict against every other variant of its series in
``pairs``; ``does_not_distinguish_from`` names those the measurements do not tell apart.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from lab.report.distinguish import compare_durations


def summarize(rows: list[dict], feasibility: dict | None = None) -> list[dict]:
    """One dict per variant (in first-seen order). Durations are measured-window seconds of
    passes with status ok; ``failures`` counts every other attempt (oom, error, killed,
    interrupted). ``accepted_passes`` counts rows with corpus_accepted true.
    """
    order: list[str] = []
    by: dict[str, list[dict]] = {}
    for r in rows:
        if r["variant_id"] not in by:
            order.append(r["variant_id"])
            by[r["variant_id"]] = []
        by[r["variant_id"]].append(r)
    out = []
    for vid in order:
        rs = by[vid]
        ok = [r for r in rs if r["status"] == "ok" and r.get("measured_s") is not None]
        d = [round(float(r["measured_s"]), 6) for r in ok]
        rates = [float(r["items_per_s"]) for r in ok if r.get("items_per_s")]
        metrics = [r["metric"] for r in rs if r.get("metric") is not None]
        accepted = sum(1 for r in rs if r.get("corpus_accepted") is True)
        first = rs[0]
        failures = [r for r in rs if r["status"] != "ok"]
        if accepted:
            verdict = f"accepted ({accepted} of {len(rs)} passes)"
        else:
            reasons = sorted({(r.get("notes") or "").split("validation: ")[-1][:120] for r in rs})
            verdict = "rejected: " + (reasons[0] if reasons else "no validated pass")
        feas = (feasibility or {}).get(vid, {"feasible": True, "reason": ""})
        out.append({
            "variant_id": vid, "label": first["variant_label"], "variant_name": first.get("variant_name"),
            "series": first.get("series"), "batch_size": first.get("batch_size"),
            "precision": first.get("precision"), "bucketing": first.get("bucketing"),
            "cards": first.get("cards"),
            "cards_observed": max((r["cards_observed"] for r in ok if r.get("cards_observed")), default=None),
            "durations_s": d, "median_s": statistics.median(d) if d else None,
            "min_s": min(d) if d else None, "max_s": max(d) if d else None,
            "successes": len(ok), "failures": len(failures),
            "failure_kinds": sorted({r["status"] for r in failures}),
            "items_per_s_median": statistics.median(rates) if rates else None,
            "metric_median": statistics.median(metrics) if metrics else None,
            "accepted_passes": accepted, "quality_verdict": verdict,
            "feasible": feas["feasible"], "infeasible_reason": feas.get("reason", ""),
            "peak_rss_bytes_max": max((r["process_peak_rss_bytes"] for r in rs
                                       if r.get("process_peak_rss_bytes")), default=None),
            "peak_allocated_bytes_max": max((r["peak_allocated_bytes"] for r in rs
                                             if r.get("peak_allocated_bytes")), default=None),
            "peak_reserved_bytes_max": max((r["peak_reserved_bytes"] for r in rs
                                            if r.get("peak_reserved_bytes")), default=None),
            "does_not_distinguish": False, "does_not_distinguish_from": [], "pairs": [],
        })
    _flag_indistinct(out)
    return out


def _flag_indistinct(summary: list[dict]) -> None:
    for a in summary:
        for b in summary:
            if a is b or a["series"] != b["series"] or a["median_s"] is None or b["median_s"] is None:
                continue
            verdict = compare_durations(a["durations_s"], b["durations_s"])
            a["pairs"].append({"other": b["variant_id"], **verdict.to_json()})
            if not verdict.distinguished:
                a["does_not_distinguish"] = True
                a["does_not_distinguish_from"].append(b["variant_id"])


def summary_table(summary: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame(summary)
    df["durations_s"] = df["durations_s"].map(lambda d: " ".join(f"{x:.3f}" for x in d))
    df["does_not_distinguish_from"] = df["does_not_distinguish_from"].map(" ".join)
    df["failure_kinds"] = df["failure_kinds"].map(" ".join)
    df["pairs"] = df["pairs"].map(lambda ps: "; ".join(f"{p['other']}: {p['reason']}" for p in ps))
    return df


def write_summary(summary: list[dict], path: Path) -> Path:
    summary_table(summary).to_csv(path, index=False)
    return path
