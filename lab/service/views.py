"""Read-only views of a campaign that the UI's screens (and any other front end) show.

Each function takes a campaign file (and folder, or fields typed by the user), computes
with the engine's own modules, and returns data: the protocol and its lock, the plan with
memory feasibility (typed, frozen records declared here: ProtocolInfo, LockResult, PlanView,
PlannedVariant; LockedVersion and ReplayOrigin in lab.service.campaign_records), the quote and decision note, the
host's environment. No rendering here: ``tui/screens`` turn these into text. Slow (model
shape, doctor probes): call them from a worker thread.

Named here for the screens (defined where documented): ``PricingError`` (lab.cost.forfaits,
which the Cost screen rewords for its field) and, for type checking, ``VariantSummary``
(lab.report.summary, loaded only when a view needs it: the report modules import pandas).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from lab.cost.forfaits import PricingError
from lab.inputs.variants import series_names, variant_short
from lab.orchestration.config import QualitySection, TimingSection
from lab.orchestration.protocol import current_version, load_protocol, read_lock
from lab.service.campaign_records import LockedVersion, ReplayOrigin
from lab.service.campaigns import runs_root
from lab.service.environment_facts import EnvironmentFacts, GpuFacts

if TYPE_CHECKING:  # annotations only: the report modules import pandas, the others load when a view needs them
    from lab.memory.feasibility import ReservationFit
    from lab.orchestration.preflight import Check
    from lab.report.summary import VariantSummary

__all__ = ["ComparisonView", "CostView", "EnvironmentFacts",
           "LockResult", "LockedVersion", "PlanView", "PlannedVariant", "PricingError",
           "ProtocolInfo", "ReplayOrigin", "ReportBuilt", "VariantSummary", "archives_under", "budget_of", "build_plan",
           "collect_environment",
           "cost_view", "declared_cost", "load_summary", "lock_protocol", "model_shape", "protocol_info",
           "rebuild_report", "run_comparison", "validated_corpora"]

_SHAPES: dict = {}
_SHAPE_LOCK = threading.Lock()  # transformers' lazy imports are not thread-safe


# ---- protocol ------------------------------------------------------------------------

@dataclass(frozen=True)
class ProtocolInfo:
    """The Protocol screen's view of a campaign file: ``file`` its path (text); ``quality``,
    ``timing`` the typed sections with their defaults filled in; ``card_counts`` {bucket: {class:
    items}} from the corpus card (else counted in the corpus; None without either); ``lock_state``
    "not locked", "locked" (the file matches version ``current``) or "edited" (changed since the
    last lock: locking makes version len(versions)+1); ``versions`` the lock's, oldest first;
    ``digest`` lab.orchestration.protocol.protocol_digest of the parsed file (64 hex)."""

    name: str
    question: str
    file: str
    quality: QualitySection
    timing: TimingSection
    card_counts: Mapping[str, Mapping[str, int]] | None
    lock_state: Literal["not locked", "locked", "edited"]
    versions: tuple[LockedVersion, ...]
    current: LockedVersion | None
    digest: str


@dataclass(frozen=True)
class LockResult:
    """What a lock did: ``entry`` the version now current, ``new`` True when this lock made it
    (False: the file was unchanged since ``entry``), ``warnings`` the unusual values that lock,
    one line each (lab.orchestration.protocol.lock_warnings, what `protocol lock` prints)."""

    entry: LockedVersion
    new: bool
    warnings: tuple[str, ...]


def protocol_info(campaign_file) -> ProtocolInfo:
    """The campaign file parsed, with its corpus card and lock state (see ProtocolInfo).

    Raises ProtocolError on an unusable file.
    """
    proto = load_protocol(campaign_file)
    versions = read_lock(proto.path)
    digest = proto.digest()
    current = current_version(proto, versions)[0] if proto.corpus_path.is_file() else None
    state: Literal["not locked", "locked", "edited"] = "locked" if current else ("edited" if versions else "not locked")
    counts = None
    if proto.card_path and proto.card_path.is_file():
        counts = json.loads(proto.card_path.read_text())["comparison"]["counts"]
    else:
        from lab.inputs.corpus import counts_by_bucket_class, read_corpus

        if proto.corpus_path.is_file():
            counts = counts_by_bucket_class(read_corpus(proto.corpus_path))
    return ProtocolInfo(name=proto.name, question=proto.config.campaign.question, file=str(proto.path),
                        quality=proto.config.quality, timing=proto.config.timing, card_counts=counts,
                        lock_state=state, versions=tuple(LockedVersion.of(v) for v in versions),
                        current=LockedVersion.of(current) if current else None, digest=digest)


def lock_protocol(campaign_file) -> LockResult:
    """Lock the file (lab.orchestration.protocol.lock, with its checks): see LockResult.
    Raises ProtocolError (one line) on a refusal."""
    from lab.orchestration.protocol import lock, lock_warnings

    before = len(read_lock(campaign_file))
    proto = load_protocol(campaign_file)
    entry = LockedVersion.of(lock(proto))
    return LockResult(entry, entry.version > before, tuple(lock_warnings(proto)))


# ---- plan ----------------------------------------------------------------------------

def model_shape(model_ref: str, revision: str | None = None, decoder: bool = False):
    """EncoderShape of a checkpoint, a hub id at ``revision`` (meta device; cached: building it
    takes seconds); with ``decoder``, its DecoderShape (a causal LM: generation)."""
    from lab.memory.estimate import DecoderShape, EncoderShape

    key = (model_ref, revision, decoder)
    with _SHAPE_LOCK:
        if key not in _SHAPES:
            _SHAPES[key] = (DecoderShape if decoder else EncoderShape).from_pretrained(model_ref, revision)
        return _SHAPES[key]


def budget_of(facts: EnvironmentFacts) -> tuple[int | None, str]:
    """(bytes, what): the first GPU's memory, else host RAM (no GPU: host memory is the limit)."""
    if facts.gpu.devices:
        first = facts.gpu.devices[0]
        return first.memory_bytes, f"GPU 0 memory ({first.name})"
    if facts.ram_total_bytes:
        return int(facts.ram_total_bytes), "host RAM (no GPU)"
    return None, "no memory budget known"


@dataclass(frozen=True)
class PlannedVariant:
    """One variant of the plan with its memory feasibility: ``series`` the series it belongs to
    (joined by "+"); ``fits`` {bucket: largest batch under the budget}; ``peak_estimate_bytes``
    {bucket: weights + the variant's own batch's activations, bytes}; ``fits_all`` True/False
    when every bucket's own batch fits, None when not estimated. A vLLM variant has
    ``reservation`` (what vLLM reserves up front and whether weights + one sequence fit it),
    empty ``fits`` and ``peak_estimate_bytes``, and ``fits_all`` = ``reservation.fits``."""

    name: str
    variant_id: str
    label: str
    series: str
    batch_size: int
    fits: Mapping[str, int]
    peak_estimate_bytes: Mapping[str, int]
    fits_all: bool | None
    reservation: ReservationFit | None = None


@dataclass(frozen=True)
class PlanView:
    """The Plan screen's view of a campaign: ``variants`` in declared order; ``schedule`` the
    variants' short names per repetition (rotated); ``passes`` their number; ``series`` the
    series' names, sorted; ``cards`` the distinct cards per pass, sorted; ``budget_bytes`` the
    memory budget (None: unknown) and ``budget_what`` what it is; ``margin`` the fraction kept
    for what the estimate leaves out (None when nothing was estimated); ``note`` why the memory
    estimate is missing ("" when it is not); ``checks`` the lock-time checks
    (lab.orchestration.preflight.lock_checks; "cards" refuses more cards than the host has)."""

    variants: tuple[PlannedVariant, ...]
    schedule: tuple[tuple[str, ...], ...]
    passes: int
    series: tuple[str, ...]
    cards: tuple[int, ...]
    budget_bytes: int | None
    budget_what: str
    margin: float | None
    note: str
    checks: tuple[Check, ...]


def build_plan(campaign_file, facts: EnvironmentFacts) -> PlanView:
    """Variants, rotated schedule and memory feasibility per variant (see PlanView).

    A variant's feasibility: lab.memory.feasibility.batch_fits; a generation campaign
    lab.memory.feasibility.generation_fits (weights + KV cache for max_length + [task]
    max_new_tokens positions + prefill activations + logits, the same in every bucket); a vLLM
    variant lab.memory.feasibility.reservation_fits. A failure of the lock checks is one check
    "lock checks" that is not ok, with the error.

    ``facts``: ``collect_environment()``'s record (the memory budget). Raises ProtocolError on
    an unusable campaign file; a missing model or corpus only fills ``note``.
    """
    from lab.orchestration.preflight import Check
    from lab.orchestration.search import planned_passes

    proto = load_protocol(campaign_file)
    sched = planned_passes(list(proto.variants), proto.config.timing.repetitions, proto.config.scenario.search)
    reps: dict[int, list[str]] = {}
    for p in sched:
        reps.setdefault(p.repetition, []).append(variant_short(p.variant))
    budget, what = budget_of(facts)
    margin = None
    note = ""
    fits: dict = {}
    reserved: dict = {}
    try:
        from lab.facts.constants import VLLM_MEMORY_FRACTION
        from lab.inputs.corpus import read_corpus
        from lab.memory.feasibility import DEFAULT_MARGIN_FRACTION, batch_fits, generation_fits, reservation_fits

        longest: dict[str, int] = {}
        for r in read_corpus(proto.corpus_path):
            b, n = r.get("bucket"), r.get("n_tokens")
            if b and n:
                longest[b] = max(longest.get(b, 0), int(n))
        generation = proto.kind.generates_text
        shape = model_shape(proto.model_ref, proto.config.model.revision)
        margin = DEFAULT_MARGIN_FRACTION
        for v in proto.variants:
            if budget and v.engine == "vllm":  # vLLM reserves up front: its reservation decides
                fraction = v.vllm_memory_fraction or VLLM_MEMORY_FRACTION["gpu" if what.startswith("GPU") else "cpu"]
                reserved[v.variant_id] = reservation_fits(shape, v.precision, budget, fraction, v.max_length)
            elif budget and longest and generation:  # decoding holds the KV cache of every layer
                fits[v.variant_id] = generation_fits(
                    model_shape(proto.model_ref, proto.config.model.revision, decoder=True), v.precision,
                    list(longest), budget, v.max_length, proto.config.task.max_new_tokens or 0, v.batch_size)
            elif budget and longest:
                fits[v.variant_id] = batch_fits(shape, v.precision, longest, budget, v.max_length,
                                                v.batch_size)
    except Exception as exc:  # no model/corpus yet: say why, keep the plan
        note = f"memory estimate not available: {type(exc).__name__}: {exc}"[:200]
    try:
        from lab.orchestration.preflight import lock_checks

        checks = tuple(lock_checks(proto))
    except Exception as exc:  # say why, keep the plan
        checks = (Check("lock checks", False, f"{type(exc).__name__}: {exc}"[:200]),)
    variants = []
    for v in proto.variants:
        f = fits.get(v.variant_id) or {}
        if v.variant_id in reserved:  # a vLLM variant: its reservation, not a batch's peak
            r = reserved[v.variant_id]
            variants.append(PlannedVariant(variant_short(v), v.variant_id, v.label, v.series, v.batch_size,
                                           fits={}, peak_estimate_bytes={}, fits_all=r.fits, reservation=r))
            continue
        variants.append(PlannedVariant(
            variant_short(v), v.variant_id, v.label, v.series, v.batch_size,
            fits={b: x.max_batch_size for b, x in f.items()},
            peak_estimate_bytes={b: x.weights_bytes + v.batch_size * x.activation_bytes_per_item
                                 for b, x in f.items()},
            fits_all=all(x.variant_fits for x in f.values()) if f else None))
    return PlanView(variants=tuple(variants), schedule=tuple(tuple(reps[r]) for r in sorted(reps)),
                    passes=len(sched),
                    series=tuple(sorted(set().union(*(series_names(v.series) for v in proto.variants)))),
                    cards=tuple(sorted({v.cards for v in proto.variants})),  # refusal: lock check "cards"
                    budget_bytes=budget, budget_what=what, margin=margin, note=note, checks=checks)


# ---- results ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ReportBuilt:
    """A campaign's report rewritten (rebuild_report): ``rows`` pass rows in its raw table,
    ``summary`` one VariantSummary per variant (lab.report.summary), ``report_dir`` the folder
    written (<campaign folder>/report)."""

    rows: int
    summary: list[VariantSummary]
    report_dir: Path


def rebuild_report(campaign_dir: str | Path) -> ReportBuilt:
    """Rewrite the campaign folder's report/ from its journal (the Results screen, `iteralab
    report`): lab.report.build.build_report's rows, summary and folder. Raises what it raises
    (DiskFull, one line, the previous report kept)."""
    from lab.report.build import build_report

    built = build_report(Path(campaign_dir))  # a dict: decoded here, once
    return ReportBuilt(rows=built["rows"], summary=built["summary"], report_dir=Path(built["report_dir"]))


# ---- cost and decision ---------------------------------------------------------------

def declared_cost(campaign_file: str | Path) -> dict:
    """The campaign file's [cost] section as written ({key: value}; {} without one), which the
    Cost screen's fields start from. Raises ProtocolError on an unusable file."""
    return dict(load_protocol(campaign_file).raw.get("cost", {}))


def load_summary(campaign_dir: Path | None) -> list[VariantSummary]:
    """The report's per-variant summary (report/summary.json, built when missing); [] without a campaign."""
    from lab.report.summary import read_summary

    if campaign_dir is None:
        return []
    p = Path(campaign_dir) / "report" / "summary.json"
    if not p.is_file():
        return rebuild_report(campaign_dir).summary
    return read_summary(p)


def validated_corpora(summary: list[VariantSummary]) -> int:
    """Distinct useful corpora validated: the campaign's corpus counts once when any pass of
    any variant was accepted (SPEC 3.11: 5 repetitions are not 5 corpora)."""
    return 1 if any(v.accepted_passes >= 1 for v in summary) else 0


@dataclass(frozen=True)
class CostView:
    """The Cost screen's figures (cost_view): ``quote_text`` the priced package (or why none is
    priced), ``validated`` the corpora this campaign validated, ``accepted`` the count priced
    (at most ``validated``), ``warning`` '' or why the count typed was not used, ``note_md`` the
    decision note (Markdown)."""

    quote_text: str
    validated: int
    accepted: int
    warning: str
    note_md: str


def cost_view(campaign_file: Path, campaign_dir: Path | None, fields: dict) -> CostView:
    """The Cost screen: quote, cost per validated corpus and decision note.

    ``fields``: strings typed by the user (catalog, gpu, days, lots, window_start,
    window_end, tz, accepted); an empty package field (catalog, gpu, days, lots) takes the
    campaign file's [cost] value; without
    a gpu and days no package is priced (none is invented). ``accepted`` may only lower the
    count of validated corpora. Returns a CostView; when the campaign's passes ran on other
    hardware than the package priced (lab.cost.hardware: the rule), its quote_text ends with the one
    line that says so, as the note does. Raises PricingError or ProtocolError (one line).
    """
    from dataclasses import asdict

    from lab.cost.forfaits import load_catalog, parse_window, quote, render_quote
    from lab.report.decision_note import decision_pricing

    proto = load_protocol(campaign_file)
    summary = load_summary(campaign_dir)
    validated = validated_corpora(summary)
    warning = ""
    wanted = fields.get("accepted", "").strip()
    accepted = validated
    if wanted:
        if not wanted.isdigit():
            warning = f"accepted corpora {wanted!r} is not an integer >= 0; using {validated}"
        elif int(wanted) > validated:
            warning = (f"accepted corpora cannot exceed the {validated} validated by this campaign; "
                       f"using {validated}")
        else:
            accepted = int(wanted)
    declared = asdict(proto.cost) if proto.cost is not None else {}  # no [cost]: no package declared
    package = {k: declared.get(k) for k in ("catalog", "gpu", "days", "lots")}  # the window: as typed
    if proto.catalog_path is not None:
        package["catalog"] = str(proto.catalog_path)  # relative to the campaign file, as at lock
    typed = {k: v for k, v in fields.items() if k != "accepted" and str(v).strip()}
    pricing = decision_pricing({**package, **typed})
    catalog = load_catalog(pricing["catalog_path"])
    window = None
    if pricing["window_start"] or pricing["window_end"]:
        window = parse_window(pricing["window_start"] or "", pricing["window_end"] or "", pricing["tz"])
    attempts = _attempts(campaign_dir) if summary else []  # the journal, read once for the line and the note
    if pricing["gpu"] and pricing["days"]:
        q = quote(catalog, pricing["gpu"], str(pricing["days"]), str(pricing["lots"]),
                  accepted if accepted >= 1 else None)
        text = render_quote(q, window)
        if accepted == 0:
            text += "\nCost per validated corpus: undefined (no accepted corpus)"
        if summary and (line := _hardware_line(q, attempts)):
            text += f"\n{line}"
    else:
        text = ("No package declared: the campaign file has no [cost] section; enter a GPU and days "
                "above to price one")
    note = _campaign_note(proto, summary, pricing, campaign_dir, attempts) if summary else \
        "_No results yet: the decision note needs at least one finished pass._"
    return CostView(text, validated, accepted, warning, note)


def _attempts(campaign_dir: Path | None) -> list:
    """The journal's attempts of ``campaign_dir`` ([] without a folder)."""
    from lab.orchestration.journal import Journal

    if campaign_dir is None:
        return []
    journal = Journal.open_read_only(Path(campaign_dir) / "journal.sqlite")
    try:
        return journal.attempts()
    finally:
        journal.close()


def _hardware_line(q, attempts: list) -> str:
    """'' or 'Measured hardware differs from the priced package. Measured: ...; priced: ...': the
    campaign's passes (``attempts``: all of them) against the quoted package ``q`` (lab.cost.hardware)."""
    from lab.cost.hardware import HardwareCheck, Measured, Priced
    from lab.report.decision_note import HARDWARE_DIFFERS
    from lab.report.raw_table import pass_cards

    measured = Measured.of(pass_cards(a.result) for a in attempts if a.result is not None)
    line = HardwareCheck(measured, Priced(q.gpu, q.gpu_name, q.cards_per_lot)).line()
    return f"{HARDWARE_DIFFERS.strip('*')} {line}" if line else ""


def _campaign_note(proto, summary, pricing: dict, campaign_dir: Path | None, attempts: list) -> str:
    """The archived note's wording for the Cost screen (lab.report.build.campaign_note): the
    same banners (partial evidence while the campaign is unfinished, measured hardware differs
    from the priced package) and the variants not run yet. ``attempts``: the journal's, read by the caller."""
    from lab.evidence.assemble import unfinished_reason
    from lab.report.build import campaign_note

    if campaign_dir is None:
        return campaign_note(proto, summary, pricing, [])
    return campaign_note(proto, summary, pricing, attempts, unfinished_reason(Path(campaign_dir)))


# ---- comparison across archives --------------------------------------------------------

def archives_under(root: str | Path) -> list[Path]:
    """The evidence archives under ``root`` (the runs folder) that the Compare screen offers:
    lab.compare.list_archives (its order and rules)."""
    from lab.compare import list_archives

    return list_archives(Path(root))


@dataclass(frozen=True)
class ComparisonView:
    """The Compare screen's comparison (run_comparison): ``path`` the decision path, one line per
    step; ``banners`` the lines every output of it starts with; ``decision`` decision.md's text;
    ``files`` {name: path of the file written}."""

    path: tuple[str, ...]
    banners: tuple[str, ...]
    decision: str
    files: Mapping[str, str]


def run_comparison(archives: list[str], fields: dict, runs_root: Path,
                   now: datetime | None = None) -> ComparisonView:
    """The Compare screen's comparison of ``archives`` (paths of evidence archives) for the
    ``fields`` typed (load in items, empty for server archives: their declared traffic decides;
    deadline, window_start; ISO; metric_file: the path, ~ expanded,
    of the local copy of the archives' own [quality] metric file, the opt-in of ``iteralab compare
    --metric-file``; empty: none), written to <runs_root>/compare/<UTC time>/. Raises
    CompareError for a bad load (and what lab.compare.compare_to_folder raises)."""
    from lab.compare import CompareError, compare_to_folder
    from lab.compare.tables import decision_markdown

    load = fields.get("load", "").strip().replace(",", "").replace("_", "")
    if load and not load.isdigit():
        raise CompareError(f"load {fields.get('load', '')!r} must be an integer >= 1 (items of the "
                           "production load), or empty for server archives")
    metric_file = (fields.get("metric_file") or "").strip()
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    c, files = compare_to_folder(archives, int(load) if load else None, Path(runs_root) / "compare" / stamp,
                                 deadline=fields.get("deadline") or None,
                                 window_start=fields.get("window_start") or None,
                                 allow_partial=bool(fields.get("allow_partial")),
                                 allow_short=bool(fields.get("allow_short")),
                                 metric_file=Path(metric_file).expanduser() if metric_file else None)
    return ComparisonView(tuple(c.path), tuple(c.banners), decision_markdown(c),
                          {k: str(v) for k, v in files.items()})


# ---- environment -----------------------------------------------------------------------

def collect_environment() -> EnvironmentFacts:
    """Facts for the Environment screen and the plan's memory budget (see EnvironmentFacts): gpu
    (lab.inputs.manifest.gpu_facts, decoded once here), host RAM/disk/cores, doctor checks (no
    test container)."""
    import psutil

    from lab.inputs.manifest import gpu_facts
    from lab.orchestration.doctor import doctor

    gpu = GpuFacts.of(gpu_facts())
    backend: Literal["cpu", "cuda", "rocm"]
    if gpu.count and gpu.hip_runtime != "absent":
        backend = "rocm"
    elif gpu.count:
        backend = "cuda"
    else:
        backend = "cpu"
    root = runs_root()
    probe = root if root.exists() else root.parent if root.parent.exists() else Path(os.getcwd())
    vm = psutil.virtual_memory()
    return EnvironmentFacts(backend=backend, gpu=gpu, ram_total_bytes=vm.total, ram_available_bytes=vm.available,
                            disk_free_bytes=shutil.disk_usage(probe).free, disk_path=str(probe),
                            cpu_cores=os.cpu_count(), checks=tuple(doctor(container_test=False)))
