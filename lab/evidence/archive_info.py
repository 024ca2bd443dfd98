"""ARCHIVE.json read back as a typed record (:class:`ArchiveInfo`): how an archive was made, as
lab.evidence.archive.pack writes it, once lab.evidence.format.check_format has accepted its format.

A reader takes the fields declared here and ignores the others (``journal``, ``skipped``,
``lab_sources_sha256``, ``corpus``: verify reads them); a value of another type is refused
(msgspec, no coercion).
"""

from __future__ import annotations

import msgspec


class ArchiveInfo(msgspec.Struct, frozen=True):
    """ARCHIVE.json: the archive's ``format`` (lab.evidence.format.ARCHIVE_FORMAT; None in a record
    built without one), when it was made (``made_at``, ISO UTC), the campaign folder it packs
    (``campaign_dir``, its name), and ``partial`` with its ``partial_reason`` ("" for a final
    archive, else why the campaign is unfinished)."""

    format: int | None = None
    made_at: str | None = None
    campaign_dir: str | None = None
    partial: bool = False
    partial_reason: str | None = None


def decode_archive_info(data: bytes) -> ArchiveInfo:
    """ARCHIVE.json's bytes as an ArchiveInfo. Raises msgspec.DecodeError (ValidationError: a value of
    another type than its field's) for bytes that are not such a record."""
    return msgspec.json.decode(data, type=ArchiveInfo)
