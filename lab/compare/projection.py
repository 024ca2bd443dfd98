"""Per archive x variant: what was measured, what it costs, and what it would take to process
the user's declared load, from measured figures only.

- Throughput: items/s of each successful pass's measured window (raw table). The median
  pass and the worst (slowest) pass are both projected; packages are sized on the worst.
- Setup: the largest sum of a successful pass's set-up phases (lab.passes.records.SETUP_PHASES:
  start-up, model load, an engine's start, compile, warm-up), once per lot.
- Lots: k lots are k separate rentals, each processing 1/k of the load with the measured
  configuration (an offline corpus splits by items; no interconnect is assumed).
- Cards: a lot whose cards outnumber the cards a pass used is never assumed to scale
  (SPEC 5: "Never assume that a lot scales beyond what was measured"): such a lot is
  projected at the measured throughput, and the row says "measured on 1 card, lot has 2".
- Hardware: the GPU each pass ran on (its result.json) is checked against the package's GPU and
  cards per lot (lab.cost.hardware: the rule). Passes run on another GPU model, or on more cards
  than a lot holds, are excluded ("hardware: ..."): their throughput is not that package's, and
  ranking them would name a package on speed it was never measured to have. Passes run on the
  CPU stay ranked with "measured on CPU, priced as ..." on every figure (a rehearsal off the
  rental, never mistaken for a GPU measurement); fewer cards than a lot holds of the priced GPU
  stay ranked with their caveat (projected at the cards measured: an upper bound on the cost).
- Prices: only through lab.cost. The archive's own package is priced with the archive's own
  catalog (report/catalog.csv, as it was when the archive was made) and shown unchanged; the
  decision sizes every configuration with the one catalog the comparison chose
  (lab.compare.decision.choose_catalog), and a row says where the two prices differ.
- Validity ([timing] min_window_s, min_accepted_passes; lab.facts.constants): a configuration
  with fewer accepted passes of at least min_window_s than the rule asks is "too short to
  project" and excluded unless the user allows it (``allow_short``), which the row then says.
  Every row states its extrapolation factor (load / items measured per pass).
- Output tokens (a generation task): the variant's output tokens over the corpus and its median
  output tokens/s (summary.json, as the campaign's decision note shows them); at the load, the
  corpus's output tokens per item times the load (the load is items of the corpus's mix), and the
  covering package's committed budget per item and per million of those output tokens, by the
  decision note's division (lab.report.decision_note.generation_costs). Other kinds generate no
  tokens: those cells stay empty, ``tokens_note`` says why.
- Quality: the metric of each pass (median, min, max over the passes that have one) and the
  archive's reference variant's median, so each host's quality is shown, not asserted.
  An archive without [cost] declared no package: its measured figures are projected, its
  money cells stay empty with that reason, and it is excluded from the budget decision
  (issue 11: no [cost] means no package, never a default GPU).
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass, field
from decimal import Decimal

from lab.compare.evidence import NO_PACKAGE, Evidence
from lab.cost.forfaits import Catalog, PricingError, Quote, cost_per_validated_corpus, quote
from lab.cost.hardware import HardwareCheck, Priced
from lab.cost.sizing import Sizing, cheapest_covering
from lab.cost.sizing import capacity_items as package_capacity
from lab.facts.constants import AGREEMENT
from lab.kinds import task_kind
from lab.passes.events import PassStatus
from lab.passes.records import SETUP_PHASES
from lab.report.caveats import Basis
from lab.report.condition_cells import StarvedPass
from lab.report.decision_note import generation_costs
from lab.report.raw_row import RawRow
from lab.report.summary import VariantSummary, median_pass_throughput


def _f(cell) -> float | None:
    try:
        return None if cell in ("", None) else float(cell)
    except ValueError:
        return None


@dataclass(frozen=True)
class Projection:
    """One archive x variant. Durations in s, throughputs in items/s, hours in h, money in
    the catalog currency. ``exclusions`` lists why the row cannot be chosen ([] = eligible)."""
    archive: str
    host: str  # short tag: letter of the archive (lab.compare.decision.host_order) + GPU priced ("A b200")
    hardware: str
    threads: object
    gpu: str | None  # None: the archive declared no package ([cost] absent)
    variant_id: str
    label: str
    accepted: bool
    verdict: str
    successes: int
    failures: int
    failure_kinds: tuple[str, ...]
    durations_s: tuple[float, ...]
    median_s: float | None
    min_s: float | None
    max_s: float | None
    items_per_s_median: float | None
    items_per_s_worst: float | None
    items_per_s_best: float | None
    setup_s: float | None
    cards_measured: int
    cards_note: str
    archive_quote: Quote | None
    cost_per_validated_corpus: Decimal | None
    load_items: int
    hours_median: float | None
    hours_worst: float | None
    sizing: Sizing | None
    cost_per_million_items: Decimal | None
    exclusions: tuple[str, ...] = field(default=())
    durations_caveat: str = ""
    """'' or why the durations (so the throughputs and the package sized on them) are not
    steady-state: recompilation inside the measured window (lab.report.summary)."""
    metric_name: str = ""
    metric_median: float | None = None
    metric_min: float | None = None
    metric_max: float | None = None
    """The quality metric over the variant's passes that have one (fraction 0-1)."""
    reference_label: str = ""
    reference_metric_median: float | None = None
    """The archive's reference variant ([quality] reference_variant) and its metric median."""
    items_per_pass: int | None = None
    extrapolation: float | None = None
    """load_items / items_per_pass: how many times the measured pass is projected."""
    long_passes: int = 0
    """Accepted passes ok whose measured window lasted at least ``min_window_s``."""
    min_window_s: float = 0.0
    min_accepted_passes: int = 1
    too_short: str = ""
    """'' or why the passes cannot support a projection (the validity rule); an exclusion
    unless allowed, then a caveat every output carries."""
    prediction_pass: str = ""
    """The pass whose predictions stand for this host's result (lab.compare.evidence); its id,
    the same on every rental of one plan: lines name it with ``host`` (lab.report.condition_cells.pass_name)."""
    starved_passes: tuple[StarvedPass, ...] = ()
    """Passes ok of this archive x variant whose window was starved of CPU (summary.json
    ``starved_passes``, lab.passes.conditions.starvation), each with ``host`` set, so a line
    naming them names the host with each (lab.report.condition_cells.pass_name)."""
    decision_quote: Quote | None = None
    """The archive's own package priced with the comparison's catalog."""
    price_note: str = ""
    """'' or where the archive's own price differs from the comparison catalog's."""
    output_tokens: int | None = None
    output_tokens_per_s_median: float | None = None
    """A generation variant: its output tokens over the corpus (the most a pass ok generated) and
    the median over passes ok of output tokens/s (summary.json); None for the other kinds."""
    output_tokens_at_load: int | None = None
    cost_per_item: Decimal | None = None
    cost_per_million_output_tokens: Decimal | None = None
    """At the declared load: the corpus's output tokens per item x ``load_items``, and the covering
    package's committed budget per item and per million of those output tokens (catalog currency;
    lab.report.decision_note.generation_costs). None when not a generation variant or not sized."""
    tokens_note: str = ""
    """'' or why the output-token cells are empty (another task kind, nothing sized or counted)."""
    measured_on_cpu: bool = False
    """Its passes ran on CPU (no GPU device, or every pass's backend "cpu"), whatever it is priced as."""
    hardware_check: HardwareCheck | None = None
    """Its passes' cards against the package priced (lab.cost.hardware); None when nothing is priced
    or no pass recorded its cards (an archive older than those records)."""

    @property
    def basis(self) -> Basis:
        """Its flags as a derived figure's caveats read them (lab.report.caveats)."""
        flags = Basis.hardware_flags(self.hardware_check) if self.hardware_check is not None else \
            {"cpu_priced_as": self.gpu or ""} if self.measured_on_cpu else {}
        return Basis(tag=self.key, passes=len(self.durations_s), starved=len(self.starved_passes),
                     too_short=bool(self.too_short), not_steady=bool(self.durations_caveat), **flags)

    @property
    def metric_gap(self) -> float | None:
        """metric_median - reference_metric_median (same archive); None when either is missing."""
        if self.metric_median is None or self.reference_metric_median is None:
            return None
        return self.metric_median - self.reference_metric_median

    def quality_text(self) -> str:
        """'accuracy 0.571 (0.571-0.571 over 2 passes); reference batch 1: 0.571, gap +0.000'."""
        if self.metric_median is None:
            return f"{self.metric_name or 'metric'}: not measured"
        text = (f"{self.metric_name} {self.metric_median:.4f} (range {self.metric_min:.4f}-"
                f"{self.metric_max:.4f})")
        if self.metric_name == AGREEMENT:  # with this archive's own reference pass: no gap to a reference metric
            return text + (f" with this host's reference {self.reference_label}'s first valid pass"
                           + ("; for the reference variant itself that pass is 1 by definition, its others "
                              "measure how it repeats" if self.label == self.reference_label else ""))
        if self.reference_metric_median is not None:
            gap = self.metric_gap
            assert gap is not None
            text += (f"; reference {self.reference_label}: {self.reference_metric_median:.4f}, "
                     f"gap {gap:+.4f}")
        return text

    def spread_text(self) -> str:
        """'x 7143 of the 7 items measured per pass; worst pass 5.1 items/s, median pass 5.6'."""
        if self.extrapolation is None:
            return "not projected: no pass ok measured a throughput"
        factor = f"{self.extrapolation:,.0f}" if self.extrapolation >= 10 else f"{self.extrapolation:.2f}"
        return (f"extrapolation x{factor} ({self.load_items} items / "
                f"{self.items_per_pass} measured per pass); worst pass {self.items_per_s_worst or 0:.2f} "
                f"items/s, median pass {self.items_per_s_median or 0:.2f} items/s, over "
                f"{len(self.durations_s)} pass(es) ok")

    @property
    def eligible(self) -> bool:
        return not self.exclusions

    @property
    def key(self) -> str:
        return f"{self.host} / {self.label}"


def lot_hours(setup_s: float, items_per_s: float, load_items: int, lots: int) -> float:
    """Hours one of ``lots`` lots works: measured setup + its share of the load at ``items_per_s``."""
    return (setup_s + load_items / lots / items_per_s) / 3600


def measured_cards(rows: list[RawRow]) -> int:
    """Cards a pass used: the raw table's ``cards`` column where it exists, else 1."""
    vals = [int(_f(r.cards) or 1) for r in rows if r.cards is not None]
    return max(vals) if vals else 1


def too_short(long_passes: int, rule_passes: int, rule_window_s: float, shortest: float | None) -> str:
    """'' when ``long_passes`` (accepted passes of at least ``rule_window_s``) meet the rule's
    ``rule_passes``; else the reason, one phrase."""
    if long_passes >= rule_passes:
        return ""
    short = f"; shortest measured window {shortest:.2f} s" if shortest is not None else ""
    return (f"too short to project: {long_passes} accepted pass(es) of at least {rule_window_s:g} s, "
            f"the rule ([timing] min_window_s, min_accepted_passes) needs {rule_passes}{short}")


def project(ev: Evidence, variant: VariantSummary, catalog: Catalog, load_items: int,
            hours_available: float | None, max_lots: int, host: str = "",
            allow_short: bool = False) -> Projection:
    """Projection of ``variant`` (one of ``ev.variants``) to ``load_items`` items.

    ``catalog``: the comparison's catalog (sizing, eligibility); the archive's own package is
    also priced with ``ev.catalog`` when the archive holds one. ``hours_available``: hours from
    the window start to the deadline (None: no deadline). ``allow_short``: a configuration
    that fails the validity rule stays eligible, with the caveat. Raises PricingError only for
    a catalog problem; a missing price is an exclusion.
    """
    vid = variant.variant_id
    rows = [r for r in ev.raw_rows if r.variant_id == vid]
    ok = [r for r in rows if r.status == PassStatus.OK and _f(r.items_per_s)]
    rates: list[float] = [x for r in ok if (x := _f(r.items_per_s))]
    setups = [sum(_f(r.phase_s(p)) or 0.0 for p in SETUP_PHASES) for r in ok]
    cost, gpu = ev.cost, ev.gpu
    why: list[str] = []
    q = own = None
    price_note = ""
    if cost is None or gpu is None:
        why.append(f"price: {NO_PACKAGE}")
    else:
        try:
            q = quote(catalog, gpu, cost.days, cost.lots)
        except PricingError as exc:
            why.append(f"price: {exc}")
        own_catalog = ev.catalog or catalog
        try:
            own = quote(own_catalog, gpu, cost.days, cost.lots)
        except PricingError as exc:
            price_note = f"the archive's own catalog does not price its package ({exc})"
        if ev.catalog is None:
            price_note = (f"the archive holds no catalog (its catalog file was {ev.catalog_missing}): its "
                          f"package is shown at the comparison catalog's price (version {catalog.version})")
        elif own is not None and q is not None and own.committed_budget != q.committed_budget:
            price_note = (f"price differs: the archive's own catalog (version {ev.catalog.version}) "
                          f"committed {own.committed_budget:.2f} {own.currency} for {gpu} {cost.days} days x "
                          f"{cost.lots} lot(s); the comparison's catalog (version {catalog.version}) "
                          f"prices it at {q.committed_budget:.2f} {q.currency}")
    accepted = variant.accepted_passes >= 1
    per_corpus = cost_per_validated_corpus(own.committed_budget, 1 if accepted else 0) if own else None
    cards = measured_cards(rows)
    measured, priced = ev.measured(vid), q or own
    check = HardwareCheck(measured, Priced(priced.gpu, priced.gpu_name, priced.cards_per_lot)) \
        if priced is not None and measured.passes else None
    backends = {r.backend for r in rows} - {"", None}
    on_cpu = check.on_cpu if check is not None else not ev.gpu_devices or backends <= {"cpu"}
    if check is not None and not on_cpu and (check.other_gpu or check.more_cards):
        why.append(f"hardware: {check.caveat} ({check.priced.gpu_name}): its throughput is not that package's, "
                   f"so it is not ranked; measure the campaign on a {check.priced.gpu} lot, or declare the "
                   "package of the hardware it ran on in [cost] and run it there")
    if on_cpu:
        cards_note = (f"measured on CPU ({ev.hardware}), priced as {gpu}: the projection says "
                      "nothing about that GPU" if gpu else f"measured on CPU ({ev.hardware}), not "
                      f"priced ({NO_PACKAGE})")
    elif check is not None and (check.other_gpu or check.more_cards):
        cards_note = f"{check.caveat}: the projection says nothing about that package"
    else:
        cards_note = f"measured on {cards} card{'s' if cards != 1 else ''}"
    lot_cards = q.cards_per_lot if q else None
    if lot_cards and lot_cards > cards:
        cards_note += (f", lot has {lot_cards}: projected at the measured throughput "
                       "(no scaling to the other cards assumed)")
    durations = [x for r in ok if (x := _f(r.measured_s))]
    items = max((int(x) for r in ok if (x := _f(r.items_total))), default=None)
    med_rate = median_pass_throughput(items, durations) if rates else None
    worst_rate = min(rates) if rates else None
    timing = ev.config.timing
    long_ok = [d for r in ok if r.accepted and (d := _f(r.measured_s)) is not None
               and d >= timing.min_window_s]
    short = too_short(len(long_ok), timing.min_accepted_passes, timing.min_window_s,
                      min(durations) if durations else None) if rates else ""
    metrics = [x for r in rows if (x := _f(r.metric)) is not None]
    ref_name = ev.config.quality.reference_variant
    ref = next((v for v in ev.variants if v.variant_name == ref_name or v.variant_id == ref_name), None)
    ref_metrics = [x for r in ev.raw_rows if ref and r.variant_id == ref.variant_id
                   and (x := _f(r.metric)) is not None]
    setup_s = max(setups) if setups else None
    h_med = load_items / med_rate / 3600 if med_rate else None
    h_worst = load_items / worst_rate / 3600 if worst_rate else None
    sizing = None
    if not accepted:
        why.append(f"quality: {variant.quality_verdict or 'no accepted pass'}")
    if not variant.feasible:
        why.append(f"memory: {variant.infeasible_reason or 'not feasible'}")
    if not rates:
        why.append(f"failures: no successful pass with a throughput ({len(rows)} attempted)")
    if short and not allow_short:
        why.append(short)  # its kind (the words before ":"): "too short to project"
    if rates and q is not None and gpu is not None:
        assert worst_rate is not None and setup_s is not None  # rates (so setups) not empty
        sizing = cheapest_covering(catalog, gpu, lambda lots: lot_hours(setup_s, worst_rate, load_items, lots),
                                   hours_available, max_lots)
        if sizing is None:
            limit = "before the deadline" if hours_available is not None else "in any package"
            why.append(f"calendar: even {max_lots} lot(s) of the longest {gpu} package do not "
                       f"process {load_items} items {limit} at the worst pass's throughput")
    per_million = (sizing.quote.committed_budget * Decimal(1_000_000) / Decimal(load_items)
                   if sizing else None)
    tokens = output_token_figures(ev.config.task.kind, variant, load_items, sizing)
    return Projection(
        archive=ev.name, host=host or ev.name, hardware=ev.hardware, threads=ev.threads, gpu=gpu, variant_id=vid,
        label=variant.label or vid, accepted=accepted,
        verdict=variant.quality_verdict or "", successes=variant.successes,
        failures=variant.failures, failure_kinds=variant.failure_kinds,
        durations_s=variant.durations_s, median_s=variant.median_s,
        min_s=variant.min_s, max_s=variant.max_s, items_per_s_median=med_rate,
        items_per_s_worst=worst_rate, items_per_s_best=max(rates) if rates else None, setup_s=setup_s,
        cards_measured=cards, cards_note=cards_note,
        archive_quote=own, cost_per_validated_corpus=per_corpus, load_items=load_items,
        hours_median=h_med, hours_worst=h_worst, sizing=sizing,
        cost_per_million_items=per_million, exclusions=tuple(why),
        durations_caveat=variant.durations_caveat(),
        metric_name=ev.config.quality.metric,
        metric_median=statistics.median(metrics) if metrics else None,
        metric_min=min(metrics) if metrics else None, metric_max=max(metrics) if metrics else None,
        reference_label=(ref.label or ref_name) if ref else ref_name,
        reference_metric_median=statistics.median(ref_metrics) if ref_metrics else None,
        items_per_pass=items, extrapolation=load_items / items if items else None,
        long_passes=len(long_ok), min_window_s=timing.min_window_s,
        min_accepted_passes=timing.min_accepted_passes, too_short=short,
        prediction_pass=ev.prediction_pass.get(vid, ""), decision_quote=q, price_note=price_note,
        starved_passes=tuple(dataclasses.replace(x, host=host or ev.name) for x in variant.starved_passes),
        measured_on_cpu=on_cpu, hardware_check=check, **tokens)


def output_token_figures(kind: str, variant: VariantSummary, load_items: int, sizing: Sizing | None) -> dict:
    """The Projection's output-token fields of ``variant`` (the summary of a ``kind`` task's variant)
    at ``load_items`` items, the package ``sizing`` (None: not sized) priced: output_tokens,
    output_tokens_per_s_median, output_tokens_at_load, cost_per_item, cost_per_million_output_tokens
    and tokens_note (why a cell is empty)."""
    out_tokens, items = variant.output_tokens, variant.items_total
    figures = {"output_tokens": out_tokens, "output_tokens_per_s_median": variant.output_tokens_per_s_median}
    if out_tokens is None:
        why = (f"no output tokens: a {kind} task generates no text" if not task_kind(kind).generates_text
               else "no output tokens: no pass ok counted them")
        return {**figures, "tokens_note": why}
    if not items or not out_tokens:
        return {**figures, "tokens_note": "no item or output token counted: nothing to divide by"}
    at_load = round(out_tokens * load_items / items)
    figures["output_tokens_at_load"] = at_load
    if not at_load:
        return {**figures, "tokens_note": "no output token at the load (fewer than one): nothing to divide by"}
    if sizing is None:
        return {**figures, "tokens_note": "cost per item and per million output tokens: no package sized "
                                          "for the load (the row's exclusions say why)"}
    per_item, per_million = generation_costs(sizing.quote.committed_budget, load_items, at_load)
    return {**figures, "cost_per_item": per_item, "cost_per_million_output_tokens": per_million}


def capacity_items(p: Projection, days_limit_hours: float, lots: int) -> int:
    """Largest load (items) ``lots`` lots process within ``days_limit_hours`` at the worst
    pass's throughput after the measured setup (0 when the setup alone does not fit)."""
    return package_capacity(days_limit_hours, lots, p.items_per_s_worst, p.setup_s)
