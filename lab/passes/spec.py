"""What one pass is told to do (written by the host as ``pass.json`` in the pass folder)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

import msgspec

from lab.facts.constants import DEFAULT_SEED
from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import did_you_mean
from lab.facts.typecheck import decode_refusal
from lab.inputs.variants import Variant, VariantError, record_refusal
from lab.inputs.variants import record_type as variant_record_type


@dataclass(frozen=True)
class PassSpec:
    """One pass. Paths are as seen by the pass process (inside a container: mount points).

    ``variant``: the typed Variant; it becomes JSON only in :meth:`to_json`/:meth:`write`
    (``Variant.to_json``, with its id and label) and a Variant again in :meth:`read` (:meth:`decode`).
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
                            "(rebuild one from its record with Variant.from_record or Variant.from_json)")

    def to_json(self) -> dict:
        """The spec as ``pass.json`` holds it: plain fields, ``variant`` as ``Variant.to_json()``."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**d, "variant": self.variant.to_json(), "extra": dict(self.extra)}

    def write(self, path: Path) -> None:
        """Write the spec as ``pass.json``, atomically (whole or absent; DiskFull when full)."""
        atomic_write_text(path, json.dumps(self.to_json(), indent=1) + "\n")

    @classmethod
    def decode(cls, data: bytes | str) -> "PassSpec":
        """The spec that :meth:`write` wrote, from ``pass.json``'s bytes, decoded straight into
        typed objects (``msgspec.json.decode(data, type=record_type())``, its ``variant`` into
        ``lab.inputs.variants.record_type()`` in the same decode; then the PassSpec and its
        Variant are built object to object): no dict in between.

        Raises ValueError (one line; lab.inputs.variants.VariantError for the variant) on bytes
        that are not JSON, a value that is not a JSON object, an unknown key (the nearest valid
        key named), a missing key, or a value of the wrong JSON type. The runner maps it to
        EXIT_BAD_SPEC.
        """
        try:
            record: Any = msgspec.json.decode(data, type=record_type())
        except msgspec.ValidationError as exc:  # an unknown key, or no JSON object (a DecodeError too: first)
            raise ValueError(_refusal(str(exc))) from None
        except msgspec.DecodeError as exc:  # not JSON: msgspec names the byte, a reader wants the line
            raise ValueError(with_line(str(exc), data.encode() if isinstance(data, str) else data)) from None
        given = {f.name: getattr(record, f.name) for f in fields(cls) if getattr(record, f.name) is not msgspec.UNSET}
        missing = [f.name for f in fields(cls)
                   if f.name not in given and f.default is MISSING and f.default_factory is MISSING]
        if missing:
            raise ValueError(f"missing key(s) {', '.join(missing)}")
        for name, want in _JSON_TYPES.items():
            if name in given and (not isinstance(given[name], want) or (want is int and isinstance(given[name], bool))):
                raise ValueError(f"{name} must be a JSON {_JSON_NAMES[want]}, got {given[name]!r}")
        try:
            variant = Variant.from_record(record.variant)
        except VariantError as exc:
            raise VariantError(f"variant: {exc}") from None
        return cls(**{**given, "variant": variant})

    @classmethod
    def read(cls, path: str | Path) -> "PassSpec":
        """:meth:`decode` of the bytes of the file at ``path``; raises OSError, ValueError (bad JSON or spec)."""
        return cls.decode(Path(path).read_bytes())


_JSON_TYPES: dict[str, type] = {"campaign": str, "pass_id": str, "corpus_path": str, "model_ref": str, "out_dir": str,
                                "warmup_items": int, "warmup_passes": int, "seed": int, "threads": int, "extra": dict}
_JSON_NAMES = {str: "string", int: "integer", dict: "object"}
@functools.cache
def record_type() -> type:
    """The strict decoding type of ``pass.json``, generated once from PassSpec's own fields (one
    declaration): a frozen ``msgspec.Struct`` with ``forbid_unknown_fields``, each field optional
    (``msgspec.UNSET`` when absent, so :meth:`PassSpec.decode` names every missing key) and of any
    JSON type (checked against ``_JSON_TYPES`` with a message a user can act on), except
    ``variant``: ``lab.inputs.variants.record_type()``."""
    variant = variant_record_type()
    return msgspec.defstruct(
        "PassSpecRecord", [(f.name, (variant | msgspec.UnsetType) if f.name == "variant" else Any, msgspec.UNSET)
                           for f in fields(PassSpec)], frozen=True, forbid_unknown_fields=True, module=__name__)


def _refusal(message: str) -> str:
    """One line for msgspec's refusal of ``pass.json`` (lab.facts.typecheck.decode_refusal): the
    variant's in lab.inputs.variants.record_refusal's words after ``variant: ``, an unknown key with
    the nearest valid one, a value that is no JSON object, else msgspec's own line."""
    unknown, got, at = decode_refusal(message)
    if at.startswith("$.variant"):
        return "variant: " + record_refusal(Variant, message)
    keys = [f.name for f in fields(PassSpec)]
    if unknown is not None:
        hint = did_you_mean(unknown, keys, f"valid keys: {', '.join(keys)}")
        return f"unknown key {unknown!r} ({hint})"
    if got is not None and at == "$":
        return f"a pass spec must be a JSON object, got {got}"
    return message


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


def with_line(message: str, data: bytes) -> str:
    """msgspec's DecodeError ``message`` ("JSON is malformed: ... (byte 12)") with the line and
    column of that byte in ``data`` added (1-based, as an editor counts), so the user can find it."""
    m = re.search(r"\(byte (\d+)\)$", message)
    if m is None:
        return message
    at = min(int(m.group(1)), len(data))
    line = data.count(b"\n", 0, at) + 1
    column = at - (data.rfind(b"\n", 0, at) + 1) + 1
    return f"{message[:m.start()]}(line {line}, column {column})"
