"""Rotated order of passes (seed: "Alterna il loro ordine, ad esempio 1–4–8 poi 4–8–1 poi 8–1–4")."""

from __future__ import annotations

from dataclasses import dataclass

from lab.facts.constants import DEFAULT_REPETITIONS
from lab.inputs.variants import Variant


@dataclass(frozen=True)
class PlannedPass:
    """One scheduled pass: ``seq`` 1-based global order, ``repetition`` and ``position`` 1-based."""

    seq: int
    repetition: int
    position: int
    variant: Variant

    @property
    def pass_id(self) -> str:
        """The id of this slot's first attempt (``pass_id_for``)."""
        return pass_id_for(self.seq, self.repetition, self.variant.variant_id)


def pass_id_for(seq: int, repetition: int, variant_id: str, attempt: int = 1) -> str:
    """The one pass id format: "p<seq, 3 digits>-r<repetition>-<variant id>", and "-a<attempt>"
    from the second attempt of a slot on (the name of the pass's folder under ``passes/``)."""
    return f"p{seq:03d}-r{repetition}-{variant_id}" + (f"-a{attempt}" if attempt > 1 else "")


def rotated_schedule(variants: list[Variant], repetitions: int = DEFAULT_REPETITIONS) -> list[PlannedPass]:
    """Repetition r runs the variants rotated left by (r-1): no variant is always first.

    Shape: len(variants) * repetitions passes. Raises ValueError on no variants or
    repetitions < 1.
    """
    if not variants:
        raise ValueError("no variants to schedule; declare at least one [[series]]")
    if repetitions < 1:
        raise ValueError("repetitions must be >= 1")
    n = len(variants)
    out: list[PlannedPass] = []
    for r in range(repetitions):
        for pos in range(n):
            out.append(PlannedPass(len(out) + 1, r + 1, pos + 1, variants[(pos + r) % n]))
    return out
