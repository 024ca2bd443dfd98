"""Decision note (Markdown) for the evidence archive.

Brings together, for each configuration, its quality verdicts, raw durations,
campaign window, committed package and accepted deliverables (seed: "Il bilancio
finale riunisce ..."), states which configurations are excluded and why, and names
the chosen one, the load it covers and the motivation. Prices come only from
:mod:`lab.cost.forfaits` (seed: "Calcolare il costo impegnato"); nothing here
re-implements the pricing rule.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from lab.cost.forfaits import (
    PACKAGE_HOURS,
    Catalog,
    Coverage,
    PricingError,
    Quote,
    Window,
    cost_per_validated_corpus,
    coverage,
    format_hours,
    load_catalog,
    money,
    parse_instant,
    parse_window,
    quote,
)
from lab.cost.hardware import HardwareCheck, Measured, Priced
from lab.cost.sizing import capacity_items, served_requests, serving_lots
from lab.facts.constants import AGREEMENT, DEFAULT_DELIVERABLES, DEFAULT_LOTS
from lab.kinds.kind import differing_share
from lab.report.caveats import Basis, rests_on
from lab.report.distinguish import TOO_FEW, compare_durations
from lab.report.exclusions import exclusion_counts
from lab.report.note_inputs import NoteCampaign, NotePricing
from lab.report.summary import VariantSummary, server_configs

UNDEFINED = "undefined: no accepted corpus"
NO_PACKAGE = "no package declared"


def decision_campaign(proto) -> NoteCampaign:
    """The ``campaign`` argument of ``decision_note`` from a ``lab.orchestration.protocol.Protocol``."""
    c = proto.config.campaign
    cut = proto.config.task.max_text_tokens if proto.kind.generates_text else None
    return NoteCampaign(name=proto.name, question=c.question, deadline=c.deadline, deliverables=c.deliverables,
                        text_cut=f"[task] max_text_tokens {cut}" if cut else "",
                        ran=what_ran(proto.kind, proto.config.task.entry))


def what_ran(kind, entry: str | None) -> str:
    """The note's "What ran" line: ``kind`` (a lab.kinds.kind.TaskKind) run by the lab's own job, or by
    the user's own code when the campaign declares ``[task] entry`` (``entry``, as written): then the
    outputs judged and timed are that code's, which the note must say."""
    if entry:
        return (f"{kind.article} task run by your own code ([task] entry {markdown_text(entry)}): the outputs "
                "judged, timed and priced below are that code's; the lab gave it the corpus, timed its measured "
                "window and checked its outputs.")
    return f"{kind.article} task run by the lab's own job on the [model] checkpoint."


def decision_pricing(cost: dict, observed_window: tuple[str, str] | None = None) -> dict:
    """The ``pricing`` argument of ``decision_note`` from a campaign file's [cost] section (as
    a dict) or the Cost screen's fields (same keys: catalog, gpu, days, lots, window_start,
    window_end, tz).

    A key that is absent or blank is None: no gpu or days means no package declared (nothing
    priced, none invented); lots defaults to lab.facts.constants.DEFAULT_LOTS. With no window_start
    given, ``observed_window`` (first pass start, last pass end; ISO) stands in for the window.
    """
    def given(key: str):
        v = cost.get(key)
        return None if v is None or (isinstance(v, str) and not v.strip()) else v

    start, end = given("window_start"), given("window_end")
    if start is None and observed_window:
        start, end = observed_window[0], end or observed_window[1]
    return {"catalog_path": given("catalog"), "gpu": given("gpu"), "days": given("days"),
            "lots": DEFAULT_LOTS if given("lots") is None else given("lots"),
            "window_start": start, "window_end": end, "tz": given("tz")}


@dataclass(frozen=True)
class Assessment:
    """One configuration judged against quality, memory, failures, calendar and price."""
    variant: VariantSummary
    quote: Quote | None
    price_missing: str  # "" when quoted, else why no price ("... not in catalog")
    window: Window | None
    coverage: Coverage | None
    accepted_deliverables: int
    cost_per_validated_corpus: Decimal | None
    exclusions: tuple[str, ...]
    hardware: HardwareCheck | None = None
    """Its passes' hardware against its package (lab.cost.hardware); None when not priced or not known."""
    catalog: Catalog | None = None
    """The catalog its package was quoted from (a server configuration's lots are quoted from it too)."""

    @property
    def eligible(self) -> bool:
        return not self.exclusions and self.quote is not None

    @property
    def unpriced(self) -> bool:
        """Passes every check but no package was declared: nothing to price, nothing excluded."""
        return not self.exclusions and self.quote is None

    def sort_key(self) -> tuple:
        median = self.variant.median_s
        assert self.quote is not None, "only eligible (quoted) configurations are ranked"
        return (self.quote.committed_budget, self.variant.failures,
                float("inf") if median is None else median)


MARKDOWN_ACTIVE = re.compile(r"([\\`*_\[\]<>&~|#!])")


def markdown_text(text: str) -> str:
    """``text`` (the user's own words: the question) as Markdown that renders as that text:
    one line, every character Markdown gives a meaning backslash-escaped, so an image, a link,
    a heading or raw HTML in it stays text in the note and in report.html (issue 23 part 6)."""
    return MARKDOWN_ACTIVE.sub(r"\\\1", " ".join(str(text).split()))


def decision_note(summary: Sequence[VariantSummary | dict], campaign: NoteCampaign | dict, pricing: dict,
                  variant_pricing: dict[str, dict] | None = None,
                  planned: Sequence[tuple[str, str]] | None = None,
                  measured: Mapping[str, Measured] | None = None, scenario=None) -> str:
    """Markdown decision note.

    ``summary``: one ``VariantSummary`` per variant (a summary.json dict is read with
    ``VariantSummary.from_json``). ``variant_pricing``: {variant_id: pricing keys} that
    override ``pricing`` for that variant (e.g. another ``gpu``).
    ``campaign``: ``name``, ``question``, ``deadline`` (ISO or None), ``deliverables``
    (int >= 1, default lab.facts.constants.DEFAULT_DELIVERABLES), ``ran`` (what ran: :func:`what_ran`;
    '' or absent: not said), ``text_cut`` (what cuts an
    item's text when it is not the variant's max_length: "[task] max_text_tokens 64" of a
    generation task; '' or absent otherwise). ``pricing``: ``catalog_path``
    (None = shipped catalog),
    ``gpu``, ``days``, ``lots``, ``window_start``/``window_end`` (ISO or None), ``tz``.
    ``planned``: (variant_id, label) of every declared variant; one with no pass in
    ``summary`` is listed as not run, and the decision never calls a configuration the only
    one that passes while others have not run. ``measured``: {variant_id: the hardware its passes ran
    on} (lab.cost.hardware.Measured, from the pass records: lab.report.build.measured_hardware); each
    priced configuration is checked against its package's GPU and cards per lot (lab.cost.hardware:
    the rule), and one measured on the CPU or on other hardware carries that caveat in every figure
    the decision derives (lab.report.caveats, with each variant's own: few passes, starved, not
    steady-state), and the Decision section ends with one line per mismatch: what was measured, what
    was priced, and that the price is the package's while the durations are the measured device's.
    None: the hardware is not known (nothing said). ``scenario``: the campaign's
    lab.inputs.scenario.ScenarioSection (None: offline); a server campaign's Decision names each
    server configuration's highest holding rate and prices its declared traffic (:func:`serving_decision`).

    Each distinct useful corpus counts once (seed: "Contare deliverable utili"): a
    variant with >= 1 accepted pass validated the corpus once, never once per
    repetition. Chosen among the eligible: lowest committed budget, then fewer
    failures, then lower median. Raises PricingError (one line) for bad pricing input
    (days not offered, lots < 1, malformed window or deadline, mixed currencies).
    """
    note_campaign = campaign if isinstance(campaign, NoteCampaign) else NoteCampaign(**campaign)
    deliverables = note_campaign.deliverables
    if isinstance(deliverables, bool) or not isinstance(deliverables, int) or deliverables < 1:
        raise PricingError(f"campaign deliverables must be an integer >= 1, got {deliverables!r}")
    deadline = note_campaign.deadline
    deadline_at = parse_instant(deadline, NotePricing(**pricing).tz, "deadline") if deadline else None
    catalogs: dict[str | None, Catalog] = {}
    records = [v if isinstance(v, VariantSummary) else VariantSummary.from_json(v) for v in summary]
    rows = [_assess(v, NotePricing(**{**pricing, **(variant_pricing or {}).get(v.variant_id, {})}), deadline_at,
                    deliverables, catalogs, None if measured is None else measured.get(v.variant_id, Measured()))
            for v in records]
    # a server pass's window is set by its arrival rate, not by the configuration: never ranked by it
    eligible = sorted((a for a in rows if a.eligible and a.variant.request_rate is None), key=Assessment.sort_key)
    if len({a.quote.currency for a in eligible if a.quote}) > 1:
        raise PricingError("eligible configurations are priced in mixed currencies: "
                           "use one catalog currency to compare committed budgets")
    checked = " (checked against the end of each campaign window)"
    out = [f"# Decision note: {note_campaign.name}", "",
           f"- **Question.** {markdown_text(note_campaign.question or '') or 'not stated'}",
           *([f"- **What ran.** {what[0].upper()}{what[1:]}"] if (what := note_campaign.ran) else []),
           f"- **Deadline.** {deadline_at.isoformat() + checked if deadline_at else 'none given'}",
           f"- **Deliverables announced.** {deliverables} distinct useful corpus(es); each "
           "accepted corpus is counted once, never once per repetition.",
           "- **Pricing rule.** Committed budget = package price per lot x lots (the committed cost of "
           "a flat-rate package, lab.cost.forfaits); a short run does not turn a package into an hourly bill. "
           f"Catalog: {', '.join(sorted({c.path for c in catalogs.values()})) or 'not loaded'}.",
           *agreement_rule_lines(records),
           "", "## Configurations", ""]
    for a in rows:
        out += _config_section(a, deliverables, note_campaign.text_cut or "")
    out += ["## Excluded configurations", ""]
    excluded = [a for a in rows if a.exclusions]
    out += [f"- **{a.variant.label}** (`{a.variant.variant_id}`): " + "; ".join(a.exclusions)
            for a in excluded] or ["- none"]
    ran = {a.variant.variant_id for a in rows}
    not_run = [label for vid, label in (planned or ()) if vid not in ran]
    out += ["", "## Not run", ""]
    out += [f"- **{label}**: no pass has run yet; not judged" for label in not_run] or \
        ["- none: every declared configuration has at least one pass"]
    unpriced = [a for a in rows if a.unpriced]
    if unpriced and not eligible:
        names = ", ".join(a.variant.label for a in unpriced)
        decision = [f"No package declared (the campaign file has no [cost] section), so no committed budget "
                    f"can be compared and none is claimed. {len(unpriced)} configuration(s) pass the quality, "
                    f"memory and failure checks: {names}. Add [cost] (gpu, days, lots) to price them."]
    else:
        decision = _decision(eligible, exclusion_counts(rows), deliverables, deadline_at, len(not_run))
    if not_run:
        decision = [f"**Not a decision over every declared configuration:** {len(not_run)} of "
                    f"{len(not_run) + len(rows)} have not run ({', '.join(not_run)}).", ""] + decision
    served = serving_decision(rows, scenario)
    out += ["", "## Decision", ""] + decision + served + hardware_lines(rows)
    return "\n".join(out) + "\n"


def hardware_checks(summary: Sequence[VariantSummary], pricing: dict,
                    measured: Mapping[str, Measured]) -> dict[str, HardwareCheck | None]:
    """{variant_id: its hardware check} as :func:`decision_note` makes it from the same ``pricing`` and
    ``measured`` (None for a configuration not priced): what report.html's chart marks read. Raises
    PricingError as decision_note does."""
    catalogs: dict[str | None, Catalog] = {}
    return {v.variant_id: _assess(v, NotePricing(**pricing), None, DEFAULT_DELIVERABLES, catalogs,
                                  measured.get(v.variant_id, Measured())).hardware for v in summary}


HARDWARE_DIFFERS = "**Measured hardware differs from the priced package.**"


def hardware_lines(rows: Sequence[Assessment]) -> list[str]:
    """The Decision section's closing lines: one per distinct mismatch between the hardware measured
    and the package priced (lab.cost.hardware.HardwareCheck.line), naming the configurations when it
    is not every one; [] when every priced configuration was measured on its package's hardware."""
    groups: dict[str, list[str]] = {}
    for a in rows:
        if a.hardware is not None and (line := a.hardware.line()):
            groups.setdefault(line, []).append(a.variant.label)
    return [x for line, labels in groups.items()
            for x in ("", f"{HARDWARE_DIFFERS} {line}" + ("" if len(labels) == len(rows) else
                                                           f" (configurations: {'; '.join(labels)})"))]


def agreement_rule_lines(records: Sequence[VariantSummary]) -> list[str]:
    """The note's agreement-rule line (lab.orchestration.agreement: the rule, when a pass was checked)
    and its quality-rule line when passes are judged by agreement ([quality] metric = "agreement",
    lab.orchestration.config.AGREEMENT): what is measured, and that the reference variant's own
    figure holds by definition (its first valid pass is the reference); [] for neither."""
    checked = next((v for v in records if v.agreement_passes_checked), None)
    rule = [] if checked is None else [
        f"- **Agreement rule.** Every pass is compared id by id with the reference variant's first valid pass "
        f"(the reference variant's later passes too): {differing_share(checked.agreement_max_differing or 0.0)} of the "
        "ids may differ from it" + ("" if checked.agreement_min_cosine is None else
                            f" (a vector differs below cosine {checked.agreement_min_cosine:g})")
        + ", locked with the protocol; a pass beyond it is rejected (not the same ML result) and its "
        "configuration is judged on its other passes. Each configuration's figures are in its section."]
    judged = next((v for v in records if v.metric_name == AGREEMENT), None)
    if judged is None:
        return rule
    return rule + [f"- **Quality rule.** Agreement with the reference variant ({judged.agreement_rule or 'per id'}), "
            f"judged against the locked threshold {judged.threshold:g}: every pass is compared id by id with the "
            "reference variant's first valid pass. That pass agrees with itself by definition, so the reference "
            "variant's figure says only how its later passes repeat its first one; it measures sameness, not "
            "correctness: no reference answers were compared."]


def _assess(v: VariantSummary, p: NotePricing, deadline_at: datetime | None, deliverables: int,
            catalogs: dict, measured: Measured | None = None) -> Assessment:
    path = p.catalog_path
    if path not in catalogs:
        catalogs[path] = load_catalog(path)
    catalog = catalogs[path]
    gpu, days, lots = p.gpu, p.days, p.lots
    q, missing = None, ""
    if gpu is None or days is None:
        missing = f"{NO_PACKAGE} (the campaign file has no [cost] section): nothing priced"
    else:
        days = str(days).strip()
        if not days.isdigit() or int(days) not in PACKAGE_HOURS:
            raise PricingError(f"days {days!r} not offered: packages are 3, 7 or 30 days")
        days = int(days)
        if catalog.row(str(gpu).strip().lower(), days) is None:
            missing = f"{gpu} {days}-day package: not in catalog"
        else:
            q = quote(catalog, gpu, days, lots)
    window = None
    start, end = p.window_start, p.window_end
    if start or end:
        if not (start and end):
            raise PricingError("give both window_start and window_end for the campaign window")
        window = parse_window(start, end, p.tz)
    cov = coverage(window, days, q.price_per_lot if q else None,  # type: ignore[arg-type]  # days as given
                   q.lots if q else 1) if window is not None and days is not None else None
    accepted = min(deliverables, 1) if v.accepted_passes >= 1 else 0
    per_corpus = cost_per_validated_corpus(q.committed_budget, accepted) if q else None
    why = []
    if v.served_skipped and not v.successes and not v.failures:  # never run: no quality or failure to judge
        why.append(f"search: {v.quality_verdict}")
    else:
        if accepted == 0:
            why.append(f"quality: {v.quality_verdict or 'no accepted pass'}")
        if not v.feasible:
            why.append(f"memory: {v.infeasible_reason or 'not feasible'}")
        if v.successes == 0:
            why.append(f"failures: no successful pass ({v.failures} failed)")
    if deadline_at is not None and window is not None and window.end > deadline_at:
        why.append(f"deadline: the campaign window ends {window.end.isoformat()}, after the "
                   f"deadline {deadline_at.isoformat()}")
    if cov is not None and window is not None and not cov.covers:
        extra = money(cov.extra_cost, q.currency) if q else "not in catalog"
        why.append(f"calendar: the {cov.days}-day package ({cov.package_hours} h) does not cover "
                   f"the {format_hours(window)} h campaign window; {cov.extra_periods} extra "
                   f"period(s) would be needed ({extra}), not assumed")
    if q is None and not missing.startswith(NO_PACKAGE):
        why.append(f"price: {missing}; committed budget unknown")
    hardware = None if q is None or measured is None else \
        HardwareCheck(measured, Priced(q.gpu, q.gpu_name, q.cards_per_lot))
    return Assessment(v, q, missing, window, cov, accepted, per_corpus, tuple(why), hardware, catalog)


def _s(value) -> str:
    return "not measured" if value is None else f"{value:.3f} s"


def _verdict_with_count(v: VariantSummary) -> str:
    """The quality verdict, with the number of accepted passes unless it already says it
    ("accepted (2 of 2 passes)" from lab.report.summary)."""
    verdict = v.quality_verdict or "none"
    return verdict if verdict.startswith("accepted (") else f"{verdict} ({v.accepted_passes} accepted pass(es))"


def _config_section(a: Assessment, deliverables: int, text_cut: str = "") -> list[str]:
    v, q = a.variant, a.quote
    durations = ", ".join(f"{d:.3f}" for d in v.durations_s) or "none"
    lines = [f"### {v.label} (`{v.variant_id}`, series {v.series or '-'})", "",
             f"- Quality verdict: {_verdict_with_count(v)}",
             f"- Q{v.quality_text()[1:]}",  # "quality: ..." as a sentence of the note
             f"- A{v.agreement_rule_text()[1:]}",
             f"- Raw durations, measured window, passes ok (s): {durations}"
             + (f". **Not steady-state:** {v.durations_caveat()}" if v.recompiled_passes else ""),
             *(["- **Starved passes** (lab.passes.conditions.starvation): "
                + "; ".join(f"`{x.pass_id}`: {x.reason}" for x in v.starved_passes)
                + ". These durations measure a host short of CPU, not the configuration"]
               if v.starved_passes else []),
             f"- Median / min / max: {_s(v.median_s)} / {_s(v.min_s)} / "
             f"{_s(v.max_s)}; successes {v.successes}, failures "
             f"{v.failures}",
             f"- {v.utilization_text()}"]
    if v.does_not_distinguish:
        undecided = [p.verdict for p in v.pairs if not p.verdict.distinguished]
        too_few = bool(undecided) and all(p.reason.startswith(TOO_FEW) for p in undecided)
        lines.append(("- Too few passes to tell the variants apart (durations_s holds "
                      f"{len(v.durations_s)}): the series does not distinguish them" if too_few else
                      "- Spread within variants is comparable to the gap between medians: "
                      "the series does not distinguish them")
                     + (f"; {v.starved_caveat()}" if v.starved_passes else ""))
    for pair in v.pairs:
        lines.append(f"  - against `{pair.other}`: "
                     f"{'distinguished' if pair.verdict.distinguished else 'not distinguished'} "
                     f"({pair.verdict.reason})")
    lines += _truncation_lines(v, text_cut)
    lines.append("- Memory: feasible" if v.memory_verdict() == "feasible"
                 else f"- Memory: {v.memory_verdict()} ({v.infeasible_reason or 'no reason given'})")
    if a.window is None:
        lines.append("- Campaign window: not given")
    else:
        lines.append(f"- Campaign window: {a.window.start.isoformat()} to "
                     f"{a.window.end.isoformat()} = {format_hours(a.window)} h (real elapsed time)")
    if q is None:
        lines.append(f"- Package committed: {a.price_missing}")
    else:
        gpus = f"{q.total_cards} GPU" + ("s" if q.total_cards != 1 else "")
        lines.append(f"- Package committed: {q.gpu_name} ({q.gpu}), {q.days} days "
                     f"({q.package_hours} h) x {q.lots} lot(s) of {q.cards_per_lot} card(s) = "
                     f"{gpus}; {money(q.price_per_lot, q.currency)} per lot, committed budget "
                     f"{money(q.committed_budget, q.currency)} (catalog version "
                     f"{q.catalog_version})")
    lines += _cards_lines(v, q)
    if a.coverage is not None:
        c = a.coverage
        lines.append(f"- Window vs package: covered by one {c.days}-day package" if c.covers else
                     f"- Window vs package: needs {c.periods_needed} periods, "
                     f"{c.extra_periods} extra (not included in the committed budget)")
    lines.append(f"- Accepted deliverables: {a.accepted_deliverables} of {deliverables} "
                 f"(repetitions are not corpora)")
    per = (a.price_missing if q is None else
           money(a.cost_per_validated_corpus, q.currency) if a.cost_per_validated_corpus
           is not None else UNDEFINED)
    if v.request_rate is not None:
        return lines + [*serving_lines(v), f"- Cost per validated corpus: {NOT_SERVED_FIGURE}",
                        *_generation_lines(a)[:1], ""]
    lines += [f"- Cost per validated corpus: {per}", *_generation_lines(a), ""]
    return lines


NOT_SERVED_FIGURE = ("not a server pass's figure (its window is set by the arrival rate, not by the configuration); "
                     "the cost of serving a traffic (lots for a peak rate, cost per million requests) is in the "
                     "Decision's serving part")


def serving_lines(v: VariantSummary) -> list[str]:
    """A server variant's figures (medians over its passes ok; lab.report.served_cells) and how
    many of them held the locked objective."""
    def s(x: float | None, unit: str) -> str:
        return "not measured" if x is None else f"{x:.4g} {unit}"

    return [f"- Served at {v.request_rate:g} req/s offered: achieved {s(v.served_achieved_rate_median, 'req/s')}, "
            f"goodput {s(v.served_goodput_median, 'req/s')}; p99 TTFT {s(v.served_ttft_p99_s_median, 's')}, "
            f"TPOT {s(v.served_tpot_p99_s_median, 's')}, end-to-end {s(v.served_e2el_p99_s_median, 's')}; "
            f"load generator lag p99 {s(v.served_lag_p99_s_median, 's')} (medians over passes ok)",
            f"- Latency objective: held in {v.served_holds} of {v.successes} pass(es) ok"]


def served_spread(v: VariantSummary) -> str:
    """'spread over its 3 passes ok: p99 TTFT median 0.040 s, worst 0.046 s; ...; achieved rate median
    3.98, lowest 3.95 req/s': a server variant's medians beside its worst pass (VariantSummary)."""
    names = (("TTFT", v.served_ttft_p99_s_median, v.served_ttft_p99_s_max),
             ("TPOT", v.served_tpot_p99_s_median, v.served_tpot_p99_s_max),
             ("end-to-end", v.served_e2el_p99_s_median, v.served_e2el_p99_s_max))
    parts = [f"p99 {name} median {m:.3f} s, worst {w:.3f} s" for name, m, w in names
             if m is not None and w is not None]
    if v.served_achieved_rate_median is not None and v.served_achieved_rate_min is not None:
        parts.append(f"achieved rate median {v.served_achieved_rate_median:.3g}, lowest "
                     f"{v.served_achieved_rate_min:.3g} req/s")
    return f"spread over its {v.successes} passes ok: " + "; ".join(parts)


def serving_decision(rows: Sequence[Assessment], scenario=None) -> list[str]:
    """The Decision's serving part: per server configuration (its variants but for the rate), the
    highest declared rate at which every pass ok held the objective and was accepted (the same ML
    result), with how many passes that rests on; a configuration with none says so. With the
    traffic the campaign declares (``scenario``: lab.inputs.scenario.ScenarioSection ``peak_rate``,
    ``average_rate``) and a package quoted from the configuration's catalog: the lots that peak needs
    (lab.cost.sizing.serving_lots, one server per card at the rate that held), their committed
    budget (lab.cost.forfaits.quote), and the cost per million requests, and per million output
    tokens, at the average traffic over the package's hours (lab.cost.sizing.served_requests). []
    for an offline campaign."""
    configs = server_configs(rows, lambda a: a.variant)
    if not configs:
        return []
    out = ["", "**Serving: the highest declared request rate that holds the latency objective.** The offline "
           "ranking above does not rank server passes (their windows are set by the rates)."]
    for config in configs:
        tried = config.tried()
        if config.holding is None:
            out.append(f"- {config.label}: no declared rate holds it (rates tried: {tried})")
            continue
        b = config.holding.variant
        line = (f"- {config.label}: **{b.request_rate:g} req/s** ({b.served_holds} of {b.successes} pass(es) held it "
                f"and were accepted; rates tried: {tried})"
                + ("; too few passes to state its spread" if b.successes < 2 else f"; {served_spread(b)}"))
        out.append(line)
        out += _serving_cost(config.holding, scenario)
    return out


def _serving_cost(best: Assessment, scenario) -> list[str]:
    """The lines pricing the declared traffic at ``best``'s holding rate (see serving_decision)."""
    q, v, catalog = best.quote, best.variant, best.catalog
    peak = getattr(scenario, "peak_rate", None)
    average = getattr(scenario, "average_rate", None)
    if peak is None:
        return ["  - Sizing: declare [scenario] peak_rate (and average_rate) to size the lots and price the traffic"]
    if q is None or catalog is None:
        return [f"  - Sizing: {best.price_missing or NO_PACKAGE}: the lots for {peak:g} req/s are not priced"]
    assert v.request_rate is not None  # a server variant
    lots = serving_lots(peak, v.request_rate, q.cards_per_lot)
    sized = quote(catalog, q.gpu, q.days, lots)
    clause = rests_on([v.basis(best.hardware)])
    out = [f"  - Peak {peak:g} req/s: {lots} lot(s) of {q.cards_per_lot} {q.gpu_name} card(s), one server per "
           f"card at {v.request_rate:g} req/s each; {q.days}-day package, committed budget "
           f"{money(sized.committed_budget, sized.currency)}" + (f"; {clause}" if clause else "")]
    if average is None:
        return out + ["  - Cost per million requests: declare [scenario] average_rate (req/s) to derive it"]
    requests = served_requests(average, sized.package_hours)
    per_m = sized.committed_budget / Decimal(str(requests)) * 1_000_000
    tokens = v.output_tokens / v.items_total if v.output_tokens and v.items_total else None
    tok = ("" if tokens is None else
           f", {money(per_m / Decimal(str(tokens)), sized.currency)} per million output tokens "
           f"({tokens:.1f} output tokens per request, measured)")
    return out + [f"  - At an average {average:g} req/s ({requests:,.0f} requests in the package's "
                  f"{sized.package_hours} h): {money(per_m, sized.currency)} per million requests{tok}"]


def _generation_lines(a: Assessment) -> list[str]:
    """A generation variant (output tokens counted): its output tokens and output tokens per
    second, and the cost per item and per million output tokens of the committed package at the
    load it processes: its hours x lots at the slowest pass's throughput (lab.cost.sizing.
    capacity_items, set-up not deducted: the summary does not hold it), the corpus's output tokens
    per item times that load, divided by :func:`generation_costs` as compare divides at the user's
    load. Never the package over one corpus's output tokens: that figure ignores the throughput.
    No line for the other kinds."""
    v, q = a.variant, a.quote
    if v.output_tokens is None:
        return []
    lines = [f"- Output tokens: {output_tokens_text(v.output_tokens, v.items_total, v.output_tokens_per_s_median)}"]
    slowest = v.items_total / max(v.durations_s) if v.items_total and v.durations_s and max(v.durations_s) > 0 \
        else None
    load = capacity_items(q.package_hours, q.lots, slowest) if q is not None else 0
    tokens = round(v.output_tokens * load / v.items_total) if v.items_total else 0
    if q is None or a.cost_per_validated_corpus is None or not load or not tokens:
        why = (a.price_missing if q is None else UNDEFINED if a.cost_per_validated_corpus is None
               else "no item, output token or measured window counted")
        return lines + [f"- Cost per item and per million output tokens: {why}"]
    assert slowest is not None  # load > 0
    return lines + [f"- {generation_cost_text(q.committed_budget, load, tokens, q.currency)} (at the package's "
                    f"load: {load} items, {tokens} output tokens, in {q.package_hours} h x {q.lots} lot(s) at the "
                    f"slowest pass's {slowest:.2f} items/s, set-up not deducted; a smaller load costs more per "
                    "item: `compare --load ITEMS` sizes and prices your own)"]


def output_tokens_text(output_tokens: int, items: int | None, per_s_median: float | None) -> str:
    """'110 over 20 items; 70.0 output tokens/s (median of passes ok)': a generation variant's
    output tokens over the corpus's ``items`` and its median output tokens per second."""
    return (f"{output_tokens} over {items} items; "
            + (f"{per_s_median:.1f} output tokens/s (median of passes ok)" if per_s_median is not None
               else "output tokens/s not measured"))


def generation_costs(amount: Decimal, items: int, output_tokens: int) -> tuple[Decimal, Decimal]:
    """(cost per item, cost per million output tokens) of ``amount`` (money, e.g. a cost per
    validated corpus or a committed budget) spread over ``items`` items (> 0) that generated
    ``output_tokens`` output tokens (> 0): the one division (lab.passes.tasks.text_metrics.
    TokenCounts), the cost per item rounded to 6 decimals. Raises MetricInputError for a count <= 0."""
    from lab.passes.tasks.text_metrics import TokenCounts

    counts = TokenCounts(items=items, input_tokens=0, output_tokens=output_tokens)
    return (Decimal(counts.per_item(amount)).quantize(Decimal("0.000001")),
            Decimal(counts.per_million_output_tokens(amount)))


def generation_cost_text(amount: Decimal, items: int, output_tokens: int, currency: str) -> str:
    """'Cost per item: 0.110000 USD; per million output tokens: 19905.90 USD' (:func:`generation_costs`)."""
    per_item, per_million = generation_costs(amount, items, output_tokens)
    return f"Cost per item: {per_item} {currency}; per million output tokens: {money(per_million, currency)}"


def _cards_lines(v: VariantSummary, q: Quote | None) -> list[str]:
    """Cards measured per pass vs cards in the priced package (SPEC 5: never assume that a
    lot scales beyond what was measured). No line when the summary does not say."""
    cards = v.cards
    if cards is None:
        return []
    seen = v.cards_observed
    measured = f"- Cards: measured on {cards} card(s) per pass" + (
        f" ({seen} observed in the raw table)" if seen is not None and seen != cards else "")
    if q is None:
        return [measured + "; cards in the priced lot unknown (no catalog row)"]
    total = q.total_cards
    line = f"{measured}; the priced package holds {q.cards_per_lot} card(s) per lot x {q.lots} lot(s) = {total}"
    if cards < total:
        line += (f". These durations describe {cards} of the {total} cards paid for; how the other "
                 f"{total - cards} would add is not measured and not assumed")
    elif cards > total:
        line += ". More cards were measured than the package holds: these durations do not describe it"
    else:
        line += ": the measurement covers every card paid for"
    return [line]


def _truncation_lines(v: VariantSummary, text_cut: str = "") -> list[str]:
    """Share of items truncated per length bucket (from the pass predictions), at the variant's
    max_length or at ``text_cut`` when the task cuts the text itself (decision_note's campaign)."""
    shares = (("short", v.truncated_short), ("medium", v.truncated_medium), ("long", v.truncated_long))
    if all(x is None for _, x in shares):
        return []
    text = ", ".join(f"{b} {x:.0%}" for b, x in shares if x is not None)
    out = [f"- Items whose text was cut to {text_cut}: {text}" if text_cut else
           f"- Items truncated at max_length {v.max_length or '?'}: {text}"]
    if v.truncated_long:
        out.append(f"- The long bucket was judged on truncated text ({v.truncated_long:.0%} of its items lost "
                   "tokens): its metric says nothing about the full documents")
    return out


def distinguished(a: VariantSummary, b: VariantSummary) -> bool:
    """Whether the measurements tell ``a``'s durations from ``b``'s
    (:func:`lab.report.distinguish.compare_durations`): the verdict stored in ``a.pairs`` for
    two variants of one series, computed the same way for variants of different series (a
    motivation comparing medians across series rests on that pair too)."""
    pair = next((p for p in a.pairs if p.other == b.variant_id), None)
    if pair is not None:
        return pair.verdict.distinguished
    return compare_durations(list(a.durations_s), list(b.durations_s)).distinguished


def _decision(eligible: list[Assessment], counts: str, deliverables: int,
              deadline_at: datetime | None, not_run: int = 0) -> list[str]:
    """The note's Decision section. ``counts``: how many configurations are excluded, per kind
    (lab.report.exclusions.exclusion_counts, the line ``iteralab compare`` prints), said when none
    is eligible. The chosen line and the comparison with the next one end with the caveats of the
    figures they rest on (lab.report.caveats; each configuration's hardware check among them)."""
    if not eligible:
        return [f"No configuration is eligible ({counts}; see the exclusions above): no package should be "
                "committed on this evidence."]
    def basis(a: Assessment) -> Basis:
        return a.variant.basis(a.hardware)

    best = eligible[0]
    v, q = best.variant, best.quote
    assert q is not None  # eligible configurations are quoted
    lines = [f"**Chosen: {v.label}** (`{v.variant_id}`), {q.days}-day package x {q.lots} "
             f"lot(s) of {q.gpu_name}, committed budget {money(q.committed_budget, q.currency)}"
             + (f"; {cav}." if (cav := rests_on([basis(best)])) else "."),
             ""]
    rest = deliverables - best.accepted_deliverables
    load = (f"**Load covered.** {best.accepted_deliverables} of {deliverables} announced "
            "corpus(es) validated by every check (ids, format, coverage, metric)")
    lines.append(load + (f"; the other {rest} are not validated yet and no cost per corpus "
                         "is claimed for them." if rest else "."))
    why = [f"{len(eligible)} eligible configuration(s)"]
    cited = [v]  # configurations whose durations the motivation uses
    if len(eligible) == 1 and not_run:
        why.append(f"it is the only one of the configurations run so far that passes quality, memory, "
                   f"failure, calendar and price checks; {not_run} declared configuration(s) have not run")
    elif len(eligible) == 1:
        why.append("it is the only configuration that passes quality, memory, failure, "
                   "calendar and price checks")
    else:
        nxt = eligible[1]
        (b0, f0, m0), (b1, f1, m1) = best.sort_key(), nxt.sort_key()
        name = nxt.variant.label
        if b0 < b1:
            pair = rests_on([basis(best), basis(nxt)], distinguished(v, nxt.variant))
            why.append(f"lowest committed budget ({money(b0, q.currency)}; next: {name} at "
                       f"{money(b1, q.currency)}{'; ' + pair if pair else ''})")
        elif f0 < f1:
            why.append(f"same committed budget as {name}; fewer failures ({f0} vs {f1})")
        elif m0 < m1:
            why.append(f"same committed budget and failures as {name}; lower median "
                       f"({m0:.3f} s vs {m1:.3f} s)")
            cited.append(nxt.variant)
            if not distinguished(v, nxt.variant):
                why.append("but the measurements do not distinguish these durations, so the "
                           "median tie-break is not evidence of a faster configuration")
        else:
            why.append(f"tied with {name} on budget, failures and median; listed first")
    fastest = min(eligible, key=lambda a: a.sort_key()[2])
    if fastest is not best and fastest.sort_key()[2] < best.sort_key()[2]:
        fq = fastest.quote
        assert fq is not None
        why.append(f"the fastest eligible one, {fastest.variant.label} (median "
                   f"{_s(fastest.variant.median_s)}), ranks lower on committed budget "
                   f"({money(fq.committed_budget, fq.currency)}) or "
                   f"failures ({fastest.variant.failures})")
        if not distinguished(fastest.variant, v):
            why.append(f"the measurements do not distinguish {fastest.variant.label}'s durations "
                       f"from {v.label}'s, so it is not shown to be faster")
        cited.append(fastest.variant)
    for named in [c for i, c in enumerate(cited) if all(c is not d for d in cited[:i])]:
        if named.starved_passes:
            why.append(f"{named.label}'s durations include {len(named.starved_passes)} starved pass(es) "
                       f"({', '.join(x.pass_id for x in named.starved_passes)}), so its median measures a "
                       "host short of CPU, not the configuration")
        if named.recompiled_passes:
            why.append(f"{named.label}'s durations include recompilation in the measured window, so "
                       "its median is not a steady-state figure")
    if deadline_at is None:
        why.append("no deadline was given")
    elif best.window is None:
        why.append("deadline not checked: no campaign window given")
    else:
        why.append(f"its campaign window ends at the deadline, {deadline_at.isoformat()}"
                   if best.window.end == deadline_at else
                   f"its campaign window ends {best.window.end.isoformat()}, before the "
                   f"deadline {deadline_at.isoformat()}")
    text = "; ".join(why)
    return lines + ["", f"**Motivation.** {text[0].upper()}{text[1:]}."]
