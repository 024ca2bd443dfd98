"""Typed sections of the campaign file: one frozen dataclass per TOML table.

Each section is built by :func:`parse_section`, which refuses an unknown key (naming the
nearest valid one, difflib), a missing required key and a value of the wrong type (a TOML
boolean is never an integer), then the dataclass's ``__post_init__`` checks the values.
Defaults are the dataclass field defaults, defined here once. The keys accepted in
``[defaults]`` and in a ``[[series]]`` table are the fields of :class:`lab.inputs.variants.Variant`,
so a new variant field is accepted there without touching this file.

Pricing facts ([cost], deadline, window) are checked through :mod:`lab.cost.forfaits`, the
single pricing source (seed: "Calcolare il costo impegnato con i nostri forfait").
Errors: :class:`ConfigError`, one line naming the section, the key and the fix.
"""

from __future__ import annotations

import json
import math
import re
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from lab.facts.constants import (
    AGREEMENT,
    DEFAULT_DELIVERABLES,
    DEFAULT_LOTS,
    DEFAULT_MIN_ACCEPTED_PASSES,
    DEFAULT_MIN_WINDOW_S,
    DEFAULT_REPETITIONS,
    DEFAULT_SEED,
)
from lab.facts.errors import UserError, did_you_mean
from lab.facts.typecheck import type_name as _type_name
from lab.facts.typecheck import type_ok as _type_ok
from lab.inputs.scenario import ScenarioSection
from lab.inputs.variants import VLLM_ONLY, VLLM_ONLY_WHERE, Variant, VariantError
from lab.kinds import KINDS
from lab.kinds.classification_kind import LABEL_METRICS
from lab.kinds.embedding_kind import EMBEDDING, POOLINGS
from lab.kinds.generation_kind import GENERATION

METRICS = tuple(m.name for m in LABEL_METRICS)  # classification (and custom code that returns labels)
EMBEDDING_METRICS = tuple(m.name for m in EMBEDDING.metrics)
GENERATION_METRICS = tuple(m.name for m in GENERATION.metrics)  # the one [quality] names is judged, the other reported
DIRECTIONS = ("higher", "lower")  # a user metric's better side
ENTRY_RE = re.compile(r"^(?P<file>[^:]+\.py):(?P<name>[A-Za-z_][A-Za-z0-9_]*)$")
ROTATIONS = ("cyclic",)          # lab.orchestration.schedule.rotated_schedule: repetition r rotated by r-1
SUBGROUPS = ("buckets",)         # lab.orchestration.validate: metric and coverage per length bucket
PROCESS_POLICIES = ("fresh",)    # one new process (or container) per pass
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
MAX_REPETITIONS = 1000  # [timing] repetitions: beyond it a campaign of one variant outlives any rental
MAX_THREADS = 4096      # [timing] threads: more CPU threads than any host has
MAX_WARMUP_ITEMS = 10_000  # [timing] warmup_items: beyond it the warm-up is a pass of its own, untimed
MAX_WARMUP_PASSES = 100    # [timing] warmup_passes: steady state comes within a few; beyond it, a typo
UNUSUAL_REPETITIONS = 30  # above it a warning at lock: the rotation needs far fewer
VARIANT_KEYS = tuple(f.name for f in fields(Variant) if f.name not in ("series", "name"))


class ConfigError(UserError):
    """A campaign-file value that cannot be used; one line naming the key and the fix."""


def nearest(key: str, valid: typing.Iterable[str], listed: str = "valid keys") -> str:
    """'; did you mean 'x'?' for the closest valid key (difflib), else the list of valid keys
    (``listed``: the words before it, e.g. 'valid keys for kind = "generation"')."""
    valid = sorted(valid)
    return did_you_mean(key, valid, f"{listed}: {', '.join(valid)}")


def check_keys(table: dict, valid: typing.Iterable[str], where: str, listed: str = "valid keys") -> None:
    """Raise ConfigError on the first key of ``table`` not in ``valid`` (``listed``: see ``nearest``)."""
    valid = set(valid)
    for key in table:
        if key not in valid:
            raise ConfigError(f"{where} unknown key {key!r}; {nearest(key, valid, listed)}")


def check_value(value: Any, hint: Any, where: str) -> None:
    if not _type_ok(value, hint):
        shown = json.dumps(value, default=str, ensure_ascii=False)[:60]  # as written in TOML: true, "yes"
        raise ConfigError(f"{where} = {shown} has the wrong type; expected {_type_name(hint)}")


def parse_section(cls, table: Any, section: str):
    """Build section dataclass ``cls`` from the TOML table ``table`` (unknown keys, types, values)."""
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise ConfigError(f"[{section}] must be a table, got {table!r}")
    hints = typing.get_type_hints(cls)
    if cls is TaskSection:  # a key no kind reads: name the keys of the declared kind only
        kind = table.get("kind", "classification")
        check_value(kind, hints["kind"], f"[{section}] kind")  # typed before it is looked up: ["x"] is unhashable
        own = KINDS[kind].accepted_keys if kind in KINDS else ()
        check_keys({k: v for k, v in table.items() if k not in hints}, ("kind", *own),
                   f"[{section}]", f"valid keys for kind = {json.dumps(kind, default=str)}")
    check_keys(table, hints, f"[{section}]")
    for f in fields(cls):
        if f.name not in table:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"missing [{section}] {f.name}; add it to the campaign file")
            continue
        check_value(table[f.name], hints[f.name], f"[{section}] {f.name}")
    return cls(**table)


# ---- sections ----------------------------------------------------------------------------

@dataclass(frozen=True)
class CampaignSection:
    """[campaign]: ``name`` becomes a folder name under runs/; ``deadline`` ISO with offset."""

    name: str
    question: str
    deliverables: int = DEFAULT_DELIVERABLES  # distinct useful corpora the job must produce (seed: count once)
    deadline: str | None = None

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name) or ".." in self.name:
            raise ConfigError(f"[campaign] name {self.name!r} is used as a folder name; use letters, digits, "
                              "'.', '_' or '-' (no '/', no '..', at most 80 characters)")
        if not self.question.strip():
            raise ConfigError("[campaign] question is empty; write the decision question")
        if self.deliverables < 1:
            raise ConfigError(f"[campaign] deliverables = {self.deliverables}; must be >= 1 distinct corpora")
        if self.deadline is not None:
            from lab.cost.forfaits import PricingError, parse_instant

            try:
                parse_instant(self.deadline, None, "[campaign] deadline")
            except PricingError as exc:
                raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class CorpusSection:
    """[corpus]: the built comparison corpus (JSONL) and optionally its card."""

    path: str
    card: str | None = None


@dataclass(frozen=True)
class ModelSection:
    """[model]: ``path`` (local checkpoint) or ``id`` (hub, from the local cache) with an optional
    ``revision`` (commit hash, branch or tag; applied to every load); ``pad_token`` names the
    padding token when the tokenizer has none (recorded in the lock). Raises ConfigError for
    neither or both of path/id, and for ``revision`` with ``path`` (it would be ignored)."""

    path: str | None = None
    id: str | None = None
    revision: str | None = None
    pad_token: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.id is None):
            raise ConfigError("[model] needs exactly one of path (local checkpoint) or id (hub model)")
        if self.path is not None and self.revision is not None:
            raise ConfigError(f"[model] revision = {self.revision!r} does not apply to [model] path (a local "
                              "folder is identified by its files' sha256); remove revision, or use "
                              "[model] id with revision for a hub model")


def parse_entry(value: str, where: str) -> tuple[str, str]:
    """(file, name) of a ``"path/to/file.py:Name"`` reference; ConfigError (one line) otherwise."""
    m = ENTRY_RE.match(value)
    if not m:
        what = "function" if where == "[quality] metric" else "class"  # an entry is a class, a metric a function
        raise ConfigError(f"{where} = {value!r} is not \"path/to/file.py:Name\"; give the Python file and the "
                          f"{what} it defines, separated by ':'")
    return m["file"], m["name"]


@dataclass(frozen=True)
class TaskSection:
    """[task]: the job each pass measures (SPEC 2: task). Absent: ``kind = "classification"``.

    ``embedding``: ``pooling`` ("mean": mean of the last hidden state over the attention mask;
    beside an ``entry``, any name the entry reads from its settings, since it pools) and
    ``normalize`` (L2, default true), recorded in each pass's result. ``custom``: ``entry``
    ``"path/to/file.py:ClassName"`` (the user's inference code, lab.passes.tasks.custom) and ``files``,
    other files it reads (hashed into the lock with it); ``embedding`` and ``generation`` take them
    too, the entry then returning vectors (``embed``) or texts (``generate``) in place of the
    built-in job (lab.passes.backends.entry_backend). ``generation``: ``prompt`` (template
    holding ``{text}`` once), ``max_new_tokens``, ``stop`` strings, ``max_text_tokens`` (the
    item's text cut to its first N tokens, 0 = whole), ``decoding`` ("greedy" only): the rule of
    lab.passes.tasks.generation_core.GenerationRule, checked by it; ``normalisation``: how outputs
    and reference answers are normalised before exact match (lab.passes.tasks.text_metrics
    NORMALISATIONS, default its NORMALISATION). Raises ConfigError (one line)."""

    kind: str = "classification"
    pooling: str | None = None
    normalize: bool | None = None
    entry: str | None = None
    files: tuple[str, ...] = ()
    prompt: str | None = None
    max_new_tokens: int | None = None
    stop: tuple[str, ...] = ()
    max_text_tokens: int | None = None
    decoding: str | None = None
    normalisation: str | None = None

    def __post_init__(self) -> None:
        declared = KINDS.get(self.kind)
        if declared is None:
            raise ConfigError(f"[task] kind {self.kind!r} unknown; {nearest(self.kind, tuple(KINDS), 'valid kinds')}")
        object.__setattr__(self, "files", tuple(self.files))
        for key, default in declared.defaults:  # "" is no pooling: only an absent key takes the default
            if getattr(self, key) is None:
                object.__setattr__(self, key, default)
        for kind in KINDS.values():  # in the registry's order: its own checks, or another kind's keys refused
            if kind is declared:
                check = getattr(self, f"_check_{kind.name}", None)  # the kind's own values, when it has any
                if check is not None:
                    check()
                if kind.entry is not None and not kind.by_entry:  # the user's own code may run it
                    self._check_entry()
                continue
            for key in kind.keys:
                if key not in declared.accepted_keys and getattr(self, key) not in (None, ()):
                    takers = " or ".join(f'"{k.name}"' for k in KINDS.values() if key in k.accepted_keys)
                    raise ConfigError(f"[task] {key} applies to kind = {takers} only; remove it, or set "
                                      f'kind = "{kind.name}"')

    def _check_entry(self) -> None:
        """The user's code, where the kind takes it (``entry`` optional): a well-formed reference,
        ``files`` only beside it and each a path."""
        if self.entry:
            parse_entry(self.entry, "[task] entry")
        elif self.files:
            raise ConfigError("[task] files lists the files an entry reads; declare entry = "
                              "\"path/to/file.py:ClassName\" beside it, or remove files")
        for f in self.files:
            if not isinstance(f, str) or not f:
                raise ConfigError("[task] files lists file paths (strings) the entry reads")

    def _check_embedding(self) -> None:
        if self.entry:  # the entry pools: its own names ("cls", "last", ...) reach it in its settings
            if not isinstance(self.pooling, str) or not self.pooling:
                raise ConfigError("[task] pooling beside an entry is the name your code reads from its "
                                  "settings (for example \"mean\" or \"cls\"); give a non-empty string")
            return
        if self.pooling not in POOLINGS:
            raise ConfigError(f"[task] pooling {self.pooling!r} is not implemented; use "
                              f"{' or '.join(map(repr, POOLINGS))} (mean over the attention mask)")

    def _check_custom(self) -> None:
        if not self.entry:
            raise ConfigError('[task] kind = "custom" needs entry = "path/to/file.py:ClassName"')
        self._check_entry()

    def _check_generation(self) -> None:
        from lab.passes.tasks.generation_core import GenerationRuleError
        from lab.passes.tasks.text_metrics import NORMALISATION, MetricInputError, normaliser

        if self.prompt is None or self.max_new_tokens is None:
            raise ConfigError('[task] kind = "generation" needs prompt (with {text}) and max_new_tokens, e.g. '
                              'prompt = "{text}\\nAnswer:" and max_new_tokens = 16')
        object.__setattr__(self, "stop", tuple(self.stop))  # max_text_tokens, decoding: GENERATION.defaults
        norm = NORMALISATION if self.normalisation is None else self.normalisation  # "" is no normalisation
        object.__setattr__(self, "normalisation", norm)
        if self.decoding != "greedy":
            raise ConfigError(f"[task] decoding {self.decoding!r} is not implemented; use \"greedy\" (argmax at "
                              "every step, one beam, no sampling)")
        try:
            normaliser(norm)
            self.rule()
        except (GenerationRuleError, MetricInputError) as exc:
            raise ConfigError(f"[task] {exc}") from None

    def rule(self):
        """The generation rule (lab.passes.tasks.generation_core.GenerationRule) this section
        declares; raises GenerationRuleError (one line) for a value it cannot use."""
        from lab.passes.tasks.generation_core import GenerationRule

        return GenerationRule(prompt=self.prompt or "", max_new_tokens=self.max_new_tokens or 0,
                              stop=tuple(self.stop), max_text_tokens=self.max_text_tokens or 0,
                              decoding="greedy")  # _check_generation refuses any other decoding


@dataclass(frozen=True)
class QualitySection:
    """[quality]: metric, absolute threshold, tolerance, reference variant. The threshold is a fraction in
    [0, 1] for a built-in metric, any finite number in the metric's unit for the user's own; the tolerance
    is a fraction in [0, 1] (the largest gap of a pass's metric to the reference variant's; between two
    rentals, of their metric medians, lab.compare.decision.agreement_pairs).

    ``metric``: a built-in name (lab.kinds.kind.TaskKind.metric_names of the task's kind) or the user's own
    procedure ``"path/to/file.py:function"`` (``function(predictions, references) -> float``,
    lab.passes.tasks.user_metric), whose ``direction`` ("higher" or "lower" is better) must be declared.

    The agreement rule (lab.orchestration.agreement), checked in every pass beside the threshold:
    ``max_differing``, the largest share of ids whose result may differ from the reference pass's
    (a fraction), and for embeddings ``min_cosine``, the per-id cosine below which a vector differs;
    None takes the task kind's default (lab.kinds.kind.TaskKind.agreement_max_differing,
    AGREEMENT_MIN_COSINE)."""

    metric: str
    threshold: float
    tolerance: float
    reference_variant: str
    subgroups: str = "buckets"
    direction: str | None = None
    max_differing: float | None = None
    min_cosine: float | None = None

    @property
    def user_metric(self) -> bool:
        """True when ``metric`` names the user's own function (``file.py:function``)."""
        return ":" in self.metric

    def __post_init__(self) -> None:
        known = tuple(dict.fromkeys(m for k in KINDS.values() for m in k.metric_names))
        if self.user_metric:
            parse_entry(self.metric, "[quality] metric")
            if self.direction is None:
                raise ConfigError(f"[quality] metric {self.metric!r} is your own function: declare direction = "
                                  '"higher" or "lower" (which side is better)')
            if self.direction not in DIRECTIONS:
                raise ConfigError(f"[quality] direction = {self.direction!r} is not a direction; use "
                                  '"higher" or "lower" (which side of your metric is better)')
        else:
            if self.metric not in known:
                raise ConfigError(f"[quality] metric {self.metric!r} unknown; " + did_you_mean(
                    self.metric, known,
                    f"use {builtin_choices()}, or {AGREEMENT} for any task (with the reference variant; "
                    "no labels needed)"))
            if self.direction is not None:  # direction is for the user's own metric only
                raise ConfigError(f"[quality] direction = {self.direction!r} is for your own metric "
                                  f"(\"file.py:function\"); the built-in metric {self.metric!r} is higher-is-better, "
                                  "remove direction")
        if self.user_metric:  # in the metric's own unit: any finite number
            if not math.isfinite(self.threshold):
                raise ConfigError(f"[quality] threshold = {self.threshold!r} is not a finite number; declare your "
                                  "metric's pass mark in its own unit")
        elif not 0 <= self.threshold <= 1:
            unit = ("the least share of ids equal to the reference's, or for embeddings the least cosine of "
                    "every id with it" if self.metric == AGREEMENT else f"the built-in metric {self.metric!r} is a "
                    "fraction")
            raise ConfigError(f"[quality] threshold = {self.threshold!r} is outside [0, 1]; {unit}")
        if not 0 <= self.tolerance <= 1:
            raise ConfigError(f"[quality] tolerance = {self.tolerance!r} is outside [0, 1]; it bounds the gap of a "
                              "pass's metric to the reference variant's, a fraction")
        if self.max_differing is not None and not 0 <= self.max_differing <= 1:
            raise ConfigError(f"[quality] max_differing = {self.max_differing!r} is outside [0, 1]; it is the largest "
                              "share of ids whose result may differ from the reference variant's (e.g. 0.05)")
        if self.min_cosine is not None and not 0 < self.min_cosine <= 1:
            raise ConfigError(f"[quality] min_cosine = {self.min_cosine!r} is outside (0, 1]; it is the least cosine "
                              "of an id's vector with the reference variant's (e.g. 0.999)")
        if self.subgroups not in SUBGROUPS:
            raise ConfigError(f"[quality] subgroups {self.subgroups!r} is not implemented; use "
                              f"{' or '.join(map(repr, SUBGROUPS))} (metric per length bucket)")


@dataclass(frozen=True)
class TimingSection:
    """[timing]: warm-up rule, repetitions, rotation, process policy, seed, CPU threads,
    ``pass_timeout_s`` (a pass still running after it is killed) and ``stall_s`` (a pass
    that sends no event for that long is killed: a stopped or hung runner). The projection
    validity rule: compare projects a configuration to a production load only when at least
    ``min_accepted_passes`` accepted passes each measured at least ``min_window_s`` seconds
    (lab.facts.constants: why these defaults)."""

    warmup_items: int
    warmup_passes: int
    repetitions: int = DEFAULT_REPETITIONS  # seed: 5 repetitions per variant
    rotation: str = "cyclic"
    process: str = "fresh"
    seed: int = DEFAULT_SEED
    threads: int = 0
    pass_timeout_s: float = 6 * 3600.0
    stall_s: float = 900.0
    min_window_s: float = DEFAULT_MIN_WINDOW_S
    min_accepted_passes: int = DEFAULT_MIN_ACCEPTED_PASSES

    def __post_init__(self) -> None:
        if self.repetitions < 1:
            raise ConfigError(f"[timing] repetitions must be >= 1 (default {DEFAULT_REPETITIONS})")
        if self.repetitions > MAX_REPETITIONS:
            raise ConfigError(f"[timing] repetitions = {self.repetitions} is beyond {MAX_REPETITIONS} passes per "
                              f"variant (a typo?); use a few (default {DEFAULT_REPETITIONS})")
        if self.threads > MAX_THREADS:
            raise ConfigError(f"[timing] threads = {self.threads} is beyond {MAX_THREADS} CPU threads, more than "
                              "any host has; give the threads a pass uses (0: torch's default)")
        for key in ("warmup_items", "warmup_passes", "threads", "seed"):
            if getattr(self, key) < 0:
                raise ConfigError(f"[timing] {key} must be >= 0")
        for key, bound in (("warmup_items", MAX_WARMUP_ITEMS), ("warmup_passes", MAX_WARMUP_PASSES)):
            if getattr(self, key) > bound:
                raise ConfigError(f"[timing] {key} = {getattr(self, key)} is beyond {bound} (a typo?): a warm-up "
                                  "only brings the engine to steady state before the window; use a few batches' "
                                  "worth of items and 1 to 3 passes over them")
        if self.rotation not in ROTATIONS:
            raise ConfigError(f"[timing] rotation {self.rotation!r} is not implemented; use "
                              f"{' or '.join(map(repr, ROTATIONS))} (1-4-8, 4-8-1, 8-1-4, ...)")
        if self.process not in PROCESS_POLICIES:
            raise ConfigError("[timing] process must be 'fresh' (one process per pass)")
        for key in ("pass_timeout_s", "stall_s"):
            if not 0 < getattr(self, key) <= 7 * 86400:
                raise ConfigError(f"[timing] {key} = {getattr(self, key)!r}; must be seconds in (0, 604800]")
        if not 0 <= self.min_window_s <= 7 * 86400:
            raise ConfigError(f"[timing] min_window_s = {self.min_window_s!r}; must be seconds in [0, 604800] "
                              f"(default {DEFAULT_MIN_WINDOW_S:g})")
        if not 1 <= self.min_accepted_passes <= 1000:
            raise ConfigError(f"[timing] min_accepted_passes = {self.min_accepted_passes}; must be 1 to 1000 "
                              f"(default {DEFAULT_MIN_ACCEPTED_PASSES})")


CAMPAIGN_CATALOG_FIX = 'set [cost] catalog = "FILE.csv"'
"""How a campaign file gives another price catalog (the command line's ``--catalog FILE``)."""


@dataclass(frozen=True)
class CostSection:
    """[cost]: the package to price (``gpu``, ``days``, ``lots``), an optional catalog CSV and
    campaign window (ISO date-times, naive ones placed in IANA zone ``tz``)."""

    gpu: str
    days: int
    lots: int = DEFAULT_LOTS
    catalog: str | None = None
    window_start: str | None = None
    window_end: str | None = None
    tz: str | None = None

    def __post_init__(self) -> None:
        for key in ("days", "lots"):
            if getattr(self, key) < 1:
                raise ConfigError(f"[cost] {key} = {getattr(self, key)}; must be an integer >= 1")

    def check(self, catalog_path: str | None) -> None:
        """Check against the catalog through lab.cost.forfaits; ConfigError on any problem."""
        from lab.cost.forfaits import PricingError, load_catalog, parse_window, quote

        if (self.window_start is None) != (self.window_end is None):
            raise ConfigError("[cost] give both window_start and window_end, or neither")
        try:
            quote(load_catalog(catalog_path), self.gpu, self.days, self.lots)
            if self.window_start is not None and self.window_end is not None:
                parse_window(self.window_start, self.window_end, self.tz)
        except PricingError as exc:  # in the campaign file's terms: it has no --catalog flag
            raise ConfigError(f"[cost] {exc.reworded(CAMPAIGN_CATALOG_FIX)}") from None


def variant_hints() -> dict:
    return {k: v for k, v in typing.get_type_hints(Variant).items() if k in VARIANT_KEYS}


def check_defaults(table: Any) -> Variant:
    """[defaults]: any Variant field (keys from dataclasses.fields(Variant)), typed.

    Returns the section as a Variant (unset fields take Variant's defaults), the base that
    lab.inputs.variants.expand_series applies each series to. Raises ConfigError (one line).
    """
    if not isinstance(table, dict):
        raise ConfigError(f"[defaults] must be a table, got {table!r}")
    hints = variant_hints()
    check_keys(table, hints, "[defaults]")
    for k, v in table.items():
        check_value(v, hints[k], f"[defaults] {k}")
    try:
        return Variant(**table)
    except VariantError as exc:
        engine = table.get("engine", Variant.engine)
        opt = next((f for f in VLLM_ONLY if f in table), None)
        if opt is None or engine == "vllm":
            raise ConfigError(f"[defaults] {exc}") from None
        raise ConfigError(f"[defaults] {opt} = {table[opt]!r} is a vLLM option, and [defaults] applies to every "
                          f"variant, whose engine here is {engine!r}"
                          + ("" if "engine" in table else " (the default)") + "; "
                          + VLLM_ONLY_WHERE.format(option=opt, value=table[opt])) from None


@dataclass(frozen=True)
class SeriesSection:
    """One [[series]]: ``factor`` (a Variant field) takes each of ``values``; ``fixed`` holds the
    other Variant fields the series sets."""

    name: str
    factor: str
    values: tuple
    fixed: tuple = ()

    @classmethod
    def parse(cls, table: Any, index: int) -> "SeriesSection":
        where = f"[[series]] #{index}"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        hints = variant_hints()
        check_keys(table, {"name", "factor", "values", *hints}, where)
        for key, hint in (("name", str), ("factor", str), ("values", list)):
            if key not in table:
                raise ConfigError(f"{where}: missing {key}; a series needs name, factor and values")
            check_value(table[key], hint, f"{where} {key}")
        name, factor, values = table["name"], table["factor"], table["values"]
        where = f"[[series]] {name!r}"
        if factor not in hints:
            raise ConfigError(f"{where} factor {factor!r} is not a variant field; {nearest(factor, hints)}")
        if not values:
            raise ConfigError(f"{where} values is empty; list at least one value of {factor}")
        for v in values:
            check_value(v, hints[factor], f"{where} values item")
        fixed = {k: v for k, v in table.items() if k not in ("name", "factor", "values")}
        if factor in fixed:
            raise ConfigError(f"{where}: factor {factor!r} is also fixed; a series varies one factor")
        for k, v in fixed.items():
            check_value(v, hints[k], f"{where} {k}")
        return cls(name, factor, tuple(values), tuple(sorted(fixed.items())))


SECTIONS = {"campaign": CampaignSection, "corpus": CorpusSection, "model": ModelSection,
            "quality": QualitySection, "timing": TimingSection, "cost": CostSection, "task": TaskSection,
            "scenario": ScenarioSection}
TOP_KEYS = (*SECTIONS, "defaults", "series")


@dataclass(frozen=True)
class CampaignConfig:
    """The whole campaign file, typed. ``cost`` is None when no package is declared."""

    campaign: CampaignSection
    corpus: CorpusSection
    model: ModelSection
    quality: QualitySection
    timing: TimingSection
    defaults: Variant
    series: tuple[SeriesSection, ...]
    cost: CostSection | None
    task: TaskSection = TaskSection()
    scenario: ScenarioSection = field(default_factory=ScenarioSection)


def with_article(word: str) -> str:
    """``word`` after its indefinite article ("a custom", "an embedding"), by its first letter
    (a vowel takes "an"; the task kinds and engine names this lab prints need no other rule)."""
    return ("an " if word[:1].lower() in "aeiou" else "a ") + word


def metric_choices(kind: str) -> str:
    """The [quality] metrics a task of ``kind`` accepts, as a message's "use ..." tail: its built-in
    names (lab.kinds.kind.TaskKind.metric_names), and the user's own "file.py:function" only for a
    kind whose ``user_metric`` is true (parse_config refuses it for the others)."""
    names = " or ".join(KINDS[kind].metric_names)
    return names + (', or your own "file.py:function"' if KINDS[kind].user_metric else "")


def builtin_choices() -> str:
    """Every kind's built-in metrics but agreement, the kinds sharing them together: 'accuracy or
    macro_f1 (or your own "file.py:function") for classification or custom, nn_accuracy for
    embedding, ...' (an unknown [quality] metric's message)."""
    groups: dict[tuple, list[str]] = {}
    for k in KINDS.values():
        groups.setdefault((tuple(m.name for m in k.metrics), k.user_metric), []).append(k.name)
    return ", ".join(" or ".join(names) + (' (or your own "file.py:function")' if user else "")
                     + f" for {' or '.join(kinds)}" for (names, user), kinds in groups.items())


def parse_config(raw: dict) -> CampaignConfig:
    """Typed configuration from the parsed TOML ``raw``; raises ConfigError (one line)."""
    check_keys(raw, TOP_KEYS, "top level:")
    parsed: dict[str, Any] = {}
    for key, cls in SECTIONS.items():
        if key == "cost" and "cost" not in raw:
            parsed[key] = None
            continue
        if key in ("campaign", "corpus", "model", "quality", "timing") and key not in raw:
            raise ConfigError(f"missing [{key}] section; add it to the campaign file")
        parsed[key] = parse_section(cls, raw.get(key), key)
    series = raw.get("series")
    if not series:
        raise ConfigError("no [[series]] declared; add at least one")
    if not isinstance(series, list):
        raise ConfigError("series must be declared as [[series]] tables")
    task, quality = parsed["task"], parsed["quality"]
    kind = KINDS[task.kind]
    if not quality.user_metric and quality.metric not in kind.metric_names:
        raise ConfigError(f"[quality] metric {quality.metric!r} does not judge {with_article(task.kind)} task; "
                          f"use {metric_choices(task.kind)}")
    if quality.user_metric and not kind.user_metric:
        users = " or ".join(k.name for k in KINDS.values() if k.user_metric)
        raise ConfigError(f'[quality] metric "file.py:function" judges label outputs '
                          f"({users}); for {with_article(task.kind)} task use "
                          f"{metric_choices(task.kind)}")
    if quality.min_cosine is not None and not kind.by_cosine:
        cosine = " or ".join(f'kind = "{k.name}"' for k in KINDS.values() if k.by_cosine)
        raise ConfigError(f"[quality] min_cosine applies to {cosine} only (a vector's cosine with the "
                          f"reference variant's); {with_article(task.kind)} task's agreement rule is max_differing "
                          "alone, remove min_cosine")
    cfg = CampaignConfig(defaults=check_defaults(raw.get("defaults", {})),
                         series=tuple(SeriesSection.parse(s, i) for i, s in enumerate(series, 1)),
                         **parsed)
    return cfg
