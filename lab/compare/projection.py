"""Per archive x variant: what was measured, what it costs, and what it would take to process
the user's declared load, from measured figures only.

- Throughput: items/s of each successful pass's measured window (raw table). The median
  pass and the worst (slowest) pass are both projected; packages are sized on the worst.
- Setup: the largest measured startup + model load + warm-up of a successful pass, once per lot.
- Lots: k lots are k separate rentals, each processing 1/k of the load with the measured
  configuration (an offline corpus splits by items; no interconnect is assumed).
- Cards: a lot whose cards outnumber the cards a pass used is never assumed to scale
  (SPEC 5: "Never assume that a lot scales beyond what was measured"): such a lot is
  projected at the measured throughput, and the row says "measured on 1 card, lot has 2".
- Prices: only through lab.cost (the archive's own [cost] package; the smallest package
  covering the worst case within the window and before the deadline from lab.cost.sizing).
  An archive without [cost] declared no package: its measured figures are projected, its
  money cells stay empty with that reason, and it is excluded from the budget decision
  (issue 11: no [cost] means no package, never a default GPU).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from decimal import Decimal

from lab.compare.evidence import NO_PACKAGE, Evidence
from lab.cost.forfaits import Catalog, PricingError, Quote, cost_per_validated_corpus, quote
from lab.cost.sizing import Sizing, cheapest_covering
from lab.passes.events import PassStatus
from lab.report.summary import recompilation_caveat


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
    host: str  # short tag: letter of the archive in the command line + GPU priced ("A b200")
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

    @property
    def eligible(self) -> bool:
        return not self.exclusions

    @property
    def key(self) -> str:
        return f"{self.host} / {self.label}"


def lot_hours(setup_s: float, items_per_s: float, load_items: int, lots: int) -> float:
    """Hours one of ``lots`` lots works: measured setup + its share of the load at ``items_per_s``."""
    return (setup_s + load_items / lots / items_per_s) / 3600


def measured_cards(rows: list[dict]) -> int:
    """Cards a pass used: the raw table's ``cards`` column where it exists, else 1."""
    vals = [int(_f(r.get("cards")) or 1) for r in rows if r.get("cards") not in (None, "")]
    return max(vals) if vals else 1


def project(ev: Evidence, variant: dict, catalog: Catalog, load_items: int,
            hours_available: float | None, max_lots: int, host: str = "") -> Projection:
    """Projection of ``variant`` (a summary.json entry of ``ev``) to ``load_items`` items.

    ``hours_available``: hours from the window start to the deadline (None: no deadline).
    Raises PricingError only for a catalog problem; a missing price is an exclusion.
    """
    vid = variant["variant_id"]
    rows = [r for r in ev.raw_rows if r["variant_id"] == vid]
    ok = [r for r in rows if r["status"] == PassStatus.OK and _f(r.get("items_per_s"))]
    rates: list[float] = [x for r in ok if (x := _f(r["items_per_s"]))]
    setups = [sum(_f(r.get(f"{p}_s")) or 0.0 for p in ("startup", "model_load", "warmup")) for r in ok]
    cost, gpu = ev.cost, ev.gpu
    why: list[str] = []
    q = None
    if cost is None or gpu is None:
        why.append(f"price: {NO_PACKAGE}")
    else:
        try:
            q = quote(catalog, gpu, cost.days, cost.lots)
        except PricingError as exc:
            why.append(f"price: {exc}")
    accepted = variant.get("accepted_passes", 0) >= 1
    per_corpus = cost_per_validated_corpus(q.committed_budget, 1 if accepted else 0) if q else None
    cards = measured_cards(rows)
    devs = ev.gpu_devices
    backends = {r.get("backend") for r in rows} - {"", None}
    if not devs or backends <= {"cpu"}:
        cards_note = (f"measured on CPU ({ev.hardware}), priced as {gpu}: the projection says "
                      "nothing about that GPU" if gpu else f"measured on CPU ({ev.hardware}), not "
                      f"priced ({NO_PACKAGE})")
    else:
        cards_note = f"measured on {cards} card{'s' if cards != 1 else ''}"
    lot_cards = q.cards_per_lot if q else None
    if lot_cards and lot_cards > cards:
        cards_note += (f", lot has {lot_cards}: projected at the measured throughput "
                       "(no scaling to the other cards assumed)")
    med_rate = statistics.median(rates) if rates else None
    worst_rate = min(rates) if rates else None
    setup_s = max(setups) if setups else None
    h_med = load_items / med_rate / 3600 if med_rate else None
    h_worst = load_items / worst_rate / 3600 if worst_rate else None
    sizing = None
    if not accepted:
        why.append(f"quality: {variant.get('quality_verdict') or 'no accepted pass'}")
    if not variant.get("feasible", True):
        why.append(f"memory: {variant.get('infeasible_reason') or 'not feasible'}")
    if not rates:
        why.append(f"failures: no successful pass with a throughput ({len(rows)} attempted)")
    elif q is not None and gpu is not None:
        assert worst_rate is not None and setup_s is not None  # rates (so setups) not empty
        sizing = cheapest_covering(catalog, gpu, lambda lots: lot_hours(setup_s, worst_rate, load_items, lots),
                                   hours_available, max_lots)
        if sizing is None:
            limit = "before the deadline" if hours_available is not None else "in any package"
            why.append(f"calendar: even {max_lots} lot(s) of the longest {gpu} package do not "
                       f"process {load_items} items {limit} at the worst pass's throughput")
    per_million = (sizing.quote.committed_budget * Decimal(1_000_000) / Decimal(load_items)
                   if sizing else None)
    return Projection(
        archive=ev.name, host=host or ev.name, hardware=ev.hardware, threads=ev.threads, gpu=gpu, variant_id=vid,
        label=variant.get("label") or vid, accepted=accepted,
        verdict=variant.get("quality_verdict") or "", successes=variant.get("successes", 0),
        failures=variant.get("failures", 0), failure_kinds=tuple(variant.get("failure_kinds") or ()),
        durations_s=tuple(variant.get("durations_s") or ()), median_s=variant.get("median_s"),
        min_s=variant.get("min_s"), max_s=variant.get("max_s"), items_per_s_median=med_rate,
        items_per_s_worst=worst_rate, items_per_s_best=max(rates) if rates else None, setup_s=setup_s,
        cards_measured=cards, cards_note=cards_note,
        archive_quote=q, cost_per_validated_corpus=per_corpus, load_items=load_items,
        hours_median=h_med, hours_worst=h_worst, sizing=sizing,
        cost_per_million_items=per_million, exclusions=tuple(why),
        durations_caveat=recompilation_caveat(int(variant.get("recompiled_passes") or 0),
                                              int(variant.get("successes") or 0),
                                              variant.get("recompiles_measured_max")))


def capacity_items(p: Projection, days_limit_hours: float, lots: int) -> int:
    """Largest load (items) ``lots`` lots process within ``days_limit_hours`` at the worst
    pass's throughput after the measured setup (0 when the setup alone does not fit)."""
    if not p.items_per_s_worst or p.setup_s is None:
        return 0
    secs = days_limit_hours * 3600 - p.setup_s
    return max(0, int(secs * p.items_per_s_worst * lots))
