"""The evidence archive's fixed names, its error type, the verification result, and the
member check shared by ``extract`` and ``verify`` (one top folder, no links or '..')."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

JOURNAL = "journal.sqlite"
ARCHIVE_INFO = "ARCHIVE.json"
SUMS = "SHA256SUMS"


class ArchiveError(ValueError):
    """A corrupt, unsafe or malformed archive, or a campaign that cannot be archived as asked;
    one line naming the member (or campaign) and the problem."""


@dataclass(frozen=True)
class Rederived:
    """The raw table and the summary as ``archive verify`` rebuilt them from the archived journal
    and pass records (lab.archive_tables), never read from report/raw_table.csv or summary.json.
    ``raw_rows``: one dict per attempt, in schedule order, the cells as the raw table's CSV holds
    them (strings, empty cell = ""); ``summary``: one summary.json object per variant
    (lab.report.summary.VariantSummary.to_json, through JSON)."""

    raw_rows: list
    summary: list


@dataclass(frozen=True)
class Verification:
    """What ``verify`` checked: files hashed, raw-table rows re-derived, problems (one line each),
    and the re-derived figures (None when the journal could not be read: then ``problems``
    says why)."""

    files_checked: int
    rows_checked: int
    problems: list
    rederived: Rederived | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def check_member(m: tarfile.TarInfo, tops: set[str]) -> str:
    """Refuse unsafe members; returns the member's path below its top folder ('' for the top
    folder itself). Raises ArchiveError for absolute paths, '..', links, devices, or a second
    top folder (``tar x`` and verify must see the same files)."""
    parts = Path(m.name).parts
    if m.name.startswith("/") or ".." in parts or not parts:
        raise ArchiveError(f"unsafe member {m.name!r}: path outside the target folder; refusing to extract")
    if not (m.isfile() or m.isdir()):
        raise ArchiveError(f"unsafe member {m.name!r}: links and devices are refused")
    tops.add(parts[0])
    if len(tops) > 1:
        raise ArchiveError(f"more than one top folder ({', '.join(sorted(tops))}): an evidence archive "
                           "holds exactly one; refusing it (unpacking would not give what is verified)")
    if m.isfile() and len(parts) == 1:
        raise ArchiveError(f"member {m.name!r} lies outside the archive's top folder; refusing it")
    return "/".join(parts[1:])
