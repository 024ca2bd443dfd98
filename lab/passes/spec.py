"""What one pass is told to do (written by the host as ``pass.json`` in the pass folder)."""

from __future__ import annotations

import difflib
import json
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path

from lab.facts.constants import DEFAULT_SEED
from lab.facts.diskfull import atomic_write_text
from lab.inputs.variants import Variant, VariantError


@dataclass(frozen=True)
class PassSpec:
    """One pass. Paths are as seen by the pass process (inside a container: mount points).

    ``variant``: the typed Variant; it becomes JSON only in :meth:`to_json`/:meth:`write`
    (``Variant.to_json``, with its id and label) and a Variant again in :meth:`read`.
    ``warmup_items``: first N corpus items; ``warmup_passes``: forward passes over them.
    ``threads``: torch CPU threads (0 = torch default). Raises TypeError when ``variant``
    is not a Variant (a caller still passing a dict).
    """

    campaign: str
    pass_id: str
    variant: Variant
    corpus_path: str
    model_ref: str
    out_dir: str
    warmup_items: int = 16
    warmup_passes: int = 1
    seed: int = DEFAULT_SEED
    threads: int = 0
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.variant, Variant):
            raise TypeError("PassSpec.variant must be a lab.inputs.variants.Variant, got "
                            f"{type(self.variant).__name__} "
                            "(rebuild one from JSON with Variant.from_json)")

    def to_json(self) -> dict:
        """The spec as ``pass.json`` holds it: plain fields, ``variant`` as ``Variant.to_json()``."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**d, "variant": self.variant.to_json(), "extra": dict(self.extra)}

    def write(self, path: Path) -> None:
        """Write the spec as ``pass.json``, atomically (whole or absent; DiskFull when full)."""
        atomic_write_text(path, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def from_json(cls, d: object) -> "PassSpec":
        """Rebuild a spec from :meth:`to_json`'s dict.

        Raises ValueError (one line; lab.inputs.variants.VariantError for the variant) on a value
        that is not a JSON object, an unknown key (the nearest valid key named), a missing
        key, or a value of the wrong JSON type. The runner maps it to EXIT_BAD_SPEC.
        """
        if not isinstance(d, dict):
            raise ValueError(f"a pass spec must be a JSON object, got {type(d).__name__}")
        spec_fields = {f.name: f for f in fields(cls)}
        for key in d:
            if key not in spec_fields:
                close = difflib.get_close_matches(key, spec_fields, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(spec_fields)}"
                raise ValueError(f"unknown key {key!r} ({hint})")
        missing = [n for n, f in spec_fields.items()
                   if n not in d and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise ValueError(f"missing key(s) {', '.join(missing)}")
        for name, want in _JSON_TYPES.items():
            if name in d and (not isinstance(d[name], want) or (want is int and isinstance(d[name], bool))):
                raise ValueError(f"{name} must be a JSON {_JSON_NAMES[want]}, got {d[name]!r}")
        try:
            variant = Variant.from_json(d["variant"])
        except VariantError as exc:
            raise VariantError(f"variant: {exc}") from None
        return cls(**{**d, "variant": variant})

    @classmethod
    def read(cls, path: str | Path) -> "PassSpec":
        """:meth:`from_json` of the file at ``path``; raises OSError, ValueError (bad JSON or spec)."""
        return cls.from_json(json.loads(Path(path).read_text()))


_JSON_TYPES: dict[str, type] = {"campaign": str, "pass_id": str, "corpus_path": str, "model_ref": str, "out_dir": str,
                                "warmup_items": int, "warmup_passes": int, "seed": int, "threads": int, "extra": dict}
_JSON_NAMES = {str: "string", int: "integer", dict: "object"}


def read_spec_or_report(path: str, ev) -> "PassSpec | None":
    """:meth:`PassSpec.read` of ``path``, or None after one error event saying why (``ev``: a
    ``lab.passes.events.EventWriter``; the caller exits ``EXIT_BAD_SPEC``). The runner and
    each card's worker read their pass.json through this: a bad file is one line, never a
    traceback."""
    from lab.passes.events import EventKind

    try:
        return PassSpec.read(path)
    except (OSError, ValueError, TypeError) as exc:
        ev.emit(EventKind.ERROR, items_done=0, message=f"bad pass spec {path}: {exc}")
        return None
