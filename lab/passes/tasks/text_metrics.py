"""Quality and accounting for generated text (issue 20, ``kind = "generation"``).

No text-metric library is pinned in requirements.lock (neither ``evaluate`` nor
``sacrebleu``), and the two metrics here are a few lines each, so they are written out against
their published definitions:

- exact match: the share of items whose output equals the reference after a normalisation
  declared by name (``NORMALISATIONS``; the lab's default ``NORMALISATION``).
- token F1: SQuAD's, as in the official evaluation script of SQuAD v2.0
  (``evaluate-v2.0.py``, functions ``normalize_answer``, ``get_tokens``, ``compute_f1``;
  Rajpurkar et al. 2016/2018): answers normalised by lowercasing, removing punctuation and the
  articles a/an/the and collapsing whitespace; tokens are whitespace-separated words; F1 of the
  bag-of-tokens overlap; when either side has no token, F1 is 1 if both have none, else 0.
- agreement: the share of ids whose output equals the reference variant's output for that id
  after the declared normalisation.

Accounting: token counts and per-item / per-million-output-token ratios for throughput and cost
(the prices come from ``lab.cost``; this module only divides).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TypeVar

import msgspec
import numpy as np

from lab.facts.errors import UserError

_SPACE = re.compile(r"\s+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def _lowercase_space(text: str) -> str:
    return _SPACE.sub(" ", text.lower()).strip()


def _squad(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


NORMALISATIONS: dict[str, Callable[[str], str]] = {
    "none": lambda text: text,                 # byte-for-byte
    "lowercase_space": _lowercase_space,       # lowercase, strip, whitespace runs -> one space
    "squad": _squad,                           # SQuAD's normalize_answer
}
NORMALISATION = "lowercase_space"  # the default a campaign gets when it names none


class MetricInputError(UserError):
    """Outputs and references that cannot be compared as given (one line)."""


def normaliser(name: str) -> Callable[[str], str]:
    """The normalisation named ``name``; ``MetricInputError`` naming the valid ones otherwise."""
    try:
        return NORMALISATIONS[name]
    except KeyError:
        raise MetricInputError(f"unknown normalisation {name!r}; use one of "
                               f"{', '.join(sorted(NORMALISATIONS))}") from None


def _paired(outputs: Sequence[str], references: Sequence[str]) -> None:
    if len(outputs) != len(references):
        raise MetricInputError(f"{len(outputs)} outputs for {len(references)} references; give one output per item")
    if not outputs:
        raise MetricInputError("no items to score; the metric needs at least one output")


def exact_match(outputs: Sequence[str], references: Sequence[str], normalisation: str = NORMALISATION) -> float:
    """Share in [0, 1] of positions where ``norm(output) == norm(reference)``.

    Raises ``MetricInputError`` on different lengths, no items, or an unknown normalisation."""
    norm = normaliser(normalisation)
    _paired(outputs, references)
    return sum(norm(o) == norm(r) for o, r in zip(outputs, references, strict=True)) / len(outputs)


def token_f1_one(output: str, reference: str) -> float:
    """SQuAD token F1 of one output against one reference, in [0, 1] (module docstring)."""
    pred, gold = _squad(output).split(), _squad(reference).split()
    if not pred or not gold:
        return float(pred == gold)
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(outputs: Sequence[str], references: Sequence[str]) -> float:
    """Mean SQuAD token F1 over items, in [0, 1]. Raises ``MetricInputError`` as ``exact_match``."""
    _paired(outputs, references)
    return sum(token_f1_one(o, r) for o, r in zip(outputs, references, strict=True)) / len(outputs)


def generation_metric(name: str, outputs: Sequence[str], references: Sequence[str],
                      normalisation: str = NORMALISATION) -> float:
    """The generation metric ``name`` ("exact_match" after ``normalisation``, or "token_f1",
    whose normalisation is SQuAD's own), in [0, 1]: the one rule validation and ``archive verify``
    both apply (lab.orchestration.config.GENERATION_METRICS). Raises ``MetricInputError`` for an
    unknown name and as ``exact_match``."""
    if name == "exact_match":
        return exact_match(outputs, references, normalisation)
    if name == "token_f1":
        return token_f1(outputs, references)
    raise MetricInputError(f"unknown generation metric {name!r}; use exact_match or token_f1")


class Agreement(msgspec.Struct, frozen=True):
    """Agreement with the reference variant: ``share`` in [0, 1] of ``items`` ids whose outputs
    are equal after normalisation; ``differing_ids``: the others, sorted."""

    share: float
    items: int
    differing_ids: tuple[str, ...]


def agreement(outputs: Mapping[str, str], reference_outputs: Mapping[str, str],
              normalisation: str = NORMALISATION) -> Agreement:
    """Per-id agreement of a variant's ``{id: output}`` with the reference variant's.

    The ids must be the same set (ids exact): ``MetricInputError`` naming how many are missing
    or extra otherwise, or when there is none."""
    missing = reference_outputs.keys() - outputs.keys()
    extra = outputs.keys() - reference_outputs.keys()
    if missing or extra:
        raise MetricInputError(f"the variant's ids differ from the reference variant's ({len(missing)} missing, "
                               f"{len(extra)} extra, e.g. {sorted(missing or extra)[0]!r}); compare passes over "
                               "the same corpus")
    if not outputs:
        raise MetricInputError("no items to compare; agreement needs at least one id")
    ids = list(outputs)
    same = output_equality(outputs, reference_outputs, ids, normalisation)
    differing = tuple(sorted(ids[k] for k in np.flatnonzero(same == 0.0)))
    return Agreement(share=1 - len(differing) / len(outputs), items=len(outputs), differing_ids=differing)


def output_equality(outputs: Mapping[str, str], reference_outputs: Mapping[str, str], ids: Sequence[str],
                    normalisation: str = NORMALISATION) -> np.ndarray:
    """Per id of ``ids`` (in that order, each in both mappings): 1.0 when the output equals the
    reference variant's after ``normalisation``, else 0.0; shape (len(ids),) float64 (the per-id
    figure the agreement metric summarises, lab.orchestration.validate.agreement_figures)."""
    norm = normaliser(normalisation)
    return np.fromiter((norm(outputs[i]) == norm(reference_outputs[i]) for i in ids), np.float64, len(ids))


class TokenCounts(msgspec.Struct, frozen=True):
    """What a pass generated: ``items``, ``input_tokens`` and ``output_tokens`` (sums)."""

    items: int
    input_tokens: int
    output_tokens: int

    @classmethod
    def of(cls, generated: Sequence) -> TokenCounts:
        """Sums over ``GeneratedItem``-like records (``input_tokens``, ``output_tokens``)."""
        return cls(items=len(generated), input_tokens=sum(g.input_tokens for g in generated),
                   output_tokens=sum(g.output_tokens for g in generated))

    def items_per_s(self, window_s: float) -> float:
        """Items per second of a measured window of ``window_s`` seconds (> 0)."""
        return self.items / _positive(window_s, "window_s")

    def output_tokens_per_s(self, window_s: float) -> float:
        """Output tokens per second of a measured window of ``window_s`` seconds (> 0)."""
        return self.output_tokens / _positive(window_s, "window_s")

    def per_item(self, amount: float | Decimal) -> float | Decimal:
        """``amount`` (a cost, a duration in s; a Decimal stays a Decimal) divided by the items (> 0)."""
        return amount / _positive(self.items, "items")

    def per_million_output_tokens(self, amount: float | Decimal) -> float | Decimal:
        """``amount`` (e.g. USD) per 10^6 output tokens (output tokens > 0)."""
        return amount * 1_000_000 / _positive(self.output_tokens, "output_tokens")


_N = TypeVar("_N", int, float)


def _positive(value: _N, name: str) -> _N:
    if not value > 0:
        raise MetricInputError(f"{name} must be > 0 to divide by it, not {value!r}")
    return value
