"""Summary per variant: raw durations, median, min, max, successes, failures (seed: "Presenta
le cinque durate grezze, la loro mediana, il minimo e il massimo, con il numero di successi
e di fallimenti"). No p95 from five passes.

"Does not distinguish" (seed: "Se la dispersione osservata è paragonabile allo scarto tra le
mediane, la serie non distingue ancora le opzioni"): judged per pair of variants that share a series
by :func:`lab.report.distinguish.compare_durations` (non-overlapping ranges, or an exact
Mann-Whitney rank test with its p-value), so one slow pass cannot flag a variant against
everything. Each variant lists the verdict against every other variant of its series in
``pairs``; ``does_not_distinguish_from`` names those the measurements do not tell apart. A
pair whose durations include starved passes (lab.passes.conditions.starvation) says so in
its reason and names them: its verdict may be the host's, not the variants'.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Generic, TypeVar

import msgspec
import pandas as pd

from lab.cost.hardware import HardwareCheck
from lab.facts.constants import AGREEMENT
from lab.inputs.variants import series_names, server_config_label
from lab.kinds.kind import differing_share
from lab.passes.events import PassStatus
from lab.passes.records import Attempt, Validation, rejected_text
from lab.report.caveats import Basis
from lab.report.condition_cells import StarvedPass, starved_text
from lab.report.distinguish import PairVerdict, compare_durations
from lab.report.long_items import Feasibility, campaign_feasibility
from lab.report.pass_row import BucketCoverage, Number, PassRow, pass_rows

T = TypeVar("T")


def recompilation_caveat(recompiled_passes: int, successes: int, frames_max: int | None) -> str:
    """'' when ``recompiled_passes`` is 0; else one sentence: the durations of the variant's
    passes ok (``successes``) include dynamo recompilation inside the measured window (up to
    ``frames_max`` frames in one pass), so the durations, their median, what is computed from
    them (throughput, utilization, a projection) are not steady-state. The one wording for a
    campaign's summary and a comparison of archives (lab.compare)."""
    if not recompiled_passes:
        return ""
    return (f"these durations include recompilation: dynamo compiled inside the measured window of "
            f"{recompiled_passes} of {successes} pass(es) ok (up to {frames_max} frame(s) in one); "
            "the durations, their median and the utilization are not steady-state")


def median_pass_throughput(items: float | None, durations_s) -> float | None:
    """Throughput of the median pass, items/s: ``items`` (per pass) / the median of the
    measured-window durations ``durations_s`` (s). With an even number of passes the median
    duration is the mean of the two middle ones, and this is items over it, never the mean of
    the two throughputs. The one definition for the summary, the decision note and compare
    (whose projected hours at the median pass are load / this). None without items or durations."""
    ds = [float(d) for d in durations_s if d]
    if not items or not ds:
        return None
    return float(items) / statistics.median(ds)


class _PairHead(msgspec.Struct, frozen=True):
    """What a pair of summary.json holds besides its PairVerdict fields."""

    other: str
    starved_passes: tuple[str, ...] = ()


@dataclass(frozen=True)
class VariantPair:
    """A variant's verdict against ``other`` (a variant id of a series they share): the
    durations' PairVerdict (lab.report.distinguish.compare_durations), whose reason names the
    starved passes among the durations of either, their ids in ``starved_passes``
    (lab.passes.conditions.starvation; () when none). In summary.json: {"other": variant_id,
    **PairVerdict.to_json(), "starved_passes": [pass_id, ...] only when some were starved}."""

    other: str
    verdict: PairVerdict
    starved_passes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        """One object of a summary.json variant's ``pairs``."""
        return {"other": self.other, **self.verdict.to_json(),
                **({"starved_passes": list(self.starved_passes)} if self.starved_passes else {})}

    @classmethod
    def from_json(cls, d: dict) -> VariantPair:
        """Inverse of ``to_json``."""
        head = msgspec.convert(d, _PairHead)
        return cls(head.other, msgspec.convert(d, PairVerdict), head.starved_passes)


@dataclass(frozen=True)
class VariantSummary:
    """One variant's results over its passes: the record the decision note, the screens and
    summary.json/summary.csv share. Durations are measured-window seconds of passes with
    status ok (raw, in pass order); statistics are None when no pass succeeded; peaks are
    the largest per-pass figure in bytes, None when never measured (SPEC 3.10).
    """

    variant_id: str
    label: str
    variant_name: str | None = None
    series: str | None = None
    batch_size: int | None = None
    precision: str | None = None
    bucketing: bool | None = None
    cards: int | None = None
    """Cards per pass as declared (Variant.cards)."""
    cards_observed: int | None = None
    """Cards the successful passes really used (raw table ``cards_observed``), None when none."""
    durations_s: tuple[float, ...] = ()
    median_s: float | None = None
    min_s: float | None = None
    max_s: float | None = None
    successes: int = 0
    failures: int = 0
    failure_kinds: tuple[str, ...] = ()
    items_per_s_median: float | None = None
    metric_median: float | None = None
    accepted_passes: int = 0
    quality_verdict: str = ""
    feasible: bool = True
    infeasible_reason: str = ""
    peak_rss_bytes_max: int | None = None
    peak_allocated_bytes_max: int | None = None
    peak_reserved_bytes_max: int | None = None
    does_not_distinguish: bool = False
    does_not_distinguish_from: tuple[str, ...] = ()
    pairs: tuple[VariantPair, ...] = ()
    """One verdict per other variant of the series (lab.report.distinguish)."""
    truncated_short: float | None = None
    truncated_medium: float | None = None
    truncated_long: float | None = None
    """Largest share (0-1) over the variant's passes of a bucket's items cut at ``max_length``;
    None when not observed."""
    max_length: int | None = None
    achieved_flop_per_s_median: float | None = None
    ceiling_flop_per_s_median: float | None = None
    utilization_median: float | None = None
    """Medians over passes ok of the pass's model FLOP/s, the matmul probe's ceiling FLOP/s and
    their ratio (0-1); None when no pass ok measured them (lab.passes.probe)."""
    recompiles_measured_max: int | None = None
    """Most frames dynamo compiled inside one measured window (compile = true variants;
    lab.passes.compile); None when not counted."""
    recompiled_passes: int = 0
    """Passes ok whose measured window included recompilation (recompiles_measured > 0): their
    durations are not steady-state (``durations_caveat``)."""

    items_total: int | None = None
    """Items of the corpus the variant's passes ok were given (None when none ran)."""
    output_tokens: int | None = None
    output_tokens_per_s_median: float | None = None
    """A generation variant (lab.passes.tasks.generation): the most output tokens a pass ok
    generated over the corpus, and the median over passes ok of output tokens per second of the
    measured window; None for the other kinds (they generate no text)."""

    request_rate: float | None = None
    served_holds: int = 0
    served_achieved_rate_median: float | None = None
    served_goodput_median: float | None = None
    served_ttft_p99_s_median: float | None = None
    served_tpot_p99_s_median: float | None = None
    served_e2el_p99_s_median: float | None = None
    served_lag_p99_s_median: float | None = None
    served_skipped: int = 0
    served_achieved_rate_min: float | None = None
    served_ttft_p99_s_max: float | None = None
    served_tpot_p99_s_max: float | None = None
    served_e2el_p99_s_max: float | None = None
    """A server variant (lab.report.served_cells): its declared request rate (req/s), how many of its
    passes ok held the locked objective, the medians over its passes ok of the served figures, how
    many of its slots a rate search skipped (lab.orchestration.search), and the spread over its
    passes ok: the lowest achieved rate and the highest 99th percentile of each latency (its worst
    pass; s); None (0) for an offline variant."""

    metric_name: str | None = None
    threshold: float | None = None
    agreement_median: float | None = None
    agreement_worst: float | None = None
    agreement_worst_id: str | None = None
    agreement_rule: str | None = None
    second_metric_name: str | None = None
    second_metric_median: float | None = None
    """The quality behind the verdict, from the passes' typed validations (lab.orchestration.validate):
    the judged metric's name and the locked threshold; agreement with the reference variant, the
    median over validated passes of each pass's figure (share of ids with the reference's label or
    output, or the median per-id cosine for embeddings: ``agreement_rule`` says which, None = same
    label) and the lowest figure seen (a pass's, or an embedding's worst id, ``agreement_worst_id``);
    a generation's second metric (token F1 or exact match) as a median. None when no pass was validated."""
    agreement_max_differing: float | None = None
    agreement_min_cosine: float | None = None
    agreement_ids: int | None = None
    agreement_differing_most: int | None = None
    agreement_passes_checked: int | None = None
    agreement_passes_beyond: int | None = None
    """The agreement rule (lab.orchestration.agreement) over the variant's passes: the rule applied
    (the largest share of differing ids allowed; embeddings: the per-id cosine floor), the most ids
    that differed in one checked pass (of ``agreement_ids`` compared), the passes checked and those
    beyond the rule. None when no pass was checked (no reference pass, or records older than the rule)."""

    starved_passes: tuple[StarvedPass, ...] = ()
    """Passes ok (their durations are in ``durations_s``) whose measured window was starved of
    CPU (raw table ``starved``; lab.passes.conditions.starvation).
    Every pair verdict of the variant names them (``pairs`` reason, ``starved_passes``)."""

    def __post_init__(self) -> None:
        for name in ("durations_s", "failure_kinds", "does_not_distinguish_from", "pairs", "starved_passes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def short_name(self) -> str:
        """'batch_size=8' from the variant name 'batch/batch_size=8', else the variant id."""
        return (self.variant_name or self.variant_id).split("/", 1)[-1]

    @property
    def holds_objective(self) -> bool:
        """A server variant whose every pass ok held the locked latency objective and was accepted
        (the same ML result), and that a rate search skipped in no repetition: the rule of the
        highest holding rate, in the decision note and in compare (:func:`server_configs`). False
        for an offline variant or one with no pass ok."""
        return (self.request_rate is not None and self.successes > 0 and not self.served_skipped
                and self.served_holds == self.successes == self.accepted_passes)

    def memory_verdict(self) -> str:
        """The memory feasibility in one word (lab.report.long_items): "infeasible" (an OOM, or a
        pass killed for host memory before the long items), "feasible" (a pass completed), or
        "not shown" (no pass completed and none ran out of memory: an error that is not a memory
        failure shows neither; the failure verdict excludes the variant)."""
        if not self.feasible:
            return "infeasible"
        return "feasible" if self.successes else "not shown"

    def quality_text(self) -> str:
        """One line: the judged metric's median over the variant's passes against its threshold, the
        second metric beside it, and the agreement with the reference variant (median, lowest); or
        why there is none. A method of the record, as utilization_text."""
        if self.metric_name is None:
            return "quality: no pass was validated"
        m = "not computed" if self.metric_median is None else f"median {self.metric_median:.4f}"
        if self.metric_name == AGREEMENT:  # the judged metric is the agreement itself: said once
            worst = "" if self.agreement_worst is None or self.metric_median is None else \
                f", lowest {self.agreement_worst:.4f}" + (f" (id {self.agreement_worst_id})"
                                                         if self.agreement_worst_id else "")
            return (f"quality: agreement with the reference variant ({self.agreement_rule or 'per id'}) {m} "
                    f"(threshold {self.threshold:g}){worst}")
        text = f"quality: {self.metric_name} {m} (threshold {self.threshold:g})"
        if self.second_metric_name and self.second_metric_median is not None:
            text += f", {self.second_metric_name} median {self.second_metric_median:.4f}"
        if self.agreement_median is None:
            return text + "; agreement with the reference variant: not computed (no reference pass validated)"
        rule = self.agreement_rule or "share of ids with the reference variant's label"
        worst = f", lowest {self.agreement_worst:.4f}" if self.agreement_worst is not None else ""
        worst += f" (id {self.agreement_worst_id})" if self.agreement_worst_id else ""
        return text + f"; agreement with the reference variant ({rule}): median {self.agreement_median:.4f}{worst}"

    def agreement_rule_text(self) -> str:
        """One line: the agreement rule and the variant's figures against it, 'agreement rule (a share
        of at most 0.05 (5 %) of the ids differ from the reference pass): at most 4 of 17 ids differed
        in a pass; 2 of 2 passes beyond it' (lab.kinds.kind.differing_share), or why it was not checked."""
        if not self.agreement_passes_checked:
            return ("agreement rule: not checked (no pass compared with a reference pass, or records written "
                    "before the rule)")
        floor = ("" if self.agreement_min_cosine is None
                 else f"; an id differs below cosine {self.agreement_min_cosine:g}")
        beyond = self.agreement_passes_beyond or 0
        share = differing_share(self.agreement_max_differing or 0.0)
        return (f"agreement rule ({share} of the ids differ from the reference "
                f"pass{floor}): at most {self.agreement_differing_most} of {self.agreement_ids} ids differed in "
                f"a pass; {beyond} of {self.agreement_passes_checked} pass(es) checked beyond it"
                + (": not the same ML result" if beyond else ""))

    def utilization_text(self) -> str:
        """One line: 'utilization: achieved X GFLOP/s, matmul ceiling Y GFLOP/s, ratio Z %
        (medians of passes ok)', or why not measured. X, Y and Z are three medians over the
        passes ok (Z the median of each pass's own ratio), so Z is not X / Y: the line never
        writes it as a quotient. Formula: lab.passes.probe. A method of the record, so a
        screen holding records needs no import of this module."""
        a, c, u = self.achieved_flop_per_s_median, self.ceiling_flop_per_s_median, self.utilization_median
        if a is None:
            return "utilization: not measured (no pass reached the probe phase)"
        text = f"utilization: achieved {a / 1e9:.2f} GFLOP/s"
        text += (f", matmul ceiling {c / 1e9:.1f} GFLOP/s, ratio {100 * u:.1f} % (medians of passes ok)"
                 if u is not None and c is not None else " (ceiling not measured: see the raw table's notes)")
        if self.recompiles_measured_max:
            text += (f"; recompilations in the measured window: up to {self.recompiles_measured_max} "
                     "(not steady-state)")
        elif self.recompiles_measured_max is not None:
            text += "; no recompilation in the measured window"
        return text

    def durations_caveat(self) -> str:
        """'' when no pass ok recompiled inside its measured window; else one sentence saying
        that the durations (and what is computed from them) include recompilation. Shown next
        to the durations on the Results screen and in the decision note
        (``recompilation_caveat``)."""
        return recompilation_caveat(self.recompiled_passes, self.successes, self.recompiles_measured_max)

    def basis(self, hardware: HardwareCheck | None = None) -> Basis:
        """Its flags as a derived figure's caveats read them (lab.report.caveats); ``hardware``: its
        passes' hardware checked against the package it is priced as (lab.cost.hardware; None: not
        priced), which flags a CPU or another GPU than priced."""
        return Basis(tag=self.label, passes=self.successes, starved=len(self.starved_passes),
                     not_steady=self.recompiled_passes > 0, **Basis.hardware_flags(hardware))

    def starved_caveat(self) -> str:
        """'' when no pass ok was starved; else one clause naming the starved passes
        (lab.report.condition_cells.starved_text): shown next to the durations."""
        return starved_text(self.starved_passes)

    def to_json(self) -> dict:
        """Plain dict (tuples as lists): one object of summary.json."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        out["pairs"] = [p.to_json() for p in self.pairs]
        out["starved_passes"] = [p.to_json() for p in self.starved_passes]
        return out

    @classmethod
    def from_json(cls, d: dict) -> "VariantSummary":
        """Inverse of ``to_json``. Raises ValueError naming keys that are not fields."""
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"variant summary: unknown key(s) {', '.join(sorted(unknown))}")
        return cls(**{**d, "pairs": tuple(VariantPair.from_json(p) for p in d.get("pairs") or ()),
                      "starved_passes": tuple(StarvedPass.from_json(p) for p in d.get("starved_passes") or ())})


@dataclass(frozen=True)
class ServerConfig(Generic[T]):
    """One server configuration of a campaign (its variants but for the request rate;
    lab.inputs.variants.server_config_label): the rates declared for it (req/s, ascending) and the
    item (a summary, or what carries one) at the highest rate that holds the objective
    (VariantSummary.holds_objective), None when no declared rate does."""
    label: str
    rates: tuple[float, ...]
    holding: T | None
    skipped: tuple[float, ...] = ()
    """The rates a rate search skipped in every repetition (never run; lab.orchestration.search)."""
    partly: tuple[tuple[float, int], ...] = ()
    """(rate, repetitions skipped) of the rates a rate search ran in some repetitions only."""

    def tried(self) -> str:
        """The configuration's rates in words (:func:`rates_tried`)."""
        return rates_tried(self.rates, self.skipped, self.partly)


def rates_tried(rates: Sequence[float], skipped: Sequence[float],
                partly: Sequence[tuple[float, int]] = ()) -> str:
    """'1, 2 (skipped in 1 repetition) req/s' and, under a search, '; 4, 8 req/s skipped by the
    rate search': a server configuration's declared ``rates`` (req/s) as the decision note and
    compare state them, ``skipped`` those a rate search never ran, ``partly`` (rate, repetitions
    skipped) those it ran in some repetitions only."""
    some = dict(partly)
    ran = [f"{r:g}" + (f" (skipped in {some[r]} repetition(s))" if r in some else "") for r in rates
           if r not in skipped]
    text = ", ".join(ran) + " req/s" if ran else "none run"
    if skipped:
        text += "; " + ", ".join(f"{r:g}" for r in skipped) + " req/s skipped by the rate search"
    return text


def server_configs(items: Sequence[T], summary_of: Callable[[T], VariantSummary]) -> list[ServerConfig[T]]:
    """The server configurations among ``items`` (``summary_of(item)``: its VariantSummary; offline
    variants left out), in the order of their first variant: the one rule that names the highest
    declared rate holding the objective, for the decision note and compare."""
    groups: dict[str, list[T]] = {}
    for item in items:
        v = summary_of(item)
        if v.request_rate is not None:
            groups.setdefault(server_config_label(v.label, v.request_rate), []).append(item)
    out = []
    for label, group in groups.items():
        def rate(item: T) -> float:
            return summary_of(item).request_rate or 0.0

        holding = [x for x in group if summary_of(x).holds_objective]
        never_ran = [rate(x) for x in group if summary_of(x).served_skipped and not summary_of(x).successes
                     and not summary_of(x).failures]
        partly = [(rate(x), summary_of(x).served_skipped) for x in group
                  if summary_of(x).served_skipped and rate(x) not in never_ran]
        out.append(ServerConfig(label, tuple(sorted(rate(x) for x in group)),
                                max(holding, key=rate) if holding else None, tuple(sorted(never_ran)),
                                tuple(sorted(partly))))
    return out


def read_summary(path: Path) -> list[VariantSummary]:
    """summary.json written by ``write_summary``."""
    return [VariantSummary.from_json(d) for d in json.loads(Path(path).read_text())]


def summarize(rows: list[dict], feasibility: dict[str, Feasibility] | None = None,
              validations: dict[str, Validation] | None = None) -> list[VariantSummary]:
    """``summarize_rows`` of raw_rows' dicts, each decoded once into a PassRow."""
    return summarize_rows(pass_rows(rows), feasibility, validations)


def summarize_rows(rows: list[PassRow], feasibility: dict[str, Feasibility] | None = None,
                   validations: dict[str, Validation] | None = None) -> list[VariantSummary]:
    """One record per variant (in first-seen order). Durations are measured-window seconds of
    passes with status ok; ``failures`` counts every other attempt (oom, error, killed,
    interrupted; a rate search's skipped slots are ``served_skipped``, never failures).
    ``accepted_passes`` counts rows with corpus_accepted true.

    ``feasibility``: each variant's memory feasibility (lab.report.long_items; feasible when
    absent). ``validations``: each pass's typed validation by pass id (the journal's); the quality
    verdict of a variant with no accepted pass is ``quality_verdict`` of them.
    """
    by: dict[str, list[PassRow]] = {}
    for r in rows:
        by.setdefault(r.variant_id, []).append(r)
    out = []
    for vid, rs in by.items():
        ok = [r for r in rs if r.status == PassStatus.OK and r.measured_s is not None]
        d = [round(float(r.measured_s), 6) for r in ok if r.measured_s is not None]
        items = _largest(r.items_total for r in ok)
        metrics = [r.metric for r in rs if r.metric is not None]
        accepted = sum(1 for r in rs if r.corpus_accepted is True)
        first = rs[0]
        failures = [r for r in rs if r.status not in (PassStatus.OK, PassStatus.SKIPPED)]
        skipped = sum(r.status == PassStatus.SKIPPED for r in rs)
        checked = [(validations or {}).get(r.pass_id) for r in rs if r.pass_id is not None]
        feas = (feasibility or {}).get(vid, Feasibility())
        out.append(VariantSummary(
            variant_id=vid, label=first.variant_label, variant_name=first.variant_name,  # type: ignore[arg-type]
            series=first.series, batch_size=first.batch_size, precision=first.precision,
            bucketing=first.bucketing, cards=first.cards,
            cards_observed=_largest(r.cards_observed for r in ok),
            durations_s=tuple(d), median_s=statistics.median(d) if d else None,
            min_s=min(d) if d else None, max_s=max(d) if d else None,
            successes=len(ok), failures=len(failures),
            failure_kinds=tuple(sorted({r.status for r in failures})),
            items_per_s_median=median_pass_throughput(items, d),
            metric_median=statistics.median(metrics) if metrics else None,
            accepted_passes=accepted,
            quality_verdict=SKIPPED_VERDICT if skipped == len(rs) else quality_verdict(accepted, len(rs), checked),
            feasible=feas.feasible, infeasible_reason=feas.reason,
            peak_rss_bytes_max=_largest(r.process_peak_rss_bytes for r in rs),
            peak_allocated_bytes_max=_largest(r.peak_allocated_bytes for r in rs),
            peak_reserved_bytes_max=_largest(r.peak_reserved_bytes for r in rs),
            **_perf_medians(ok),
            truncated_short=_most(r.truncated_short for r in rs),
            truncated_medium=_most(r.truncated_medium for r in rs),
            truncated_long=_most(r.truncated_long for r in rs),
            max_length=first.max_length,
            items_total=items,
            output_tokens=max((r.output_tokens for r in ok if r.output_tokens is not None), default=None),
            output_tokens_per_s_median=_median_known([r.output_tokens_per_s for r in ok]),
            **_quality_figures(checked),
            **_served_figures(first.request_rate, ok, skipped),
            starved_passes=tuple(StarvedPass(r.pass_id or "", r.starved_reason or "") for r in ok if r.starved),
        ))
    return _flag_indistinct(out)


def _largest(values: Iterable[T]) -> T | None:
    """The largest non-empty, non-zero of ``values``; None when none."""
    return max((v for v in values if v), default=None)  # type: ignore[type-var]


def _most(values: Iterable[Number | None]) -> float | None:
    """The largest known of ``values`` as a float; None when none is known."""
    return max((float(v) for v in values if v is not None), default=None)


SKIPPED_VERDICT = "not run: skipped by the rate search in every repetition"
"""The quality verdict of a server variant a rate search never ran (lab.orchestration.search)."""


def _served_figures(rate: Number | None, ok: list[PassRow], skipped: int) -> dict:
    """A server variant's fields of VariantSummary: its declared ``rate``, from its passes ok the
    served figures (lab.report.served_cells.SERVED_FIGURES, each as ``<column>_median``) and the
    worst pass of each (the lowest achieved rate, the highest p99 latencies), and its ``skipped``
    slots (a rate search's SKIPPED rows); {} for an offline variant (the defaults stand)."""
    if rate is None:
        return {}
    rates = [r.served_achieved_rate for r in ok if r.served_achieved_rate is not None]
    ttft = [r.served_ttft_p99_s for r in ok if r.served_ttft_p99_s is not None]
    tpot = [r.served_tpot_p99_s for r in ok if r.served_tpot_p99_s is not None]
    e2el = [r.served_e2el_p99_s for r in ok if r.served_e2el_p99_s is not None]
    return {"request_rate": rate, "served_holds": sum(r.served_objective_holds is True for r in ok),
            "served_skipped": skipped,
            "served_achieved_rate_median": _median_known([r.served_achieved_rate for r in ok]),
            "served_goodput_median": _median_known([r.served_goodput for r in ok]),
            "served_ttft_p99_s_median": _median_known([r.served_ttft_p99_s for r in ok]),
            "served_tpot_p99_s_median": _median_known([r.served_tpot_p99_s for r in ok]),
            "served_e2el_p99_s_median": _median_known([r.served_e2el_p99_s for r in ok]),
            "served_lag_p99_s_median": _median_known([r.served_lag_p99_s for r in ok]),
            "served_achieved_rate_min": float(min(rates)) if rates else None,
            "served_ttft_p99_s_max": float(max(ttft)) if ttft else None,
            "served_tpot_p99_s_max": float(max(tpot)) if tpot else None,
            "served_e2el_p99_s_max": float(max(e2el)) if e2el else None}


def _quality_figures(validations: list[Validation | None]) -> dict:
    """VariantSummary's quality fields from a variant's validations (see the field docstring)."""
    vs = [v for v in validations if v is not None]
    if not vs:
        return {}
    agree = [v.agreement_with_reference for v in vs if v.agreement_with_reference is not None]
    lows = [(v.agreement_worst if v.agreement_worst is not None else v.agreement_with_reference,
             v.agreement_worst_id or "") for v in vs if v.agreement_with_reference is not None]
    low = min(lows, default=(None, ""), key=lambda x: x[0])
    seconds = [v.second_metric for v in vs if v.second_metric is not None]
    checked = [v for v in vs if v.agreement_ok is not None]
    most = max(checked, key=lambda v: (v.agreement_differing or 0, -(v.agreement_ids or 0)), default=None)
    rule = {} if most is None else {
        "agreement_max_differing": most.agreement_max_differing, "agreement_min_cosine": most.agreement_min_cosine,
        "agreement_ids": most.agreement_ids, "agreement_differing_most": most.agreement_differing,
        "agreement_passes_checked": len(checked), "agreement_passes_beyond": sum(not v.agreement_ok for v in checked)}
    return {**rule, "metric_name": vs[0].metric_name, "threshold": vs[0].threshold,
            "agreement_median": statistics.median(agree) if agree else None,
            "agreement_worst": low[0], "agreement_worst_id": low[1] or None,
            "agreement_rule": vs[0].agreement_rule, "second_metric_name": vs[0].second_metric_name,
            "second_metric_median": statistics.median(seconds) if seconds else None}


def quality_verdict(accepted: int, passes: int, validations: list[Validation | None]) -> str:
    """A variant's quality verdict: "accepted (A of N passes)" when ``accepted`` > 0, else the
    rejection of its passes' typed ``validations`` (lab.passes.records.rejected_text of the
    first, in sorted order, of their reasons; "rejected: no validated pass" when none)."""
    if accepted:
        return f"accepted ({accepted} of {passes} passes)"
    texts = sorted({rejected_text(v.reasons) for v in validations if v is not None})
    return texts[0] if texts else rejected_text([])


def campaign_summary(rows: list[dict], attempts: list[Attempt]) -> list[VariantSummary]:
    """``summarize`` of a campaign's raw rows (lab.report.raw_table.raw_rows of ``attempts``) with
    each variant's feasibility from lab.report.long_items (memory before cost, SPEC 3.9), which
    reads the coverage of each attempt's validation. The one summary of the report and of
    ``archive verify``'s re-derivation."""
    validations = {a.pass_id: a.validation for a in attempts if a.validation is not None}
    cov = {pid: msgspec.convert(v.coverage, dict[str, BucketCoverage]) for pid, v in validations.items()}
    typed = [msgspec.structs.replace(r, coverage=cov.get(r.pass_id or "")) for r in pass_rows(rows)]
    return summarize_rows(typed, campaign_feasibility(typed), validations)


def _known(value) -> bool:
    """A figure present in a raw row (not None, not pandas' NA)."""
    return value is not None and not pd.isna(value)


def _median_known(values: list) -> float | None:
    """Median of the known figures of ``values``, None when none is known."""
    xs = [float(x) for x in values if _known(x)]
    return statistics.median(xs) if xs else None


def _perf_medians(ok: list[PassRow]) -> dict:
    """Medians over passes ok of the utilization figures (FLOP/s, fraction; None if none),
    and the most recompilations seen in one measured window (compile = true variants)."""
    rc = [r.recompiles_measured for r in ok if r.recompiles_measured is not None]
    return {"achieved_flop_per_s_median": _median_known([r.achieved_flop_per_s for r in ok]),
            "ceiling_flop_per_s_median": _median_known([r.ceiling_flop_per_s for r in ok]),
            "utilization_median": _median_known([r.utilization for r in ok]),
            "recompiles_measured_max": max(rc) if rc else None,
            "recompiled_passes": sum(1 for x in rc if x > 0)}


def _flag_indistinct(summary: list[VariantSummary]) -> list[VariantSummary]:
    """``summary`` with each variant's ``pairs`` against every other variant of a series it shares,
    and ``does_not_distinguish(_from)`` where the measurements do not tell them apart (module doc)."""
    out = []
    for a in summary:
        pairs = []
        for b in summary:
            if (a is b or not series_names(a.series) & series_names(b.series)
                    or a.median_s is None or b.median_s is None):
                continue
            verdict = compare_durations(list(a.durations_s), list(b.durations_s))
            starved = a.starved_passes + b.starved_passes
            if starved:  # a gap (or a spread) made by a host short of CPU is not the variants'
                pairs.append(VariantPair(b.variant_id, replace(verdict, reason=f"{verdict.reason}; "
                                                                         f"{starved_text(starved)}"),
                                         tuple(x.pass_id for x in starved)))
            else:
                pairs.append(VariantPair(b.variant_id, verdict))
        undecided = tuple(x.other for x in pairs if not x.verdict.distinguished)
        out.append(replace(a, pairs=tuple(pairs), does_not_distinguish=bool(undecided),
                           does_not_distinguish_from=undecided))
    return out


def summary_table(summary: list[VariantSummary]) -> pd.DataFrame:
    df = pd.DataFrame([s.to_json() for s in summary], columns=[f.name for f in fields(VariantSummary)])
    df["durations_s"] = [" ".join(f"{x:.3f}" for x in s.durations_s) for s in summary]
    df["does_not_distinguish_from"] = [" ".join(s.does_not_distinguish_from) for s in summary]
    df["failure_kinds"] = [" ".join(s.failure_kinds) for s in summary]
    df["starved_passes"] = ["; ".join(f"{p.pass_id}: {p.reason}" for p in s.starved_passes) for s in summary]
    df["pairs"] = ["; ".join(f"{p.other}: {p.verdict.reason}" for p in s.pairs) for s in summary]
    return df


def write_summary(summary: list[VariantSummary], path: Path) -> Path:
    """summary.csv at ``path`` and summary.json beside it (same records)."""
    from lab.report.csv_safe import write_csv

    write_csv(summary_table(summary), path)  # formula-like cells neutralised
    path.with_suffix(".json").write_text(json.dumps([s.to_json() for s in summary], indent=1, default=str) + "\n")
    return path
