"""The caveats a derived figure carries: one vocabulary for every line and chart built from
measured configurations (issue 35 item 1).

A derived figure (a decision, a break-even load, a budget ratio, a needed throughput, a bar of a
chart) rests on one or more measured configurations. Each configuration's flags are computed
where its figures are (lab.compare.projection.project for a comparison, lab.report.summary for a
campaign) and gathered here as a :class:`Basis`; :func:`rests_on` turns the bases of one figure
into one short clause, :func:`chart_mark` into the mark of its chart label. No flag is computed
here: only worded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lab.cost.hardware import HardwareCheck
from lab.report.distinguish import can_distinguish

# The vocabulary, one phrase per flag (the only place these words are written).
FEW_PASSES = "n = {n} pass(es){who}"
STARVED = "{k} of {n} pass(es) starved{who}"
ON_CPU = "measured on CPU, priced as {gpus}"
# OTHER_HARDWARE: lab.cost.hardware.HardwareCheck.caveat ("measured on NVIDIA H200, priced as rtx-4090")
TOO_SHORT = "too short to project{who}"
NOT_STEADY = "not steady-state (recompilation){who}"
NOT_DISTINGUISHED = "durations not distinguished"
RESTS_ON = "rests on: "
CPU_MARK = " (CPU)"
OTHER_MARK = " (other GPU)"
CAVEAT_MARK = "*"


@dataclass(frozen=True)
class Basis:
    """One measured configuration a derived figure rests on, by its flags.

    ``tag``: how outputs name it ('A b200 / batch 1' or a variant's label); ``passes``: passes ok
    whose durations it uses; ``starved``: how many of those were starved of CPU; ``cpu_priced_as``:
    the GPU it is priced as when its passes ran on CPU ('' when measured on a GPU or not priced);
    ``too_short``: it fails the projection validity rule (projected because allowed);
    ``not_steady``: its measured windows include recompilation; ``other_hardware``: measured on a GPU
    (or a number of cards) that is not the package it is priced as, in the words of
    lab.cost.hardware.HardwareCheck.caveat ('' when it matches, is measured on CPU or is not priced)."""
    tag: str
    passes: int
    starved: int = 0
    cpu_priced_as: str = ""
    too_short: bool = False
    not_steady: bool = False
    other_hardware: str = ""

    @classmethod
    def hardware_flags(cls, check: HardwareCheck | None) -> dict:
        """The ``cpu_priced_as`` and ``other_hardware`` of a configuration whose measured hardware
        was checked against its package (lab.cost.hardware); none for None (nothing priced)."""
        if check is None or not check.differs:
            return {}
        if check.on_cpu:
            return {"cpu_priced_as": check.priced.gpu}
        return {"other_hardware": check.caveat}

    @property
    def few(self) -> bool:
        """Too few passes to tell this configuration from another of as many (lab.report.distinguish)."""
        return not can_distinguish(self.passes, self.passes)


def _who(bases: Sequence[Basis], flagged: Sequence[Basis]) -> str:
    """'' when every basis has the flag (or there is one basis), else ' (A b200 / batch 1; B b200 / batch 1)'
    (a label may hold commas: tags are joined by semicolons)."""
    return "" if len(flagged) == len(bases) else f" ({'; '.join(b.tag for b in flagged)})"


def caveats(bases: Sequence[Basis], distinguished: bool | None = None) -> list[str]:
    """The caveats of a figure resting on ``bases``, one phrase each, in a fixed order: few passes,
    starved passes, measured on CPU but priced as a GPU, measured on another GPU or number of cards
    than priced, too short to project, not steady-state,
    and (``distinguished`` False: the figure compares two configurations whose durations the
    measurements do not tell apart) not distinguished. [] when the figures are clean."""
    out = []
    few = [b for b in bases if b.few]
    if few:
        counts = sorted({b.passes for b in few})
        n = " and ".join(str(x) for x in counts)
        out.append(FEW_PASSES.format(n=n, who=_who(bases, few)))
    starved = [b for b in bases if b.starved]
    if starved:
        out.append(STARVED.format(k=sum(b.starved for b in starved), n=sum(b.passes for b in starved),
                                  who=_who(bases, starved)))
    gpus = list(dict.fromkeys(b.cpu_priced_as for b in bases if b.cpu_priced_as))
    if gpus:
        out.append(ON_CPU.format(gpus=" and ".join(gpus)))
    out += list(dict.fromkeys(b.other_hardware for b in bases if b.other_hardware))
    short = [b for b in bases if b.too_short]
    if short:
        out.append(TOO_SHORT.format(who=_who(bases, short)))
    unsteady = [b for b in bases if b.not_steady]
    if unsteady:
        out.append(NOT_STEADY.format(who=_who(bases, unsteady)))
    if distinguished is False:
        out.append(NOT_DISTINGUISHED)
    return out


def rests_on(bases: Sequence[Basis], distinguished: bool | None = None) -> str:
    """'' for clean figures, else 'rests on: n = 1 pass(es), 1 of 1 pass(es) starved, measured on
    CPU, priced as b200, too short to project' (:func:`caveats`): the clause a derived line ends with."""
    found = caveats(bases, distinguished)
    return RESTS_ON + ", ".join(found) if found else ""


def with_caveats(line: str, bases: Sequence[Basis], distinguished: bool | None = None, sep: str = "; ") -> str:
    """``line`` followed by ``sep`` and its :func:`rests_on` clause, or ``line`` unchanged when clean."""
    clause = rests_on(bases, distinguished)
    return f"{line}{sep}{clause}" if clause else line


def chart_mark(label: str, basis: Basis) -> str:
    """A chart label with its marks: ' (CPU)' when measured on CPU, ' (other GPU)' when measured on
    another GPU or number of cards than priced, '*' when it carries any caveat ('B b200 / batch 8
    (CPU)*'); the chart's legend (:func:`chart_legend`) names them."""
    cpu = CPU_MARK if basis.cpu_priced_as else OTHER_MARK if basis.other_hardware else ""
    return label + cpu + (CAVEAT_MARK if caveats([basis]) else "")


def chart_legend(bases: Sequence[Basis]) -> str:
    """The legend of a chart's marks: '* A b200 / batch 1: rests on: ...; (CPU): measured on a CPU'
    for every marked basis; '' when no bar is marked."""
    marked = [f"{CAVEAT_MARK} {b.tag}: {rests_on([b])}" for b in bases if caveats([b])]
    if any(b.cpu_priced_as for b in bases):
        marked.append(f"{CPU_MARK.strip()}: measured on a CPU, not on the GPU the bar is priced as")
    if any(b.other_hardware for b in bases):
        marked.append(f"{OTHER_MARK.strip()}: measured on another GPU or number of cards than the bar is priced as")
    return "; ".join(marked)
