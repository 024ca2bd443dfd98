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

from lab.compare.comparability import check_comparable
from lab.compare.evidence import NO_PACKAGE, CompareError, Evidence, load_evidence
from lab.compare.projection import Projection, capacity_items, lot_hours, project
from lab.cost.forfaits import Catalog, load_catalog, parse_instant
from lab.cost.sizing import cheapest_covering, package_limits
from lab.report.distinguish import compare_durations

DEFAULT_MAX_LOTS = 8
MAX_LOTS = 100  # --max-lots above it: the break-even search grows with its square (issue 23 part 3)


@dataclass(frozen=True)
class Comparison:
    """Result of :func:`compare_archives`; everything the tables and the report show."""
    archives: tuple[dict, ...]  # name, path, hardware, threads, gpu, files_checked, cost
    identity: dict
    projections: tuple[Projection, ...]
    load_items: int
    window_start: datetime
    deadline: datetime | None
    hours_available: float | None
    max_lots: int
    catalog_path: str
    chosen: Projection | None
    motivation: tuple[str, ...]
    cross_pairs: tuple[dict, ...]
    what_would_change: tuple[str, ...]
    path: tuple[str, ...]  # the decision path, one line per step


def host_letter(i: int) -> str:
    """A, B, ... Z, AA, AB, ...: the archive's position on the command line."""
    return chr(65 + i) if i < 26 else host_letter(i // 26 - 1) + chr(65 + i % 26)


def priced_as(ev: Evidence) -> str:
    """'priced as b200', or the reason nothing is priced (no [cost]: no package, issue 11)."""
    return f"priced as {ev.gpu}" if ev.gpu else f"not priced: {NO_PACKAGE}"


def host_tag(i: int, ev: Evidence) -> str:
    """'A b200': the archive's letter and the GPU of its package ('B unpriced' without [cost])."""
    return f"{host_letter(i)} {ev.gpu or 'unpriced'}"


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
    below the declared load, found at the capacity edges of every candidate package."""
    edges = set()
    for p in cands:
        assert p.gpu is not None  # eligible: its archive declared a package
        for _days, limit in package_limits(catalog, p.gpu, hours_available):
            for lots in range(1, max_lots + 1):
                cap = capacity_items(p, limit, lots)
                edges.update({cap, cap + 1})
    out = []
    for direction, loads in (("above", sorted(e for e in edges if e > load)),
                             ("below", sorted((e for e in edges if 0 < e < load), reverse=True))):
        for x in loads:
            w = _winner_at(cands, catalog, x, hours_available, max_lots)
            if w is None:
                if direction == "above":
                    out.append(f"above {x - 1} items no configuration covers the load "
                               f"{'before the deadline' if hours_available else 'in any package'}")
                    break
                continue
            p, s = w
            if p.key != chosen.key:
                q = s.quote
                out.append(f"break-even: at a load of {x} items ({direction} the declared "
                           f"{load}) the choice becomes {p.key} on {p.hardware}: {q.days}-day "
                           f"package x {q.lots} lot(s) of {q.gpu_name}, committed "
                           f"{q.committed_budget:.2f} {q.currency}")
                break
        else:
            out.append(f"no load {direction} {load} items within the package edges changes the choice")
    return out


def steady_state_caveats(ranked: list[Projection]) -> list[str]:
    """Motivation lines for the chosen configuration (``ranked[0]``) and the next one, whose
    durations the motivation uses, when they include recompilation in the measured window
    (``Projection.durations_caveat``): their packages are sized on figures that are not
    steady-state. [] when neither recompiled."""
    return [f"{p.key}: {p.durations_caveat}; the package sized on its worst pass rests on them"
            for p in ranked[:2] if p.durations_caveat]


def compare_archives(archives: list[str | Path], load_items: int, *, deadline: str | None = None,
                     window_start: str | None = None, tz: str | None = None,
                     catalog_path: str | None = None, max_lots: int = DEFAULT_MAX_LOTS,
                     now: datetime | None = None) -> Comparison:
    """Verify, check comparability, project and decide.

    ``load_items``: production load in corpus items of the same mix (int >= 1).
    ``deadline``/``window_start``: ISO date-times (naive ones need ``tz``); the window starts
    now (UTC) when not given. ``catalog_path``: None = the shipped catalog. ``max_lots``:
    the most lots considered per package. Raises CompareError (not comparable, bad load or
    window), ArchiveError (unreadable archive), PricingError (catalog, dates).
    """
    if isinstance(load_items, bool) or not isinstance(load_items, int) or load_items < 1:
        raise CompareError(f"--load must be an integer >= 1 (items of the production load), "
                           f"got {load_items!r}")
    if isinstance(max_lots, bool) or not isinstance(max_lots, int) or not 1 <= max_lots <= MAX_LOTS:
        raise CompareError(f"--max-lots must be an integer from 1 to {MAX_LOTS} (lots considered per "
                           f"package), got {max_lots!r}; give --max-lots {MAX_LOTS} or fewer")
    path = []
    evidence = []
    for a in archives:
        ev = load_evidence(a)
        evidence.append(ev)
        path.append(f"verified {ev.name}: {ev.files_checked} files, {len(ev.raw_rows)} raw rows; "
                    f"{ev.hardware}, threads {ev.threads}, {priced_as(ev)}")
    identity = check_comparable(evidence)
    path.append(f"comparable: corpus sha256 {identity['corpus_sha256'][:16]}..., same model files, "
                f"quality and timing rules; {len(identity['common_variants'])} common variant(s)")
    start = parse_instant(window_start, tz, "window start") if window_start else \
        (now or datetime.now(timezone.utc)).replace(microsecond=0)
    dl = parse_instant(deadline, tz, "deadline") if deadline else None
    hours_available = None
    if dl is not None:
        hours_available = (dl.astimezone(timezone.utc) - start.astimezone(timezone.utc)).total_seconds() / 3600
        if hours_available <= 0:
            raise CompareError(f"deadline {dl.isoformat()} is not after the window start "
                               f"{start.isoformat()}; give a later --deadline or --window-start")
    catalog = load_catalog(catalog_path)
    for ev in evidence:
        named = ev.cost.catalog if ev.cost else None
        if named and str(named) != str(catalog_path):
            path.append(f"{ev.name} names catalog {named} in its [cost]; priced with {catalog.path} "
                        "(pass --catalog FILE to use another)")
    projections = []
    tags = [host_tag(i, ev) for i, ev in enumerate(evidence)]
    for ev, tag in zip(evidence, tags, strict=True):
        by_id = {v["variant_id"]: v for v in ev.summary}
        for vid in identity["common_variants"]:
            projections.append(project(ev, by_id[vid], catalog, load_items, hours_available, max_lots,
                                       host=tag))
    cands = [p for p in projections if p.eligible]
    cands.sort(key=lambda p: _rank(p, p.sizing))
    path.append(f"projected {len(projections)} configuration(s) to {load_items} items: "
                f"{len(cands)} eligible, {len(projections) - len(cands)} excluded")
    unpriced = [tag for ev, tag in zip(evidence, tags, strict=True) if ev.cost is None]
    if unpriced:
        path.append(f"{', '.join(unpriced)}: {NO_PACKAGE}; measured figures only, no quote, "
                    "not a candidate for the budget decision")
    cross = []
    for vid in identity["common_variants"]:
        ps = [p for p in projections if p.variant_id == vid]
        for i, pa in enumerate(ps):
            for pb in ps[i + 1:]:
                v = compare_durations(list(pa.durations_s), list(pb.durations_s))
                cross.append({"variant": pa.label, "a": pa.host, "b": pb.host, **v.to_json()})
    chosen = cands[0] if cands else None
    motivation: list[str] = []
    change: list[str] = []
    if chosen is None:
        motivation.append("no configuration is accepted, feasible and covered by a package before "
                          "the deadline: commit no package on this evidence")
        if unpriced:
            motivation.append(f"{', '.join(unpriced)} not considered: {NO_PACKAGE}")
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
                motivation.append(f"next: {nxt.key} at {nq.committed_budget:.2f} {nq.currency}")
            elif chosen.failures < nxt.failures:
                motivation.append(f"same budget as {nxt.key}; fewer failures ({chosen.failures} "
                                  f"vs {nxt.failures})")
            else:
                motivation.append(f"same budget and failures as {nxt.key}; higher median throughput")
                if not v.distinguished:
                    motivation.append(f"but the measurements do not distinguish {chosen.key} from "
                                      f"{nxt.key} ({v.reason}): the tie-break is not evidence of a "
                                      "faster configuration")
            if v.distinguished and q.committed_budget >= nq.committed_budget:
                motivation.append(f"durations of {chosen.key} and {nxt.key}: {v.reason}")
        motivation += steady_state_caveats(cands)
        change = what_would_change(cands, chosen, catalog, load_items, hours_available, max_lots)
        path.append(f"decision: {chosen.key} ({chosen.archive}, {chosen.hardware}), {q.days}-day package x {q.lots} "
                    f"lot(s) of {q.gpu_name}, committed budget {q.committed_budget:.2f} {q.currency}, "
                    f"covers {load_items} items")
    if chosen is None:
        path.append("decision: none (see the exclusions in decision.md)")
    archives_info = tuple({"name": e.name, "host": tag, "path": str(e.path), "hardware": e.hardware,
                           "threads": e.threads, "gpu": e.gpu,
                           "files_checked": e.files_checked,
                           "cost": dataclasses.asdict(e.cost) if e.cost else None,
                           "driver": (e.manifest.get("gpu") or {}).get("driver")}
                          for e, tag in zip(evidence, tags, strict=True))
    return Comparison(archives_info, identity, tuple(projections), load_items, start, dl,
                      hours_available, max_lots, catalog.path, chosen, tuple(motivation),
                      tuple(cross), tuple(change), tuple(path))
