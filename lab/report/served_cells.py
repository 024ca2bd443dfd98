"""A server pass's figures as raw-table cells and per-variant medians (issue 36).

The cells come from result.json's ``serving`` (lab.passes.tasks.server_job.ServingRecord), which
``archive verify`` re-derives from the pass's ``served.jsonl`` (lab.evidence.served): the achieved
rate (req/s; the offered one is the variant's declared ``request_rate`` column), goodput
(requests meeting every bound of the objective per second), the 99th percentiles of TTFT, TPOT
and end-to-end latency (s), the load generator's p99 release lag (s) and whether the pass held
the locked objective. An offline pass leaves them empty.
"""

from __future__ import annotations

from lab.passes.records import PassResult

P99 = 99.0
TPOT = "tpot"
LATENCIES = ("ttft", TPOT, "e2el")
HOLDS = "served_objective_holds"
SERVED_FIGURES = ("served_achieved_rate", "served_goodput", *(f"served_{m}_p99_s" for m in LATENCIES),
                  "served_lag_p99_s")
"""The columns a variant's summary gives as a median over its passes ok (``<column>_median``)."""
SERVED = (*SERVED_FIGURES, HOLDS)
"""The raw-table columns of a server pass, in order (its declared rate is the variant's
``request_rate`` column)."""


def served_cells(result: PassResult) -> dict:
    """{column: value} of SERVED for one pass's result; every cell None for an offline pass, or a
    record this lab cannot read (its figures stay in result.json)."""
    rec = _record(result)
    if rec is None:
        return dict.fromkeys(SERVED)
    f, p = rec.figures, _p99(rec)
    figures = (f.achieved_rate, f.goodput, *(p[m] for m in LATENCIES), None if f.lag_s is None else f.lag_s.get("p99"))
    return {**dict(zip(SERVED_FIGURES, figures, strict=True)), HOLDS: rec.verdict.holds}


def served_notes(result: PassResult) -> list[str]:
    """The raw table's reasons for a server pass's empty served cells: TPOT has no figure when no
    answered request had more than one output token (a classification or embedding answer comes
    whole); nothing for an offline pass."""
    rec = _record(result)
    if rec is None or not rec.answered or _p99(rec)[TPOT] is not None:
        return []
    return ["empty served_tpot_p99_s: no answered request had more than one output token (a pooled answer "
            "comes whole: its one latency is served_e2el_p99_s)"]


def _record(result: PassResult):
    """result.json's ``serving`` as a ServingRecord (lab.passes.tasks.server_job.serving_record)."""
    from lab.passes.tasks.server_job import serving_record

    return serving_record(result.serving)


def _p99(rec) -> dict:
    """{metric of LATENCIES: its 99th percentile (s) or None} of a ServingRecord."""
    return {m: (rec.figures.percentiles_s.get(m) or {}).get(P99) for m in LATENCIES}
