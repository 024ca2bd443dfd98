"""Typed records of the archive's JSON members that ``archive verify`` and ``archive replay`` read:
``protocol_version.json``, ``campaign.lock.json`` (its version entries) and ``report/manifest.json``
(the facts cross-checked against them). Each member is parsed once, where it is read from the
archive, into one of these records; the checks then read attributes.

The decode is lenient on purpose: an archive is evidence that may have been altered, and a member
whose fact has the wrong type or is absent must be *named* by the check that compares it (one
line, "... 'x' in A, absent in B"), never refused before the comparison. So each field holds its
JSON value as written (``Any``; None when absent, like a missing key), unknown keys are ignored,
and the type a well-formed member holds is given on each field. The writers: lab.orchestration.protocol
``lock`` (the lock entry), lab.orchestration.orchestrator (``protocol_version.json``: the entry less
its ``protocol``), lab.report.build (the manifest).
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)


class LockedFacts(msgspec.Struct, frozen=True):
    """What a lock entry and ``protocol_version.json`` share (the latter is the entry less its
    ``protocol``; lab.orchestration.protocol.lock). sha256 values are 64 hex characters."""

    version: Any = None
    """int, from 1: the protocol version."""
    sha256: Any = None
    """str: the identity (lab.orchestration.identity.identity_sha256 of the IDENTITY_PARTS)."""
    protocol_sha256: Any = None
    """str: the parsed campaign file's digest (lab.orchestration.protocol.protocol_digest)."""
    corpus_sha256: Any = None
    """str: the corpus file's sha256."""
    model_sha256: Any = None
    """str: the model files' fingerprint (lab.orchestration.identity.fingerprint_of)."""
    model_files_sha256: Any = None
    """dict {file name: sha256} of the model files, when recorded."""
    task_sha256: Any = None
    """str: the user's code files' fingerprint (digests_fingerprint), when the protocol runs code."""
    task_files_sha256: Any = None
    """dict {role: sha256} of the user's code files (roles of Protocol.task_files), when recorded."""
    locked_at: Any = None
    """str: ISO 8601 UTC time of the lock."""
    question_version: Any = None
    """int: the question version (absent: 1), set by a replay."""
    replays: Any = None
    """dict: the archive a replay's version came from (lab.evidence.replay)."""

    def identity_parts(self) -> dict[str, str]:
        """{part: sha256} of the IDENTITY_PARTS this record holds as text (what its ``sha256`` covers)."""
        parts = {"protocol_sha256": self.protocol_sha256, "corpus_sha256": self.corpus_sha256,
                 "model_sha256": self.model_sha256, "task_sha256": self.task_sha256}
        return {k: v for k, v in parts.items() if isinstance(v, str)}


class LockEntry(LockedFacts, frozen=True):
    """One version of ``campaign.lock.json``: the locked facts and the parsed campaign file."""

    protocol: Any = None
    """dict: the campaign file as parsed TOML (a date as its text), compared leaf by leaf."""


class ManifestCampaign(msgspec.Struct, frozen=True):
    """``campaign`` of ``report/manifest.json`` (lab.report.build), as far as verify checks it."""

    name: Any = None
    """str: [campaign] name."""
    protocol_version: Any = None
    """int: the protocol version the report was built for."""
    protocol_sha256: Any = None
    """str: the version's identity sha256 (named so in the manifest)."""
    locked_at: Any = None
    """str: ISO 8601 UTC time of the lock."""
    identity: Any = None
    """dict {part: sha256} of the identity's parts."""
    repetitions: Any = None
    """int: [timing] repetitions."""
    seed: Any = None
    """int: [timing] seed."""
    threads_requested: Any = None
    """int: [timing] threads."""
    variants: Any = None
    """list of Variant.to_json() dicts (their ``variant_id`` compared)."""


class ManifestSha(msgspec.Struct, frozen=True):
    """A file's record in the manifest: ``corpus`` ({sha256}) and ``model`` ({files_sha256})."""

    sha256: Any = None
    """str: the file's sha256."""
    files_sha256: Any = None
    """dict {file name: sha256} of a model folder's files."""


class CatalogRecord(msgspec.Struct, frozen=True):
    """``catalog`` of the manifest (lab.report.build.copy_catalog): its copy in the archive, or why
    the catalog was missing."""

    copy: Any = None
    """str: the member holding the catalog's copy (report/catalog.csv)."""
    sha256: Any = None
    """str: the copy's sha256."""
    missing: Any = None
    """str: why the catalog was missing when the report was built."""


class Manifest(msgspec.Struct, frozen=True):
    """``report/manifest.json``: the facts that cross_check compares with the other members."""

    campaign: Any = None
    """ManifestCampaign, or the value as written when it is no object."""
    corpus: Any = None
    """ManifestSha of the corpus file."""
    model: Any = None
    """ManifestSha of the model (files_sha256)."""
    catalog: Any = None
    """CatalogRecord, or the value as written when it is no object."""


def as_record(value: object, kind: type[T]) -> T | None:
    """``value`` (a parsed JSON object) as the record ``kind``; None when it is no JSON object."""
    return msgspec.convert(value, kind) if isinstance(value, dict) else None


def parse_record(text: str, kind: type[T]) -> T | None:
    """The JSON text ``text`` parsed once as the record ``kind``; None when it is not a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return as_record(value, kind)


def lock_versions(text: str) -> list[LockEntry] | None:
    """The version entries of ``campaign.lock.json``'s text (an entry that is no object left out),
    None when it is no lock (not a JSON object, or no ``versions`` list)."""
    lock = parse_record(text, LockFile)
    if lock is None or not isinstance(lock.versions, list):
        return None
    return [e for e in (as_record(v, LockEntry) for v in lock.versions) if e is not None]


class LockFile(msgspec.Struct, frozen=True):
    """``campaign.lock.json``: {campaign_file, versions: [lock entry, ...]} (lab.orchestration.protocol.lock)."""

    versions: Any = None
    """list of lock entries, oldest first."""


class PlanSlot(msgspec.Struct, frozen=True):
    """One row of the archived journal's ``plan`` table (lab.orchestration.journal.SCHEMA): a
    planned pass slot. Read back as SQLite holds it (a column's affinity does not force its type)."""

    seq: Any = None
    """int: the slot's number, from 1 (the attempts' ``seq``)."""
    repetition: Any = None
    """int: the repetition the slot belongs to."""
    position: Any = None
    """int: the slot's place within its repetition."""
    variant_id: Any = None
    """str: the planned variant's id."""
    variant_json: Any = None
    """str: the planned variant's record as JSON (Variant.to_json; lab.orchestration.journal.plan_record)."""


def plan_slots(rows: list[dict]) -> list[PlanSlot]:
    """The journal's plan rows (``Journal.plan()``) as typed slots, in the journal's order."""
    return [msgspec.convert(r, PlanSlot) for r in rows]


class SpecFacts(msgspec.Struct, frozen=True):
    """A pass's ``passes/<id>/pass.json`` as written, for the checks that compare it with the other
    members and for replay (the paths the passes read). The spec's own type is
    lab.passes.spec.PassSpec, whose decode refuses a malformed spec at once; verify must instead
    name each fact that differs, so these are the same keys read as written (None when absent)."""

    pass_id: Any = None
    """str: the pass id (its folder's name)."""
    campaign: Any = None
    """str: [campaign] name."""
    variant: Any = None
    """dict: Variant.to_json() of the pass's variant."""
    corpus_path: Any = None
    """str: the corpus file as the pass process saw it (absolute)."""
    model_ref: Any = None
    """str: the model folder (absolute) or hub id the pass loaded."""
    warmup_items: Any = None
    """int: [timing] warmup_items."""
    warmup_passes: Any = None
    """int: [timing] warmup_passes."""
    seed: Any = None
    """int: [timing] seed."""
    threads: Any = None
    """int: [timing] threads (0: torch's default)."""


class GoldLine(msgspec.Struct, frozen=True):
    """One line of ``report/gold_labels.jsonl`` (lab.report.build.write_gold_labels): a corpus item's
    ``id``, its ``label`` (None: a corpus without labels; a generation corpus's reference answer) and
    ``bucket`` (short, medium, long; None when the corpus gives none). Decoded strictly: a line
    that is not this shape is named by verify as malformed."""

    id: str
    label: str | None
    bucket: str | None = None


class CardComparison(msgspec.Struct, frozen=True):
    """``comparison`` of ``corpus_card.json`` (lab.inputs.corpus.corpus_card), as written: what the
    card says of the comparison corpus file, checked against the lock and the gold labels."""

    file: Any = None
    """str: the corpus file's name."""
    sha256: Any = None
    """str: the corpus file's sha256."""
    items: Any = None
    """int: items in the file."""
    counts: Any = None
    """dict {bucket: {class: items}} (lab.inputs.corpus.counts_by_bucket_class)."""
    labels: Any = None
    """bool: every item has a label."""


class CorpusCard(msgspec.Struct, frozen=True):
    """``corpus_card.json``, the part verify checks: its ``comparison`` (a CardComparison when it is
    an object; other keys ignored)."""

    comparison: Any = None
    """dict, read as CardComparison."""


class RecordFiles(msgspec.Struct, frozen=True):
    """The files a pass's ``result.json`` or a card's ``cards/card<r>.json`` (or one of result.json's
    ``per_card`` entries) names, with their sha256, as written: what verify checks against the
    archive's bytes. The records' own types are lab.passes.records.PassResult and CardRecord,
    which decode strictly; verify reads these few fields leniently so that a damaged record is
    named by the check it fails, never refused as a whole."""

    card: Any = None
    """int: the card's rank (a card record, a per_card entry)."""
    predictions_path: Any = None
    """str: the predictions file, relative to the pass folder (absent: predictions.jsonl)."""
    predictions_sha256: Any = None
    """str: that file's sha256."""
    vectors_path: Any = None
    """str: an embedding pass's or card's vector file (vectors.npy, card<r>.vectors.npy)."""
    vectors_sha256: Any = None
    """str: that file's sha256."""
    per_card: Any = None
    """list of the cards' records (a multi-card pass's result.json)."""
    serving: Any = None
    """dict: a server pass's serving record (lab.passes.tasks.server_job.ServingRecord)."""


class TaskTable(msgspec.Struct, frozen=True):
    """[task] of the archived campaign file as written (the typed section is
    lab.orchestration.config's; verify reads the table of a file that may not parse): the keys
    re-derivation needs."""

    kind: Any = None
    """str: the task kind's name (lab.kinds.KINDS); None: classification."""
    normalisation: Any = None
    """str: a generation kind's output normalisation (None: text_metrics.NORMALISATION)."""
    normalize: Any = None
    """bool: an embedding's declared normalisation (None: true, the kind's default)."""
    entry: Any = None
    """str: the user's code that ran every pass ("file.py:Class"); None: the lab's engines."""
