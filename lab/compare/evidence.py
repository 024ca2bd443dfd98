"""One evidence archive read for a comparison: verified first, then its manifest, summary,
raw table and campaign file (SPEC 2: evidence archive).

A comparison is only as good as the verify it starts with: an archive that does not verify
is refused with its first problem, never compared.
"""

from __future__ import annotations

import json
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from lab.archive import ArchiveError, extract, verify
from lab.config import CampaignConfig, ConfigError, CostSection, parse_config

NO_PACKAGE = "no package declared in [cost]"


class CompareError(ValueError):
    """Archives that cannot be compared as given; one line naming the field and both values."""


@dataclass(frozen=True)
class Evidence:
    """What a comparison reads from one archive. ``name``: the archive's file name without
    .tar.gz; ``raw_rows``: raw-table rows as CSV strings (empty cell = "") and ``summary``:
    summary.json objects, both as ``archive verify`` re-derived them from the journal and the
    pass records (lab.archive_tables), never the archive's own raw_table.csv or summary.json."""
    path: Path
    name: str
    manifest: dict
    summary: list[dict]
    raw_rows: list[dict]
    campaign: dict
    lock: dict
    corpus_card: dict | None
    files_checked: int
    config: CampaignConfig

    @property
    def gpu_devices(self) -> list[dict]:
        return list((self.manifest.get("gpu") or {}).get("devices") or [])

    @property
    def hardware(self) -> str:
        """'2 x NVIDIA B200' from the manifest, or 'CPU <name> (no GPU)'."""
        devs = self.gpu_devices
        if devs:
            names = sorted({d.get("name", "?") for d in devs})
            return f"{len(devs)} x {' + '.join(names)}"
        return f"CPU {(self.manifest.get('cpu') or {}).get('name', 'unknown')} (no GPU)"

    @property
    def cost(self) -> CostSection | None:
        """The archive's declared package (typed, lab.config), None when it has no [cost]:
        then nothing is priced (issue 11: no [cost] means no package, never a default GPU)."""
        return self.config.cost

    @property
    def gpu(self) -> str | None:
        """GPU id of the declared package, lower case; None without [cost]."""
        return self.cost.gpu.strip().lower() if self.cost else None

    @property
    def threads(self) -> int:
        return self.config.timing.threads


def _json(top: Path, rel: str, archive: Path, required: bool = True):
    p = top / rel
    if not p.is_file():
        if required:
            raise CompareError(f"{archive.name}: {rel} missing from the archive; pack it again "
                               "with `iteralab archive` (it rebuilds the report)")
        return None
    return json.loads(p.read_text(encoding="utf-8"))


def load_evidence(archive: str | Path) -> Evidence:
    """Verify ``archive`` (lab.archive.verify) and read it. Raises ArchiveError for an
    unreadable file, CompareError for one that does not verify or lacks a report file."""
    archive = Path(archive)
    v = verify(archive)
    if not v.ok or v.rederived is None:
        raise CompareError(f"{archive.name}: does not verify ({len(v.problems)} problem(s), first: "
                           f"{(v.problems or ['figures not re-derived'])[0]}); download it again or re-pack it "
                           "before comparing")
    with tempfile.TemporaryDirectory(prefix="iteralab-compare-") as tmp:
        top = extract(archive, Path(tmp))
        manifest = _json(top, "report/manifest.json", archive)
        lock = _json(top, "campaign.lock.json", archive, required=False) or {}
        card = _json(top, "corpus_card.json", archive, required=False)
        try:
            campaign = tomllib.loads((top / "campaign.toml").read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ArchiveError(f"{archive.name}: campaign.toml unreadable ({exc}); "
                               "re-pack the archive") from None
    try:
        config = parse_config(campaign)
    except ConfigError as exc:
        raise CompareError(f"{archive.name}: campaign.toml does not parse as a campaign file "
                           f"({exc}); fix it in the campaign and re-pack the archive") from None
    name = archive.name.removesuffix(".tar.gz")
    return Evidence(archive, name, manifest, v.rederived.summary, v.rederived.raw_rows, campaign, lock, card,
                    v.files_checked, config)
