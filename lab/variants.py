"""Variants: one full configuration each, frozen, with a content-derived id.

Series change exactly one declared factor (seed: "L'unica variabile di questa prima
serie è il batch"); length bucketing or another precision is a new declared variant.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields, replace

from lab.files import sha256_bytes

PRECISIONS = ("fp32", "bf16", "fp16")
PADDINGS = ("longest", "max_length")


class VariantError(ValueError):
    """A variant or series that cannot run as declared; one line with the fix."""


@dataclass(frozen=True)
class Variant:
    """One configuration of a pass. Units: ``max_length`` in tokens, ``batch_size`` in items.

    ``cards``: devices one pass runs on (N workers under torchrun, one per card; on CPU, N
    workers that split the declared threads). ``batch_size`` is per worker. Raises
    VariantError for a value outside its range.
    """

    batch_size: int = 1
    precision: str = "fp32"
    padding: str = "longest"
    max_length: int = 256
    bucketing: bool = False
    device: str = "auto"
    compile: bool = False
    attention: str = "sdpa"
    quantization: str = "none"
    cards: int = 1
    series: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise VariantError(f"batch_size {self.batch_size!r} must be an integer >= 1")
        if self.precision not in PRECISIONS:
            raise VariantError(f"precision {self.precision!r} unknown; use one of {', '.join(PRECISIONS)}")
        if self.padding not in PADDINGS:
            raise VariantError(f"padding {self.padding!r} unknown; use one of {', '.join(PADDINGS)}")
        if not isinstance(self.max_length, int) or self.max_length < 8:
            raise VariantError(f"max_length {self.max_length!r} must be an integer >= 8 tokens")
        if self.quantization != "none":
            raise VariantError(f"quantization {self.quantization!r} is not supported yet; use 'none'")
        if isinstance(self.cards, bool) or not isinstance(self.cards, int) or self.cards < 1:
            raise VariantError(f"cards {self.cards!r} must be an integer >= 1 (devices per pass)")
        if self.compile:
            raise VariantError("compile = true is not supported yet; declare compile = false")

    def config(self) -> dict:
        """The parameters that define the work (series and name excluded).

        ``cards`` is left out when it is 1 (the value every variant had before the field
        existed), so ids of one-card variants stay what they were; ``cards = 2`` and up
        are part of the config and make new ids.
        """
        d = asdict(self)
        d.pop("series")
        d.pop("name")
        if d["cards"] == 1:
            d.pop("cards")
        return d

    @property
    def variant_id(self) -> str:
        """Stable id from content: 'v-' + first 10 hex of sha256 of the canonical config."""
        blob = json.dumps(self.config(), sort_keys=True).encode()
        return "v-" + sha256_bytes(blob)[:10]

    @property
    def label(self) -> str:
        """Short human label, e.g. 'batch 8, fp32, longest, max 256'."""
        s = f"batch {self.batch_size}, {self.precision}, {self.padding}, max {self.max_length}"
        s += ", bucketed" if self.bucketing else ""
        return s + (f", {self.cards} cards" if self.cards != 1 else "")

    def to_json(self) -> dict:
        return {**asdict(self), "variant_id": self.variant_id, "label": self.label}

    @classmethod
    def from_json(cls, d: dict) -> "Variant":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def variant_short(variant: dict | None) -> str:
    """'batch_size=8' from a variant's JSON named 'batch/batch_size=8', else its label or id."""
    if not variant:
        return "?"
    name = variant.get("name") or ""
    return name.split("/", 1)[-1] if name else variant.get("label", variant.get("variant_id", "?"))


def expand_series(defaults: dict, series: list[dict]) -> list[Variant]:
    """Expand ``[[series]]`` tables into variants, deduplicated by content id, in declared order.

    Each series is {"name": str, "factor": field name, "values": [...], optional fixed fields}.
    A variant's name is "<series>/<factor>=<value>". Raises VariantError on an unknown factor,
    an empty series, or a fixed field that is also the factor.
    """
    known = {f.name for f in fields(Variant)} - {"series", "name"}
    out: list[Variant] = []
    seen: set[str] = set()
    for s in series:
        name, factor, values = s.get("name"), s.get("factor"), s.get("values")
        if not name or factor not in known or not values:
            raise VariantError(
                f"series {name!r}: needs name, factor (one of {', '.join(sorted(known))}) and values")
        fixed = {k: v for k, v in s.items() if k not in ("name", "factor", "values")}
        if factor in fixed:
            raise VariantError(f"series {name!r}: factor {factor!r} is also fixed; a series varies one factor")
        bad = set(fixed) - known
        if bad:
            raise VariantError(f"series {name!r}: unknown field(s) {', '.join(sorted(bad))}")
        base = Variant(**{**{k: v for k, v in defaults.items() if k in known}, **fixed})
        for value in values:
            v = replace(base, **{factor: value}, series=name, name=f"{name}/{factor}={value}")
            if v.variant_id not in seen:
                seen.add(v.variant_id)
                out.append(v)
    return out
