"""Facts an evidence archive states in more than one member, checked against each other for
``archive verify`` (issue 34): an archive whose members disagree never verifies.

- ``campaign.toml`` against the lock entry of its version (``campaign.lock.json``, the entry
  ``protocol_version.json`` names): the same parsed protocol, fact by fact ("[cost] gpu");
- the lock entry re-hashed: its ``protocol`` gives its ``protocol_sha256``
  (lab.orchestration.protocol.protocol_digest), its parts give its identity ``sha256``
  (lab.orchestration.identity.identity_sha256), its model files give its ``model_sha256`` and its
  user files its ``task_sha256``; each of these equal in ``protocol_version.json``;
- ``report/manifest.json`` against them: campaign name, protocol version and sha256, lock time,
  identity, repetitions, seed, threads, the declared variants, the corpus and model files' sha256,
  and the catalog's record (its sha256 against ``report/catalog.csv``, or why it was missing);
- the journal's plan against the campaign file's variants and repetitions, each attempt's variant
  against its planned slot's;
- each ``passes/<id>/pass.json`` (the pass's spec) against the journal's attempt and the campaign
  file: pass id, campaign name, variant, warm-up items and passes, seed, threads.

Each problem is one line naming the fact and both members. What consistency cannot show: a
forger who rewrites every member consistently (and re-hashes SHA256SUMS) makes a new archive that
verifies; only a signature (or the archive's sha256 recorded elsewhere) tells it from the original.
"""

from __future__ import annotations

import json
import tomllib
from typing import Any

import msgspec

from lab.evidence.members import (
    CatalogRecord,
    LockedFacts,
    LockEntry,
    Manifest,
    ManifestCampaign,
    ManifestSha,
    SpecFacts,
    as_record,
    lock_versions,
    parse_record,
)
from lab.evidence.rederive import JournalRead, member_text
from lab.evidence.table_checks import CAMPAIGN, PROTOCOL_VERSION

LOCK = "campaign.lock.json"
MANIFEST = "report/manifest.json"
CATALOG = "report/catalog.csv"
MEMBERS = (LOCK, MANIFEST)
"""Members only these checks read (kept by the verify scan, with every pass's pass.json)."""


def locked_fields(facts: LockedFacts) -> tuple[tuple[str, object], ...]:
    """(field, value) of the lock entry's fields that protocol_version.json repeats."""
    return (("sha256", facts.sha256), ("protocol_sha256", facts.protocol_sha256),
            ("corpus_sha256", facts.corpus_sha256), ("model_sha256", facts.model_sha256),
            ("model_files_sha256", facts.model_files_sha256), ("task_sha256", facts.task_sha256),
            ("task_files_sha256", facts.task_files_sha256), ("locked_at", facts.locked_at))

SHOWN = 72  # a sha256 is shown whole


def pass_spec(rel: str) -> bool:
    """Whether member ``rel`` is a pass's spec (passes/<id>/pass.json)."""
    return rel.startswith("passes/") and rel.count("/") == 2 and rel.endswith("/pass.json")


def _shown(v) -> str:
    t = "absent" if v is None else json.dumps(v, sort_keys=True, default=str) if not isinstance(v, str) else repr(v)
    return t if len(t) <= SHOWN else t[:SHOWN] + "..."


def disagree(fact: str, a, member_a: str, b, member_b: str) -> str:
    """The one problem line: "[cost] gpu: 'b200' in campaign.toml, 'rtx-4090' in campaign.lock.json"."""
    return f"{fact}: {_shown(a)} in {member_a}, {_shown(b)} in {member_b} (the members disagree)"


def differences(a, b, where: tuple = ()) -> list[tuple[str, object, object]]:
    """(fact, value in a, value in b) for every leaf where ``a`` and ``b`` differ; a fact is named
    as in a campaign file: "[cost] gpu", "[[series]] 1 values"."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str) for d in differences(a.get(k), b.get(k), (*where, k))]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True)) for d in differences(x, y, (*where, i + 1))]
    if a == b and type(a) is type(b):
        return []
    head = f"[{where[0]}]" if where else "the protocol"
    return [(" ".join([head, *map(str, where[1:])]), a, b)]


def _canonical(raw: dict) -> dict:
    """The parsed campaign file as the lock's JSON holds it (a TOML date as its text)."""
    return json.loads(json.dumps(raw, default=str))


def check_members_agree(scan, journal: JournalRead | None, problems: list[str]) -> None:
    """Append one line per fact two members of the archive state differently (module docstring).
    A member that is missing or unreadable is named by the check that needs it; the facts it
    holds are then not compared here."""
    from lab.orchestration.config import ConfigError, parse_config

    try:
        raw = tomllib.loads(member_text(scan, CAMPAIGN).removeprefix("\ufeff"))
    except (KeyError, tomllib.TOMLDecodeError):
        return  # named by the threshold check (lab.evidence.verify)
    version = parse_record(member_text(scan, PROTOCOL_VERSION), LockedFacts) \
        if PROTOCOL_VERSION in scan.kept else None
    entry = _lock_entry(scan, version, problems)
    if entry is not None and version is not None:
        _check_lock(raw, entry, version, problems)
    try:
        cfg = parse_config(raw)
    except ConfigError as exc:
        problems.append(f"{CAMPAIGN}: does not parse as a campaign file ({exc})")
        return
    _check_manifest(scan, raw, cfg, version, problems)
    if journal is not None:
        _check_plan(cfg, journal, problems)
        _check_specs(scan, raw, cfg, journal, problems)


def _lock_entry(scan, version: LockedFacts | None, problems: list[str]) -> LockEntry | None:
    """The lock entry of the archive's protocol version, None (with a problem) when there is none."""
    if LOCK not in scan.kept:
        problems.append(f"{LOCK} missing: {CAMPAIGN} cannot be checked against the protocol it locked")
        return None
    versions = lock_versions(member_text(scan, LOCK))
    if versions is None:
        problems.append(f"{LOCK}: not a campaign lock (no versions list)")
        return None
    if version is None:
        return None  # protocol_version.json missing or unreadable: named by the table checks
    found = [v for v in versions if v.version == version.version]
    if not found:
        problems.append(f"{PROTOCOL_VERSION} names protocol version {version.version}, which {LOCK} "
                        "does not hold")
        return None
    if not isinstance(found[0].protocol, dict):
        problems.append(f"{LOCK}: version {version.version} holds no protocol")
        return None
    return found[0]


def _check_lock(raw: dict, entry: LockEntry, version: LockedFacts, problems: list[str]) -> None:
    from lab.orchestration.identity import digests_fingerprint, fingerprint_of, identity_sha256
    from lab.orchestration.protocol import protocol_digest

    locked = f"{LOCK} (version {entry.version})"
    for fact, a, b in differences(_canonical(raw), entry.protocol):
        problems.append(disagree(fact, a, CAMPAIGN, b, locked))
    if protocol_digest(entry.protocol) != entry.protocol_sha256:
        problems.append(f"{locked}: its protocol re-hashes to {protocol_digest(entry.protocol)[:12]}..., not to "
                        f"its protocol_sha256 {str(entry.protocol_sha256)[:12]}... (the protocol was edited)")
    for (k, ours), (_, theirs) in zip(locked_fields(entry), locked_fields(version), strict=True):
        if ours != theirs:
            problems.append(disagree(k, theirs, PROTOCOL_VERSION, ours, locked))
    parts = entry.identity_parts()
    if identity_sha256(parts) != entry.sha256:
        problems.append(f"{locked}: its protocol, corpus, model (and code) sha256 give the identity "
                        f"{identity_sha256(parts)[:12]}..., not its sha256 {str(entry.sha256)[:12]}...")
    files = entry.model_files_sha256
    if isinstance(files, dict) and fingerprint_of(files, "", None) != entry.model_sha256:
        problems.append(f"{locked}: its model files' sha256 give {fingerprint_of(files, '', None)[:12]}..., not its "
                        f"model_sha256 {str(entry.model_sha256)[:12]}...")
    code = entry.task_files_sha256
    if isinstance(code, dict) and code and digests_fingerprint(code) != entry.task_sha256:
        problems.append(f"{locked}: its code files' sha256 give {digests_fingerprint(code)[:12]}..., not its "
                        f"task_sha256 {str(entry.task_sha256)[:12]}...")


def _check_manifest(scan, raw: dict, cfg, version: LockedFacts | None, problems: list[str]) -> None:
    from lab.inputs.variants import expand_series

    manifest = parse_record(member_text(scan, MANIFEST), Manifest) if MANIFEST in scan.kept else None
    if manifest is None:
        return  # an archive without its report: the raw table's own line says so
    camp = as_record(manifest.campaign, ManifestCampaign) or ManifestCampaign()
    pairs = [("[campaign] name", camp.name, cfg.campaign.name, CAMPAIGN),
             ("repetitions", camp.repetitions, cfg.timing.repetitions, CAMPAIGN),
             ("seed", camp.seed, cfg.timing.seed, CAMPAIGN),
             ("threads", camp.threads_requested, cfg.timing.threads, CAMPAIGN),
             ("declared variants", [v.variant_id for v in _declared(camp.variants)],
              [v.variant_id for v in expand_series(cfg.defaults, cfg.series)], CAMPAIGN)]
    if version is not None and version != LockedFacts():  # an empty protocol_version.json: nothing to compare
        corpus = as_record(manifest.corpus or {}, ManifestSha) or ManifestSha()
        pairs += [("protocol version", camp.protocol_version, version.version, PROTOCOL_VERSION),
                  ("sha256", camp.protocol_sha256, version.sha256, PROTOCOL_VERSION),
                  ("locked_at", camp.locked_at, version.locked_at, PROTOCOL_VERSION),
                  ("corpus_sha256", corpus.sha256, version.corpus_sha256, PROTOCOL_VERSION)]
        in_version = dict(locked_fields(version))
        pairs += [(k, v, in_version.get(k), PROTOCOL_VERSION) for k, v in (camp.identity or {}).items()]
        files = (as_record(manifest.model or {}, ManifestSha) or ManifestSha()).files_sha256
        if files is not None and version.model_files_sha256 is not None:
            pairs.append(("model_files_sha256", files, version.model_files_sha256, PROTOCOL_VERSION))
    for fact, ours, theirs, where in pairs:
        if ours != theirs:
            problems.append(disagree(fact, ours, MANIFEST, theirs, where))
    catalog = as_record(manifest.catalog, CatalogRecord)
    if not (catalog is not None and (catalog.copy or catalog.missing)):
        problems.append(f"{MANIFEST}: no catalog record (its copy {CATALOG}, or why the catalog was missing when "
                        "the report was built); the prices the archive states cannot be traced")
    elif catalog.copy:
        copy = str(catalog.copy)
        if copy not in scan.sha:
            problems.append(f"{MANIFEST} names the catalog copy {copy}, which the archive lacks")
        elif scan.sha[copy] != catalog.sha256:
            problems.append(disagree("catalog sha256", catalog.sha256, MANIFEST, scan.sha[copy],
                                     f"{copy} (its bytes)"))


class _Declared(msgspec.Struct, frozen=True):
    """A declared variant as the manifest lists it (Variant.to_json()): only its id is compared."""

    variant_id: Any = None
    """str: the variant's content-derived id, as written."""


def _declared(variants: object) -> list[_Declared]:
    """The manifest's declared variants (an entry that is no object left out)."""
    listed = variants if isinstance(variants, list) else []
    return [d for d in (as_record(v, _Declared) for v in listed) if d is not None]



def _check_plan(cfg, journal: JournalRead, problems: list[str]) -> None:
    from collections import Counter

    from lab.inputs.variants import expand_series

    attempts, plan, _damaged = journal
    declared = [v.variant_id for v in expand_series(cfg.defaults, cfg.series)]
    planned = Counter(str(p.variant_id) for p in plan)
    wanted = Counter({vid: cfg.timing.repetitions for vid in declared})
    if planned != wanted:
        problems.append(disagree("planned passes per variant", dict(sorted(planned.items())), JOURNAL_MEMBER,
                                 dict(sorted(wanted.items())), f"{CAMPAIGN} (variants x repetitions)"))
    by_seq = {p.seq: p for p in plan}
    for a in attempts:
        slot = by_seq.get(a.seq)
        if slot is not None and slot.variant_id != a.variant_id:
            problems.append(f"pass {a.pass_id}: variant {a.variant_id} in the journal's attempt, "
                            f"{slot.variant_id} in its planned slot {a.seq} (the journal disagrees with itself)")


JOURNAL_MEMBER = "journal.sqlite (plan)"


def _check_specs(scan, raw: dict, cfg, journal: JournalRead, problems: list[str]) -> None:
    attempts = {a.pass_id: a for a in journal[0]}
    name = cfg.campaign.name
    t = cfg.timing
    for rel in sorted(r for r in scan.kept if pass_spec(r)):
        pid = rel.split("/")[1]
        spec = parse_record(member_text(scan, rel), SpecFacts)
        if spec is None:
            problems.append(f"{rel}: not a pass spec (not a JSON object)")
            continue
        a = attempts.get(pid)
        if spec.pass_id != pid:
            problems.append(disagree("pass id", spec.pass_id, rel, pid, "its folder name"))
        facts = [("[campaign] name", spec.campaign, name, CAMPAIGN),
                 ("[timing] warmup_items", spec.warmup_items, t.warmup_items, CAMPAIGN),
                 ("[timing] warmup_passes", spec.warmup_passes, t.warmup_passes, CAMPAIGN),
                 ("[timing] seed", spec.seed, t.seed, CAMPAIGN),
                 ("[timing] threads", spec.threads, t.threads, CAMPAIGN)]
        if a is not None and a.variant is not None:
            facts.append(("variant", spec.variant, a.variant.to_json(), "journal.sqlite"))
        for fact, ours, theirs, where in facts:
            for sub, x, y in (differences(ours, theirs, ("variant",)) if fact == "variant" else [(fact, ours, theirs)]):
                if x != y or type(x) is not type(y):
                    problems.append(disagree(sub, x, rel, y, where))
