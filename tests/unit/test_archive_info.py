"""ARCHIVE.json read back typed (lab.evidence.archive_info): as the packer writes it, the fields a
comparison reads (when made, partial and why); a value of another type is refused."""

from __future__ import annotations

import json

import msgspec
import pytest

from lab.evidence.archive_info import decode_archive_info

INFO = {"format": 3, "made_at": "2026-12-01T09:00:00+00:00", "campaign_dir": "v1-abc", "partial": True,
        "partial_reason": "interrupted at pass 3 of 8", "journal": "snapshot", "skipped": [],
        "lab_sources_sha256": "0" * 64}


def test_archive_info_reads_as_the_packer_writes_it():
    info = decode_archive_info(json.dumps(INFO).encode())
    assert (info.format, info.made_at, info.partial, info.partial_reason) == (
        3, "2026-12-01T09:00:00+00:00", True, "interrupted at pass 3 of 8")
    final = decode_archive_info(json.dumps({**INFO, "partial": False, "partial_reason": ""}).encode())
    assert not final.partial and final.partial_reason == ""


def test_a_value_of_another_type_is_refused():
    with pytest.raises(msgspec.ValidationError, match="partial"):
        decode_archive_info(json.dumps({**INFO, "partial": "yes"}).encode())
