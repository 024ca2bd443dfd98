"""The evidence archive's fixed names, its error type, the verification result, and the
member checks shared by ``extract`` and ``verify`` (one top folder, no links or '..'; the
bounds below, checked on each member's header before a byte of it is read or written)."""

from __future__ import annotations

import json
import tarfile
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from lab.facts.errors import UserError
from lab.facts.host import iteralab_command
from lab.facts.signing import SSH_KEYGEN_PACKAGE, default_allowed_signers

if TYPE_CHECKING:
    from lab.report.raw_row import RawRow

JOURNAL = "journal.sqlite"
ARCHIVE_INFO = "ARCHIVE.json"
SUMS = "SHA256SUMS"

ARCHIVE_FORMAT = 3
"""The evidence archive format this lab writes (ARCHIVE.json ``format``) and the only one it reads:
which members, raw-table columns, summary fields and ARCHIVE.json keys an archive holds. Raise it
when a change makes an archive of the format before fail to verify or compare here (a member,
column or field that the readers now require); ``check_format`` refuses any other. It names the
layout, never vouches for the contents: an archive that claims it is checked member by member.
tests/unit/test_archive_format.py pins each format's raw-table columns and summary fields."""
FORMAT_KEY = "format"
"""ARCHIVE.json's key for ARCHIVE_FORMAT."""
LAB_SOURCES = "lab_sources_sha256"
"""ARCHIVE.json's key for the sha256 of the sources of the lab that wrote the archive
(lab.facts.files.lab_sources_sha256): verify compares prose (lab.evidence.table_checks.PROSE) only
when it is its own."""

# Bounds on what one archive may hold (issue 23 part 3). A real campaign's archive has a few
# files per pass (a 1,000-pass campaign: about 5,000 members), predictions of a few MB per
# pass and a journal of a few MB; a hostile one (a 4 GiB journal in 18 MB, a million empty
# members in 6 MB) is refused at the first member beyond a bound, in one line.
MAX_MEMBERS = 50_000
"""Members (files and folders) in one archive."""
MAX_MEMBER_BYTES = 2**30
"""Declared size of one member: 1 GiB."""
MAX_JOURNAL_BYTES = 512 * 2**20
"""The journal member, the one member verify writes to disk (a temporary file): 512 MiB."""
MAX_TOTAL_BYTES = 4 * 2**30
"""Uncompressed bytes of the whole archive (members and padding): 4 GiB, so also the most
that ``extract`` writes."""
MAX_TRAILER_BYTES = 2**20
"""Bytes after the tar's end blocks (read to reach the gzip trailer): tar pads to 10 KiB records."""


def skipped_missing(subject: str, check: str, rel: str) -> str:
    """The one problem line of a check that needs member ``rel`` and could not run because the
    member is not in the archive: "pass p001: metric check skipped: passes/p001/vectors.npy is
    missing" (``subject`` "pass p001", ``check`` "metric check"). A missing member is named
    missing, never "malformed"; the SHA256SUMS line naming it is verify's own."""
    return f"{subject}: {check} skipped: {rel} is missing"


class ArchiveError(UserError):
    """A corrupt, unsafe or malformed archive, or a campaign that cannot be archived as asked;
    one line naming the member (or campaign) and the problem."""


class CampaignUnfinished(ArchiveError):
    """A campaign with planned slots not yet finished, archived without ``partial``: one line
    with the reason; packing it labelled partial (``archive --partial``) is the way on."""


class ArchiveFormatError(ArchiveError):
    """An archive whose ARCHIVE.json records no format, another one than ARCHIVE_FORMAT, or cannot
    be read as an object: one line saying which and how to fix it (``check_format``)."""


def check_format(name: str, info_json: bytes | None) -> dict:
    """ARCHIVE.json (``info_json``: its bytes, None when the archive has no readable one) of the
    archive ``name`` (a file name, shown first) as a dict, when it records ``format`` =
    ARCHIVE_FORMAT. The first thing every reader of an archive checks (verify, and through it
    compare and replay). Raises ArchiveFormatError, one line: the format found ("none: made before
    formats were recorded" when ARCHIVE.json has no ``format``), the one this lab reads, and how to
    fix it (re-pack the campaign folder with this lab, or read the archive with the lab that made
    it)."""
    def refused(found: str) -> ArchiveFormatError:
        return ArchiveFormatError(f"{name}: evidence archive format {found}, this lab reads format {ARCHIVE_FORMAT}; "
                                  f"re-pack it from its campaign folder with `{iteralab_command()} archive "
                                  "CAMPAIGN_FOLDER` using this lab, or read it with the lab version that made it")

    if info_json is None:
        raise refused(f"unknown (no {ARCHIVE_INFO})")
    try:
        info = json.loads(info_json)
    except (UnicodeDecodeError, json.JSONDecodeError):
        info = None
    if not isinstance(info, dict):
        raise refused(f"unknown ({ARCHIVE_INFO} is not a JSON object)")
    found = info.get(FORMAT_KEY)
    if type(found) is int and found == ARCHIVE_FORMAT:
        return info
    raise refused("none: made before formats were recorded" if found is None else json.dumps(found)[:40])


@dataclass(frozen=True)
class Rederived:
    """The raw table and the summary as ``archive verify`` rebuilt them from the archived journal
    and pass records (lab.evidence.table_checks), never read from report/raw_table.csv or summary.json.
    ``rows``: one typed row per attempt, in schedule order, read from the cells as the raw table's
    CSV holds them (lab.report.raw_row.RawRow); ``summary``: one summary.json object per variant
    (lab.report.summary.VariantSummary.to_json, through JSON)."""

    rows: list[RawRow]
    summary: list

    @property
    def raw_rows(self) -> list[dict]:
        """The rows' cells as the raw table's CSV holds them ({column: text}, empty cell "")."""
        return [r.cells for r in self.rows]


class SignatureState(StrEnum):
    """What is known of who made an archive (lab.evidence.signature.check_signature)."""

    VERIFIED = "verified"
    """Signed by a key the user's allowed-signers file lists, over the archive's bytes as they are."""
    UNSIGNED = "unsigned"
    """No signature file beside the archive."""
    SIGNER_NOT_CHECKED = "signer not checked"
    """A signature that matches the archive's bytes, by a key no allowed-signers file was there to name."""
    NOT_CHECKED = "not checked"
    """A signature file that could not be checked here (``reason`` says why: no ssh-keygen)."""


@dataclass(frozen=True)
class Signature:
    """An archive's signature as checked: its ``state``; ``signer`` (the allowed-signers file's name
    for the key, VERIFIED only); ``key`` ("ED25519 key SHA256:...", the signature's key as ssh-keygen
    names it, '' when not read); ``allowed_signers`` (the file it was checked against, VERIFIED only);
    ``reason`` (NOT_CHECKED: why)."""

    state: SignatureState
    signer: str = ""
    key: str = ""
    allowed_signers: str = ""
    reason: str = ""

    @property
    def line(self) -> str:
        """The phrase every output names the archive's signer with ("signed by NAME (KEY)",
        "unsigned", "signed, signer not checked (no allowed-signers file) ...", "signature not
        checked: REASON"); the only place these words are spelled."""
        key = f" ({self.key})" if self.key else ""
        if self.state == SignatureState.VERIFIED:
            return f"signed by {self.signer}{key}"
        if self.state == SignatureState.SIGNER_NOT_CHECKED:
            return f"signed, signer not checked (no allowed-signers file){', ' + self.key if self.key else ''}"
        if self.state == SignatureState.NOT_CHECKED:
            return f"signature not checked: {self.reason}"
        return "unsigned"

    @property
    def advice(self) -> str:
        """'' or how to learn more than ``line`` says: where to list trusted keys (a signer not
        checked), which package checks a signature (no ssh-keygen)."""
        if self.state == SignatureState.SIGNER_NOT_CHECKED:
            return (f"to name the signer, list the keys you trust in {default_allowed_signers()} (one 'NAME KEY-TYPE "
                    "KEY' line each) or give --allowed-signers FILE")
        if self.state == SignatureState.NOT_CHECKED:
            return f"install {SSH_KEYGEN_PACKAGE} to check it"
        return ""


UNSIGNED = Signature(SignatureState.UNSIGNED)
"""The Signature of an archive with no signature file beside it."""


@dataclass(frozen=True)
class Verification:
    """What ``verify`` checked: files hashed, raw-table rows re-derived, problems (one line each),
    and the re-derived figures (None when the journal could not be read: then ``problems``
    says why)."""

    files_checked: int
    rows_checked: int
    problems: list
    rederived: Rederived | None = None
    not_rederived: list = field(default_factory=list)
    """Figures verify left unchecked on purpose, one line each with how to check them (a user's own
    metric without ``--metric-file``): not a problem of the archive, but not verified either."""
    lab_apart: list = field(default_factory=list)
    """Lines saying the archive was written by another version of the lab's sources than the one
    that verified it, and which prose fields (lab.evidence.table_checks.PROSE) are worded differently:
    not compared, and not a problem; empty when the same lab wrote and verified it."""
    signature: Signature | None = None
    """Who made the archive (lab.evidence.archive.verify checks it first); None from
    lab.evidence.verify.verify_archive alone, which reads only the archive's contents."""
    partial: str = ""
    """Why the archive is labelled partial (ARCHIVE.json ``partial_reason``; "unfinished campaign"
    when it gives none); "" for the archive of a finished campaign. verify's last line says it."""

    @property
    def ok(self) -> bool:
        """Every claim re-derived and none contradicted."""
        return not self.problems and not self.not_rederived

    @property
    def incomplete(self) -> bool:
        """Nothing contradicted, something not re-derived (``not_rederived``): the INCOMPLETE
        outcome, neither a verified archive nor a failed one."""
        return not self.problems and bool(self.not_rederived)

    @property
    def outcome(self) -> str:
        """The one word the CLI prints: OK, FAILED (a problem) or INCOMPLETE (``incomplete``);
        the only place these words are spelled (tests/unit/test_verify_outcome.py)."""
        return "FAILED" if self.problems else "INCOMPLETE" if self.incomplete else "OK"


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


class MemberBounds:
    """Counts the members and bytes of one archive read forward; ``check`` refuses (ArchiveError,
    one line) the member that goes beyond MAX_MEMBERS, MAX_MEMBER_BYTES (MAX_JOURNAL_BYTES for
    the journal) or MAX_TOTAL_BYTES, from its header, before any of its bytes is read."""

    def __init__(self, archive: Path):
        self.archive, self.members, self.total_bytes = Path(archive).name, 0, 0

    def check(self, m: tarfile.TarInfo, rel: str) -> None:
        self.members += 1
        if self.members > MAX_MEMBERS:
            raise ArchiveError(f"{self.archive}: more than {MAX_MEMBERS:,} members; an evidence archive holds a "
                               "few files per pass, so this is not one (refused before reading further)")
        limit, what = (MAX_JOURNAL_BYTES, "the journal") if rel == JOURNAL else (MAX_MEMBER_BYTES, "a member")
        if m.size > limit:
            raise ArchiveError(f"{self.archive}: member {m.name!r} declares {m.size:,} bytes, beyond the "
                               f"{limit:,} bytes allowed for {what}; not an evidence archive (refused "
                               "before unpacking it)")
        self.total_bytes += m.size
        self.check_total(self.total_bytes)

    def check_trailer(self, trailer_bytes: int) -> None:
        if trailer_bytes > MAX_TRAILER_BYTES:
            raise ArchiveError(f"{self.archive}: more than {MAX_TRAILER_BYTES:,} bytes after the end of the tar; "
                               "not an evidence archive (refused before reading further)")

    def check_total(self, total_bytes: int) -> None:
        if total_bytes > MAX_TOTAL_BYTES:
            raise ArchiveError(f"{self.archive}: more than {MAX_TOTAL_BYTES:,} bytes once uncompressed; not an "
                               "evidence archive (refused before reading further)")
