"""campaign.lock.json read back as typed records: the lock (:class:`CampaignLock`), one locked
version (:class:`LockEntry`, written by lab.orchestration.protocol.lock) and the archive a replayed
version came from (:class:`LockReplay`, lab.evidence.replay).

A lock is appended to and never rewritten, so it holds entries written by every lab version that
locked the file: decoding ignores a key a later version added and leaves a key an earlier one did not
write at its default (None or empty), but refuses a value of another type (msgspec, no coercion).
"""

from __future__ import annotations

from typing import Any

import msgspec


class LockReplay(msgspec.Struct, frozen=True):
    """The ``replays`` of a lock entry (lab.evidence.replay): the replayed ``archive``'s file name and
    its ``archive_sha256`` (64 hex), its ``campaign`` name, the ``protocol_version`` (n >= 1) and
    ``protocol_sha256`` (64 hex) it came from, the ``question_version`` it answered and the
    ``change`` made ("" for the same question; "model: <sha256> -> <sha256>" for a new model)."""

    archive: str | None = None
    archive_sha256: str | None = None
    campaign: str | None = None
    protocol_version: int | None = None
    protocol_sha256: str | None = None
    question_version: int | None = None
    change: str = ""


class LockEntry(msgspec.Struct, frozen=True):
    """One locked version (lab.orchestration.protocol.lock): ``version`` n >= 1; ``sha256`` the
    protocol identity (64 hex, lab.orchestration.identity.identity_sha256) and the digests it covers
    (``protocol_sha256``, ``corpus_sha256``, ``model_sha256``, ``task_sha256`` when the protocol runs
    the user's own code); ``model_files_sha256`` {model file: sha256} and ``task_files_sha256``
    {role: sha256} (roles ``entry``, ``file:<path>``, ``metric``; lab.orchestration.identity), None
    when not recorded; ``locked_at`` ISO UTC; ``replays`` and ``question_version`` (>= 1) of a
    replayed version, None otherwise; ``protocol`` the campaign file as parsed."""

    version: int | None = None
    sha256: str | None = None
    protocol_sha256: str | None = None
    corpus_sha256: str | None = None
    model_sha256: str | None = None
    task_sha256: str | None = None
    model_files_sha256: dict[str, str] | None = None
    task_files_sha256: dict[str, str] | None = None
    locked_at: str | None = None
    replays: LockReplay | None = None
    question_version: int | None = None
    protocol: dict[str, Any] | None = None


class CampaignLock(msgspec.Struct, frozen=True):
    """campaign.lock.json: the campaign file's name and its locked ``versions``, oldest first."""

    campaign_file: str | None = None
    versions: tuple[LockEntry, ...] = ()


def decode_lock(data: bytes) -> CampaignLock:
    """campaign.lock.json's bytes as a CampaignLock. Raises msgspec.DecodeError (ValidationError: a
    value of another type than its field's) for bytes that are not such a lock."""
    return msgspec.json.decode(data, type=CampaignLock)
