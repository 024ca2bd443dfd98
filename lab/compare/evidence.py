"""One evidence archive read for a comparison: verified first, then its manifest, summary,
raw table and campaign file (SPEC 2: evidence archive).

A comparison is only as good as the verify it starts with: an archive that does not verify
is refused with its first problem, never compared.
"""

from __future__ import annotations

import json
import tempfile
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path

import msgspec
import numpy as np

from lab.compare.comparison_records import WrittenSections, written_sections
from lab.cost.forfaits import Catalog, PricingError, load_catalog
from lab.cost.hardware import Measured
from lab.evidence.archive import ArchiveError, extract, verify
from lab.evidence.archive_info import ArchiveInfo, decode_archive_info
from lab.evidence.format import ARCHIVE_INFO, UNSIGNED, Signature
from lab.facts.errors import UserError
from lab.facts.files import sha256_file
from lab.facts.host import iteralab_command
from lab.inputs.manifest_record import GpuDevice, Manifest, decode_manifest
from lab.inputs.variants import expand_series
from lab.orchestration.config import CampaignConfig, ConfigError, CostSection, parse_config
from lab.orchestration.lock_record import CampaignLock, decode_lock
from lab.passes.events import PassStatus
from lab.passes.records import decode_result
from lab.passes.tasks.embedding import VECTORS_FILE
from lab.passes.tasks.embedding_metrics import load_vectors
from lab.report.raw_row import RawRow
from lab.report.raw_table import pass_cards
from lab.report.summary import VariantSummary

NO_PACKAGE = "no package declared in [cost]"
READ_MEMBERS = ("report/manifest.json", "campaign.lock.json", "corpus_card.json", "campaign.toml")
"""The members a comparison always reads; besides them only ARCHIVE.json, report/catalog.csv, each
pass's result.json (the cards it ran on), the predictions of each variant's representative pass (and
an embedding pass's vectors.npy) are unpacked (the raw table and the summary come re-derived from
the journal by verify)."""


class CompareError(UserError):
    """Archives that cannot be compared as given; one line naming the field and both values."""


@dataclass(frozen=True)
class Evidence:
    """What a comparison reads from one archive. ``name``: the archive's file name without
    .tar.gz; ``raw_rows``: raw-table rows, typed (lab.report.raw_row.RawRow), and ``variants``:
    the summary, one typed record per variant (lab.report.summary.VariantSummary), both as
    ``archive verify`` re-derived them from the journal and the pass records
    (lab.evidence.table_checks), never the archive's own raw_table.csv or summary.json."""
    path: Path
    name: str
    manifest: Manifest
    """report/manifest.json, typed (lab.inputs.manifest_record)."""
    variants: tuple[VariantSummary, ...]
    raw_rows: list[RawRow]
    campaign: WrittenSections
    """campaign.toml's rule sections as written (lab.compare.comparison_records.WrittenSections);
    ``config`` holds the whole file typed."""
    lock: CampaignLock
    corpus_card: dict | None
    files_checked: int
    config: CampaignConfig
    info: ArchiveInfo = field(default_factory=ArchiveInfo)
    """ARCHIVE.json, typed (lab.evidence.archive_info): when it was made, ``partial`` and the
    ``partial_reason`` of an unfinished campaign."""
    catalog: Catalog | None = None
    """report/catalog.csv: the catalog the archive was priced with when it was made (None when its
    catalog file was missing then: ``catalog_missing`` says why); its ``path`` names the archive's member."""
    predictions: dict = field(default_factory=dict)
    """{variant_id: {item id: prediction}} of the variant's first accepted pass (the first pass
    ok when none was accepted), from the pass's predictions file in the archive."""
    prediction_pass: dict = field(default_factory=dict)
    """{variant_id: pass_id} the ``predictions`` (or ``vectors``) come from."""
    vectors: dict = field(default_factory=dict)
    """An embedding archive's {variant_id: (item ids, float32 array (items, width))} of the same
    representative pass, from its predictions' lines and vectors.npy (row k = line k)."""
    held_back: str = ""
    """'' or this archive's own prerequisite refusal (one phrase, without the archive's name): its
    user metric not re-derived without ``--metric-file``, or the ``--metric-file`` given refused for
    it. Held back by :func:`read_evidence` so that a refusal of the whole set (archives not
    comparable, lab.compare.comparability) is said first: the opt-in advice is given only where
    following it can help (lab.compare.decision.compare_evidence raises it after those checks)."""
    signature: Signature = UNSIGNED
    """Who signed the archive, as verify checked it (lab.evidence.signature): named in the comparison."""
    cards: dict = field(default_factory=dict)
    """{variant_id: the cards each of its passes ran on, ``(device, name)`` per card} from each pass's
    result.json (lab.report.raw_table.pass_cards): what the hardware check of lab.cost.hardware
    reads; a pass whose result.json the archive lacks is left out."""

    def measured(self, variant_id: str) -> Measured:
        """The hardware the passes of ``variant_id`` ran on (lab.cost.hardware.Measured; passes: 0
        when no pass record was read, e.g. an archive older than them)."""
        return Measured.of(self.cards.get(variant_id, ()))

    @property
    def catalog_missing(self) -> str:
        """Why the archive holds no catalog (the manifest's record: "not found when the report was
        built"); '' when it holds one."""
        record = self.manifest.catalog
        return str(record.missing or "") if record is not None else ""

    @property
    def partial(self) -> bool:
        return self.info.partial

    @property
    def planned(self) -> list[tuple[str, str]]:
        """(variant_id, label) of every variant its campaign file declares, in order."""
        return [(v.variant_id, v.label) for v in expand_series(self.config.defaults, self.config.series)]

    @property
    def not_run(self) -> list[str]:
        """Labels of declared variants with no attempted pass in this archive."""
        ran = {v.variant_id for v in self.variants}
        return [label for vid, label in self.planned if vid not in ran]

    @property
    def gpu_devices(self) -> list[GpuDevice]:
        """The GPUs the manifest records (none on a CPU host)."""
        return list(self.manifest.gpu.devices) if self.manifest.gpu is not None else []

    @property
    def protocol_sha256(self) -> str | None:
        """The protocol version the archive's report was built for (the manifest's campaign
        ``protocol_sha256``, its lock entry's ``sha256``); None when not recorded."""
        return self.manifest.campaign.protocol_sha256 if self.manifest.campaign is not None else None

    @property
    def hardware(self) -> str:
        """'2 x NVIDIA B200' from the manifest, or 'CPU <name> (no GPU)'."""
        devs = self.gpu_devices
        if devs:
            names = sorted({d.name for d in devs})
            return f"{len(devs)} x {' + '.join(names)}"
        return f"CPU {self.manifest.cpu.name if self.manifest.cpu is not None else 'unknown'} (no GPU)"

    @property
    def cost(self) -> CostSection | None:
        """The archive's declared package (typed, lab.orchestration.config), None when it has no [cost]:
        then nothing is priced (issue 11: no [cost] means no package, never a default GPU)."""
        return self.config.cost

    @property
    def gpu(self) -> str | None:
        """GPU id of the declared package, lower case; None without [cost]."""
        return self.cost.gpu.strip().lower() if self.cost else None

    @property
    def threads(self) -> int:
        return self.config.timing.threads


def _missing(rel: str, archive: Path) -> CompareError:
    """The refusal of an archive that lacks the member ``rel``, one line saying how to fix it."""
    return CompareError(f"{archive.name}: {rel} missing from the archive; pack it again with "
                        f"`{iteralab_command()} archive CAMPAIGN_FOLDER` on the rental (it rebuilds the report)")


def _json(top: Path, rel: str, archive: Path, required: bool = True):
    p = top / rel
    if not p.is_file():
        if required:
            raise _missing(rel, archive)
        return None
    return json.loads(p.read_text(encoding="utf-8"))


def load_evidence(archive: str | Path, metric_file: str | Path | None = None,
                  allowed_signers: str | Path | None = None) -> Evidence:
    """:func:`read_evidence`, raising at once the prerequisite it holds back (``Evidence.held_back``):
    one archive read on its own, for callers that compare nothing. Raises what read_evidence raises,
    and CompareError (one line naming the archive) for a held-back refusal."""
    ev = read_evidence(archive, metric_file, allowed_signers)
    if ev.held_back:
        raise CompareError(f"{ev.path.name}: {ev.held_back}")
    return ev


def read_evidence(archive: str | Path, metric_file: str | Path | None = None,
                  allowed_signers: str | Path | None = None) -> Evidence:
    """Verify ``archive`` (lab.evidence.archive.verify: its signature first, against
    ``allowed_signers``, None: the default location's file when there is one) and read it. Raises
    ArchiveError for an unreadable file, an archive of another format than this lab's
    (ArchiveFormatError, lab.evidence.format.check_format) or a signature that does not verify (SignatureError),
    CompareError for one that does not verify or lacks a report file.

    ``metric_file``: the user's opt-in for an archive whose [quality] metric is their own
    function ("file.py:function"), as for ``archive verify --metric-file``: a local copy of that
    file, run in a fresh process to re-derive the metric only when its sha256 is the one the
    archive's lock recorded (lab.evidence.user_metric.user_metric_ref). When it is not, when the
    archive's metric is built-in, or when such a metric is met without the opt-in, the archive is
    verified without the file (everything but that metric) and the refusal, saying how to fix it,
    is held back in ``Evidence.held_back``: it is the archive's own prerequisite, said only once
    the whole set was found comparable (a set of different task kinds is refused as such, whatever
    the option)."""
    from lab.evidence.user_metric import MetricFileRefused

    archive = Path(archive)
    signers = None if allowed_signers is None else Path(allowed_signers)
    held = ""
    try:
        v = verify(archive, None if metric_file is None else Path(metric_file), signers)
    except MetricFileRefused as exc:
        held = str(exc)
        v = verify(archive, allowed_signers=signers)
    if v.problems or v.rederived is None:
        raise CompareError(f"{archive.name}: does not verify ({len(v.problems)} problem(s), first: "
                           f"{(v.problems or ['figures not re-derived'])[0]}); download it again or re-pack it "
                           "before comparing")
    own = sorted({r.metric_name for r in v.rederived.rows if r.metric_name and ":" in r.metric_name})
    if v.not_rederived and not held:
        held = (f"its [quality] metric {own[0]} is your own function, and compare runs no code from an archive "
                "unless you opt in: give a local copy of that file with --metric-file FILE (its sha256 is checked "
                "against each archive's lock, then it runs in a fresh process)" if own else v.not_rederived[0])
    with tempfile.TemporaryDirectory(prefix="iteralab-compare-") as tmp:
        rows = v.rederived.rows
        chosen = representative_passes(rows)
        # an embedding pass's vectors beside its predictions (a member the archive lacks is not extracted;
        # whatever its metric: nn_accuracy or agreement)
        vec_rels = {vid: str(Path(rel).parent / VECTORS_FILE) for vid, (_pid, rel) in chosen.items()}
        results = [(r.variant_id or "", f"passes/{r.pass_id}/result.json") for r in rows]
        top = extract(archive, Path(tmp), only=READ_MEMBERS + (ARCHIVE_INFO, "report/catalog.csv")
                      + tuple(rel for _pid, rel in chosen.values()) + tuple(vec_rels.values())
                      + tuple(rel for _vid, rel in results))
        cards: dict[str, list] = {}
        for vid, rel in results:
            if (c := _cards(top / rel)) is not None:
                cards.setdefault(vid, []).append(c)
        manifest = _manifest(top, archive)
        lock = _lock(top / "campaign.lock.json", archive)
        card = _json(top, "corpus_card.json", archive, required=False)
        info = _archive_info(top, archive)
        catalog = _catalog(top, archive)
        predictions = {vid: _read_predictions(top / rel) for vid, (_pid, rel) in chosen.items()
                       if (top / rel).is_file()}
        vectors = {vid: _read_vectors(top / chosen[vid][1], top / vrel) for vid, vrel in vec_rels.items()
                   if (top / vrel).is_file() and (top / chosen[vid][1]).is_file()}
        try:
            campaign = tomllib.loads((top / "campaign.toml").read_text(encoding="utf-8-sig"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ArchiveError(f"{archive.name}: campaign.toml unreadable ({exc}); "
                               "re-pack the archive") from None
    try:
        config = parse_config(campaign)
    except ConfigError as exc:
        raise CompareError(f"{archive.name}: campaign.toml does not parse as a campaign file "
                           f"({exc}); fix it in the campaign and re-pack the archive") from None
    written = written_sections(campaign)
    name = archive.name.removesuffix(".tar.gz")
    variants = tuple(VariantSummary.from_json(d) for d in v.rederived.summary)
    return Evidence(archive, name, manifest, variants, rows, written, lock, card,
                    v.files_checked, config, info, catalog, predictions,
                    {vid: pid for vid, (pid, _rel) in chosen.items() if vid in predictions}, vectors, held,
                    v.signature or UNSIGNED, cards)


def _manifest(top: Path, archive: Path) -> Manifest:
    """The archive's report/manifest.json, typed (lab.inputs.manifest_record). Raises CompareError
    when the archive lacks it or it does not read as a manifest."""
    rel = "report/manifest.json"
    if not (top / rel).is_file():
        raise _missing(rel, archive)
    try:
        return decode_manifest((top / rel).read_bytes())
    except msgspec.DecodeError as exc:
        raise CompareError(f"{archive.name}: its {rel} does not read as a manifest ({exc}); pack it again "
                           f"with `{iteralab_command()} archive CAMPAIGN_FOLDER` on the rental (it rebuilds the "
                           "report)") from None


def _archive_info(top: Path, archive: Path) -> ArchiveInfo:
    """The archive's ARCHIVE.json, typed (lab.evidence.archive_info). Raises CompareError when the
    archive lacks it or it does not read as one."""
    if not (top / ARCHIVE_INFO).is_file():
        raise _missing(ARCHIVE_INFO, archive)
    try:
        return decode_archive_info((top / ARCHIVE_INFO).read_bytes())
    except msgspec.DecodeError as exc:
        raise CompareError(f"{archive.name}: its {ARCHIVE_INFO} does not read as one ({exc}); pack it again "
                           f"with `{iteralab_command()} archive CAMPAIGN_FOLDER` on the rental") from None


def _lock(path: Path, archive: Path) -> CampaignLock:
    """The archive's campaign.lock.json, typed (lab.orchestration.lock_record); an empty lock when the
    archive holds none. Raises CompareError for one that does not read as a lock."""
    if not path.is_file():
        return CampaignLock()
    try:
        return decode_lock(path.read_bytes())
    except msgspec.DecodeError as exc:
        raise CompareError(f"{archive.name}: its campaign.lock.json does not read as a campaign lock ({exc}); "
                           "re-pack the archive") from None


def _cards(result: Path) -> tuple | None:
    """The cards a pass's result.json says it ran on (lab.report.raw_table.pass_cards); None when the
    archive lacks the file or it does not decode as a pass result (then the pass is left out)."""
    if not result.is_file():
        return None
    try:
        return pass_cards(decode_result(result.read_bytes()))
    except msgspec.DecodeError:
        return None


def _read_vectors(predictions: Path, vectors: Path) -> tuple[tuple[str, ...], np.ndarray]:
    """(ids in line order, float32 vectors) of an embedding pass whose files verify checked
    (lines ``{"id", "row"}`` with row k on line k; vectors.npy float16 (lines, width))."""
    ids = tuple(str(json.loads(line)["id"]) for line in predictions.read_text(encoding="utf-8").splitlines())
    return ids, load_vectors(vectors.read_bytes()).astype(np.float32)


def _catalog(top: Path, archive: Path) -> Catalog | None:
    """The archive's report/catalog.csv as a Catalog named '<archive>:report/catalog.csv'."""
    p = top / "report" / "catalog.csv"
    if not p.is_file():
        return None
    try:
        cat = load_catalog(str(p))
    except PricingError as exc:
        raise CompareError(f"{archive.name}: its report/catalog.csv does not read as a catalog "
                           f"({str(exc).removeprefix(str(p) + ': ')}); re-pack the archive") from None
    return replace(cat, path=f"{archive.name}:report/catalog.csv", sha256=sha256_file(p))


def _read_predictions(path: Path) -> dict[str, str]:
    """{id: predicted label}, or {id: output text} for a generation pass (lab.passes.tasks.generation);
    {} for an embedding pass (its lines carry a vector row, no label)."""
    out: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        key = "pred" if "pred" in rec else "output" if "output" in rec else None
        if key is None:
            return {}
        out[str(rec["id"])] = str(rec[key])
    return out


def representative_passes(rows: list[RawRow]) -> dict[str, tuple[str, str]]:
    """{variant_id: (pass_id, predictions path in the archive)} of each variant's first accepted
    pass in schedule order (else its first pass ok): what "this host's result" means when hosts
    are compared per id. Verify has already checked each predictions file against its sha256
    and its metric against the gold labels."""
    chosen: dict[str, tuple[str, str]] = {}
    for accepted_only in (True, False):
        for r in rows:
            vid = r.variant_id or ""
            if vid in chosen or r.status != PassStatus.OK or not r.predictions_path:
                continue
            if accepted_only and not r.accepted:
                continue
            chosen[vid] = (r.pass_id, r.predictions_path)  # relative to the campaign folder
    return chosen
