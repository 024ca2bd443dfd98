"""Whether two sets of pass durations are told apart by the measurements: one rule, per pair.

Seed (section on reading durations): "Se la dispersione osservata è paragonabile allo scarto
tra le mediane, la serie non distingue ancora le opzioni" (when the observed spread is
comparable to the gap between the medians, the series does not yet distinguish the options).

The rule, chosen so that one slow pass (a cold first pass, a noisy neighbour) cannot flip it:

- the two ranges do not overlap (every pass of one is faster than every pass of the
  other): the gap is larger than both spreads, so the pair is **distinguished**;
- otherwise an exact two-sided Mann-Whitney rank test (all C(n+m, n) splits of the pooled
  durations enumerated, mid-ranks for ties; 252 splits for 5 vs 5) gives a p-value, and
  the pair is distinguished when p <= ``ALPHA``. A slow pass changes U only by the number
  of the other's passes it overtakes, and the spread does not enter at all: a 96 s pass
  among 31-36 s ones, or a cold first pass just slower than the other's fastest (4 of 5
  faster than all 5, p = 0.016), leaves the pair distinguished.

Small samples are called small: with n and m passes the exact test cannot give a p-value
below 2 / C(n+m, n) (every pass of one side faster than every pass of the other), so a pair
whose sample sizes cannot reach ``ALPHA`` is never called distinguished, whatever its ranges:
2 vs 2 passes (smallest p 0.333) or 3 vs 3 (0.100) say "not enough passes to distinguish";
4 vs 4 (0.029) or 3 vs 5 (0.036) can be distinguished. Non-overlapping ranges alone are a
one-in-three chance at 2 vs 2. The seed's 5 repetitions (smallest p 0.008) stay the default.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import combinations
from math import comb

from lab.facts.numbers import beside

ALPHA = 0.05
MAX_EXACT_SPLITS = 200_000  # C(n+m, n) above this is not enumerated (20 vs 20 would be 1.4e11)


@dataclass(frozen=True)
class PairVerdict:
    """Verdict for durations ``a`` against ``b`` (seconds of the measured window).

    ``p_value``: exact two-sided Mann-Whitney p (None when not computed); ``u_a``: number of
    (a, b) pairs with a slower than b (ties count 1/2); ``ranges_disjoint``: max of one side
    below min of the other. ``distinguished`` follows the module's rule; ``reason`` says why
    in one line.
    """
    n_a: int
    n_b: int
    ranges_disjoint: bool
    u_a: float | None
    p_value: float | None
    distinguished: bool
    reason: str

    def to_json(self) -> dict:
        return asdict(self)


def _midranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def exact_mann_whitney(a: list[float], b: list[float]) -> tuple[float, float]:
    """(U_a, two-sided exact p) for samples ``a`` and ``b``.

    U_a counts pairs (x in a, y in b) with x > y, ties 1/2. p is the share of all C(n+m, n)
    ways of labelling the pooled values that give a rank sum at least as far from its mean
    as the observed one (exact permutation distribution, ties kept as mid-ranks).
    Raises ValueError for an empty sample or more than MAX_EXACT_SPLITS splits.
    """
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        raise ValueError("both samples need at least one duration")
    if comb(n + m, n) > MAX_EXACT_SPLITS:
        raise ValueError(f"{n} vs {m} durations: too many splits for an exact test")
    ranks = _midranks(list(a) + list(b))
    observed = sum(ranks[:n])
    mean = n * (n + m + 1) / 2
    dev = abs(observed - mean) - 1e-9
    total = extreme = 0
    for idx in combinations(range(n + m), n):
        total += 1
        if abs(sum(ranks[i] for i in idx) - mean) >= dev:
            extreme += 1
    return observed - n * (n + 1) / 2, extreme / total


def smallest_p(n: int, m: int) -> float:
    """Smallest two-sided exact Mann-Whitney p-value that ``n`` vs ``m`` samples can give
    (complete separation, no ties): 2 / C(n+m, n), at most 1. 2 vs 2 -> 0.333, 3 vs 3 -> 0.1,
    4 vs 4 -> 0.029, 5 vs 5 -> 0.008."""
    return min(1.0, 2 / comb(n + m, n)) if n and m else 1.0


def can_distinguish(n: int, m: int) -> bool:
    """Whether ``n`` vs ``m`` passes are enough for the exact test to reach ALPHA."""
    return n >= 2 and m >= 2 and smallest_p(n, m) <= ALPHA


TOO_FEW = "not enough passes to distinguish"
"""How a pair's reason begins when the sizes alone keep the test from reaching ALPHA."""


def compare_durations(a: list[float], b: list[float]) -> PairVerdict:
    """Apply the module's rule to two lists of durations (s)."""
    a, b = [float(x) for x in a], [float(x) for x in b]
    disjoint = bool(a and b) and (max(a) < min(b) or max(b) < min(a))
    if not can_distinguish(len(a), len(b)):
        u, p = exact_mann_whitney(a, b) if a and b else (None, None)
        return PairVerdict(len(a), len(b), disjoint, u, p, False,
                           f"{TOO_FEW}: n = {len(a)} and {len(b)} "
                           f"(smallest p the exact test can give with these sizes: "
                           f"{beside(smallest_p(len(a), len(b)), ALPHA, 3)} > {ALPHA}; "
                           "4 and 4 or 3 and 5 can reach it)")
    u, p = exact_mann_whitney(a, b)
    if disjoint:
        faster = "first" if max(a) < min(b) else "second"
        return PairVerdict(len(a), len(b), True, u, p, True,
                           f"ranges do not overlap (every pass of the {faster} is faster); "
                           f"exact Mann-Whitney p = {p:.3f}")
    if p <= ALPHA:
        return PairVerdict(len(a), len(b), False, u, p, True,
                           f"ranges overlap but exact Mann-Whitney p = {beside(p, ALPHA, 3)} <= {ALPHA}")
    return PairVerdict(len(a), len(b), False, u, p, False,
                       f"ranges overlap and exact Mann-Whitney p = {beside(p, ALPHA, 3)} > {ALPHA}: "
                       "spread comparable to the gap, not distinguished")
