"""Replay an evidence archive's question on another rental (seed: "put exactly the same
experimental question again if the model or the version changes").

``replay_archive`` verifies the archive, takes the locked protocol of the version it holds
(``campaign.lock.json`` entry named by ``protocol_version.json``) and writes a campaign file
with exactly that protocol: question, corpus, model reference and revision, quality, timing,
series and task. Only what a new rental changes may differ: ``[cost]`` (given here) and the
runs folder (``ITERALAB_RUNS``, never in the file). The corpus (the archive's own copy when it
was packed ``--with-corpus``, else its recorded path, else ``corpus``) and the model (its
recorded path or hub id, else ``model``) must give the archive's locked sha256 values, and so
must the user's own code the protocol runs (``[task] entry`` and ``files``, a ``[quality]``
metric file: found in ``code`` when given, else at its recorded place; the archive holds their
sha256, never the files), each by its role. The new
file is locked at once; its lock entry records ``replays`` (archive name and sha256, the
protocol version it came from) and the question version. A deliberate change of model
(``new_model``) is a new question version whose ``replays`` names the archive and the change;
``lab.compare.comparability`` then says it compares two models. A signed archive's signature is
checked first (lab.evidence.signature): one that does not verify is refused, its signer named.
Errors: :class:`ReplayError`, one line naming both sha256 values on a mismatch.
"""

from __future__ import annotations

import copy
import json
import math
import shlex
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from lab.evidence.archive import extract, verify
from lab.evidence.format import UNSIGNED, ArchiveError, ArchiveFormatError, Signature
from lab.evidence.members import LockedFacts, LockEntry, LockFile, SpecFacts, as_record
from lab.facts.errors import ProtocolError
from lab.facts.files import REPO_ROOT, sha256_file
from lab.facts.host import iteralab_command

if TYPE_CHECKING:
    from lab.orchestration.config import CampaignConfig, ModelSection

BUNDLED_CORPUS = "corpus/"
"""Folder of an archive packed ``--with-corpus`` (lab.evidence.assemble) holding the corpus file."""


class ReplayError(ProtocolError):
    """An archive that cannot be replayed as given; one line with what to give instead."""


@dataclass(frozen=True)
class Replay:
    """What ``replay_archive`` wrote: the campaign file, its lock entry, where the corpus and
    the model were found, and who signed the archive replayed (lab.evidence.format.Signature)."""

    campaign_file: Path
    lock_entry: dict
    corpus: Path
    model: str
    question_version: int
    signature: Signature = UNSIGNED
    code: tuple[tuple[str, Path], ...] = ()
    """(role, file) of each of the user's code files found, with the archive's sha256 (role as
    lab.orchestration.protocol.Protocol.task_files names it: entry, file:<as written>, metric)."""


# ---- a small TOML writer for the campaign file's shape (tables of scalars and lists) ----------

def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ReplayError(f"value {v!r} cannot be written to a campaign file")
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are TOML basic-string escapes
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise ReplayError(f"value {v!r} of type {type(v).__name__} cannot be written to a campaign file")


def _toml_table(header: str, table: dict) -> list[str]:
    lines = [header]
    for k, v in table.items():
        if isinstance(v, dict):
            raise ReplayError(f"nested table {k!r} in {header}: not a campaign-file shape")
        lines.append(f"{json.dumps(k) if not k.replace('_', '').isalnum() else k} = {_toml_value(v)}")
    return lines + [""]


def dumps_campaign(raw: dict) -> str:
    """TOML text of a parsed campaign file (top-level tables and arrays of tables)."""
    out: list[str] = []
    for name, value in raw.items():
        if isinstance(value, dict):
            out += _toml_table(f"[{name}]", value)
        elif isinstance(value, list) and value and all(isinstance(t, dict) for t in value):
            for t in value:
                out += _toml_table(f"[[{name}]]", t)
        else:
            raise ReplayError(f"top-level key {name!r} is not a table; not a campaign-file shape")
    return "\n".join(out)


# ---- reading the archive ---------------------------------------------------------------

def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ReplayError(f"{path.name}: not readable in the archive ({exc}); the archive is damaged") from None


def _locked_entry(top: Path, archive: Path) -> LockEntry:
    """The lock entry of the protocol version the archive holds (its parsed campaign in ``protocol``)."""
    from lab.facts.files import sha256_bytes

    version = as_record(_read_json(top / "protocol_version.json"), LockedFacts) or LockedFacts()
    lock = as_record(_read_json(top / "campaign.lock.json"), LockFile) or LockFile()
    held = version.sha256
    entries = (as_record(v, LockEntry) for v in lock.versions or [])
    entry = next((v for v in entries if v is not None and v.sha256 == held), None)
    if entry is None or not isinstance(entry.protocol, dict):
        raise ReplayError(f"{archive.name}: its lock has no entry for protocol version {version.version} "
                          f"(sha256 {held}); the archive cannot be replayed")
    blob = json.dumps(entry.protocol, sort_keys=True, ensure_ascii=False, default=str).encode()
    if sha256_bytes(blob) != entry.protocol_sha256:
        raise ReplayError(f"{archive.name}: its locked protocol text does not give its protocol_sha256; "
                          "the archive is inconsistent")
    return entry


def _recorded_home(top: Path) -> Path | None:
    """The folder of the campaign file the archive's campaign ran (its journal's ``campaign_file``):
    where the protocol's relative paths (corpus, code) were resolved; None when not recorded."""
    from lab.orchestration.journal import Journal

    path = top / "journal.sqlite"
    if not path.is_file():
        return None
    j = Journal.open_read_only(path)
    try:
        recorded = j.get_control("campaign_file")
    finally:
        j.close()
    return Path(recorded).parent if isinstance(recorded, str) and recorded else None


def _recorded_pass(top: Path) -> SpecFacts:
    """A pass.json of the archive (the absolute corpus and model paths the passes read); an
    empty record when there is none."""
    for p in sorted((top / "passes").glob("*/pass.json")):
        return as_record(_read_json(p), SpecFacts) or SpecFacts()
    return SpecFacts()


def _resolve_recorded(p: str, home: Path) -> Path:
    if p.startswith("@repo/"):
        return REPO_ROOT / p[len("@repo/"):]
    q = Path(p).expanduser()
    return q if q.is_absolute() else home / q


# ---- finding and checking the inputs -----------------------------------------------------

def _find_corpus(given: str | None, top: Path, written: str, recorded: SpecFacts, want: str, inputs: Path,
                 home: Path | None = None) -> Path:
    """The corpus file to replay with: ``given``, else the archive's own copy, the path the passes
    read, the path as written (``written``: [corpus] path) relative to ``home`` (the recorded
    campaign file's folder) and to the repository. ReplayError naming both sha256 values on a
    mismatch."""
    if given:
        candidates = [Path(given).expanduser().resolve()]
        if not candidates[0].is_file():
            raise ReplayError(f"--corpus {given}: no such file; give the corpus file the archive was made with")
    else:
        bundled = sorted((top / BUNDLED_CORPUS).glob("*")) if (top / BUNDLED_CORPUS).is_dir() else []
        candidates = []
        if bundled:  # packed --with-corpus (listed in SHA256SUMS, verified): copied beside the new file
            inputs.mkdir(parents=True, exist_ok=True)
            candidates.append(Path(shutil.copyfile(bundled[0], inputs / bundled[0].name)))
        if recorded.corpus_path:
            candidates.append(Path(recorded.corpus_path))
        candidates += [_resolve_recorded(written, where) for where in (home, REPO_ROOT) if where is not None]
    existing = [c for c in candidates if c.is_file()]  # a custom pass's spec names its label-free copy
    found = next((c for c in existing if sha256_file(c) == want), existing[0] if existing else None)
    if found is None:
        raise ReplayError(f"corpus not found at its recorded path ({candidates[-1]}); give it with --corpus FILE "
                          "(sha256 must be the archive's " + want + ")")
    got = sha256_file(found)
    if got != want:
        raise ReplayError(f"corpus {found} has sha256 {got}, the archive's corpus has sha256 {want}; give the "
                          "archive's corpus with --corpus FILE (replay refuses another corpus)")
    return found.resolve()


def _code_refs(cfg: CampaignConfig) -> dict[str, tuple[str, str, str]]:
    """{role: (where it is written, the path as written, ":Name" or "")} of the user's code files the
    protocol runs (the roles of lab.orchestration.protocol.Protocol.task_files), read from
    its typed sections ``cfg`` (lab.orchestration.config.parse_config)."""
    out: dict[str, tuple[str, str, str]] = {}
    if cfg.task.entry:
        file, _, name = cfg.task.entry.rpartition(":")
        out["entry"] = ("[task] entry", file, ":" + name)
    for f in cfg.task.files:
        out[f"file:{f}"] = ("[task] files", f, "")
    if cfg.quality.user_metric:
        file, _, name = cfg.quality.metric.rpartition(":")
        out["metric"] = ("[quality] metric", file, ":" + name)
    return out


def _find_code(given: str | None, refs: dict[str, tuple[str, str, str]], want: dict,
               home: Path | None) -> dict[str, Path]:
    """{role: file} of each of the user's code files ``refs`` names (:func:`_code_refs`), each giving the archive's
    sha256 for its role (``want``: the lock's task_files_sha256). Looked for in ``given`` (a
    folder: the path as written below it, then the file's name in it), else the path as written,
    relative to ``home`` (the recorded campaign file's folder) and to the repository. Raises
    ReplayError (one line) naming the role, what was found and the sha256 wanted."""
    if given is not None and not Path(given).expanduser().is_dir():
        raise ReplayError(f"--code {given}: no such folder; give the folder that holds the archive's code files")
    if not refs:
        return {}
    found: dict[str, Path] = {}
    for role, (where, written, _) in refs.items():
        sha = want.get(role)
        if not sha or sha == "missing":
            raise ReplayError(f"{where} {written}: the archive's lock records no sha256 for it; the archive "
                              "cannot replay this code")
        candidates: list[Path] = []
        if given is not None:
            home = Path(given).expanduser().resolve()
            if not written.startswith("@repo/") and not Path(written).is_absolute():
                candidates.append(home / written)
            candidates.append(home / Path(written).name)
        else:
            if home is not None:
                candidates.append(_resolve_recorded(written, home))
            candidates.append(_resolve_recorded(written, REPO_ROOT))
        existing = list(dict.fromkeys(c.resolve() for c in candidates if c.is_file()))
        match = next((c for c in existing if sha256_file(c) == sha), None)
        if match is None:
            fix = "give the folder that holds the archive's code with --code DIR"
            if existing:
                got = sha256_file(existing[0])
                raise ReplayError(f"{where} {written}: {existing[0]} has sha256 {got}, the archive's code has sha256 "
                                  f"{sha}; {fix} (replay refuses other code)")
            raise ReplayError(f"{where} {written}: not found (looked at {', '.join(str(c) for c in candidates)}); "
                              f"{fix} (sha256 must be the archive's {sha})")
        found[role] = match
    return found


def _place_code(raw: dict, refs: dict[str, tuple[str, str, str]], found: dict[str, Path]) -> None:
    """Write each found code file's absolute path into ``raw`` where the protocol names it (``refs``:
    :func:`_code_refs` of ``raw``)."""
    task, quality = raw.setdefault("task", {}), raw.setdefault("quality", {})
    for role, path in found.items():
        _, written, name = refs[role]
        if role == "entry":
            task["entry"] = f"{path}{name}"
        elif role == "metric":
            quality["metric"] = f"{path}{name}"
        else:
            task.update(files=[str(path) if f == written else f for f in task.setdefault("files", [])])


def _model_fingerprint(ref: str, revision: str | None) -> str:
    from lab.orchestration.identity import model_fingerprint

    return model_fingerprint(ref, revision)


def _find_model(given: str | None, revision: str | None, table: dict, model: ModelSection,
                recorded: SpecFacts, want: str, new_model: bool) -> tuple[dict, str, str]:
    """(the new [model] table, its fingerprint, the model's folder or hub id) from ``table``, the
    archive's [model] as written, and ``model``, its typed section. ReplayError naming both values
    on a mismatch."""
    table = dict(table)
    if new_model:
        if not given:
            raise ReplayError("--new-model needs --model PATH-OR-HUB-ID: the model of the new question version")
        path = Path(given).expanduser()
        table = {k: v for k, v in table.items() if k == "pad_token"}
        pinned: str | None = None
        if path.is_dir():
            ref = table["path"] = str(path.resolve())
        else:
            ref = table["id"] = given
            if revision:
                pinned = table["revision"] = revision
        got = _model_fingerprint(ref, pinned)
        if got == want:
            raise ReplayError(f"--new-model: model {given} has the archive's own model sha256 {want}; drop "
                              "--new-model to replay the same question")
        return table, got, ref
    if given:
        path = Path(given).expanduser()
        if not path.is_dir():
            raise ReplayError(f"--model {given}: no such model folder; give the checkpoint folder the archive "
                              "was made with (a hub model is found in the local cache by its recorded id and "
                              "revision)")
        candidates = [str(path.resolve())]
    elif model.path:
        candidates = [recorded.model_ref or "", str(_resolve_recorded(str(model.path), REPO_ROOT))]
        candidates = [c for c in candidates if c and Path(c).is_dir()]
        if not candidates:
            raise ReplayError(f"model not found at its recorded path ({model.path}); give it with --model PATH "
                              f"(model sha256 must be the archive's {want})")
    else:  # a hub id at its pinned revision: the local cache's snapshot
        candidates = [str(model.id)]
    ref = candidates[0]
    got = _model_fingerprint(ref, model.revision if not model.path else None)
    if got != want:
        raise ReplayError(f"model {ref} has sha256 {got}, the archive's model has sha256 {want}; give the "
                          "archive's model with --model PATH, or add --new-model to make a new question version "
                          "with this model")
    if model.path:
        table["path"] = ref
    return table, got, ref


def _cost_table(old: dict | None, cost: dict | None) -> dict | None:
    """[cost] of the new rental: the given options over the archive's own (None: none declared)."""
    given = {k: v for k, v in (cost or {}).items() if v is not None}
    if not given:
        return old
    new = {**(old or {}), **given}
    if "gpu" not in new or "days" not in new:
        raise ReplayError("--gpu and --days are both needed for [cost] (the archive declares no package); "
                          "give the package this rental runs on")
    return new


# ---- the replay ----------------------------------------------------------------------------

def replay_archive(archive: str | Path, out: str | Path, *, corpus: str | None = None,
                   model: str | None = None, code: str | None = None, revision: str | None = None,
                   new_model: bool = False, cost: dict | None = None,
                   allowed_signers: str | Path | None = None) -> Replay:
    """Verify ``archive`` (its signature first, against ``allowed_signers``: None, the default
    location's file when there is one; lab.evidence.signature.check_signature), write ``out`` (a
    campaign file with the archive's protocol; [cost] from ``cost``: {gpu, days, lots, catalog,
    window_start, window_end, tz}, each None = the archive's) and lock it. ``code``: the folder
    holding the user's code files when they are not at their recorded place. Refuses an existing
    ``out``. Raises ReplayError (one line) when the archive is not of this lab's format
    (lab.evidence.format.check_format), or it or its signature does not verify, the
    corpus, the model or a code file does not give the archive's sha256, or ProtocolError when the lock refuses
    the new file (e.g. a deadline already past)."""
    archive, out = Path(archive), Path(out).resolve()
    for taken in (out, out.with_suffix(".lock.json")):
        if taken.exists():
            raise ReplayError(f"{taken} exists; give another --out (a replay never overwrites a campaign file "
                              "or its lock)")
    if not archive.is_file():
        raise ReplayError(f"{archive}: no such archive; give the evidence archive (.tar.gz) to replay")
    try:
        v = verify(archive, allowed_signers=None if allowed_signers is None else Path(allowed_signers))
    except ArchiveFormatError as exc:  # its own line already names the archive and the fix
        raise ReplayError(str(exc)) from None
    except ArchiveError as exc:
        raise ReplayError(f"{archive.name} does not verify: {exc}") from None
    if not v.ok:
        raise ReplayError(f"{archive.name} does not verify ({len(v.problems)} problem(s), first: "
                          f"{(v.problems or v.not_rederived)[0]}); "
                          f"replay only an archive that `{iteralab_command()} archive verify "
                          f"{shlex.quote(str(archive))}` accepts")
    archive_sha = sha256_file(archive)
    inputs = out.parent / f"{out.stem}-inputs"
    made_inputs = not inputs.exists()
    try:
        r = _replay(archive, archive_sha, out, inputs, corpus, model, code, revision, new_model, cost)
        return replace(r, signature=v.signature or r.signature)
    except BaseException:
        if made_inputs:
            shutil.rmtree(inputs, ignore_errors=True)  # nothing half-made is left beside --out
        raise


def _replay(archive: Path, archive_sha: str, out: Path, inputs: Path, corpus: str | None, model: str | None,
            code: str | None, revision: str | None, new_model: bool, cost: dict | None) -> Replay:
    from lab.orchestration.config import parse_config
    from lab.orchestration.protocol import load_protocol, lock

    with tempfile.TemporaryDirectory() as tmp:
        top = extract(archive, Path(tmp))
        entry = _locked_entry(top, archive)
        raw = copy.deepcopy(entry.protocol)
        cfg = parse_config(raw)
        recorded, home = _recorded_pass(top), _recorded_home(top)
        corpus_file = _find_corpus(corpus, top, str(cfg.corpus.path), recorded, entry.corpus_sha256, inputs, home)
        model_table, model_sha, model_ref = _find_model(model, revision, raw.get("model") or {}, cfg.model,
                                                        recorded, entry.model_sha256, new_model)
        refs = _code_refs(cfg)
        found_code = _find_code(code, refs, entry.task_files_sha256 or {}, home)
        _place_code(raw, refs, found_code)
        card = top / "corpus_card.json"
        corpus_table = {"path": str(corpus_file)}
        if card.is_file() and cfg.corpus.card:
            inputs.mkdir(parents=True, exist_ok=True)
            corpus_table["card"] = str(Path(shutil.copyfile(card, inputs / "corpus_card.json")).resolve())
        raw["corpus"] = corpus_table
    raw["model"] = model_table
    new_cost = _cost_table(raw.pop("cost", None), cost)
    if new_cost:
        raw["cost"] = new_cost
    came_from = entry.question_version or 1
    question_version = came_from + 1 if new_model else came_from
    replays = {"archive": archive.name, "archive_sha256": archive_sha, "campaign": cfg.campaign.name,
               "protocol_version": entry.version, "protocol_sha256": entry.sha256,
               "question_version": came_from,
               "change": (f"model: {entry.model_sha256} -> {model_sha}" if new_model else "")}
    out.parent.mkdir(parents=True, exist_ok=True)
    head = (f"# Replay of {archive.name} (sha256 {archive_sha}), protocol version {entry.version}.\n"
            + ("# New question version: the model changed (--new-model).\n" if new_model else
               "# Same question: only [cost] and the runs folder may differ from the archive.\n") + "\n")
    out.write_text(head + dumps_campaign(raw), encoding="utf-8")
    try:
        entry_new = lock(load_protocol(out), replays=replays, question_version=question_version)
    except BaseException:
        out.unlink(missing_ok=True)  # never a campaign file that claims a replay and is not locked
        raise
    return Replay(out, entry_new, corpus_file, model_ref,
                  question_version, code=tuple(found_code.items()))
