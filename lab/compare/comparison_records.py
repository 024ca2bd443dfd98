"""The typed records a comparison is made of, besides the projections (lab.compare.projection) and the
agreements (lab.compare.decision.HostAgreement): the rule sections each archive's campaign file
writes (:class:`WrittenSections`), what the archives share (:class:`Identity`), the
catalog that priced the decision (:class:`CatalogChoice`), each archive compared
(:class:`ComparedArchive`) and each pair of hosts' durations of one variant (:class:`CrossPair`).
Built once by lab.compare.comparability and lab.compare.decision; read by their attributes in the
tables (lab.compare.tables), never by key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from lab.inputs.manifest_record import ManifestModel
from lab.orchestration.config import CostSection
from lab.report.distinguish import PairVerdict


class WrittenSections(msgspec.Struct, frozen=True):
    """The rule sections of an archive's campaign.toml as written, before defaults: ``task``,
    ``quality`` and ``timing`` ({key: value as the TOML parser gives it}; {} when the file has no
    such table). What lab.compare.comparability compares key by key, once the typed sections
    (lab.orchestration.config) have filled in their defaults; the other tables are not kept."""

    task: dict[str, Any] = {}
    quality: dict[str, Any] = {}
    timing: dict[str, Any] = {}


def written_sections(campaign: dict) -> WrittenSections:
    """The rule sections of ``campaign`` (a campaign file as tomllib parsed it, already accepted by
    lab.orchestration.config.parse_config, so each is a table)."""
    return msgspec.convert(campaign, WrittenSections)


@dataclass(frozen=True)
class Identity:
    """What every archive of a comparison shares (lab.compare.comparability.check_comparable):
    ``corpus_sha256`` the corpus file's sha256 (64 hex, from the first archive's manifest);
    ``model`` the first archive's manifest ``model`` block (lab.inputs.manifest_record);
    ``two_models`` one clause per archive that is a declared new-model question version of another
    (the model files then differ on purpose); ``quality`` the first archive's [quality] section as
    written ({} when absent); ``timing`` its timing rule (the [timing] section with its defaults
    filled in, without the conditions that may differ between rentals); ``common_variants`` the
    variant ids every archive has, in the first archive's declared order; ``missing`` {archive
    name: the variant ids it lacks}, only archives that lack one."""

    corpus_sha256: str
    model: ManifestModel
    two_models: tuple[str, ...]
    quality: Mapping
    timing: Mapping
    common_variants: tuple[str, ...]
    missing: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class CatalogFound:
    """One catalog a comparison found (lab.compare.decision.choose_catalog): where (``source``: the
    user's --catalog, the bundle's, or an archive's own report/catalog.csv), its ``version`` and
    its file's ``sha256`` (64 hex)."""

    source: str
    version: str
    sha256: str


@dataclass(frozen=True)
class CatalogChoice:
    """The catalog that priced a comparison (lab.compare.decision.choose_catalog): its ``path``,
    ``version``, file ``sha256`` (64 hex) and ``source`` (as in CatalogFound), whether the user gave
    it (``explicit``: --catalog), and every catalog found, the chosen one first (``found``)."""

    path: str
    version: str
    sha256: str
    source: str
    explicit: bool
    found: tuple[CatalogFound, ...]


@dataclass(frozen=True)
class ComparedArchive:
    """One archive as a comparison names it (lab.compare.decision.compare_evidence): its ``name``
    (file name without .tar.gz), ``host`` tag ("A b200"), ``path``, ``hardware`` ('2 x NVIDIA
    B200', or 'CPU <name> (no GPU)'), CPU ``threads``, the GPU id of its package (``gpu``; None
    without [cost]), the members verify checked (``files_checked``), who signed it
    (``signature``, one line), its [cost] section (``cost``; None without one), the GPU driver its
    manifest records (``driver``; None when absent), whether it is ``partial`` and the labels of
    declared variants it never ran (``not_run``), and its own catalog's version and sha256
    (None when it holds none)."""

    name: str
    host: str
    path: str
    hardware: str
    threads: int
    gpu: str | None
    files_checked: int
    signature: str
    cost: CostSection | None
    driver: str | None
    partial: bool
    not_run: tuple[str, ...]
    catalog_version: str | None
    catalog_sha256: str | None


@dataclass(frozen=True)
class CrossPair(PairVerdict):
    """One variant measured on two hosts: the verdict of lab.report.distinguish on their measured
    windows' durations (``reason`` also names the passes of either host starved of CPU), the
    ``variant``'s label and the host tags ``a`` and ``b``."""

    variant: str = ""
    a: str = ""
    b: str = ""
