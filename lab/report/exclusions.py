"""Exclusion records of a decision: each configuration's ``exclusions`` are one line per reason
it cannot be chosen, "kind: why" (the campaign's decision note, lab.report.decision_note, writes quality,
memory, failures, deadline, calendar or price; a comparison across archives, lab.compare.projection,
quality, memory, failures, too short to project, price or calendar). Counted here once, so the campaign's
decision.md and ``iteralab compare`` (its decision.md and the terminal) say the same counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol


class Excludable(Protocol):
    """A judged configuration: ``lab.report.decision_note.Assessment`` or ``lab.compare.projection.Projection``."""

    @property
    def exclusions(self) -> tuple[str, ...]: ...


def exclusion_kind(reason: str) -> str:
    """The kind of one exclusion entry: the word before its first ':' ("quality" of
    "quality: rejected: nn_accuracy 0.3500 < threshold 0.5")."""
    return reason.split(":", 1)[0]


def exclusion_counts(configurations: Sequence[Excludable]) -> str:
    """'6 of 6 excluded: quality 6' or '6 of 6 excluded: quality 4, price 2': how many
    configurations are excluded, then per kind (:func:`exclusion_kind`) how many it excludes,
    most first (a configuration excluded for two kinds counts in each); read from the same
    ``exclusions`` the decision note lists per configuration. '0 of N excluded' when none is."""
    counts = Counter(k for c in configurations for k in dict.fromkeys(exclusion_kind(x) for x in c.exclusions))
    excluded = sum(1 for c in configurations if c.exclusions)
    text = f"{excluded} of {len(configurations)} excluded"
    return text + (": " + ", ".join(f"{k} {n}" for k, n in counts.most_common()) if counts else "")
