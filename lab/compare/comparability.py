"""Are several archives one protocol? Checked before anything is compared.

Must be equal (SPEC 3.1: results of different protocols are never mixed): the corpus
(sha256 of the corpus file, from the manifest, cross-checked with the lock), the model
files (sha256 of each weight/tokenizer/config file, or the hub id and revision), the
task ([task]: kind, pooling, entry, and the sha256 of each file of the user's code it runs:
the entry, its files; the code by its file's name and sha256, never by where it lies), the
quality rule ([quality]: metric and the sha256 of its file when it is
the user's function, threshold, tolerance, reference variant, subgroups, the agreement rule with its
defaults filled in) and
the timing rule ([timing] without ``threads``: warm-up items and passes, repetitions,
rotation, process policy, seed) and the scenario ([scenario]: offline, or a server's arrivals,
latency objective and declared traffic; server and offline archives are never compared together).
The protocol hash cannot be the key: it covers the whole
campaign file, including the ``[cost]`` that names each rental's package.

May differ: hardware, driver, image, package (``[cost]``) and CPU threads, which are
conditions of the measurement recorded in the manifest. The model files differ only between an
archive and a deliberate new-model question version of it (``campaign replay --new-model``,
recorded in its lock): that comparison is of two models, and says so. Variants are matched by their
content id (lab.inputs.variants.Variant.variant_id); a variant missing from an archive is
listed, not compared.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from pathlib import Path

from lab.compare.comparison_records import Identity
from lab.compare.evidence import CompareError, Evidence
from lab.inputs.manifest_record import ManifestModel
from lab.orchestration.lock_record import LockEntry, LockReplay

TIMING_CONDITIONS = ("threads",)  # may differ between rentals: recorded, not part of the rule


def corpus_sha256(ev: Evidence) -> str:
    """The corpus file's sha256 from the manifest; CompareError when the lock disagrees."""
    sha = (ev.manifest.corpus.sha256 if ev.manifest.corpus is not None else None) or ""
    locked = {v.corpus_sha256 for v in ev.lock.versions if v.corpus_sha256}
    if not sha:
        raise CompareError(f"{ev.name}: its manifest has no corpus sha256; re-pack the archive "
                           "with this version of the lab")
    if locked and sha not in locked:
        raise CompareError(f"{ev.name}: manifest corpus sha256 {sha} is not the locked one "
                           f"({', '.join(sorted(locked))}); the archive is inconsistent")
    return sha


def model_identity(ev: Evidence) -> str:
    """Canonical model identity: JSON of {file: sha256} for a local checkpoint or a resolved hub
    snapshot; id@revision for a hub model recorded without its snapshot's files."""
    m = ev.manifest.model or ManifestModel()
    if m.kind == "hub" and m.files_sha256:
        return json.dumps(m.files_sha256, sort_keys=True)
    if m.kind == "local":
        files = m.files_sha256 or {}
        if not files:
            raise CompareError(f"{ev.name}: its manifest has no model file sha256; re-pack it")
        return json.dumps(files, sort_keys=True)
    return f"{m.id}@{m.revision}"


def effective(raw: dict, typed) -> dict:
    """A campaign-file section as its rule: ``raw`` (the section as written) with every field of
    its typed section (lab.orchestration.config, defaults filled in) in place of the written
    value, so that a value left to its default and the same value written out (``seed = 0``,
    ``rotation = "cyclic"``) are one rule. Fields the section leaves unset (None, empty) are left
    out, as a key the file does not write. ``typed`` None (an Evidence assembled without its parsed
    campaign, as unit tests do): the section as written."""
    if typed is None:
        return dict(raw)
    filled = {f.name: getattr(typed, f.name) for f in fields(typed)}
    return {**raw, **{k: list(v) if isinstance(v, tuple) else v for k, v in filled.items()
                      if v is not None and v != ()}}


def code_ref(ref):
    """A reference to the user's code (``"path/to/file.py:Name"``, as the campaign file writes it)
    as a rule holds it: the file's name and the class or function, ``"file.py:Name"``. Where the
    file lies is no part of the rule (two rentals keep the same code in different folders); what it
    holds is, by its sha256 (:func:`user_code_sha256`). Anything else unchanged."""
    if not isinstance(ref, str) or ":" not in ref:
        return ref
    file, _, name = ref.rpartition(":")
    return f"{Path(file).name}:{name}"


def code_role(role: str) -> str:
    """A role of ``task_files_sha256`` as a rule holds it: ``file:<as written>`` -> ``file:<its
    name>`` (:func:`code_ref`); ``entry`` and ``metric`` unchanged."""
    return f"file:{Path(role[5:]).name}" if role.startswith("file:") else role


def quality_rule(ev: Evidence, per_role: bool = True) -> str:
    """The [quality] section, with the sha256 of its metric function's file ("metric file sha256",
    the lock's ``task_files_sha256["metric"]``) when it is the user's own and ``per_role``
    (:func:`user_code_sha256`)."""
    code = user_code_sha256(ev, per_role)
    metric = {"metric file sha256": code["metric"]} if "metric" in code else {}
    quality = ev.campaign.quality
    rule = effective(quality, getattr(ev.config, "quality", None))
    rule = {k: code_ref(v) if k == "metric" else v for k, v in rule.items()}
    return json.dumps({**rule, **metric, **agreement_rule(ev, quality)}, sort_keys=True)


def agreement_rule(ev: Evidence, quality: dict) -> dict:
    """The agreement rule the archive's [quality] table ``quality`` locks, defaults filled in
    (lab.orchestration.agreement.AgreementRule.of), so that a rule left to its default and the same
    rule written out are one rule; {} when the table gives none (compare refuses it elsewhere)."""
    from lab.orchestration.agreement import AgreementRule

    try:
        rule = AgreementRule.of(quality, task_kind(ev))
    except (KeyError, TypeError, ValueError):
        return {}
    return {"max_differing": rule.max_differing, "min_cosine": rule.min_cosine}


def timing_rule(ev: Evidence) -> str:
    """The [timing] section as its rule (:func:`effective`), without the conditions that may
    differ between rentals (TIMING_CONDITIONS)."""
    t = effective(ev.campaign.timing, getattr(ev.config, "timing", None))
    return json.dumps({k: v for k, v in t.items() if k not in TIMING_CONDITIONS}, sort_keys=True)


def own_lock_entry(ev: Evidence) -> LockEntry:
    """The lock entry of the protocol version this archive holds (an empty entry when not found)."""
    return next((v for v in ev.lock.versions if v.sha256 == ev.protocol_sha256), LockEntry())


def new_model_of(a: Evidence, b: Evidence) -> str:
    """'' unless one archive is a deliberate new-model question version replaying the other
    (lab.evidence.replay, `campaign replay --new-model`: its lock entry's ``replays`` names the other's
    protocol version); else one clause saying so."""
    for new, old in ((a, b), (b, a)):
        entry = own_lock_entry(new)
        r = entry.replays or LockReplay()
        if r.change.startswith("model") and r.protocol_sha256 == old.protocol_sha256:
            return (f"{new.name} is question version {entry.question_version} with a new "
                    f"model, replaying {r.archive}")
    return ""


JOINT_CODE = "code sha256 (entry, files and metric together)"
"""The task rule's key for the lock's joint ``task_sha256``, when an archive's lock predates the
per-file map (``task_files_sha256``)."""


def user_code_sha256(ev: Evidence, per_role: bool = True) -> dict[str, str]:
    """The sha256 of the user's code the archive's protocol runs, by file role: the lock's
    ``task_files_sha256`` ({role: sha256}; roles ``entry``, ``file:<name>``, ``metric``;
    lab.orchestration.identity.task_files_sha256) when ``per_role`` and the lock has it; else
    {JOINT_CODE: the lock's joint ``task_sha256``} (a lock written before the map). {} when the
    protocol runs no user code."""
    entry = own_lock_entry(ev)
    if per_role and entry.task_files_sha256 is not None:
        return dict(entry.task_files_sha256)
    return {JOINT_CODE: entry.task_sha256} if entry.task_sha256 else {}


def per_role_comparable(evidence: list[Evidence]) -> bool:
    """True when every archive that runs user code has the per-role map (``task_files_sha256``):
    then the code is compared file by file; else by the joint ``task_sha256`` for all (the map
    of one and the joint digest of another cannot be matched key by key)."""
    return all(JOINT_CODE not in user_code_sha256(e) for e in evidence)


def task_rule(ev: Evidence, per_role: bool = True) -> str:
    """The task ([task], kind "classification" when absent) and the sha256 of the user's code it
    runs, by file role (:func:`user_code_sha256`): "entry sha256", "file:<name> sha256"; the
    metric's file belongs to the quality rule (:func:`quality_rule`). With ``per_role`` False (or
    a lock predating the map), the joint digest of all of them under JOINT_CODE."""
    t = {"kind": "classification", **effective(ev.campaign.task, getattr(ev.config, "task", None))}
    t = {k: code_ref(v) if k == "entry" else sorted(Path(f).name for f in v) if k == "files" else v
         for k, v in t.items()}
    code = {k if k == JOINT_CODE else f"{code_role(k)} sha256": v for k, v in user_code_sha256(ev, per_role).items()
            if k != "metric"}
    return json.dumps({**t, **code}, sort_keys=True)


def identities(evidence: list[Evidence]) -> list[tuple[str, list[str]]]:
    """Each field that must be equal, with its value per archive (same order as ``evidence``):
    corpus sha256, model files sha256, task rule, quality rule, timing rule. The user's code is
    compared per file role when every archive's lock allows it (:func:`per_role_comparable`)."""
    per_role = per_role_comparable(evidence)
    return [("corpus sha256", [corpus_sha256(e) for e in evidence]),
            ("model files sha256", [model_identity(e) for e in evidence]),
            ("task rule", [task_rule(e, per_role) for e in evidence]),
            ("quality rule", [quality_rule(e, per_role) for e in evidence]),
            ("timing rule", [timing_rule(e) for e in evidence]),
            ("scenario rule", [scenario_rule(e) for e in evidence])]


def _is_digest(key: str, value) -> bool:
    return "sha256" in key and isinstance(value, str) and len(value) == 64


def _value(value, compact: bool) -> str:
    """A rule's value as the line shows it, in JSON; cut to 40 characters when ``compact``."""
    text = json.dumps(value)
    return text[:39] + "…" if compact and len(text) > 40 else text


KIND_DEFAULTED = ("kind", "max_differing", "min_cosine")
"""Rule keys left out of the compact line (archives of different task kinds): the kind itself, which
the line leads with, and the agreement rule, whose defaults follow the kind."""


RULES = ("task rule", "quality rule", "timing rule", "scenario rule")
"""The identity fields that are a campaign-file section, named one key at a time when they differ."""


def _differ(field: str, a: Evidence, va: str, b: Evidence, vb: str, compact: bool = False) -> str:
    """The clauses naming how ``field`` differs between ``a`` and ``b``: '<field> differs: <a> has
    <value>, <b> has <value>'; a rule ([task], [quality], [timing]) one clause per key that
    differs ('[quality] metric differs: ...'). ``compact`` (archives of different task kinds,
    :func:`refuse_other_kinds`): no digest values ('corpus sha256 differs', '[task] entry sha256
    differs'), the other values cut short ('[quality] metric: A has "accuracy", B has "m.py:f"'),
    [task] keys only one of the two has left out and KIND_DEFAULTED (the kinds already say they
    differ)."""
    if field == "model files sha256" and va.startswith("{") and vb.startswith("{"):
        fa, fb = json.loads(va), json.loads(vb)
        names = [f for f in sorted(set(fa) | set(fb)) if fa.get(f) != fb.get(f)]
        if compact:
            more = f" and {len(names) - 1} more" if len(names) > 1 else ""
            return f"model file sha256 differs ({names[0] if names else '?'}{more})"
        name = names[0] if names else "?"
        va, vb = f"{name} {fa.get(name, 'absent')}", f"{name} {fb.get(name, 'absent')}"
        field = "model file sha256"
    if field in RULES and va.startswith("{") and vb.startswith("{"):
        ra, rb = json.loads(va), json.loads(vb)
        section = field.split()[0]
        keys = [k for k in sorted(set(ra) | set(rb)) if ra.get(k) != rb.get(k)
                and not (compact and (k in KIND_DEFAULTED or (section == "task" and (k not in ra or k not in rb))))]
        verb = "" if compact else " differs"
        return "; ".join(
            f"[{section}] {k} differs" if compact and (_is_digest(k, ra.get(k)) or _is_digest(k, rb.get(k)))
            else f"[{section}] {k}{verb}: {a.name} has {_value(ra.get(k, 'absent'), compact)}, "
                 f"{b.name} has {_value(rb.get(k, 'absent'), compact)}" for k in keys)
    if compact:
        return f"{field} differs"
    return f"{field} differs: {a.name} has {va}, {b.name} has {vb}"


def task_kind(ev: Evidence) -> str:
    """The archive's task kind ([task] kind; "classification" when absent, as in task_rule)."""
    return str(json.loads(task_rule(ev))["kind"])


def refuse_other_kinds(evidence: list[Evidence]) -> None:
    """CompareError leading with the difference that matters when the archives hold different task
    kinds: 'different task kinds: A is embedding, B is generation', then every other difference
    found, compactly (:func:`_differ` with ``compact``: digests named, not shown; '[quality]
    metric: A has "accuracy", B has "m.py:f"')."""
    kinds = {e.name: task_kind(e) for e in evidence}
    if len(set(kinds.values())) < 2:
        return
    tail = "".join(f"; {clause}" for clause in _differences(evidence, compact=True) if clause)
    raise CompareError(f"not comparable: different task kinds: "
                       f"{', '.join(f'{n} is {k}' for n, k in kinds.items())}{tail}; compare only archives "
                       "of one task kind, the same campaign file run on each rental")


def refuse_mixed_scenarios(evidence: list[Evidence]) -> None:
    """CompareError (one line) when server campaigns ([scenario] kind = "server", lab.inputs.scenario)
    and offline ones are given together: a server archive answers another question (a traffic at a
    latency objective) than an offline one (a corpus in bulk), so neither ranks the other's passes.
    Archives of one server campaign compare (lab.compare.serving)."""
    served = [e.name for e in evidence if is_server(e)]
    offline = [e.name for e in evidence if not is_server(e)]
    if served and offline:
        is_are = "is a server campaign" if len(served) == 1 else "are server campaigns"
        raise CompareError(f"not comparable: {', '.join(served)} {is_are} "
                           f"([scenario] kind = \"server\"), {', '.join(offline)} "
                           f"{'is an offline one' if len(offline) == 1 else 'are offline ones'}: they answer different "
                           "questions; compare server archives with server archives of the same campaign file")


def is_server(ev: Evidence) -> bool:
    """The archive holds a server campaign ([scenario] kind = "server")."""
    return ev.config is not None and ev.config.scenario.server


def scenario_rule(ev: Evidence) -> str:
    """The [scenario] section as locked (arrivals, objective, declared traffic), JSON; the offline
    scenario is {"kind": "offline"}."""
    scenario = ev.config.scenario if ev.config is not None else None
    return json.dumps(dataclasses.asdict(scenario) if scenario is not None and scenario.server
                      else {"kind": "offline"}, sort_keys=True)


def _differences(evidence: list[Evidence], compact: bool = False) -> list[str]:
    """The clauses naming each field (:func:`identities`) where an archive differs from the first
    (:func:`_differ`); a model-file difference declared as a new question version
    (:func:`new_model_of`) is not one."""
    first, out = evidence[0], []
    for field, values in identities(evidence):
        for other, val in zip(evidence[1:], values[1:], strict=True):
            if val != values[0] and not (field == "model files sha256" and new_model_of(first, other)):
                out.append(_differ(field, first, values[0], other, val, compact))
    return out


def pass_record(ev: Evidence) -> tuple:
    """The passes an archive holds, as (pass_id, start_time) pairs (a pass not started left out):
    a pass run once has one such pair, whatever archive of its campaign holds it."""
    return tuple(sorted((r.pass_id, r.start_time) for r in ev.raw_rows if r.start_time))


def refuse_one_run(evidence: list[Evidence]) -> None:
    """CompareError (one line naming both archives) when two archives hold a pass in common (the
    same pass id started at the same instant): archives of one campaign run, whatever subset of
    its passes each holds (a copy, a re-pack, a partial and a later archive), are one rental,
    never two. Two rentals of one locked campaign file share the lock but never a pass."""
    seen: dict[tuple, str] = {}
    for e in evidence:
        record = pass_record(e)
        for pair in record:
            if pair in seen and seen[pair] != e.name:
                both = sum(1 for p in record if seen.get(p) == seen[pair])
                raise CompareError(f"{e.name} and {seen[pair]} hold the same campaign's passes ({both} pass(es) in "
                                   f"both, first {pair[0]} started {pair[1]}: a copy, a re-pack, or a partial and a "
                                   "later archive of one run), not two rentals; give each rental's archive once "
                                   "(its latest)")
        for pair in record:
            seen.setdefault(pair, e.name)


def check_comparable(evidence: list[Evidence]) -> Identity:
    """Raise CompareError when corpus, model files, task, quality rule or timing rule differ: one
    line naming every difference found (each field with both values), not only the first;
    else return the shared identity (lab.compare.comparison_records.Identity): ``two_models``
    lists the archives that are a declared new-model question version of another (``new_model_of``;
    the model files then differ on purpose and the comparison is of two models); ``common_variants``
    are the variant ids every archive has (declared order of the first), ``missing`` maps
    an archive name to the variant ids it lacks. Raises CompareError when no variant is
    common or fewer than two archives are given."""
    if len(evidence) < 2:
        raise CompareError("give at least two archives to compare (one per rental)")
    names = [e.name for e in evidence]
    if len(set(names)) != len(names):
        raise CompareError("the same archive name is given twice; give each rental's archive once")
    refuse_one_run(evidence)
    first = evidence[0]
    refuse_mixed_scenarios(evidence)
    refuse_other_kinds(evidence)
    differences = _differences(evidence)
    two_models = [link for other in evidence[1:] if (link := new_model_of(first, other))
                  and model_identity(other) != model_identity(first)]
    if differences:
        raise CompareError(f"not comparable: {'; '.join(differences)}; compare only archives of the "
                           "same corpus, model and rules")
    ids = [[v.variant_id for v in e.variants] for e in evidence]
    common = [v for v in ids[0] if all(v in other for other in ids[1:])]
    if not common:
        raise CompareError("not comparable: no variant (content id) is in every archive; run the "
                           "same campaign file's series on each rental")
    missing = {e.name: [v for v in i if v not in common] for e, i in zip(evidence, ids, strict=True)}
    return Identity(corpus_sha256=corpus_sha256(first), model=first.manifest.model or ManifestModel(),
                    two_models=tuple(two_models), quality=first.campaign.quality,
                    timing=json.loads(timing_rule(first)), common_variants=tuple(common),
                    missing={k: tuple(v) for k, v in missing.items() if v})
