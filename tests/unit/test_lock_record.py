"""campaign.lock.json read back typed (lab.orchestration.lock_record): every entry a lab version
wrote reads, a replayed version's origin included; a value of another type is refused."""

from __future__ import annotations

import json

import msgspec
import pytest

from lab.orchestration.lock_record import LockReplay, decode_lock

ENTRY = {"version": 2, "sha256": "a" * 64, "protocol_sha256": "p" * 64, "corpus_sha256": "c" * 64,
         "model_sha256": "m" * 64, "task_sha256": "t" * 64, "task_files_sha256": {"entry": "e" * 64},
         "locked_at": "2026-12-01T09:00:00+00:00", "question_version": 2, "protocol": {"campaign": {"name": "x"}},
         "replays": {"archive": "old.tar.gz", "archive_sha256": "o" * 64, "campaign": "x", "protocol_version": 1,
                     "protocol_sha256": "q" * 64, "question_version": 1, "change": "model: m -> n"}}


def test_a_lock_reads_its_entries_old_and_new():
    older = {"version": 1, "sha256": "b" * 64, "locked_at": "2026-11-01T09:00:00+00:00",
             "a_key_a_later_lab_added": True}
    lock = decode_lock(json.dumps({"campaign_file": "c.toml", "versions": [older, ENTRY]}).encode())
    first, second = lock.versions
    assert first.version == 1 and first.corpus_sha256 is None and first.replays is None
    assert first.task_files_sha256 is None
    assert second.corpus_sha256 == "c" * 64 and second.task_files_sha256 == {"entry": "e" * 64}
    assert second.replays == LockReplay("old.tar.gz", "o" * 64, "x", 1, "q" * 64, 1, "model: m -> n")
    assert decode_lock(b"{}").versions == ()


def test_a_value_of_another_type_is_refused():
    with pytest.raises(msgspec.ValidationError, match="version"):
        decode_lock(json.dumps({"versions": [{**ENTRY, "version": "2"}]}).encode())
