"""Several archives of one protocol -> one decision for the user's declared load.

Rule (seed: "Quale configurazione elabora tutti i miei documenti, rispetta la mia qualità
minima e termina prima della mia scadenza, per il budget impegnato più basso?"): among
accepted, memory-feasible configurations whose package covers the load before the deadline,
the lowest committed budget; then fewer failures; then higher median throughput. Whether
the measurements tell two configurations apart is judged per pair by
lab.report.distinguish (the same rule as within a campaign). What would change the decision
is computed from the same figures: the loads (in items) at which another configuration
becomes the choice.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from lab.compare.comparability import check_comparable, is_server
from lab.compare.comparison_records import CatalogChoice, CatalogFound, ComparedArchive, CrossPair, Identity
from lab.compare.evidence import NO_PACKAGE, CompareError, Evidence, read_evidence
from lab.compare.projection import Projection, capacity_items, lot_hours, project
from lab.compare.serving import ServingComparison, served_variant_ids, serving_comparison
from lab.cost.forfaits import Catalog, load_catalog, money, parse_instant, quote
from lab.cost.sizing import cheapest_covering, package_limits
from lab.facts.files import sha256_file
from lab.kinds import task_kind
from lab.orchestration.agreement import AgreementCheck, AgreementRule, judge_maps, judge_vectors
from lab.report.caveats import rests_on, with_caveats
from lab.report.condition_cells import pass_name, starved_text
from lab.report.decision_note import what_ran
from lab.report.distinguish import compare_durations
from lab.report.exclusions import exclusion_counts, exclusion_kind

DEFAULT_MAX_LOTS = 8
MAX_LOTS = 100  # --max-lots above it: the break-even search grows with its square (issue 23 part 3)


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare_archives`; everything the tables and the report show."""
    archives: tuple[ComparedArchive, ...]
    identity: Identity
    projections: tuple[Projection, ...]
    load_items: int | None  # None: server archives compared without --load (nothing projected)
    window_start: datetime
    deadline: datetime | None
    hours_available: float | None
    max_lots: int
    catalog_path: str
    chosen: Projection | None
    motivation: tuple[str, ...]
    cross_pairs: tuple[CrossPair, ...]
    what_would_change: tuple[str, ...]
    path: tuple[str, ...]  # the decision path, one line per step
    banners: tuple[str, ...] = ()
    """Lines every output opens with: partial evidence compared (--allow-partial), passes
    too short projected anyway (--allow-short)."""
    catalog: CatalogChoice | None = None
    """The catalog that priced the decision (:func:`choose_catalog`); None in a Comparison assembled
    without one (unit tests)."""
    agreements: tuple[HostAgreement, ...] = ()
    """Per pair of hosts, same variant: prediction agreement per id (``agreement_pairs``)."""
    per_host: tuple[str, ...] = ()
    """Headline lines: the best configuration on each other host, its budget ratio, and the
    throughput the runner-up host would need to win."""
    stands_on: str = ""
    """Which host's result (predictions, metric) the decision stands on, and who disagrees."""
    serving: ServingComparison | None = None
    """Archives of a server campaign: the server question across them (lab.compare.serving); None
    for offline archives. Their server variants are never projected as offline configurations."""
    ran: str = ""
    """What ran, when it was the user's own code ([task] entry, the same on every archive:
    comparability refuses another): lab.report.decision_note.what_ran; '' for the lab's own jobs."""

    @property
    def decided(self) -> bool:
        """Whether the comparison chose: a configuration for the load, or (server archives compared
        without --load) the serving part's offer for the declared traffic."""
        if self.load_items is None:
            return self.serving is not None and self.serving.chosen is not None
        return self.chosen is not None


def host_letter(i: int) -> str:
    """A, B, ... Z, AA, AB, ...: the archive's position in :func:`host_order`."""
    return chr(65 + i) if i < 26 else host_letter(i // 26 - 1) + chr(65 + i % 26)


def host_order(evidence: list[Evidence]) -> list[Evidence]:
    """The one order of hosts, which gives their letters: by when each archive was made
    (ARCHIVE.json ``made_at``, oldest first: A is the first rental), then by file name and
    path. The order archives are given in (command-line arguments, the Compare screen's
    selection) never changes which host is A."""
    return sorted(evidence, key=lambda ev: (str(ev.info.made_at or ""), ev.name, str(ev.path)))


def priced_as(ev: Evidence) -> str:
    """'priced as b200', or the reason nothing is priced (no [cost]: no package, issue 11)."""
    return f"priced as {ev.gpu}" if ev.gpu else f"not priced: {NO_PACKAGE}"


def host_tag(i: int, ev: Evidence) -> str:
    """'A b200': the archive's letter and the GPU of its package ('B unpriced' without [cost])."""
    return f"{host_letter(i)} {ev.gpu or 'unpriced'}"


def pair_caveats(a: Projection, b: Projection) -> str:
    """The caveats of a figure that sets configuration ``a`` against ``b`` (a break-even load, a
    budget ratio): both configurations' flags (Projection.basis) and whether their durations are
    distinguished (lab.report.distinguish, the one rule); '' when clean (lab.report.caveats)."""
    verdict = compare_durations(list(a.durations_s), list(b.durations_s))
    return rests_on([a.basis, b.basis], verdict.distinguished)


def _rank(p: Projection, sizing) -> tuple:
    return (sizing.quote.committed_budget, p.failures, -(p.items_per_s_median or 0.0))


def _winner_at(cands: list[Projection], catalog: Catalog, load: int, hours_available, max_lots):
    best = None
    for p in cands:
        def hours(k: int, p: Projection = p) -> float:
            assert p.setup_s is not None and p.items_per_s_worst is not None  # eligible: measured
            return lot_hours(p.setup_s, p.items_per_s_worst, load, k)

        assert p.gpu is not None  # eligible: its archive declared a package
        s = cheapest_covering(catalog, p.gpu, hours, hours_available, max_lots)
        if s is not None and (best is None or _rank(p, s) < _rank(*best)):
            best = (p, s)
    return best


def what_would_change(cands: list[Projection], chosen: Projection, catalog: Catalog, load: int,
                      hours_available, max_lots) -> list[str]:
    """Loads (items) at which another configuration becomes the choice, nearest above and
    below the declared load, found at the capacity edges of every candidate package. A break-even
    line ends with the caveats of the two configurations it sets against each other
    (:func:`pair_caveats`); a line about every candidate, with theirs."""
    edges = set()
    for p in cands:
        assert p.gpu is not None  # eligible: its archive declared a package
        for _days, limit in package_limits(catalog, p.gpu, hours_available):
            for lots in range(1, max_lots + 1):
                cap = capacity_items(p, limit, lots)
                edges.update({cap, cap + 1})
    out = []
    every = [p.basis for p in cands]
    for direction, loads in (("above", sorted(e for e in edges if e > load)),
                             ("below", sorted((e for e in edges if 0 < e < load), reverse=True))):
        for x in loads:
            w = _winner_at(cands, catalog, x, hours_available, max_lots)
            if w is None:
                if direction == "above":
                    out.append(with_caveats(f"above {x - 1} items no configuration covers the load "
                                            f"{'before the deadline' if hours_available else 'in any package'} "
                                            f"with 1 to {max_lots} lot(s) per package (--max-lots)", every))
                    break
                continue
            p, s = w
            if p.key != chosen.key:
                q = s.quote
                out.append(f"break-even: at a load of {x} items ({direction} the declared "
                           f"{load}) the choice becomes {p.key} on {p.hardware}: {q.days}-day "
                           f"package x {q.lots} lot(s) of {q.gpu_name}, committed "
                           f"{q.committed_budget:.2f} {q.currency} (packages of 1 to {max_lots} lot(s), "
                           "--max-lots)" + (f"; {cav}" if (cav := pair_caveats(p, chosen)) else ""))
                break
        else:
            out.append(with_caveats(f"no load {direction} {load} items within the package edges changes the choice",
                                    every))
    return out


def steady_state_caveats(ranked: list[Projection]) -> list[str]:
    """Motivation lines for the chosen configuration (``ranked[0]``) and the next one, whose
    durations the motivation uses, when they include recompilation in the measured window
    (``Projection.durations_caveat``): their packages are sized on figures that are not
    steady-state. [] when neither recompiled."""
    return [f"{p.key}: {p.durations_caveat}; the package sized on its worst pass rests on them"
            for p in ranked[:2] if p.durations_caveat]


def choose_catalog(evidence: list[Evidence], catalog_path: str | None) -> tuple[Catalog, CatalogChoice]:
    """The one catalog that prices a comparison, and what was found.

    The user's own catalog prices every host: ``catalog_path`` when given, else the bundle's
    (lab.cost.forfaits.load_catalog). Each archive's own report/catalog.csv is only found and
    shown as that archive's own price (lab.compare.projection), never chosen for the others: a
    catalog inside an archive is a member anyone can rewrite, whatever version it claims. Two
    catalogs of the same version whose prices differ are refused (CompareError, one line naming
    both): a version must name one price list. Returns (catalog, what was chosen and found)."""
    bundle = load_catalog(catalog_path)
    bundle = dataclasses.replace(bundle, sha256=sha256_file(bundle.path))
    found = [("--catalog " + str(catalog_path) if catalog_path else "the bundle's catalog", bundle)]
    found += [(f"{ev.name}'s own catalog", ev.catalog) for ev in evidence if ev.catalog is not None]
    by_version: dict[str, tuple[str, Catalog]] = {}
    for source, cat in found:
        seen = by_version.get(cat.version)
        if seen is not None and seen[1].prices() != cat.prices():
            fix = ("give your catalog a new catalog_version (a version names one price list)" if catalog_path
                   else "give the edited catalog a new catalog_version, or pass --catalog FILE with a new version")
            raise CompareError(f"two catalogs of version {cat.version} price differently: {seen[0]} "
                               f"(sha256 {seen[1].sha256[:16]}...) and {source} (sha256 {cat.sha256[:16]}...); {fix}")
        by_version.setdefault(cat.version, (source, cat))
    source, chosen = found[0]  # the user's own; the archives' are found, never chosen
    info = CatalogChoice(path=chosen.path, version=chosen.version, sha256=chosen.sha256, source=source,
                         explicit=bool(catalog_path),
                         found=tuple(CatalogFound(src, c.version, c.sha256) for src, c in found))
    return chosen, info


CATALOG_DEFAULT = "the default; an archive's own catalog prices only that archive's budget"
"""Why the bundle's catalog priced a comparison given no --catalog (choose_catalog)."""


def catalog_line(info: CatalogChoice) -> str:
    """One line: which catalog priced the decision, why, and the other versions found."""
    why = "given with --catalog" if info.explicit else CATALOG_DEFAULT
    others = sorted({f"{f.source}: {f.version}" for f in info.found if f.sha256 != info.sha256})
    return (f"priced with catalog version {info.version} (sha256 {info.sha256[:16]}..., "
            f"{info.source}; {why})" + (f"; also found: {', '.join(others)}" if others else ""))


@dataclass(frozen=True)
class IdAgreement:
    """Two hosts' predictions of one variant compared id by id under the locked agreement rule:
    ``ids`` common ids, ``agree`` ids with the same prediction (embeddings: at or above the rule's
    cosine), ``flips`` ids that differ, ``agreement`` agree / ids (fraction; None without common
    ids), ``only_a`` / ``only_b`` ids one host predicted and the other did not; the rule's figures:
    ``share`` of ids that differ (None without common ids), ``max_differing`` (fraction),
    ``min_cosine`` (None for labels and texts), its verdict ``agreement_ok``; embeddings also
    ``cosine_median``, ``cosine_worst`` and the id at the worst, ``worst_id`` (None otherwise)."""

    ids: int
    agree: int
    flips: int
    agreement: float | None
    only_a: int
    only_b: int
    share: float | None
    max_differing: float
    min_cosine: float | None
    agreement_ok: bool
    cosine_median: float | None = None
    cosine_worst: float | None = None
    worst_id: str | None = None


@dataclass(frozen=True)
class HostAgreement(IdAgreement):
    """One variant on two hosts (:func:`agreement_pairs`): its ``variant`` label and
    ``variant_id``, the hosts ``a`` and ``b`` and the passes whose predictions were compared
    (``pass_a``, ``pass_b``), the IdAgreement figures, the gap between the hosts' metric medians
    (``metric_gap``; None: not measured on both) against the [quality] ``tolerance``, whether that is
    the same ML result (``within_tolerance``) and whether both hosts' configurations were accepted
    (``both_accepted``)."""

    variant: str = ""
    variant_id: str = ""
    a: str = ""
    b: str = ""
    pass_a: str = ""
    pass_b: str = ""
    metric_gap: float | None = None
    tolerance: float = 0.0
    within_tolerance: bool = False
    both_accepted: bool = False

    def other(self, host: str) -> str:
        """The other host of the pair than ``host``."""
        return self.b if self.a == host else self.a


def prediction_agreement(a: dict[str, str], b: dict[str, str], rule: AgreementRule | None = None,
                         normalisation: str | None = None) -> IdAgreement:
    """Per-id agreement of two prediction maps {id: label, or a generation's output} by the
    agreement rule ``rule`` (lab.orchestration.agreement; None: classification's default), outputs
    compared after ``normalisation`` (lab.passes.tasks.text_metrics; None: as written)."""
    rule = rule or AgreementRule.of({}, "classification")
    m = judge_maps(a, b, rule, normalisation)
    check = m.check
    return IdAgreement(ids=check.ids, agree=check.ids - check.differing, flips=check.differing,
                       agreement=(check.ids - check.differing) / check.ids if check.ids else None,
                       only_a=m.only_a, only_b=m.only_b, **rule_figures(check))


def rule_figures(check: AgreementCheck) -> dict:
    """IdAgreement's figures of the agreement rule, as keyword arguments: ``share`` of the ids that
    differ, the rule (``max_differing``, ``min_cosine``) and its verdict (``agreement_ok``)."""
    return dict(share=check.share if check.ids else None, max_differing=check.rule.max_differing,
                min_cosine=check.rule.min_cosine, agreement_ok=check.ok)


def vector_agreement(a: tuple, b: tuple, rule: AgreementRule | None = None) -> IdAgreement:
    """Per-id cosine of two hosts' vectors of one variant, ``a`` and ``b`` = (item ids, float
    array (items, width)) (lab.compare.evidence.Evidence.vectors), by the agreement rule validation
    applies against the reference variant (lab.orchestration.agreement.judge_vectors; None: the
    embedding default): an id whose cosine is below ``rule.min_cosine`` counts as a flip. The cosine
    figures are None without common ids."""
    m = judge_vectors(a, b, rule or AgreementRule.of({}, "embedding"))
    check = m.check
    agree = check.ids - check.differing
    return IdAgreement(ids=check.ids, agree=agree, flips=check.differing,
                       agreement=agree / check.ids if check.ids else None, only_a=m.only_a, only_b=m.only_b,
                       cosine_median=m.cosine_median, cosine_worst=check.lowest_cosine, worst_id=check.lowest_id,
                       **rule_figures(check))


def serving_path(s: ServingComparison) -> str:
    """The decision path's serving step: the offers sized and the chosen one."""
    sized = [o for o in s.offers if o.quote is not None]
    head = (f"serving: {len(s.offers)} server configuration(s) over the hosts, {len(sized)} sized for a peak of "
            f"{s.peak_rate:g} req/s" if s.peak_rate is not None else
            f"serving: {len(s.offers)} server configuration(s) over the hosts, none sized (no [scenario] peak_rate)")
    if s.chosen is None or s.chosen.quote is None:
        return head + "; serving decision: none"
    q = s.chosen.quote
    return (head + f"; serving decision: {s.chosen.key}, {q.lots} lot(s) of {q.gpu_name}, committed budget "
            f"{q.committed_budget:.2f} {q.currency}")


def agreement_pairs(evidence: list[Evidence], projections: list[Projection], tags: list[str],
                    tolerance: float, rule: AgreementRule | None = None,
                    normalisation: str | None = None) -> list[HostAgreement]:
    """Same variant on two hosts: is it the same ML result? Per pair, the per-id agreement of
    the two hosts' representative predictions (lab.compare.evidence: first accepted pass; for
    embeddings, their vectors' per-id cosine, :func:`vector_agreement`; a generation's outputs
    after its ``normalisation``) by the agreement rule ``rule`` the protocol locks (the one
    validation applies inside a campaign, lab.orchestration.agreement), and the gap between their
    metric medians. The same ML result (``within_tolerance``) when the rule holds, the metric gap is
    <= the [quality] tolerance (seed: two configurations may be equivalent without identical numbers,
    within a tolerance fixed before timing), and both hosts predicted exactly the same ids."""
    by = {(p.host, p.variant_id): p for p in projections}
    out = []
    for i, ea in enumerate(evidence):
        for j in range(i + 1, len(evidence)):
            eb = evidence[j]
            shared = (ea.predictions.keys() & eb.predictions.keys()) | (ea.vectors.keys() & eb.vectors.keys())
            for vid in sorted(shared):
                pa, pb = by.get((tags[i], vid)), by.get((tags[j], vid))
                if pa is None or pb is None:
                    continue
                ag = (vector_agreement(ea.vectors[vid], eb.vectors[vid], rule)
                      if vid in ea.vectors and vid in eb.vectors
                      else prediction_agreement(ea.predictions[vid], eb.predictions[vid], rule, normalisation))
                gap = (abs(pa.metric_median - pb.metric_median)
                       if pa.metric_median is not None and pb.metric_median is not None else None)
                within = (ag.agreement_ok and gap is not None and not ag.only_a and not ag.only_b
                          and gap <= tolerance + 1e-12)
                out.append(HostAgreement(**dataclasses.asdict(ag), variant=pa.label, variant_id=vid, a=pa.host,
                                         b=pb.host, pass_a=ea.prediction_pass[vid], pass_b=eb.prediction_pass[vid],
                                         metric_gap=gap, tolerance=tolerance, within_tolerance=within,
                                         both_accepted=pa.accepted and pb.accepted))
    return out


def same_result_clause(x: HostAgreement) -> str:
    """Whether one agreement_pairs entry is the same ML result, and by which rule: 'within the
    agreement rule (at most 0.05 of ids differ) and the tolerance 0.05 (metric gap)', or 'BEYOND the
    agreement rule (2 of 7 ids differ, allowed 0.05)' (and/or the tolerance, the same ids)."""
    if x.within_tolerance:
        rule = (f"at most {x.max_differing:g} of ids differ" if x.min_cosine is None
                else f"every id at cosine >= {x.min_cosine:g}" if x.max_differing == 0
                else f"at most {x.max_differing:g} of ids below cosine {x.min_cosine:g}")
        return f"within the agreement rule ({rule}) and the tolerance {x.tolerance} (metric gap)"
    beyond = [f"the agreement rule ({x.flips} of {x.ids} ids differ, allowed {x.max_differing:g})"
              ] if not x.agreement_ok else []
    if x.metric_gap is None or x.metric_gap > x.tolerance + 1e-12:
        gap = "not measured" if x.metric_gap is None else f"{x.metric_gap:.4f}"
        beyond.append(f"the tolerance {x.tolerance} (metric gap {gap})")
    if x.only_a or x.only_b:
        beyond.append("the same ids")
    return "BEYOND " + " and ".join(beyond)


def agreement_text(x: HostAgreement) -> str:
    """'batch 1: A rtx-4090 vs B b200: 7 of 7 ids agree (100.0 %), 0 flips, metric gap 0.0000:
    within the agreement rule (...) and the tolerance 0.05 (metric gap)' (embeddings: the ids'
    cosine median and worst id too; :func:`same_result_clause`)."""
    if x.agreement is None:
        return f"{x.variant}: {x.a} vs {x.b}: no common ids"
    gap = "not measured" if x.metric_gap is None else f"{x.metric_gap:.4f}"
    extra = (f"; ids in one host only: {x.only_a} and {x.only_b}" if x.only_a or x.only_b else "")
    return (f"{x.variant}: {x.a} vs {x.b}: {ids_clause(x, share=True)}, metric gap {gap}{extra}: "
            + same_result_clause(x))


def ids_clause(x: IdAgreement, share: bool = False) -> str:
    """'7 of 7 ids agree, 0 flip(s)' of one agreement_pairs entry; for embeddings '7 of 7 ids
    agree (cosine median 1.000000, worst 0.999998 at id x), 0 flip(s)' (``share``: the percentage too)."""
    pct = f" ({100 * x.agreement:.1f} %)" if share and x.agreement is not None else ""
    return f"{x.agree} of {x.ids} ids agree{pct}{cosine_clause(x)}, {x.flips} flip(s)"


def cosine_clause(x: IdAgreement) -> str:
    """' (per-id cosine median m, worst w at id i)' of an embedding agreement, else ''."""
    if x.cosine_median is None:
        return ""
    return f" (per-id cosine median {x.cosine_median:.6f}, worst {x.cosine_worst:.6f} at id {x.worst_id})"


def needed_throughput(p: Projection, budget, catalog: Catalog, load: int, hours_available,
                      max_lots: int) -> float | None:
    """Worst-pass throughput (items/s) that configuration ``p`` would need for a package of its
    GPU cheaper than ``budget`` to cover ``load`` (same setup, same rule as the sizing); None
    when no package of its GPU (1..max_lots lots) is cheaper."""
    if p.gpu is None or p.setup_s is None:
        return None
    best = None
    for days, limit in package_limits(catalog, p.gpu, hours_available):
        for lots in range(1, max_lots + 1):
            q = quote(catalog, p.gpu, days, lots)
            if q.committed_budget >= budget:
                break
            secs = limit * 3600 - p.setup_s
            if secs > 0:
                need = load / lots / secs
                best = need if best is None else min(best, need)
    return best


def per_host_lines(cands: list[Projection], projections: list[Projection], chosen: Projection,
                   catalog: Catalog, load: int, hours_available, max_lots: int) -> list[str]:
    """The best eligible configuration on each host other than the chosen one's, with its
    committed budget and its ratio to the chosen budget; for the runner-up host, the
    worst-pass throughput it would need to win. A host with nothing eligible says why. Each figure
    ends with the caveats of what it rests on (:func:`pair_caveats`)."""
    assert chosen.sizing is not None
    budget = chosen.sizing.quote.committed_budget
    lines, runner_up = [], None
    for host in dict.fromkeys(p.host for p in projections):
        if host == chosen.host:
            continue
        best = next((p for p in cands if p.host == host), None)
        if best is None:
            why = sorted({exclusion_kind(x) for p in projections if p.host == host for x in p.exclusions})
            lines.append(f"best on {host}: none eligible ({', '.join(why) or 'no configuration'})")
            continue
        assert best.sizing is not None
        q = best.sizing.quote
        metric = ("metric not measured" if best.metric_median is None
                  else f"{best.metric_name} {best.metric_median:.4f}")
        lines.append(f"best on {host}: {best.label} at {q.committed_budget:.2f} {q.currency}, "
                     f"{float(q.committed_budget / budget):.1f}x the chosen budget ({metric})"
                     + (f"; {cav}" if (cav := pair_caveats(best, chosen)) else ""))
        if runner_up is None:
            runner_up = best
    if runner_up is not None:
        need = needed_throughput(runner_up, budget, catalog, load, hours_available, max_lots)
        q = chosen.sizing.quote
        if need is None:
            lines.append(with_caveats(f"{runner_up.host} cannot win at the declared load at any throughput: no "
                                      f"{runner_up.gpu} package "
                                      f"of 1 to {max_lots} lot(s) costs less than {budget:.2f} {q.currency}",
                                      [chosen.basis]))
        else:
            lines.append(f"{runner_up.host} would need a worst pass of {need:.2f} items/s "
                         f"(measured {runner_up.items_per_s_worst or 0:.2f}, "
                         f"{need / (runner_up.items_per_s_worst or need):.1f}x) to win with a package "
                         f"cheaper than {budget:.2f} {q.currency}"
                         + (f"; {cav}" if (cav := pair_caveats(runner_up, chosen)) else ""))
    return lines


def compare_archives(archives: list[str | Path], load_items: int | None, *, deadline: str | None = None,
                     window_start: str | None = None, tz: str | None = None,
                     catalog_path: str | None = None, max_lots: int = DEFAULT_MAX_LOTS,
                     now: datetime | None = None, allow_partial: bool = False,
                     allow_short: bool = False, metric_file: str | Path | None = None,
                     allowed_signers: str | Path | None = None) -> Comparison:
    """Check the load and the dates (:func:`calendar`), verify each archive
    (lab.compare.evidence.read_evidence, ``metric_file``: the opt-in that re-derives a user's own
    [quality] metric, hash-checked against every archive's lock; its refusals are held back until
    the set is found comparable; ``allowed_signers``: the keys trusted to sign archives, None: the
    default location's file when there is one), then :func:`compare_evidence`. Raises CompareError,
    ArchiveError (SignatureError: a signature that does not verify), PricingError as that function
    does."""
    _check_load(load_items, max_lots)
    calendar(deadline, window_start, tz, now)  # bad dates refused before any archive is verified
    return compare_evidence([read_evidence(a, metric_file, allowed_signers) for a in archives], load_items,
                            deadline=deadline,
                            window_start=window_start, tz=tz, catalog_path=catalog_path,
                            max_lots=max_lots, now=now, allow_partial=allow_partial,
                            allow_short=allow_short)


def _check_load(load_items: int | None, max_lots: int) -> None:
    """``load_items`` None (no --load: a server campaign's decision is its declared traffic) or an
    int >= 1; ``max_lots`` 1 to MAX_LOTS. Raises CompareError, one line."""
    if load_items is not None and (isinstance(load_items, bool) or not isinstance(load_items, int) or load_items < 1):
        raise CompareError(f"--load must be an integer >= 1 (items of the production load), "
                           f"got {load_items!r}")
    if isinstance(max_lots, bool) or not isinstance(max_lots, int) or not 1 <= max_lots <= MAX_LOTS:
        raise CompareError(f"--max-lots must be an integer from 1 to {MAX_LOTS} (lots considered per "
                           f"package), got {max_lots!r}; give a value in that range (default {DEFAULT_MAX_LOTS})")


def calendar(deadline: str | None, window_start: str | None, tz: str | None = None,
             now: datetime | None = None) -> tuple[datetime, datetime | None, float | None]:
    """(window start, deadline or None, hours from the start to the deadline or None) of the
    user's ISO date-times (naive ones placed in IANA zone ``tz``); the window starts ``now``
    (default: the current UTC time, to the second) when ``window_start`` is None. Hours are
    real elapsed time (both ends in UTC). Raises PricingError for a malformed date
    (lab.cost.forfaits.parse_instant) and CompareError when the deadline is not after the
    window start: the fix is an earlier window start or a later deadline."""
    start = parse_instant(window_start, tz, "window start") if window_start else \
        (now or datetime.now(timezone.utc)).replace(microsecond=0)
    dl = parse_instant(deadline, tz, "deadline") if deadline else None
    if dl is None:
        return start, None, None
    hours = (dl.astimezone(timezone.utc) - start.astimezone(timezone.utc)).total_seconds() / 3600
    if hours <= 0:
        starts = f"the window start {start.isoformat()}" if window_start else \
            f"now ({start.isoformat()}; no --window-start given, the window starts now)"
        raise CompareError(f"deadline {dl.isoformat()} is not after {starts}; give an earlier --window-start "
                           "or a later --deadline")
    return start, dl, hours


def refuse_prerequisites(evidence: list[Evidence], allow_partial: bool) -> None:
    """CompareError, one line naming every archive's own prerequisite not met: partial evidence
    without ``allow_partial``, and each refusal read_evidence held back (``Evidence.held_back``:
    the --metric-file opt-in, worded for one archive); archives with the same refusal are named
    together ('A.tar.gz: its [quality] metric ...; the same for B.tar.gz and C.tar.gz'). Called once
    the set is comparable (lab.compare.comparability.check_comparable), so that every advice
    given can be followed: none is refused by the whole-set checks after it."""
    parts = []
    partial = [f"{ev.name} ({ev.info.partial_reason or 'unfinished campaign'})"
               for ev in evidence if ev.partial]
    if partial and not allow_partial:
        parts.append(f"partial evidence refused: {'; '.join(partial)}; finish the campaign and "
                     "archive it again, or pass --allow-partial (every output then says so)")
    held: dict[str, list[str]] = {}
    for ev in evidence:
        if ev.held_back:
            held.setdefault(ev.held_back, []).append(ev.path.name)
    parts += [f"{names[0]}: {text}" + (f"; the same for {and_list(names[1:])}" if names[1:] else "")
              for text, names in held.items()]  # one subject per refusal: "its ..." stays singular
    if parts:
        raise CompareError("; ".join(parts))


def and_list(names: list[str]) -> str:
    """'A', 'A and B', 'A, B and C'."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def partial_banner(evidence: list[Evidence], tags: list[str]) -> str:
    """'' when every archive is final; else one line naming each partial archive, why, and
    the declared variants it never ran."""
    parts = []
    for ev, tag in zip(evidence, tags, strict=True):
        if ev.partial:
            never = ev.not_run
            parts.append(f"{tag} ({ev.name}) is partial ({ev.info.partial_reason or 'unfinished'})"
                         + (f"; never run there: {', '.join(never)}" if never else ""))
    return ("PARTIAL EVIDENCE compared (--allow-partial): " + "; ".join(parts)) if parts else ""


def compare_evidence(evidence: list[Evidence], load_items: int | None, *, deadline: str | None = None,
                     window_start: str | None = None, tz: str | None = None,
                     catalog_path: str | None = None, max_lots: int = DEFAULT_MAX_LOTS,
                     now: datetime | None = None, allow_partial: bool = False,
                     allow_short: bool = False) -> Comparison:
    """Check comparability, choose the catalog, project and decide.

    ``load_items``: production load in corpus items of the same mix (int >= 1); None only for
    server campaigns (their decision is the declared traffic: the offline variants are then not
    projected), refused for offline ones.
    ``deadline``/``window_start``: ISO date-times (naive ones need ``tz``); the window starts
    now (UTC) when not given. ``catalog_path``: None = the bundle's catalog, never an archive's own
    (:func:`choose_catalog`). ``max_lots``: the most lots
    considered per package. ``allow_partial``: compare archives of unfinished campaigns
    (refused otherwise); ``allow_short``: keep configurations whose passes fail the validity
    rule ([timing] min_window_s, min_accepted_passes) eligible; both are named in every output.
    Raises CompareError (not comparable, partial, catalogs in conflict, bad load or window),
    PricingError (catalog, dates). Refusals of the whole set (check_comparable) come before any
    archive's own prerequisite (:func:`refuse_prerequisites`: --allow-partial, --metric-file).
    """
    _check_load(load_items, max_lots)
    evidence = host_order(evidence)
    tags = [host_tag(i, ev) for i, ev in enumerate(evidence)]
    identity = check_comparable(evidence)  # the whole set first: no archive's own prerequisite before it
    refuse_prerequisites(evidence, allow_partial)
    if load_items is None and not all(is_server(ev) for ev in evidence):
        raise CompareError("--load is required for an offline campaign's archives: give the production load in "
                           "corpus items of the same mix, e.g. --load 2000000")
    banners = [b for b in (partial_banner(evidence, tags),) if b]
    path = []
    for ev in evidence:
        path.append(f"verified {ev.name}: {ev.files_checked} files, {len(ev.raw_rows)} raw rows, "
                    f"{ev.signature.line}; {ev.hardware}, threads {ev.threads}, {priced_as(ev)}"
                    + (" (PARTIAL)" if ev.partial else ""))
    if identity.two_models:
        path.append(f"comparable as TWO MODELS, not two rentals of one question ({'; '.join(identity.two_models)}): "
                    f"corpus sha256 {identity.corpus_sha256[:16]}..., same quality and timing rules; "
                    f"{len(identity.common_variants)} common variant(s)")
    else:
        path.append(f"comparable: corpus sha256 {identity.corpus_sha256[:16]}..., same model files, "
                    f"quality and timing rules; {len(identity.common_variants)} common variant(s)")
    start, dl, hours_available = calendar(deadline, window_start, tz, now)
    catalog, catalog_info = choose_catalog(evidence, catalog_path)
    path.append(catalog_line(catalog_info))
    timing = evidence[0].config.timing
    rule = (f"projection rule: at least {timing.min_accepted_passes} accepted pass(es) of at least "
            f"{timing.min_window_s:g} s measured window per configuration ([timing] min_window_s, "
            "min_accepted_passes)")
    projections = []
    # every variant each archive measured (a host's variant the other host never ran is still
    # that host's evidence: projected, compared across hosts only where both have it)
    order = list(identity.common_variants) + [v.variant_id for ev in evidence for v in ev.variants]
    order = list(dict.fromkeys(order))
    for ev, tag in zip(evidence, tags, strict=True):
        if load_items is None:  # server archives without --load: the serving part decides
            break
        served = served_variant_ids(ev)  # compared in the serving part, never projected
        by_id = {v.variant_id: v for v in ev.variants if v.variant_id not in served}
        for vid in (v for v in order if v in by_id):
            projections.append(project(ev, by_id[vid], catalog, load_items, hours_available, max_lots,
                                       host=tag, allow_short=allow_short))
    short = [p for p in projections if p.too_short]
    if allow_short and short:
        banners.append(f"PASSES TOO SHORT projected anyway (--allow-short): {len(short)} of "
                       f"{len(projections)} configuration(s) fail the {rule}")
    cands = [p for p in projections if p.eligible]
    cands.sort(key=lambda p: _rank(p, p.sizing))
    path.append("offline configurations not projected: no --load given (the serving decision below sizes the "
                "declared traffic)" if load_items is None else
                f"projected {len(projections)} configuration(s) to {load_items} items: "
                f"{len(cands)} eligible, {len(projections) - len(cands)} excluded; {rule}"
                + (f", {len(short)} too short" + (" (allowed)" if allow_short else " (excluded)")
                   if short else ""))
    unpriced = [tag for ev, tag in zip(evidence, tags, strict=True) if ev.cost is None]
    if unpriced:
        path.append(f"{', '.join(unpriced)}: {NO_PACKAGE}; measured figures only, no quote, "
                    "not a candidate for the budget decision")
    cross = []
    for vid in identity.common_variants:
        ps = [p for p in projections if p.variant_id == vid]
        for i, pa in enumerate(ps):
            for pb in ps[i + 1:]:
                verdict = compare_durations(list(pa.durations_s), list(pb.durations_s))
                hungry = list(pa.starved_passes) + list(pb.starved_passes)
                # a gap made by a host short of CPU is the host's, not the GPU's
                if hungry:
                    verdict = dataclasses.replace(verdict, reason=f"{verdict.reason}; {starved_text(hungry)}")
                cross.append(CrossPair(**dataclasses.asdict(verdict), variant=pa.label, a=pa.host, b=pb.host))
    config = evidence[0].config
    tolerance = float(config.quality.tolerance)
    same_rule = AgreementRule.of(dataclasses.asdict(config.quality), config.task.kind)
    agreements = agreement_pairs(evidence, projections, tags, tolerance, same_rule,
                                 config.task.normalisation if task_kind(config.task.kind).generates_text else None)
    beyond = [x for x in agreements if not x.within_tolerance]
    serving = serving_comparison(evidence, tags, catalog, max_lots, same_rule, config.task.normalisation
                                 if task_kind(config.task.kind).generates_text else None, allow_short)
    rule_text = same_rule.text("the other host's")
    path.append(f"same ML result: {len(agreements) - len(beyond)} of {len(agreements)} host pair(s) x "
                f"variant within the agreement rule ({rule_text}) and the tolerance {tolerance} (metric gap)"
                + (f"; beyond them: {'; '.join(agreement_text(x) for x in beyond)}" if beyond else "")
                + (f"; served outputs: {sum(x.result.same for x in serving.agreements)} of {len(serving.agreements)} "
                   "host pair(s) x server variant the same" if serving is not None else ""))
    chosen = cands[0] if cands else None
    motivation: list[str] = []
    change: list[str] = []
    per_host: list[str] = []
    stands_on = ""
    if load_items is None:
        motivation.append("no --load given: the offline configurations are not projected; the serving part "
                          "decides which package holds the declared traffic")
    elif chosen is None:
        motivation.append("no configuration is accepted, feasible and covered by a package"
                          + (" before the deadline" if dl is not None else "")
                          + f" ({exclusion_counts(projections)}): commit no package on this evidence")
        if unpriced:
            motivation.append(f"{', '.join(unpriced)} not considered: {NO_PACKAGE}")
        if short and not allow_short:
            motivation.append(f"{len(short)} configuration(s) excluded as too short to project "
                              "(pass --allow-short to project them anyway, named in every output)")
    else:
        assert chosen.sizing is not None  # eligible configurations are sized
        q = chosen.sizing.quote
        motivation.append(f"{len(cands)} eligible configuration(s); chosen for the lowest committed "
                          f"budget ({q.committed_budget:.2f} {q.currency}), then fewer failures, "
                          "then throughput")
        if unpriced:
            motivation.append(f"{', '.join(unpriced)} not considered: {NO_PACKAGE}")
        if len(cands) > 1:
            nxt = cands[1]
            assert nxt.sizing is not None
            nq = nxt.sizing.quote
            v = compare_durations(list(chosen.durations_s), list(nxt.durations_s))
            if q.committed_budget < nq.committed_budget:
                motivation.append(f"next: {nxt.key} at {nq.committed_budget:.2f} {nq.currency}"
                                  + (f" ({cav})" if (cav := pair_caveats(chosen, nxt)) else ""))
            elif chosen.failures < nxt.failures:
                motivation.append(f"same budget as {nxt.key}; fewer failures ({chosen.failures} "
                                  f"vs {nxt.failures})")
            else:
                motivation.append(f"same budget and failures as {nxt.key}; higher median throughput")
                if not v.distinguished:
                    hunger = starved_text(list(chosen.starved_passes) + list(nxt.starved_passes))
                    motivation.append(f"but the measurements do not distinguish {chosen.key} from "
                                      f"{nxt.key} ({v.reason}{'; ' + hunger if hunger else ''}): the "
                                      "tie-break is not evidence of a faster configuration")
            if v.distinguished and q.committed_budget >= nq.committed_budget:
                motivation.append(f"durations of {chosen.key} and {nxt.key}: {v.reason}")
        motivation += steady_state_caveats(cands)
        if chosen.too_short:
            motivation.append(f"{chosen.key}: {chosen.too_short}; projected only because --allow-short "
                              "was given")
        change = what_would_change(cands, chosen, catalog, load_items, hours_available, max_lots)
        per_host = per_host_lines(cands, projections, chosen, catalog, load_items, hours_available,
                                  max_lots)
        stands_on = _stands_on(chosen, agreements)
        path.append(f"decision: {chosen.key} ({chosen.archive}, {chosen.hardware}), {q.days}-day package x {q.lots} "
                    f"lot(s) of {q.gpu_name}, committed budget {q.committed_budget:.2f} {q.currency}, "
                    f"covers {load_items} items{tokens_clause(chosen)}; {chosen.spread_text()}; {stands_on}"
                    + (f"; {cav}" if (cav := rests_on([chosen.basis])) else ""))
    if serving is not None:
        path.append(serving_path(serving))
    if chosen is None and load_items is not None:
        hint = (f"; {len(short)} configuration(s) too short to project: --allow-short projects them, "
                "named in every output" if short and not allow_short else "")
        path.append(f"decision: none: {exclusion_counts(projections)} (each configuration's reasons in "
                    f"decision.md){hint}")
    path = banners + path
    archives_info = tuple(ComparedArchive(name=e.name, host=tag, path=str(e.path), hardware=e.hardware,
                                          threads=e.threads, gpu=e.gpu, files_checked=e.files_checked,
                                          signature=e.signature.line, cost=e.cost,
                                          driver=e.manifest.gpu.driver if e.manifest.gpu is not None else None,
                                          partial=e.partial, not_run=tuple(e.not_run),
                                          catalog_version=e.catalog.version if e.catalog else None,
                                          catalog_sha256=e.catalog.sha256 if e.catalog else None)
                          for e, tag in zip(evidence, tags, strict=True))
    return Comparison(archives_info, identity, tuple(projections), load_items, start, dl,
                      hours_available, max_lots, catalog.path, chosen, tuple(motivation),
                      tuple(cross), tuple(change), tuple(path), tuple(banners), catalog_info,
                      tuple(agreements), tuple(per_host), stands_on, serving, ran_by_entry(evidence[0]))


def ran_by_entry(ev: Evidence) -> str:
    """What ran on every archive when the user's own code did ([task] entry): the single-archive
    note's sentence (lab.report.decision_note.what_ran); '' when the lab's own job ran."""
    task = ev.config.task if ev.config is not None else None
    if task is None or not task.entry:
        return ""
    return what_ran(task_kind(task.kind), task.entry)


def tokens_clause(p: Projection) -> str:
    """', 550000 output tokens projected, 200.00 USD per million output tokens' for a generation
    configuration priced at the load (Projection.cost_per_million_output_tokens); '' otherwise."""
    if p.cost_per_million_output_tokens is None or p.sizing is None:
        return ""
    return (f", {p.output_tokens_at_load} output tokens projected, "
            f"{money(p.cost_per_million_output_tokens, p.sizing.quote.currency)} per million output tokens")


def _stands_on(chosen: Projection, agreements: list[HostAgreement]) -> str:
    """Which result the decision stands on: the chosen host's predictions for its variant, and
    every other host whose same variant agrees or disagrees beyond the tolerance: 'stands on A
    rtx-4090's result for batch 1 (the predictions of pass A rtx-4090 / p001-...); the same ML result on B b200
    (7 of 7 ids agree, metric gap 0.0000: within the agreement rule and the tolerance)'."""
    mine = [x for x in agreements if x.variant_id == chosen.variant_id
            and chosen.host in (x.a, x.b)]
    source = (f"the predictions of pass {pass_name(chosen.prediction_pass, chosen.host)}" if chosen.prediction_pass
              else "no predictions file in its archive")
    text = f"stands on {chosen.host}'s result for {chosen.label} ({source})"
    agree = [f"{x.other(chosen.host)} ({x.agree} of {x.ids} ids agree{cosine_clause(x)}, "
             "metric gap "
             f"{'not measured' if x.metric_gap is None else format(x.metric_gap, '.4f')}: within the agreement "
             "rule and the tolerance)" for x in mine if x.within_tolerance]
    differ = [x for x in mine if not x.within_tolerance]
    if agree:
        text += f"; the same ML result on {', '.join(agree)}"
    if differ:
        text += "; NOT the same ML result on " + "; ".join(
            f"{x.other(chosen.host)} ({x.flips} flip(s) of {x.ids} ids{cosine_clause(x)}, "
            f"metric gap {'not measured' if x.metric_gap is None else format(x.metric_gap, '.4f')})"
            for x in differ)
    if not mine:
        text += "; no other host's predictions of this variant to compare"
    return text
