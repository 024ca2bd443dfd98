"""Variants: one full configuration each, frozen, with a content-derived id.

Series change exactly one declared factor (seed: "L'unica variabile di questa prima
serie è il batch"); length bucketing or another precision is a new declared variant.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Protocol

import msgspec

from lab.facts.constants import ENGINE_NAMES
from lab.facts.errors import UserError, did_you_mean
from lab.facts.files import sha256_bytes
from lab.facts.typecheck import decode_refusal, type_name, type_ok

MAX_BATCH_SIZE = 65536  # items per batch: beyond it no accelerator holds one batch of even the shortest texts
UNUSUAL_BATCH_SIZE = 1024  # above it a warning at lock
PRECISIONS = ("fp32", "bf16", "fp16")
#: A precision's dtype name (torch.<name>; vLLM's ``dtype`` takes the same names).
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
PADDINGS = ("longest", "max_length")
ENGINES = ENGINE_NAMES  # the engines a variant declares, its default first (lab.facts.constants)
"""Inference engines a variant can declare (SPEC section 2, "engine"); the first is the default."""
# engine options that only vLLM reads
VLLM_ONLY = ("max_num_seqs", "vllm_memory_fraction", "prefix_caching", "max_num_batched_tokens")
VLLM_ONLY_WHERE = ('set {option} only where engine = "vllm": a [[series]] of its own with engine = "vllm" '
                   'among its fixed fields (e.g. factor = "{option}", values = [{value}], engine = "vllm"), '
                   'or remove {option}')
"""How to give a vLLM option to the vLLM variants only: [defaults] and a series' fixed fields apply to
every variant they make (lab.inputs.variants.expand_series, lab.orchestration.config.check_defaults)."""
SERIES_SEP = "+"  # joins the names of the series a shared variant belongs to
DERIVED_KEYS = ("variant_id", "label")  # written by Variant.to_json, recomputed from the fields
ID_FIELDS = ("batch_size", "precision", "padding", "max_length", "bucketing", "device", "compile",
             "attention", "quantization")
"""The fields Variant had when ids were first defined (lab/inputs/variants.py at 8867912): they always
enter the content-derived id. A field added since (``cards`` first) enters it only when set
away from its default, so adding a field leaves every existing id, lock and journal valid."""
NAME_FIELDS = ("series", "name")  # what a variant is called, not what it runs: never in the id


def rate_label(rate: float | None) -> str:
    """The request rate's part of a variant's label (``", 2 req/s"``; "" for an offline variant)."""
    return "" if rate is None else f", {rate:g} req/s"


def server_config_label(label: str, rate: float | None) -> str:
    """A variant's label without its request rate: the server configuration that a rate series
    shares (the same text for each of its rates; Variant.label names every setting, so two
    configurations never share it)."""
    return label.replace(rate_label(rate), "", 1) if rate is not None else label


class VariantError(UserError):
    """A variant or series that cannot run as declared; one line with the fix."""


@dataclass(frozen=True)
class Variant:
    """One configuration of a pass. Units: ``max_length`` in tokens, ``batch_size`` in items.

    ``cards``: devices one pass runs on (N workers under torchrun, one per card; on CPU, N
    workers that split the declared threads). ``batch_size`` is per worker.

    ``engine``: "transformers" (the lab's own batched forward passes) or "vllm" (lab.engines.vllm:
    vLLM's offline engine in its own venv). For vLLM, ``batch_size`` is how many prompts the lab
    hands the engine per call, not what it runs together (vLLM batches continuously; what it
    scheduled is recorded); ``max_length`` is vLLM's ``max_model_len``, ``precision`` its dtype,
    ``compile = false`` its ``enforce_eager``. ``max_num_seqs`` caps the sequences vLLM runs at
    once (None: vLLM's own default, recorded); ``vllm_memory_fraction`` is the fraction of device
    memory (on CPU: of host RAM) vLLM reserves up front for weights and KV cache (None: the lab's
    safe value, lab.facts.constants.VLLM_MEMORY_FRACTION, recorded); ``prefix_caching`` is vLLM's
    ``enable_prefix_caching`` (None: off, the lab's default for a measured pass: the warm-up items
    are the window's first items, and their cached blocks would speed the window up; true: on,
    vLLM's own default). All three only with engine "vllm". ``request_rate`` (req/s, > 0) makes the
    variant a server pass ([scenario] kind = "server", lab.inputs.scenario): vLLM's server
    is offered the corpus's items as requests arriving at that mean rate; None: an offline pass.
    It is kept as a float (``2`` and ``2.0`` are one variant, one id). Raises
    VariantError (one line) for a value of the wrong type (checked for every field against its
    annotation; ``true`` is not an integer) or outside its range.

    Id rule: the fields of ID_FIELDS always enter the content-derived id; a field added after
    them (``cards``, and any new one) enters it only when set away from its default, so a new
    field leaves existing ids, locks and journals valid (:meth:`config`).
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
    engine: str = "transformers"
    max_num_seqs: int | None = None
    vllm_memory_fraction: float | None = None
    prefix_caching: bool | None = None
    request_rate: float | None = None  # req/s offered to vLLM's server: a server pass ([scenario] kind = "server")
    max_num_batched_tokens: int | None = None  # vLLM: tokens its scheduler runs in one step at most (None: its default)
    series: str = ""
    name: str = ""

    def __post_init__(self) -> None:
        self._check_types()
        if self.batch_size < 1:  # types were checked above: these are the ranges
            raise VariantError(f"batch_size {self.batch_size!r} must be an integer >= 1")
        if self.batch_size > MAX_BATCH_SIZE:
            raise VariantError(f"batch_size {self.batch_size} is beyond {MAX_BATCH_SIZE:,} items per batch (a "
                               "typo?); give the items one forward pass takes, e.g. 8")
        if self.precision not in PRECISIONS:
            raise VariantError(f"precision {self.precision!r} unknown; use one of {', '.join(PRECISIONS)}")
        if self.padding not in PADDINGS:
            raise VariantError(f"padding {self.padding!r} unknown; use one of {', '.join(PADDINGS)}")
        if self.max_length < 8:
            raise VariantError(f"max_length {self.max_length!r} must be an integer >= 8 tokens")
        if self.quantization != "none":
            raise VariantError(f"quantization {self.quantization!r} is not supported yet; use 'none'")
        if self.cards < 1:
            raise VariantError(f"cards {self.cards!r} must be an integer >= 1 (devices per pass)")
        if self.compile and self.cards > 1:  # lab.passes.multicard's workers do not compile
            raise VariantError(f"compile = true runs on one card only (cards = {self.cards}); "
                               "declare cards = 1 or compile = false")
        self._check_engine()

    def _check_engine(self) -> None:
        """The engine and its options: one line each (VariantError)."""
        if self.request_rate is not None:
            if not self.request_rate > 0 or self.request_rate == float("inf"):
                raise VariantError(f"request_rate {self.request_rate!r} must be a finite number > 0 (requests "
                                   "per second offered to the server), e.g. 2")
            object.__setattr__(self, "request_rate", float(self.request_rate))  # 2 and 2.0: one id
            if self.engine != "vllm":
                raise VariantError(f"request_rate is a server pass's factor and the server is vLLM's, but "
                                   f"engine = {self.engine!r}; declare engine = \"vllm\" or remove request_rate")
            if self.batch_size != 1 or self.bucketing:
                what = f"batch_size = {self.batch_size}" if self.batch_size != 1 else "bucketing = true"
                raise VariantError(f"{what} with request_rate: a server pass sends one request per item as it "
                                   "arrives and the server batches them itself (max_num_seqs caps it); declare "
                                   "batch_size = 1 and bucketing = false for the served variants")
        if self.engine not in ENGINES:
            hint = did_you_mean(self.engine.lower(), ENGINES, f"use one of {', '.join(ENGINES)}")
            raise VariantError(f"engine {self.engine!r} unknown ({hint})")
        if self.engine != "vllm":
            bad = [f for f in VLLM_ONLY if getattr(self, f) is not None]
            if bad:
                raise VariantError(f"{bad[0]} is a vLLM option but engine = {self.engine!r}; declare "
                                   f"engine = \"vllm\" or remove {bad[0]}")
            return
        if self.cards != 1:
            raise VariantError(f"engine vllm runs on one card per pass here (cards = {self.cards}); declare cards = 1")
        if self.padding != "longest":  # vLLM packs sequences: it never pads to max_length
            raise VariantError(f"padding {self.padding!r} with engine vllm: vLLM packs sequences without "
                               "padding; declare padding = \"longest\" (the default) for a vLLM variant")
        if self.max_num_seqs is not None and self.max_num_seqs < 1:
            raise VariantError(f"max_num_seqs {self.max_num_seqs!r} must be an integer >= 1 (sequences vLLM "
                               "runs at once), or left out for vLLM's default")
        if self.max_num_batched_tokens is not None and self.max_num_batched_tokens < 1:
            raise VariantError(f"max_num_batched_tokens {self.max_num_batched_tokens!r} must be an integer >= 1 "
                               "(tokens vLLM schedules in one step), or left out for vLLM's default")
        f = self.vllm_memory_fraction
        if f is not None and not 0 < f <= 1:
            raise VariantError(f"vllm_memory_fraction {f!r} must be in (0, 1] (a fraction of device memory; "
                               "on CPU of host RAM), e.g. 0.1, or left out for the lab's safe value")

    def config(self) -> dict:
        """The parameters that define the work, from which :attr:`variant_id` is derived.

        Every field of ID_FIELDS (those that existed when ids were first defined); a field
        added later (``cards``, and any new one) only when it differs from its default, the
        value every variant implicitly had before the field existed: ``cards = 1`` is left
        out and ``cards = 2`` makes a new id. NAME_FIELDS (``series``, ``name``) never enter.
        """
        return {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in ID_FIELDS or (f.name not in NAME_FIELDS and getattr(self, f.name) != f.default)}

    @property
    def variant_id(self) -> str:
        """Stable id from content: 'v-' + first 10 hex of sha256 of the canonical config."""
        blob = json.dumps(self.config(), sort_keys=True).encode()
        return "v-" + sha256_bytes(blob)[:10]

    @property
    def ladder_id(self) -> str | None:
        """The server configuration a server variant's rate is one rung of: the ``variant_id`` of
        this variant without its ``request_rate`` (None for an offline variant). The variants that
        share it differ only by their rate (lab.orchestration.search climbs them)."""
        return None if self.request_rate is None else replace(self, request_rate=None).variant_id

    @property
    def label(self) -> str:
        """Short human label, e.g. 'batch 8, fp32, longest, max 256'; a server variant's starts
        'served' (the server batches and pads its requests itself: 'served, fp32, max 128, vllm,
        max_num_seqs 4, 2 req/s'). Every vLLM option set is named, so two configurations never
        share a label."""
        s = (f"batch {self.batch_size}, {self.precision}, {self.padding}, max {self.max_length}"
             if self.request_rate is None else f"served, {self.precision}, max {self.max_length}")
        s += (", bucketed" if self.bucketing else "") + (", compiled" if self.compile else "")
        s += f", {self.engine}" if self.engine != ENGINES[0] else ""
        s += "".join(f", {name} {value:g}" if isinstance(value, float) else f", {name} {value}"
                     for name, value in (("max_num_seqs", self.max_num_seqs),
                                         ("max_num_batched_tokens", self.max_num_batched_tokens),
                                         ("memory", self.vllm_memory_fraction)) if value is not None)
        s += "" if self.prefix_caching is None else f", prefix caching {'on' if self.prefix_caching else 'off'}"
        s += rate_label(self.request_rate)
        return s + (f", {self.cards} cards" if self.cards != 1 else "")

    def to_json(self) -> dict:
        return {**asdict(self), "variant_id": self.variant_id, "label": self.label}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Variant":
        """The Variant that :meth:`to_json` wrote, from its dict (the same rule as
        :meth:`from_record`, through ``msgspec.convert`` into :func:`record_type`).

        Fields missing from ``d`` take their defaults (a record older than a field). Raises
        VariantError (one line) when ``d`` is not a JSON object, holds a key that is neither a
        field nor a derived key (``variant_id``, ``label``; the nearest field is named), a value
        of the wrong type, or a ``variant_id`` that its fields do not give.
        """
        try:
            record: Any = msgspec.convert(d, record_type(cls))
        except msgspec.ValidationError as exc:
            raise VariantError(record_refusal(cls, str(exc))) from None
        return cls.from_record(record)

    def _check_types(self) -> None:
        for name, hint in _field_types(type(self)).items():
            value = getattr(self, name)
            if not type_ok(value, hint):
                raise VariantError(f"variant field {name} = {value!r} has the wrong type; expected "
                                   f"{type_name(hint)}")

    @classmethod
    def from_record(cls, record: Any, rules: bool = True) -> "Variant":
        """The Variant a decoded record (an instance of :func:`record_type`) holds, object to
        object: its set fields given to the constructor (which checks every type and range),
        the others at their defaults (a record older than a field). Raises VariantError (one
        line) for a ``variant_id`` its fields do not give (an edited record, or one written by
        a lab version that derives ids differently).

        ``rules`` False (the journal's record of a pass that ran, read as evidence): types and
        ``variant_id`` are checked, today's ranges and cross-field rules are not, so a rule added
        after a journal was written does not make its rows damaged (``pass.json``, the input of a
        pass about to run, keeps them)."""
        names = [f.name for f in fields(cls)]
        given = {n: getattr(record, n) for n in names if getattr(record, n) is not msgspec.UNSET}
        if rules:
            v = cls(**given)
        else:
            v = object.__new__(cls)
            for f in fields(cls):
                object.__setattr__(v, f.name, given.get(f.name, f.default))
            v._check_types()
        claimed = record.variant_id
        if claimed is not msgspec.UNSET and claimed != v.variant_id:
            raise VariantError(f"variant_id {claimed!r} does not match its fields "
                               f"({v.variant_id}); the record was edited or written by another lab version")
        return v


_RECORD_TYPES: dict[type, type] = {}


def record_type(cls: type = Variant) -> type:
    """The strict decoding type of a Variant class's JSON record (:meth:`Variant.to_json`, as
    ``pass.json`` and the journal hold it), generated once from the dataclass's own fields, so
    a field is declared in one place: a frozen ``msgspec.Struct`` with every field and
    DERIVED_KEYS, each optional (``msgspec.UNSET`` when absent) and of any JSON type (the
    Variant's constructor checks types, one rule for every route), and
    ``forbid_unknown_fields`` (msgspec decodes a dataclass by type but ignores unknown keys;
    this refuses them). Decode with ``msgspec.json.decode(data, type=record_type())``, then
    :meth:`Variant.from_record`; no dict in between."""
    if cls not in _RECORD_TYPES:
        names = [f.name for f in fields(cls)] + list(DERIVED_KEYS)
        _RECORD_TYPES[cls] = msgspec.defstruct(f"{cls.__name__}Record", [(n, Any, msgspec.UNSET) for n in names],
                                               frozen=True, forbid_unknown_fields=True, module=__name__)
    return _RECORD_TYPES[cls]


def record_refusal(cls: type, message: str) -> str:
    """One line for msgspec's refusal ``message`` of a Variant record (:func:`record_type`): an
    unknown field with the nearest one named, a value that is no JSON object, else msgspec's
    own line (it names the path)."""
    unknown, got, _ = decode_refusal(message)
    names = [f.name for f in fields(cls)]
    if unknown is not None:
        hint = did_you_mean(unknown, names, f"known fields: {', '.join(names)}")
        return (f"unknown variant field {unknown!r} ({hint}); the record was edited or written by another "
                "lab version")
    if got is not None:
        return f"a variant must be a JSON object of its fields, got {got}"
    return message


_FIELD_TYPES: dict[type, dict[str, Any]] = {}


def _field_types(cls: type) -> dict[str, Any]:
    """{field name: resolved type} of a Variant class (annotations are strings here), cached."""
    if cls not in _FIELD_TYPES:
        hints = typing.get_type_hints(cls)
        _FIELD_TYPES[cls] = {f.name: hints[f.name] for f in fields(cls)}
    return _FIELD_TYPES[cls]


def variant_short(variant: "Variant | dict | None") -> str:
    """'batch_size=8' from a variant (or its JSON record) named 'batch/batch_size=8', else its
    label or id; '?' for none."""
    if isinstance(variant, Variant):
        variant = variant.to_json()
    if not variant:
        return "?"
    name = variant.get("name") or ""
    return name.split("/", 1)[-1] if name else variant.get("label", variant.get("variant_id", "?"))


class SeriesDecl(Protocol):
    """A declared series, as :class:`lab.orchestration.config.SeriesSection` holds it.

    ``factor`` (a Variant field) takes each of ``values`` in order; ``fixed`` is a tuple of
    (field, value) pairs the series also sets. Defined here so this module never imports
    lab.orchestration.config (lab.orchestration.config imports this one).
    """

    @property
    def name(self) -> str: ...
    @property
    def factor(self) -> str: ...
    @property
    def values(self) -> tuple: ...
    @property
    def fixed(self) -> tuple: ...


def expand_series(defaults: Variant, series: Iterable[SeriesDecl]) -> list[Variant]:
    """Expand declared series into variants, deduplicated by content id, in declared order.

    ``defaults``: the ``[defaults]`` section as a Variant (lab.orchestration.config.check_defaults);
    ``series``: the ``[[series]]`` sections (lab.orchestration.config.SeriesSection, or any SeriesDecl).
    A variant's name is "<series>/<factor>=<value>". A variant that two series share (e.g.
    batch 8 unbucketed, in the batch series and as the baseline of a bucketing series) runs
    once, keeps its first name, and lists every series it belongs to in ``series``, joined
    by SERIES_SEP ("batch+bucketing"; see ``series_names``). Raises VariantError on an
    unknown factor, an empty series, a fixed field that is also the factor, or two values of one
    series that make one variant (a value repeated, 2 and 2.0).
    """
    known = {f.name for f in fields(Variant)} - {"series", "name"}
    out: list[Variant] = []
    seen: set[str] = set()
    for s in series:
        name, factor, values = s.name, s.factor, s.values
        if not name or factor not in known or not values:
            raise VariantError(
                f"series {name!r}: needs name, factor (one of {', '.join(sorted(known))}) and values")
        if SERIES_SEP in name:
            raise VariantError(f"series {name!r}: a series name cannot hold {SERIES_SEP!r}; rename it")
        fixed = dict(s.fixed)
        if factor in fixed:
            raise VariantError(f"series {name!r}: factor {factor!r} is also fixed; a series varies one factor")
        bad = set(fixed) - known
        if bad:
            raise VariantError(f"series {name!r}: unknown field(s) {', '.join(sorted(bad))}")
        mine: dict[str, object] = {}  # this series' variant ids -> the value that made each
        for value in values:
            vname = f"{name}/{factor}={value}"
            try:
                v = replace(defaults, **fixed, **{factor: value}, series=name, name=vname)
            except VariantError as exc:
                engine = value if factor == "engine" else fixed.get("engine", defaults.engine)
                opt = next((f for f in VLLM_ONLY if f in fixed), None)
                if opt is None or engine == "vllm":
                    raise VariantError(f"variant {vname}: {exc}") from None
                raise VariantError(
                    f"variant {vname}: {opt} = {fixed[opt]!r}, fixed by series {name!r} for every value of "
                    f"{factor}, is a vLLM option but this variant's engine = {engine!r}; a series cannot fix a "
                    "field for one of its values only: " + VLLM_ONLY_WHERE.format(option=opt, value=fixed[opt])
                ) from None
            if v.variant_id in mine:  # [2, 2, 4] or [2, 2.0]: one variant twice, never silently dropped
                first = mine[v.variant_id]
                same = (f"values {first!r} and {value!r} make one variant" if repr(first) != repr(value)
                        else f"values lists {value!r} twice")
                raise VariantError(f"series {name!r}: {same}; remove the repeat")
            mine[v.variant_id] = value
            if v.variant_id not in seen:
                seen.add(v.variant_id)
                out.append(v)
                continue
            k = next(i for i, o in enumerate(out) if o.variant_id == v.variant_id)
            if name not in series_names(out[k].series):
                out[k] = replace(out[k], series=out[k].series + SERIES_SEP + name)
    return out


def _spelling(name: str) -> str:
    """A variant name with a boolean value spelled as in TOML ('bucketing=true'), whatever the
    case the name was written with ('bucketing=True', the Python spelling names are made with)."""
    head, sep, value = name.rpartition("=")
    return f"{head}={value.lower()}" if sep and value.lower() in ("true", "false") else name


def find_variant(variants, ref: str) -> "Variant | None":
    """The variant whose id or name is ``ref`` (a campaign file's ``reference_variant``), or None.

    A boolean value matches in either spelling: 'bucketing/bucketing=true' (TOML, what a user
    types) and 'bucketing/bucketing=True' (how names are written) are the same variant.
    """
    return next((v for v in variants if ref == v.variant_id or _spelling(ref) == _spelling(v.name)), None)


def series_names(series: str | None) -> set[str]:
    """The series a variant belongs to, from its ``series`` field ("batch+bucketing")."""
    return set(filter(None, (series or "").split(SERIES_SEP)))
