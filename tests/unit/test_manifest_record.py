"""report/manifest.json read back typed (lab.inputs.manifest_record): the blocks a reader takes,
whatever else the manifest holds; a host fact the journal did not record (null) or a block an
earlier lab did not write reads as None; a value of another type is refused."""

from __future__ import annotations

import json

import msgspec
import pytest

from lab.inputs.manifest_record import GpuDevice, ManifestCatalog, decode_manifest

MANIFEST = {"written_at": "2026-12-01T09:00:00+00:00", "python": "3.11.7", "packages": {"torch": "2.5"},
            "cpu": {"name": "AMD EPYC 7B13", "logical_cores": 16, "capability": "AVX2", "isa_flags": ["avx2"]},
            "gpu": {"count": 2, "devices": [{"index": 0, "name": "NVIDIA B200", "memory_bytes": 1},
                                            {"index": 1, "name": "NVIDIA B200", "memory_bytes": 1}],
                    "driver": "570.1", "cuda_runtime": "12.8", "hip_runtime": "absent"},
            "model": {"kind": "hub", "id": "org/m", "revision": "main", "commit": "c", "files_sha256": {"w": "a" * 64}},
            "corpus": {"file": "corpus.jsonl", "sha256": "c" * 64, "items": 7, "buckets": {"short": 7}},
            "campaign": {"name": "x", "protocol_version": 1, "protocol_sha256": "p" * 64, "order": ["1:v"]},
            "catalog": {"path": "/gone.csv", "missing": "not found when the report was built"}}


def test_a_manifest_reads_the_blocks_a_reader_takes():
    m = decode_manifest(json.dumps(MANIFEST).encode())
    assert m.corpus is not None and m.corpus.sha256 == "c" * 64
    assert m.model is not None and (m.model.kind, m.model.id, m.model.revision) == ("hub", "org/m", "main")
    assert m.model.files_sha256 == {"w": "a" * 64}
    assert m.campaign is not None and m.campaign.protocol_sha256 == "p" * 64
    assert m.gpu is not None and m.gpu.devices == (GpuDevice("NVIDIA B200"),) * 2 and m.gpu.driver == "570.1"
    assert m.cpu is not None and m.cpu.name == "AMD EPYC 7B13"
    assert m.catalog == ManifestCatalog("not found when the report was built")


def test_an_absent_or_null_block_reads_as_none():
    m = decode_manifest(json.dumps({**MANIFEST, "gpu": None, "cpu": None, "catalog": {"path": "p", "sha256": "s"}}
                                   ).encode())
    assert m.gpu is None and m.cpu is None and m.catalog is not None and m.catalog.missing is None
    assert decode_manifest(b"{}").model is None


def test_a_value_of_another_type_is_refused():
    with pytest.raises(msgspec.ValidationError, match="sha256"):
        decode_manifest(json.dumps({**MANIFEST, "corpus": {"sha256": 7}}).encode())
