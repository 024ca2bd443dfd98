"""report/manifest.json read back as a typed record (:class:`Manifest`): the facts a reader of an
archive takes from it (the corpus and model identities, the protocol version, the host's GPUs, CPU
and driver, the catalog record), each block typed as its producer writes it: ``corpus``
lab.inputs.corpus.fingerprint, ``model`` lab.inputs.models.model_revision, ``gpu``
:func:`lab.inputs.manifest.gpu_facts`, ``cpu`` :func:`lab.inputs.manifest.host_facts`, ``campaign``
and ``catalog`` lab.report.build (assembled by :func:`lab.inputs.manifest.build_manifest`).

A manifest holds far more (packages, environment, launcher, order, ...), and archives made by
earlier lab versions lack some blocks, or hold null for a host fact the journal did not record:
decoding reads the fields declared here, ignores the others and leaves an absent or null block
None; it refuses a value of another type than its field's (msgspec, no coercion).
"""

from __future__ import annotations

import msgspec


class ManifestCorpus(msgspec.Struct, frozen=True):
    """The corpus file (lab.inputs.corpus.fingerprint): its ``sha256`` (64 hex)."""

    sha256: str | None = None


class ManifestModel(msgspec.Struct, frozen=True):
    """The model (lab.inputs.models.model_revision): ``kind`` "local" (a folder) or "hub"; a hub
    model's ``id`` and ``revision`` as declared; ``files_sha256`` {file name: sha256} of the folder
    or of the resolved hub snapshot (empty when unresolved; None when not recorded)."""

    kind: str | None = None
    id: str | None = None
    revision: str | None = None
    files_sha256: dict[str, str] | None = None


class ManifestCampaign(msgspec.Struct, frozen=True):
    """The campaign block (lab.report.build): the ``protocol_sha256`` (64 hex) of the protocol
    version the report was built for (the lock entry's ``sha256``)."""

    protocol_sha256: str | None = None


class GpuDevice(msgspec.Struct, frozen=True):
    """One GPU torch saw (lab.inputs.manifest.gpu_facts): its ``name`` ("?" when not recorded)."""

    name: str = "?"


class ManifestGpu(msgspec.Struct, frozen=True):
    """The host's GPUs (lab.inputs.manifest.gpu_facts): ``devices`` (none on a CPU host) and the
    NVIDIA ``driver`` version ("absent" without NVML; None when not recorded)."""

    devices: tuple[GpuDevice, ...] = ()
    driver: str | None = None


class ManifestCpu(msgspec.Struct, frozen=True):
    """The host's CPU (lab.inputs.manifest.host_facts): its ``name`` ("unknown" when not recorded)."""

    name: str = "unknown"


class ManifestCatalog(msgspec.Struct, frozen=True):
    """The catalog record (lab.report.build.copy_catalog): ``missing`` says why the archive holds no
    copy of the catalog ("not found when the report was built"); None when it holds one."""

    missing: str | None = None


class Manifest(msgspec.Struct, frozen=True):
    """report/manifest.json as read back (see the module): each block None when the manifest has
    none (or null)."""

    corpus: ManifestCorpus | None = None
    model: ManifestModel | None = None
    campaign: ManifestCampaign | None = None
    gpu: ManifestGpu | None = None
    cpu: ManifestCpu | None = None
    catalog: ManifestCatalog | None = None


def decode_manifest(data: bytes) -> Manifest:
    """report/manifest.json's bytes as a Manifest. Raises msgspec.DecodeError (ValidationError: a
    value of another type than its field's) for bytes that are not such a manifest."""
    return msgspec.json.decode(data, type=Manifest)
