"""Server archives across rentals (issue 36): which package holds the declared traffic at the
latency objective for the least committed budget, and the traffic at which that changes.

Each archive's server configurations (lab.report.summary.server_configs: the highest declared
rate at which every pass ok held the locked objective and was accepted) are sized for the peak
rate the campaign's [scenario] declares (lab.cost.sizing.serving_lots: one server per card at that
rate), quoted from the comparison's catalog for the archive's own package duration
(lab.cost.forfaits.quote), and priced per million requests at the declared average rate over the
package's hours (lab.cost.sizing.served_requests). The lowest committed budget is chosen (then
fewer lots, then the higher holding rate). Budgets are steps (whole lots), so the break-even
traffic is a list of peak ranges, each with the cheaper package (:func:`cheaper_by_peak`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from decimal import Decimal

from lab.compare.evidence import Evidence
from lab.compare.projection import too_short
from lab.cost.forfaits import Catalog, PricingError, Quote, money, quote
from lab.cost.hardware import HardwareCheck, Priced
from lab.cost.sizing import served_requests, serving_lots
from lab.orchestration.agreement import AgreementRule, MapAgreement, judge_maps, judge_vectors
from lab.passes.events import PassStatus
from lab.report.caveats import Basis, rests_on
from lab.report.summary import VariantSummary, rates_tried, server_configs

MAX_RANGES = 6
"""Peak ranges a break-even line names before it says how many more there are."""


@dataclass(frozen=True)
class ServedOffer:
    """One host's server configuration sized for the declared peak. ``variant``: its summary at the
    highest holding rate (None: no declared rate holds); ``quote``: the lots the peak needs on the
    archive's package duration (None: not sized, ``why`` says why); ``per_million_requests`` and
    ``per_million_output_tokens`` at the declared average traffic (None without it)."""
    host: str
    archive: str
    hardware: str
    config: str
    rates: tuple[float, ...]
    variant: VariantSummary | None
    skipped: tuple[float, ...]
    """Of ``rates``, those a rate search never ran (lab.report.summary.ServerConfig.skipped)."""
    partly: tuple[tuple[float, int], ...]
    """(rate, repetitions skipped) of those it ran in some repetitions only (ServerConfig.partly)."""
    quote: Quote | None
    why: str
    basis: Basis | None = None
    per_million_requests: Decimal | None = None
    per_million_output_tokens: Decimal | None = None
    too_short: str = ""
    """'' or why its holding rate's passes fail the projection rule ([timing] min_window_s,
    min_accepted_passes; lab.compare.projection.too_short): not ranked unless --allow-short."""

    @property
    def key(self) -> str:
        return f"{self.host} {self.config}"

    @property
    def capacity_per_lot(self) -> float | None:
        """Requests per second one lot holds at the objective: the holding rate x cards per lot."""
        if self.variant is None or self.variant.request_rate is None or self.quote is None:
            return None
        return self.variant.request_rate * self.quote.cards_per_lot

    def line(self) -> str:
        """The offer as decision.md lists it."""
        tried = rates_tried(self.rates, self.skipped, self.partly)
        head = f"{self.key} ({self.archive}, {self.hardware})"
        if self.variant is None:
            return f"{head}: no declared rate holds the objective (rates tried: {tried})"
        v = self.variant
        held = (f"holds {v.request_rate:g} req/s per card ({v.served_holds} of {v.successes} pass(es) held it and "
                f"were accepted; rates tried: {tried})")
        if self.quote is None:
            return f"{head}: {held}; not sized: {self.why}"
        q = self.quote
        text = (f"{head}: {held}; {q.lots} lot(s) of {q.cards_per_lot} {q.gpu_name} card(s), {q.days}-day package, "
                f"committed budget {money(q.committed_budget, q.currency)}")
        if self.per_million_requests is not None:
            text += f", {money(self.per_million_requests, q.currency)} per million requests"
        if self.per_million_output_tokens is not None:
            text += f", {money(self.per_million_output_tokens, q.currency)} per million output tokens"
        if self.why:
            text += f"; not ranked: {self.why}"
        elif self.too_short and not (self.basis and self.basis.too_short):
            text += f"; not ranked: {self.too_short} (--allow-short ranks it, named in every output)"
        clause = rests_on([self.basis]) if self.basis is not None else ""
        return text + (f"; {clause}" if clause else "")


SERVING_COLUMNS = ("host", "archive", "hardware", "config", "rates_tried", "rates_skipped", "holding_rate",
                   "holding_passes",
                   "passes_ok", "achieved_rate_median", "goodput_median", "ttft_p99_s_median",
                   "tpot_p99_s_median", "e2el_p99_s_median", "lag_p99_s_median", "peak_rate", "average_rate",
                   "objective", "package_days", "package_lots", "cards_per_lot", "committed_budget", "currency",
                   "per_million_requests", "per_million_output_tokens", "too_short", "why_not_sized", "chosen")
"""serving.csv (beside compare.csv for server archives): one row per host and server configuration:
rates tried and those a rate search skipped in every repetition (req/s, space-separated), the
highest holding one (req/s; empty: none holds) with how many passes held it of its passes ok and
its served medians (req/s, s), the declared traffic
(req/s), the lots sized for the peak with their committed budget, the costs per million at the
average traffic, why it is not ranked or not sized, and whether it is the serving decision."""


@dataclass(frozen=True)
class ServingComparison:
    """The server question across the archives: the declared traffic (req/s; None: not declared),
    every offer, the chosen one (None: none is sized, priced and ranked), the break-even lines
    against the cheapest offer of each other host, and the served outputs compared across hosts
    (:func:`served_agreements`)."""
    peak_rate: float | None
    average_rate: float | None
    objective: str
    offers: tuple[ServedOffer, ...]
    chosen: ServedOffer | None
    break_even: tuple[str, ...]
    agreements: tuple[ServedAgreement, ...]

    def rows(self) -> list[dict]:
        """serving.csv's rows (SERVING_COLUMNS), one per offer, in the order decision.md lists them."""
        out = []
        for o in self.offers:
            v, q = o.variant, o.quote
            out.append({
                "host": o.host, "archive": o.archive, "hardware": o.hardware, "config": o.config,
                "rates_tried": " ".join(f"{r:g}" for r in o.rates if r not in o.skipped),
                "rates_skipped": " ".join(f"{r:g}" for r in o.skipped),
                "holding_rate": v.request_rate if v else None, "holding_passes": v.served_holds if v else None,
                "passes_ok": v.successes if v else None,
                "achieved_rate_median": v.served_achieved_rate_median if v else None,
                "goodput_median": v.served_goodput_median if v else None,
                "ttft_p99_s_median": v.served_ttft_p99_s_median if v else None,
                "tpot_p99_s_median": v.served_tpot_p99_s_median if v else None,
                "e2el_p99_s_median": v.served_e2el_p99_s_median if v else None,
                "lag_p99_s_median": v.served_lag_p99_s_median if v else None,
                "peak_rate": self.peak_rate, "average_rate": self.average_rate, "objective": self.objective,
                "package_days": q.days if q else None, "package_lots": q.lots if q else None,
                "cards_per_lot": q.cards_per_lot if q else None,
                "committed_budget": float(q.committed_budget) if q else None, "currency": q.currency if q else None,
                "per_million_requests": None if o.per_million_requests is None else float(o.per_million_requests),
                "per_million_output_tokens": (None if o.per_million_output_tokens is None
                                              else float(o.per_million_output_tokens)),
                "too_short": o.too_short, "why_not_sized": o.why, "chosen": o is self.chosen})
        return out

    def lines(self) -> list[str]:
        """decision.md's serving section (without its heading)."""
        peak = "not declared" if self.peak_rate is None else f"{self.peak_rate:g} req/s"
        average = "not declared" if self.average_rate is None else f"{self.average_rate:g} req/s"
        out = [f"Traffic declared in the campaign's [scenario]: peak {peak}, average {average}; objective "
               f"{self.objective}. Per host and server configuration: the highest declared rate at which every "
               "pass held the objective and was accepted (the same ML result as its host's reference), the lots "
               "the peak needs at one server per card at that rate, their committed budget from the "
               "comparison's catalog for the archive's package duration, and the cost per million requests "
               "at the average traffic over the package's hours.", ""]
        c = self.chosen
        if c is not None and c.quote is not None:
            q = c.quote
            clause = rests_on([c.basis]) if c.basis is not None else ""
            out += [f"**Serving decision: host {c.host} ({c.hardware}, archive {c.archive}), {c.config}: "
                    f"{q.lots} lot(s) of {q.gpu_name} for a peak of {self.peak_rate:g} req/s, {q.days}-day package, "
                    f"committed budget {money(q.committed_budget, q.currency)}.**"
                    + (f" {clause[0].upper()}{clause[1:]}." if clause else ""), ""]
        else:
            short = [o for o in self.offers if o.quote is not None and not o.why and o.too_short]
            why = ("declare [scenario] peak_rate (and average_rate) in the campaign file to size and price the "
                   "traffic" if self.peak_rate is None else
                   f"{len(short)} sized configuration(s) rest on passes too short to project (each says why "
                   "below): pass --allow-short to rank them anyway, named in every output, or run longer "
                   "passes (more requests per pass)" if short else
                   "no server configuration holds the objective and is sized from a package of the catalog "
                   "within --max-lots lots")
            out += [f"**Serving decision: none.** {why[0].upper()}{why[1:]}.", ""]
        out += [f"- {o.line()}" for o in self.offers]
        out += [f"- {line}" for line in self.break_even]
        out += [f"- Served outputs, {x.text()}" for x in self.agreements] or [
            "- Served outputs: no server variant's outputs are in two archives to compare"]
        return out


@dataclass(frozen=True)
class ServedAgreement:
    """One server variant that two hosts ran: its served outputs (each host's first accepted pass,
    lab.compare.evidence) compared per id by the locked agreement rule."""
    variant: str
    variant_id: str
    a: str
    b: str
    result: MapAgreement

    def text(self) -> str:
        """'batch 1, ..., 2 req/s: A vs B: 24 of 24 ids agree: the same result'."""
        c, r = self.result.check, self.result
        only = "".join(f"; {n} id(s) only on {h}" for n, h in ((r.only_a, self.a), (r.only_b, self.b)) if n)
        cosine = ("" if c.lowest_cosine is None else
                  f" (cosine median {r.cosine_median:.6f}, lowest {c.lowest_cosine:.6f} at {c.lowest_id}, "
                  f"rule >= {c.rule.min_cosine:g})")
        return (f"{self.variant}: {self.a} vs {self.b}: {c.ids - c.differing} of {c.ids} ids agree{cosine}{only}: "
                + ("the same result" if r.same else "NOT the same result"))


def server_summaries(ev: Evidence) -> list[VariantSummary]:
    """The archive's server variants' summaries (typed), in its summary's order."""
    return [v for v in ev.variants if v.request_rate is not None]


def served_variant_ids(ev: Evidence) -> set[str]:
    """Ids of the archive's server variants: compared here, never projected as offline ones."""
    return {v.variant_id for v in server_summaries(ev)}


def served_agreements(evidence: list[Evidence], tags: list[str], rule: AgreementRule,
                      normalisation: str | None) -> list[ServedAgreement]:
    """Per pair of hosts and server variant both kept outputs of: the per-id agreement of their
    served outputs by ``rule``: embedding vectors by per-id cosine (lab.orchestration.agreement.
    judge_vectors), labels and generated texts by judge_maps, the generation kind's outputs compared
    after ``normalisation``."""
    out = []
    for i, ea in enumerate(evidence):
        for j in range(i + 1, len(evidence)):
            eb = evidence[j]
            for v in server_summaries(ea):
                vid = v.variant_id
                if vid in ea.vectors and vid in eb.vectors:
                    result = judge_vectors(ea.vectors[vid], eb.vectors[vid], rule)
                elif vid in ea.predictions and vid in eb.predictions:
                    result = judge_maps(ea.predictions[vid], eb.predictions[vid], rule, normalisation)
                else:
                    continue
                out.append(ServedAgreement(v.label, vid, tags[i], tags[j], result))
    return out


def objective_text(scenario) -> str:
    """'TTFT p99 <= 1 s, TPOT p99 <= 0.25 s for 90 % of requests' from a server ScenarioSection."""
    names = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "end-to-end latency"}
    bounds = ", ".join(f"{names[m]} p{p:g} <= {b:g} s" for m, p, b in scenario.bounds())
    return f"{bounds} for {scenario.share * 100:g} % of requests"


def offers_of(ev: Evidence, host: str, catalog: Catalog, peak: float | None,
              average: float | None, allow_short: bool = False, max_lots: int = 8) -> list[ServedOffer]:
    """Every server configuration of ``ev`` as an offer (see the module docstring). A configuration
    measured on another GPU than its package, or on more cards, is listed but not ranked (its rate
    is not that package's); one measured on CPU is ranked with the caveat, as offline passes are;
    one whose holding rate rests on passes too short for the projection rule is ranked only with
    ``allow_short`` (then its caveat says so), as compare treats offline configurations; one whose
    peak needs more than ``max_lots`` lots (compare's --max-lots) is listed, not ranked."""
    out = []
    for config in server_configs(server_summaries(ev), lambda v: v):
        v = config.holding
        base = (host, ev.name, ev.hardware, config.label, config.rates, v, config.skipped, config.partly)
        if v is None:
            out.append(ServedOffer(*base, quote=None, why="no declared rate holds the objective"))
            continue
        cost, gpu = ev.cost, ev.gpu
        if cost is None or gpu is None:
            out.append(ServedOffer(*base, quote=None, why="no package declared in the archive's [cost]"))
            continue
        if peak is None:
            out.append(ServedOffer(*base, quote=None, why="no [scenario] peak_rate declared"))
            continue
        try:
            one = quote(catalog, gpu, cost.days, 1)
            assert v.request_rate is not None  # a server configuration's summary
            q = quote(catalog, gpu, cost.days, serving_lots(peak, v.request_rate, one.cards_per_lot))
        except PricingError as exc:
            out.append(ServedOffer(*base, quote=None, why=f"the comparison's catalog: {exc}"))
            continue
        measured = ev.measured(v.variant_id)
        check = HardwareCheck(measured, Priced(q.gpu, q.gpu_name, q.cards_per_lot)) if measured.passes else None
        why = (f"{check.caveat} ({q.gpu_name}): its rate is not that package's; measure it on a {q.gpu} lot"
               if check is not None and not check.on_cpu and (check.other_gpu or check.more_cards) else
               f"the peak needs {q.lots} lots, over --max-lots {max_lots}" if q.lots > max_lots else "")
        short = served_too_short(ev, v)
        basis = dataclasses.replace(v.basis(check), too_short=bool(short) and allow_short)
        per_m = per_tok = None
        if average is not None:
            per_m = q.committed_budget / Decimal(str(served_requests(average, q.package_hours))) * 1_000_000
            if v.output_tokens and v.items_total:
                per_tok = per_m / Decimal(str(v.output_tokens / v.items_total))
        out.append(ServedOffer(*base, quote=q, why=why, basis=basis, per_million_requests=per_m,
                               per_million_output_tokens=per_tok, too_short=short))
    return out


def served_too_short(ev: Evidence, v: VariantSummary) -> str:
    """'' when the server variant ``v``'s accepted passes of at least [timing] min_window_s meet
    min_accepted_passes (the rule offline configurations are projected by); else the reason."""
    timing = ev.config.timing
    ok = [(r, float(r.measured_s)) for r in ev.raw_rows if r.variant_id == v.variant_id
          and r.status == PassStatus.OK and isinstance(r.measured_s, (int, float))]  # windows read as figures
    long_ok = [r for r, window in ok if r.accepted and window >= timing.min_window_s]
    return too_short(len(long_ok), timing.min_accepted_passes, timing.min_window_s,
                     min((window for _, window in ok), default=None))


def ranked(offers: list[ServedOffer], allow_short: bool = False) -> list[ServedOffer]:
    """The offers that are sized, priced and not excluded (too short, unless ``allow_short``),
    cheapest first: committed budget, then fewer lots, then the higher holding rate."""
    ok = [o for o in offers if o.quote is not None and not o.why and (allow_short or not o.too_short)]
    return sorted(ok, key=lambda o: (o.quote.committed_budget, o.quote.lots,  # type: ignore[union-attr]
                                     -(o.capacity_per_lot or 0.0)))


def cheaper_by_peak(a: tuple[Decimal, float], b: tuple[Decimal, float], upto: float) -> list[tuple[float, float, str]]:
    """Which of two packages commits less for each peak traffic in (0, ``upto``] req/s: ``a`` and ``b``
    are (price per lot, requests per second one lot holds). Budgets are price x lots with lots =
    lab.cost.sizing.serving_lots (whole lots), so they are steps that change only at whole multiples
    of a lot's capacity; each range between two such points is judged once. Returns the merged
    ranges [(from, to, "a" | "b" | "same")], from exclusive, to inclusive, in req/s. Raises ValueError
    for a capacity or ``upto`` <= 0."""
    (pa, ca), (pb, cb) = a, b
    if not (ca > 0 and cb > 0 and upto > 0):
        raise ValueError(f"cheaper_by_peak needs capacities and a range > 0, got {ca}, {cb}, {upto}")
    points = {upto}
    for cap in (ca, cb):
        points.update(k * cap for k in range(1, math.floor(upto / cap + 1e-9) + 1))
    out: list[tuple[float, float, str]] = []
    low = 0.0
    for high in sorted(points):
        if high <= low:
            continue
        ba, bb = pa * serving_lots(high, ca, 1), pb * serving_lots(high, cb, 1)
        side = "a" if ba < bb else "b" if bb < ba else "same"
        if out and out[-1][2] == side:
            out[-1] = (out[-1][0], high, side)
        else:
            out.append((low, high, side))
        low = high
    return out


def break_even_line(chosen: ServedOffer, other: ServedOffer, peak: float, max_lots: int) -> str:
    """How the committed budgets of ``chosen`` and ``other`` (both sized) order by peak traffic, up to
    the traffic ``max_lots`` lots of either hold (the smaller), or the declared ``peak`` if more."""
    assert chosen.quote is not None and other.quote is not None
    ca, cb = chosen.capacity_per_lot, other.capacity_per_lot
    assert ca is not None and cb is not None
    upto = max(peak, max_lots * min(ca, cb))  # both within --max-lots lots
    ranges = cheaper_by_peak((chosen.quote.price_per_lot, ca), (other.quote.price_per_lot, cb), upto)
    name = {"a": chosen.key, "b": other.key, "same": "the same budget"}

    def part(r: tuple[float, float, str]) -> str:
        return f"{name[r[2]]} for peaks {'up to' if r[0] == 0 else f'over {r[0]:g} to'} {r[1]:g} req/s"

    shown = "; ".join(part(r) for r in ranges[:MAX_RANGES])
    more = f"; {len(ranges) - MAX_RANGES} more range(s)" if len(ranges) > MAX_RANGES else ""
    flips = [r for r in ranges if r[2] == "b"]
    head = (f"Break-even traffic, {chosen.key} against {other.key}: "
            + (f"{other.key} commits less from a peak over {flips[0][0]:g} req/s" if flips
               else f"{other.key} never commits less up to {upto:g} req/s"))
    return (f"{head} (per lot: {money(chosen.quote.price_per_lot, chosen.quote.currency)} for {ca:g} req/s, "
            f"{money(other.quote.price_per_lot, other.quote.currency)} for {cb:g} req/s); cheaper: {shown}{more}")


def serving_comparison(evidence: list[Evidence], tags: list[str], catalog: Catalog, max_lots: int,
                       rule: AgreementRule, normalisation: str | None,
                       allow_short: bool = False) -> ServingComparison | None:
    """The server question across ``evidence`` (archives of one server campaign, in host order,
    ``tags`` their hosts), priced with ``catalog``; the served outputs compared across hosts by
    ``rule`` (:func:`served_agreements`); ``allow_short``: rank offers whose passes are too short
    for the projection rule (:func:`served_too_short`). None when no archive holds a server campaign."""
    served = [ev for ev in evidence if ev.config is not None and ev.config.scenario.server]
    if not served:
        return None
    scenario = served[0].config.scenario
    peak, average = scenario.peak_rate, scenario.average_rate
    offers = [o for ev, tag in zip(evidence, tags, strict=True) for o in offers_of(ev, tag, catalog, peak, average,
                                                                                    allow_short, max_lots)]
    agreements = served_agreements(evidence, tags, rule, normalisation)
    order = ranked(offers, allow_short)
    chosen = order[0] if order else None
    lines = []
    if chosen is not None and peak is not None:
        for host in dict.fromkeys(o.host for o in order if o.host != chosen.host):
            other = next(o for o in order if o.host == host)
            lines.append(break_even_line(chosen, other, peak, max_lots))
        mine = chosen.variant.variant_id if chosen.variant is not None else None
        disagree = [x for x in agreements if x.variant_id == mine and not x.result.same]
        if disagree:
            lines.append(f"{chosen.key}'s served outputs are NOT the same result on every host: "
                         + "; ".join(x.text() for x in disagree))
    return ServingComparison(peak, average, objective_text(scenario), tuple(offers), chosen, tuple(lines),
                             tuple(agreements))
