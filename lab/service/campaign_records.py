"""What the campaign actions of lab.service.campaigns return, as typed, frozen records (issue
33, part 3): a headless run's end, an assembled archive with its verification, a replay, and a
version of the campaign file's lock (which the Protocol screen's view also shows)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

if TYPE_CHECKING:
    from lab.evidence.format import Verification

__all__ = ["ArchiveMade", "HeadlessRun", "LockedVersion", "ReplayOrigin", "ReplayedCampaign"]


@dataclass(frozen=True)
class HeadlessRun:
    """The end of a headless run (run_headless, run_demo): ``state`` the campaign's state
    (lab.orchestration.status.CampaignState value); ``dir`` its folder; ``archive`` the archive
    packed when it finished (None otherwise); ``finished`` / ``planned`` schedule slots;
    ``accepted`` passes accepted; ``exit`` the process exit status (run_exit_status); ``line`` the
    last line to print (the archive's path when finished, after a line saying so when no pass was
    accepted; else "paused: N of M passes ..." or stopped, blocked)."""

    state: str
    dir: Path
    archive: Path | None
    finished: int
    planned: int
    accepted: int
    exit: int
    line: str


@dataclass(frozen=True)
class ArchiveMade:
    """An evidence archive assembled and verified (assemble_archive): ``path`` (text),
    ``size_bytes``, ``sha256`` (64 hex), ``verification`` what lab.evidence.archive.verify
    checked (ok, incomplete, problems, not_rederived, files_checked, rows_checked...), ``partial``
    True when it was asked for labelled partial (an unfinished campaign)."""

    path: str
    size_bytes: int
    sha256: str
    verification: Verification
    partial: bool


@dataclass(frozen=True)
class ReplayedCampaign:
    """A replay written and locked (replay_here): ``campaign_file`` its path (text), ``version``
    the lock version it got (n >= 1), ``question_version`` (>= 1), ``corpus`` the corpus path
    (text) and ``model`` the model reference the replay reuses."""

    campaign_file: str
    version: int | None
    question_version: int | None
    corpus: str
    model: str


@dataclass(frozen=True)
class ReplayOrigin:
    """The evidence archive a lock version replays (the ``replays`` of its lock entry,
    lab.evidence.replay): ``archive`` its file name, ``archive_sha256`` 64 hex,
    ``protocol_version`` the archive's protocol version (None in an entry that does not record
    it), ``change`` "" for the same question, else what changed ("model: <sha256> -> <sha256>")."""

    archive: str
    archive_sha256: str
    protocol_version: int | None = None
    change: str = ""


@dataclass(frozen=True)
class LockedVersion:
    """One version of the campaign file's lock (lab.orchestration.protocol.lock's entry):
    ``version`` n >= 1, ``sha256`` the protocol identity (64 hex; names the results folder),
    ``locked_at`` ISO UTC; a replay's version also ``replays`` and ``question_version`` (>= 1),
    None otherwise."""

    version: int
    sha256: str
    locked_at: str
    replays: ReplayOrigin | None = None
    question_version: int | None = None

    @classmethod
    def of(cls, entry: dict) -> LockedVersion:
        """The record of a lock entry as read_lock returns it (a dict from the lock's JSON; its
        other fields ignored). Raises msgspec.ValidationError for an entry without version,
        sha256 or locked_at, or with one of another type."""
        return msgspec.convert(entry, cls)
