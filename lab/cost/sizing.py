"""Smallest package of the catalog that covers a projected job (days x lots).

Prices come only from :func:`lab.cost.forfaits.quote` (committed budget = price per lot x
lots, seed: "Calcolare il costo impegnato"). A package covers the job when the hours one
lot needs fit in the package's hours and in the hours left before the deadline; nothing
is extended automatically (seed: "non dare per scontata una proroga automatica").
Standard library only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lab.cost.forfaits import Catalog, Quote, known_gpu, quote


@dataclass(frozen=True)
class Sizing:
    """The chosen package: its quote, hours one lot needs, and the hours it may use
    (min of the package's hours and the hours before the deadline)."""
    quote: Quote
    hours_needed: float
    hours_allowed: float


def capacity_items(hours: float, lots: int, items_per_s: float | None, setup_s: float | None = 0.0) -> int:
    """Largest load (items) ``lots`` lots process in ``hours`` each at ``items_per_s`` after a
    set-up of ``setup_s`` seconds per lot (0 when the set-up alone does not fit, or nothing was
    measured). The one capacity rule of the decision note and of compare's sizing."""
    if not items_per_s or setup_s is None:
        return 0
    return max(0, int((hours * 3600 - setup_s) * items_per_s * lots))


def serving_lots(peak_rate: float, rate_per_card: float, cards_per_lot: int) -> int:
    """Lots a declared peak traffic needs (issue 36): ``peak_rate`` (req/s) over one server per card
    each holding ``rate_per_card`` (req/s: the highest measured rate at which the latency objective
    held on one card), ``cards_per_lot`` cards per lot, requests balanced across the cards. The
    rate a card holds is what was measured; that N servers hold N times it assumes nothing shared
    between cards (the host's CPU, its network) binds first. Raises ValueError for a rate <= 0."""
    import math

    if not peak_rate > 0 or not rate_per_card > 0 or cards_per_lot < 1:
        raise ValueError(f"serving_lots needs rates > 0 and cards >= 1, got {peak_rate}, {rate_per_card}, "
                         f"{cards_per_lot}")
    return max(1, math.ceil(peak_rate / (rate_per_card * cards_per_lot) - 1e-9))


def served_requests(average_rate: float, hours: float) -> float:
    """Requests a declared average traffic (req/s) sends in ``hours``: what a committed package is
    divided by for its cost per request (the package is paid whatever the traffic uses of it)."""
    return average_rate * hours * 3600.0


def package_limits(catalog: Catalog, gpu: str, hours_available: float | None) -> list[tuple[int, float]]:
    """[(days, hours a lot may work)] for each package of ``gpu`` in the catalog, shortest first.
    ``hours_available``: hours from the window start to the deadline (None: no deadline)."""
    gpu = known_gpu(catalog, gpu)
    out = []
    for row in sorted((r for r in catalog.rows if r.gpu == gpu), key=lambda r: r.days):
        limit = float(row.package_hours)
        if hours_available is not None:
            limit = min(limit, hours_available)
        out.append((row.days, limit))
    return out


def cheapest_covering(catalog: Catalog, gpu: str, hours_needed: Callable[[int], float],
                      hours_available: float | None, max_lots: int) -> Sizing | None:
    """Lowest committed budget among the catalog's packages of ``gpu`` (each of its days,
    1..``max_lots`` lots) whose lots each finish within the allowed hours.

    ``hours_needed(lots)`` gives the hours one lot works when the job is split over ``lots``
    lots. Ties: fewer lots, then fewer days. Returns None when no package covers the job.
    Raises PricingError for an unknown GPU.
    """
    best: Sizing | None = None
    for days, limit in package_limits(catalog, gpu, hours_available):
        for lots in range(1, max_lots + 1):
            need = hours_needed(lots)
            if need > limit:
                continue
            q = quote(catalog, gpu, days, lots)
            cand = Sizing(q, need, limit)
            if best is None or (q.committed_budget, q.lots, q.days) < \
                    (best.quote.committed_budget, best.quote.lots, best.quote.days):
                best = cand
            break  # more lots of the same package only cost more
    return best
