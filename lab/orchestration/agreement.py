"""The agreement rule: is a pass the same ML result as the reference variant's, id by id?

The seed fixes before timing a threshold *and* a tolerance relative to a reference; the metric's
gap to the reference bounds the aggregate, this rule bounds the ids. Each id of a pass is compared
with the same id of the reference pass (the reference variant's first valid pass; the reference
variant's own later passes are compared with it too) by its task kind's test:

- classification and custom: the label differs;
- generation: the output differs after the declared normalisation
  (lab.passes.tasks.text_metrics.output_equality);
- embedding: the vectors' cosine is below ``min_cosine``
  (lab.passes.tasks.embedding_metrics.cosine_agreement).

The pass is the same ML result when the share of differing ids is at most ``max_differing``.
Both values are [quality] keys, locked with the protocol; a campaign file that leaves them out
takes its kind's default (the kind object's ``agreement_max_differing``, from
lab.facts.constants.AGREEMENT_MAX_DIFFERING_*, and AGREEMENT_MIN_COSINE, which say why), or
under [quality] metric = "agreement" the rule its threshold states. The one
definition validation (every pass), ``archive verify`` (lab.evidence.rederive) and compare (two
rentals' same variant, lab.compare.decision) apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lab.facts.constants import AGREEMENT, AGREEMENT_MIN_COSINE
from lab.facts.numbers import beside
from lab.kinds import task_kind

NOT_CHECKED = "not checked"
"""The agreement cell of a pass the rule did not judge: no reference pass yet, ids or format wrong,
or a record written before the rule existed."""
_EPS = 1e-12


@dataclass(frozen=True)
class AgreementRule:
    """The locked rule for a task ``kind``: at most ``max_differing`` (a share in [0, 1]) of the
    compared ids may differ from the reference pass's; for embeddings an id differs when its
    cosine is below ``min_cosine`` (None for the other kinds)."""

    kind: str
    max_differing: float
    min_cosine: float | None = None

    @classmethod
    def of(cls, quality: Mapping, kind: str) -> AgreementRule:
        """The rule of the [quality] table ``quality`` (a dict: its ``max_differing`` and
        ``min_cosine``, absent or None = the default) for a task of ``kind`` (the [task] kind; a
        custom task's labels are judged as classification's). The default is the kind's
        (lab.facts.constants), except under [quality] metric = "agreement", whose threshold already
        states the rule and is not contradicted: at most 1 - threshold of the labels or outputs
        differ; every vector at cosine >= threshold."""
        declared = task_kind(kind)
        share, cosine = quality.get("max_differing"), quality.get("min_cosine")
        if quality.get("metric") == AGREEMENT:
            threshold = float(quality["threshold"])
            share = (0.0 if declared.by_cosine else round(1.0 - threshold, 12)) if share is None else share
            cosine = threshold if cosine is None else cosine
        return cls(kind, float(declared.agreement_max_differing if share is None else share),
                   float(AGREEMENT_MIN_COSINE if cosine is None else cosine) if declared.by_cosine else None)

    @property
    def noun(self) -> str:
        return task_kind(self.kind).agreement_noun

    def text(self, against: str = "the reference pass's") -> str:
        """The rule in words: 'at most 0.05 of the ids' labels differ from the reference pass's';
        embeddings: 'every id's vector at cosine >= 0.999 with the reference pass's' (``against``:
        what the ids are compared with, e.g. "the other host's" in compare)."""
        if self.min_cosine is None:
            return f"at most {self.max_differing:g} of the ids' {self.noun} differ from {against}"
        if self.max_differing == 0:
            return f"every id's vector at cosine >= {self.min_cosine:g} with {against}"
        return f"at most {self.max_differing:g} of the ids' vectors below cosine {self.min_cosine:g} with {against}"

    def differs(self, per_id: np.ndarray) -> np.ndarray:
        """Which ids differ (bool, shape (n,)) given ``per_id``: 1.0/0.0 for an equal/different
        label or output, the cosine for an embedding."""
        if self.min_cosine is None:
            return per_id < 1.0
        return per_id < self.min_cosine - _EPS

    def judge(self, per_id: np.ndarray, ids: Sequence[str]) -> AgreementCheck:
        """The check of one pass (or one rental's variant) against its reference: ``per_id`` as
        :meth:`differs` reads it, ``ids`` the ids in the same order (n >= 1)."""
        differ = self.differs(per_id)
        low = int(np.argmin(per_id)) if self.min_cosine is not None and len(ids) else None
        return AgreementCheck(self, len(ids), int(np.count_nonzero(differ)),
                              None if low is None else round(float(per_id[low]), 6),
                              None if low is None else ids[low])


@dataclass(frozen=True)
class AgreementCheck:
    """The rule applied: ``ids`` compared, ``differing`` of them; for embeddings the lowest cosine
    and its id (None otherwise)."""

    rule: AgreementRule
    ids: int
    differing: int
    lowest_cosine: float | None = None
    lowest_id: str | None = None

    @property
    def share(self) -> float:
        """The share of ids that differ (0.0 with no id), rounded to 6 decimals."""
        return round(self.differing / self.ids, 6) if self.ids else 0.0

    @property
    def ok(self) -> bool:
        """At most ``max_differing`` of the ids differ (and at least one id was compared)."""
        return self.ids > 0 and self.differing <= self.rule.max_differing * self.ids + _EPS

    def figures(self, against: str) -> str:
        """'4 of 17 labels differ from batch/batch_size=1' (``against``: what the ids were
        compared with); embeddings: '3 of 17 vectors below cosine 0.999 with X (lowest 0.68 at id y)'."""
        if self.rule.min_cosine is None:
            return f"{self.differing} of {self.ids} {self.rule.noun} differ from {against}"
        low = "" if self.lowest_cosine is None else f" (lowest {self.lowest_cosine:.6f} at id {self.lowest_id})"
        return f"{self.differing} of {self.ids} vectors below cosine {self.rule.min_cosine:g} with {against}{low}"

    def reason(self, against: str) -> str:
        """The rejection reason: 'not the same ML result: 4 of 17 labels differ from
        batch/batch_size=1, allowed 0.05 (share 0.2353)' (the share printed on its side of the
        allowed one, lab.facts.numbers.beside)."""
        return (f"not the same ML result: {self.figures(against)}, allowed {self.rule.max_differing:g} "
                f"(share {beside(self.share, self.rule.max_differing, 4)})")

    def fields(self) -> dict:
        """The Validation fields of this check (lab.passes.records.Validation ``agreement_*``)."""
        return {"agreement_ids": self.ids, "agreement_differing": self.differing,
                "agreement_max_differing": self.rule.max_differing, "agreement_min_cosine": self.rule.min_cosine,
                "agreement_ok": self.ok}


@dataclass(frozen=True)
class MapAgreement:
    """Two prediction maps {id: label, or a generation's output} judged per id (:func:`judge_maps`):
    the rule's check over the ids both hold, and how many ids only one of them holds."""

    check: AgreementCheck
    only_a: int
    only_b: int
    cosine_median: float | None = None
    """Embeddings (:func:`judge_vectors`): the median per-id cosine (None otherwise or without common ids)."""

    @property
    def same(self) -> bool:
        """The rule holds and both maps hold the same ids."""
        return self.check.ok and not self.only_a and not self.only_b


def judge_maps(a: Mapping[str, str], b: Mapping[str, str], rule: AgreementRule,
               normalisation: str | None = None) -> MapAgreement:
    """``rule`` over the ids ``a`` and ``b`` share (sorted): labels compared as written, a
    generation's outputs after ``normalisation`` (lab.passes.tasks.text_metrics; None: labels)."""
    from lab.passes.tasks.text_metrics import output_equality

    common = sorted(set(a) & set(b))
    per_id = (output_equality(a, b, common, normalisation) if normalisation is not None
              else per_id_labels(a, b, common))
    return MapAgreement(rule.judge(per_id, common), len(set(a) - set(common)), len(set(b) - set(common)))


def judge_vectors(a: tuple[Sequence[str], np.ndarray], b: tuple[Sequence[str], np.ndarray],
                  rule: AgreementRule) -> MapAgreement:
    """``rule`` over the ids two embedding passes share, in ``a``'s order: each = (item ids, float
    array (items, width), row k = id k), compared by per-id cosine
    (lab.passes.tasks.embedding_metrics.cosine_agreement); ``rule.min_cosine`` decides a flip."""
    from lab.passes.tasks.embedding_metrics import cosine_agreement

    (ids_a, va), (ids_b, vb) = a, b
    at_b = {item: k for k, item in enumerate(ids_b)}
    rows_a = [k for k, item in enumerate(ids_a) if item in at_b]
    common = [ids_a[k] for k in rows_a]
    only_a, only_b = len(ids_a) - len(common), len(ids_b) - len(common)
    if not common:
        return MapAgreement(rule.judge(np.zeros(0), []), only_a, only_b)
    cos = cosine_agreement(va[rows_a], vb[[at_b[item] for item in common]])
    return MapAgreement(rule.judge(cos, common), only_a, only_b, round(float(np.median(cos)), 6))


def per_id_labels(mine: Mapping[str, str], theirs: Mapping[str, str], ids: Sequence[str]) -> np.ndarray:
    """1.0/0.0 per id of ``ids`` (each in both maps): the label (or raw output) equals the other's."""
    return np.fromiter((mine[i] == theirs[i] for i in ids), np.float64, len(ids))
