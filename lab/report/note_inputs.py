"""What the decision note is given besides the summary: the campaign as it names it
(``NoteCampaign``, made from a locked protocol by lab.report.decision_note.decision_campaign, or
from a dict of the same keys) and the package it prices (``NotePricing``, from the dict that
lab.report.decision_note.decision_pricing makes, with a variant's overrides), each read by
attribute."""

from __future__ import annotations

from dataclasses import dataclass

from lab.facts.constants import DEFAULT_DELIVERABLES, DEFAULT_LOTS


@dataclass(frozen=True)
class NoteCampaign:
    """The campaign as its decision note names it: ``name`` (its [campaign] name), the
    ``question`` it answers, its ``deadline`` (ISO 8601 with offset; None: none given), the
    ``deliverables`` announced (distinct useful corpora; checked by the note: an int >= 1),
    ``text_cut`` (what cut a generation task's text, "[task] max_text_tokens 64"; "" when the
    variants' max_length did) and ``ran`` (lab.report.decision_note.what_ran; "": not said)."""

    name: str = "campaign"
    question: str | None = None
    deadline: str | None = None
    deliverables: int = DEFAULT_DELIVERABLES
    text_cut: str | None = ""
    ran: str | None = ""


@dataclass(frozen=True)
class NotePricing:
    """The package one variant is priced as (keys of lab.report.decision_note.decision_pricing):
    the catalog (``catalog_path``; None: the shipped one), the package's ``gpu`` and ``days`` (3, 7
    or 30, as given: checked by the note; no gpu or days: nothing priced), ``lots`` bought, the
    campaign window (``window_start``/``window_end``, ISO 8601; None: not given) and ``tz`` (the
    zone of a time given without offset)."""

    catalog_path: str | None = None
    gpu: str | None = None
    days: int | str | None = None
    lots: int = DEFAULT_LOTS
    window_start: str | None = None
    window_end: str | None = None
    tz: str | None = None
