"""A server pass's figures, re-derived from its per-request records (issue 36; no vLLM import).

The load generator (``vllm bench serve``, driven by lab.engines.vllm_load) reports its own
percentiles, goodput and rates; the lab keeps every request's record (``ServedRequest``) and
derives the figures from those records here, with the generator's own definitions (its
``calculate_metrics``, vLLM 0.32), so that the figures it reports can be checked and a forged one
is found (``tool_percentiles`` reads the generator's for the comparison):

- TTFT: time to first token of each answered request; E2E: end-to-end latency (first byte
  sent to last token received); TPOT: (E2E - TTFT) / (output tokens - 1) of each answered
  request with more than one output token; ITL: every inter-token gap of every answered
  request, pooled. Percentiles: numpy's linear interpolation (``np.percentile``).
- achieved rate: answered requests / the generator's duration (its first send to its last
  answer); output tokens/s: output tokens of answered requests / that duration.
- goodput: requests meeting every per-request bound of the objective / that duration, a request
  with at most one output token counted with TPOT 0 (the generator's rule); a failed request is
  never good.

The objective (``Objective``) is the user's, locked before timing: per metric a percentile and a
bound, and the share of the offered requests that must meet every bound. The verdict
(``verdict``) holds when every declared percentile is within its bound and the good share
reaches the declared one; it says which part failed.

Times are seconds everywhere here (the generator writes milliseconds in its summary: converted
once, in ``tool_percentiles``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import numpy as np

from lab.facts.errors import UserError

METRICS = ("ttft", "tpot", "itl", "e2el")
"""The latency metrics, in the generator's words (its ``--percentile-metrics``)."""
PERCENTILES = (50.0, 90.0, 99.0)
"""The percentiles a server pass reports (its ``--metric-percentiles``)."""
BOUNDED = ("ttft", "tpot", "e2el")
"""The metrics an objective may bound per request (ITL is a gap, not a request's figure)."""


class ServedRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One measured request of a server pass, as the load generator recorded it.

    ``id``: the corpus id whose text was the prompt. ``scheduled_s``: when the arrival process
    scheduled it, from the schedule's start (None when not known); ``dispatched_s``: when the
    generator released it (same clock and origin); ``sent_s``: when its HTTP request was sent
    (after the concurrency cap's wait); ``ttft_s``, ``e2el_s``: time to first token and
    end-to-end latency; ``itl_s``: the gaps between successive streamed chunks (s each);
    ``output_text``: the text streamed back; ``output_tokens``: the server's count of generated
    tokens; ``input_tokens``: the server's count of prompt tokens; ``error``: '' when answered,
    else the generator's error text (then the latencies are not figures); ``answer``: a pooled
    answer (the embedding, or the class probabilities; None for a completion, whose answer is
    ``output_text``). A pooled answer comes whole: its TTFT is its end-to-end latency."""

    id: str
    sent_s: float
    ttft_s: float
    e2el_s: float
    itl_s: tuple[float, ...]
    output_text: str
    output_tokens: int
    input_tokens: int
    error: str = ""
    scheduled_s: float | None = None
    dispatched_s: float | None = None
    answer: tuple[float, ...] | None = None

    @property
    def answered(self) -> bool:
        return not self.error

    @property
    def tpot_s(self) -> float:
        """(E2E - TTFT) / (output tokens - 1); 0.0 with at most one output token (the generator's
        rule for goodput; such a request has no TPOT in the percentiles)."""
        if self.output_tokens <= 1:
            return 0.0
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)


class Bound(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One bound of an objective: ``metric`` (one of BOUNDED) at ``percentile`` (0-100] must be at
    most ``bound_s`` seconds."""

    metric: str
    percentile: float
    bound_s: float

    def __post_init__(self) -> None:
        if self.metric not in BOUNDED:
            raise UserError(f"objective metric {self.metric!r} is not one of {', '.join(BOUNDED)}")
        if not 0 < self.percentile <= 100:
            raise UserError(f"objective percentile {self.percentile!r} must be in (0, 100], e.g. 99")
        if not self.bound_s > 0:
            raise UserError(f"objective bound {self.bound_s!r} s for {self.metric} must be > 0")


class Objective(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A latency objective: every bound of ``bounds`` holds, and at least ``share`` (0-1] of the
    offered requests meet every bound one by one (failed requests never do)."""

    bounds: tuple[Bound, ...]
    share: float

    def __post_init__(self) -> None:
        if not self.bounds:
            raise UserError("an objective needs at least one bound (e.g. ttft at p99 <= 2 s)")
        if len({b.metric for b in self.bounds}) != len(self.bounds):
            raise UserError("an objective bounds each metric once")
        if not 0 < self.share <= 1:
            raise UserError(f"objective share {self.share!r} must be in (0, 1], e.g. 0.9")


def plain(record: msgspec.Struct) -> Any:
    """A serving record (ServedRequest, Figures, Verdict, a pass's ServingRecord) as the plain
    JSON values result.json and served.jsonl hold: dicts with string keys (percentile keys such
    as ``99.0`` written as ``"99.0"``), lists, numbers, text."""
    return msgspec.to_builtins(record, str_keys=True)


class LiveFigures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A server pass's figures while its requests are being answered (progress only, never a
    result): ``answered`` and ``failed`` so far, ``achieved_rate`` (answered / seconds from the
    schedule's origin to the last answer, req/s; None before two answers), ``ttft_p50_s`` and
    ``ttft_p99_s`` (numpy linear percentiles over the answered requests, as ``percentile``; None
    before the first answer)."""

    answered: int
    failed: int
    achieved_rate: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None


def live_of(value: object) -> LiveFigures | None:
    """The LiveFigures a progress event's ``served`` holds (plain values, as ``plain`` wrote them);
    None when it is not one (an event of another version: progress only, never a figure)."""
    try:
        return msgspec.convert(value, LiveFigures)
    except msgspec.ValidationError:
        return None


def live_figures(outcomes: Sequence[Mapping]) -> LiveFigures:
    """LiveFigures of the outcomes the load generator has written so far (each a mapping with
    ``ok``, ``ttft_s``, ``t_s``: lab/engines/vllm_load_worker.py's live lines)."""
    ok = [o for o in outcomes if o.get("ok")]
    ttft = np.array([float(o["ttft_s"]) for o in ok], dtype=np.float64)
    last = max((float(o["t_s"]) for o in ok), default=0.0)
    return LiveFigures(answered=len(ok), failed=len(outcomes) - len(ok),
                       achieved_rate=len(ok) / last if len(ok) > 1 and last > 0 else None,
                       ttft_p50_s=float(np.percentile(ttft, 50)) if ttft.size else None,
                       ttft_p99_s=float(np.percentile(ttft, 99)) if ttft.size else None)


def metric_values(records: Sequence[ServedRequest], metric: str) -> np.ndarray:
    """The values (s, float64) a percentile of ``metric`` is taken over: TTFT, E2E of each answered
    request; TPOT of each answered request with more than one output token; ITL: every gap of every
    answered request. Raises ValueError for a metric not in METRICS."""
    ok = [r for r in records if r.answered]
    if metric == "ttft":
        return np.array([r.ttft_s for r in ok], dtype=np.float64)
    if metric == "e2el":
        return np.array([r.e2el_s for r in ok], dtype=np.float64)
    if metric == "tpot":
        return np.array([r.tpot_s for r in ok if r.output_tokens > 1], dtype=np.float64)
    if metric == "itl":
        return np.array([g for r in ok for g in r.itl_s], dtype=np.float64)
    raise ValueError(f"metric {metric!r} is not one of {', '.join(METRICS)}")


def percentile(records: Sequence[ServedRequest], metric: str, p: float) -> float | None:
    """The ``p``-th percentile (0-100) of ``metric`` over ``records`` in s (numpy linear), None
    when no value exists (no answered request; TPOT: none with two tokens or more)."""
    v = metric_values(records, metric)
    return float(np.percentile(v, p)) if v.size else None


def percentiles(records: Sequence[ServedRequest],
                ps: Sequence[float] = PERCENTILES) -> dict[str, dict[float, float | None]]:
    """{metric: {p: value s}} for every metric of METRICS and every ``p`` of ``ps``."""
    return {m: {float(p): percentile(records, m, p) for p in ps} for m in METRICS}


def tool_percentiles(result: Mapping, ps: Sequence[float] = PERCENTILES) -> dict[str, dict[float, float | None]]:
    """The same table as ``percentiles``, read from the load generator's own result (its
    ``p<P>_<metric>_ms`` keys, converted to s; None where it wrote none)."""
    def key(p: float) -> str:
        return str(int(p)) if int(p) == p else str(p)

    out: dict[str, dict[float, float | None]] = {}
    for m in METRICS:
        out[m] = {}
        for p in ps:
            v = result.get(f"p{key(p)}_{m}_ms")
            out[m][float(p)] = None if v is None else float(v) / 1000.0
    return out


def meets(r: ServedRequest, objective: Objective) -> bool:
    """Whether request ``r`` meets every bound of ``objective`` by itself (answered, and each bounded
    metric of its own at most the bound)."""
    if not r.answered:
        return False
    own = {"ttft": r.ttft_s, "tpot": r.tpot_s, "e2el": r.e2el_s}
    return all(own[b.metric] <= b.bound_s for b in objective.bounds)


class Figures(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A server pass's figures (``figures``): ``offered`` requests, ``answered``, ``failed``;
    ``duration_s`` (the generator's); ``offered_rate`` (req/s declared; None: as fast as possible),
    ``achieved_rate`` (answered / duration, req/s), ``dispatch_rate`` (requests released per s
    between the first and the last release; None without release times or with one request);
    ``output_tokens_per_s``; ``good`` requests and ``goodput`` (good / duration, req/s; None without
    an objective); ``percentiles_s`` ({metric: {p: s}}); ``lag_s`` (the generator's release lag
    behind the schedule: {"p50", "p99", "max"} s; None when the schedule is not known)."""

    offered: int
    answered: int
    failed: int
    duration_s: float
    offered_rate: float | None
    achieved_rate: float
    dispatch_rate: float | None
    output_tokens_per_s: float
    good: int | None
    goodput: float | None
    percentiles_s: dict[str, dict[float, float | None]]
    lag_s: dict[str, float] | None


def figures(records: Sequence[ServedRequest], duration_s: float, offered_rate: float | None,
            objective: Objective | None = None, ps: Sequence[float] = PERCENTILES) -> Figures:
    """Every figure of a server pass from its records and the generator's ``duration_s`` (> 0).

    Raises ValueError for no record or a duration that is not positive."""
    if not records:
        raise ValueError("figures of a server pass need at least one request record")
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, not {duration_s!r}")
    ok = [r for r in records if r.answered]
    good = None if objective is None else sum(meets(r, objective) for r in records)
    released = sorted(r.dispatched_s for r in records if r.dispatched_s is not None)
    dispatch_rate = ((len(released) - 1) / (released[-1] - released[0])
                     if len(released) == len(records) > 1 and released[-1] > released[0] else None)
    lags = [r.dispatched_s - r.scheduled_s for r in records if r.dispatched_s is not None and r.scheduled_s is not None]
    lag = ({"p50": float(np.percentile(lags, 50)), "p99": float(np.percentile(lags, 99)), "max": float(max(lags))}
           if len(lags) == len(records) else None)
    return Figures(offered=len(records), answered=len(ok), failed=len(records) - len(ok), duration_s=duration_s,
                   offered_rate=offered_rate, achieved_rate=len(ok) / duration_s, dispatch_rate=dispatch_rate,
                   output_tokens_per_s=sum(r.output_tokens for r in ok) / duration_s, good=good,
                   goodput=None if good is None else good / duration_s, percentiles_s=percentiles(records, ps),
                   lag_s=lag)


class Verdict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The objective judged on one pass: ``holds``; ``checks`` one line per part (each bound's
    percentile against it, the good share against the declared share); ``failed`` the lines of the
    parts that do not hold (empty when it holds)."""

    holds: bool
    checks: tuple[str, ...]
    failed: tuple[str, ...]


def verdict(records: Sequence[ServedRequest], objective: Objective) -> Verdict:
    """Judge ``objective`` on ``records``: each bound's percentile (over the answered requests; a
    metric with no value does not hold) at most its bound, and the share of the offered requests
    that meet every bound (``meets``) at least ``objective.share``. Raises ValueError for no record."""
    if not records:
        raise ValueError("a verdict needs at least one request record")
    checks, failed = [], []
    for b in objective.bounds:
        v = percentile(records, b.metric, b.percentile)
        ok = v is not None and v <= b.bound_s
        line = (f"{b.metric} p{b.percentile:g} {'n/a' if v is None else f'{v:.4f}'} s "
                f"{'<=' if ok else '>'} {b.bound_s:g} s")
        checks.append(line)
        if not ok:
            failed.append(line)
    good = sum(meets(r, objective) for r in records)
    share = good / len(records)
    ok = share >= objective.share
    line = (f"{good} of {len(records)} requests meet every bound "
            f"(share {share:.4f} {'>=' if ok else '<'} {objective.share:g})")
    checks.append(line)
    if not ok:
        failed.append(line)
    return Verdict(holds=not failed, checks=tuple(checks), failed=tuple(failed))
