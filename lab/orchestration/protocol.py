"""The campaign file (TOML): decision question, corpus, model, quality, timing, series.

Locking records the protocol's hash before any measured pass (seed: "Inscrivi la soglia
e la tolleranza ... prima di guardare i tempi"); an edit after lock makes a new version,
and each version has its own results folder, so versions never mix (SPEC 3.1).
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from lab.facts.diskfull import atomic_write_text
from lab.facts.errors import ProtocolError
from lab.facts.files import REPO_ROOT, sha256_bytes
from lab.facts.host import iteralab_command
from lab.inputs.scenario import ScenarioError, check_variants
from lab.inputs.variants import Variant, VariantError, expand_series, find_variant
from lab.kinds import KINDS, task_kind
from lab.kinds.kind import TRANSFORMERS, TaskKind
from lab.orchestration.config import CampaignConfig, ConfigError, CostSection, parse_config

DEMO_CAMPAIGN = Path(__file__).resolve().parents[1] / "defaults" / "demo.toml"


@dataclass(frozen=True)
class Protocol:
    """A parsed campaign file. ``raw`` is the TOML as a dict; paths are resolved."""

    path: Path
    raw: dict
    variants: tuple[Variant, ...]
    config: CampaignConfig

    @property
    def name(self) -> str:
        return self.config.campaign.name

    @property
    def quality(self) -> dict:
        """[quality] with its defaults filled in, as a dict (validate_pass reads it)."""
        return asdict(self.config.quality)

    @property
    def timing(self) -> dict:
        """[timing] with its defaults filled in, as a dict."""
        return asdict(self.config.timing)

    @property
    def corpus_path(self) -> Path:
        return _resolve(self.config.corpus.path, self.path)

    @property
    def card_path(self) -> Path | None:
        c = self.config.corpus.card
        return _resolve(c, self.path) if c else None

    @property
    def model_ref(self) -> str:
        m = self.config.model
        if m.path is not None:
            return str(_resolve(m.path, self.path))
        assert m.id is not None  # lab.orchestration.config refuses a [model] with neither path nor id
        return m.id

    @property
    def cost(self) -> CostSection | None:
        """The declared package, or None: no [cost] means no package declared (never a default GPU)."""
        return self.config.cost

    @property
    def catalog_path(self) -> Path | None:
        """The [cost] catalog CSV resolved like the corpus (relative to the campaign file, or
        ``@repo/``), None for the shipped catalog."""
        c = self.config.cost.catalog if self.config.cost is not None else None
        return _resolve(c, self.path) if c else None

    @property
    def task_kind(self) -> str:
        """[task] kind ("classification" when the section is absent)."""
        return self.config.task.kind

    @property
    def kind(self) -> TaskKind:
        """The [task] kind's object (lab.kinds): what differs by kind; with a [task] entry, the kind
        as the user's code runs it (lab.kinds.kind.TaskKind.run_by_entry)."""
        return task_kind(self.config.task.kind, entry=bool(self.config.task.entry))

    def task_files(self) -> dict[str, Path]:
        """{role: path} of the user's files the protocol runs: ``entry`` (a custom task's code),
        ``file:<as written>`` for each [task] files item, ``metric`` (a [quality] metric
        function's file); resolved like the corpus (relative to the campaign file, or @repo/)."""
        from lab.orchestration.config import parse_entry

        out: dict[str, Path] = {}
        task = self.config.task
        if task.entry:
            out["entry"] = _resolve(parse_entry(task.entry, "[task] entry")[0], self.path)
        for f in task.files:
            out[f"file:{f}"] = _resolve(f, self.path)
        if self.config.quality.user_metric:
            out["metric"] = _resolve(parse_entry(self.config.quality.metric, "[quality] metric")[0], self.path)
        return out

    def task_extra(self) -> dict:
        """PassSpec.extra's ``task`` entry: {} for classification (its pass.json is unchanged),
        else {"task": the [task] fields, ``entry`` with its file resolved to an absolute path}."""
        task, kind = self.config.task, self.kind
        if not kind.keys:  # a kind with no [task] keys (classification): its pass.json is unchanged
            return {}
        private = {k for other in KINDS.values() if other.keys_private and other.name != kind.name
                   for k in other.keys if k not in kind.accepted_keys}
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(task).items()
             if k not in private}  # generation's keys stay out of the other kinds' pass.json
        if task.entry:
            d["entry"] = f"{self.task_files()['entry']}:{task.entry.rsplit(':', 1)[1]}"
        return {"task": d}

    @property
    def reference(self) -> Variant:
        found = find_variant(self.variants, self.quality["reference_variant"])
        assert found is not None  # load_protocol refuses a reference that names no variant
        return found

    def digest(self) -> str:
        """sha256 of the canonical protocol (protocol_digest of the parsed TOML)."""
        return protocol_digest(self.raw)


def protocol_digest(raw: dict) -> str:
    """The lock's ``protocol_sha256``: sha256 (64 hex) of the parsed campaign file ``raw`` as
    JSON with sorted keys (comments and layout do not count; a TOML date counts as its text, so
    the lock's JSON copy of the protocol re-hashes to the same value)."""
    return sha256_bytes(json.dumps(raw, sort_keys=True, ensure_ascii=False, default=str).encode())


def _resolve(p: str, campaign_file: Path) -> Path:
    if p.startswith("@repo/"):
        return REPO_ROOT / p[len("@repo/"):]
    q = Path(p).expanduser()
    return q if q.is_absolute() else (campaign_file.parent / q)


def refusal_name(path: str | Path) -> str:
    """How a campaign file is named at the start of a refusal (parser, lock, model and entry
    checks alike): its full path, so the line says which file from any folder."""
    return str(Path(path).resolve())


def load_protocol(path: str | Path, relative_to: str | Path | None = None) -> Protocol:
    """Parse and check a campaign file (lab.orchestration.config: typed sections, unknown keys and wrong
    types refused). Raises ProtocolError with one line on any problem.

    ``relative_to``: the campaign file whose folder the relative paths of ``path`` belong to
    (a campaign folder's copy of it: the original file); the Protocol's ``path`` is then that
    file, so the corpus, model, card and catalog resolve as they did at lock."""
    path = Path(path).resolve()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # -sig: an editor's BOM, as for corpus and catalog
    except FileNotFoundError:
        raise ProtocolError(f"{refusal_name(path)}: no such campaign file; check the path, or start from "
                            f"{DEMO_CAMPAIGN.relative_to(REPO_ROOT)}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"{refusal_name(path)}: not valid TOML ({exc}); fix the syntax") from None
    refuse_secrets(raw, path)
    home = Path(relative_to).resolve() if relative_to else path
    try:
        cfg = parse_config(raw)
        if cfg.cost is not None:
            cfg.cost.check(str(_resolve(cfg.cost.catalog, home)) if cfg.cost.catalog else None)
        variants = tuple(expand_series(cfg.defaults, cfg.series))
        check_variants(cfg.scenario, task_kind(cfg.task.kind, entry=bool(cfg.task.entry)), variants,
                       cfg.quality.reference_variant)
    except (ConfigError, VariantError, ScenarioError) as exc:
        raise ProtocolError(f"{refusal_name(path)}: {exc}") from None
    proto = Protocol(home, raw, variants, cfg)
    ref = cfg.quality.reference_variant
    if find_variant(variants, ref) is None:
        names = ", ".join(v.name for v in variants)
        raise ProtocolError(f"{refusal_name(path)}: reference_variant {ref!r} is not a declared variant; use one "
                            f"of: {names}")
    refuse_unsupported(proto, path)
    return proto


def refuse_unsupported(proto: Protocol, path: Path) -> None:
    """One-line ProtocolError for a variant the task cannot run: an ``engine`` the task kind does
    not run on (its ``engines``; a kind run by [task] entry runs the user's own code only), and a
    declared value the task's job always overrides (its ``fixed_padding``: generation's,
    lab.passes.tasks.generation.PADDING_HONOURED). cards > 1 and compile = true run for every kind
    (lab.passes.multicard merges by the kind; lab.passes.compile compiles by the job's own step, a
    custom entry compiles itself)."""
    kind = proto.kind
    for v in proto.variants:
        if kind.runs_on(v.engine):
            continue
        if kind.by_entry and KINDS[kind.name].runs_on(v.engine):
            raise ProtocolError(f"{refusal_name(path)}: variant {v.name} declares engine = \"{v.engine}\", but [task] "
                                f"entry runs every pass with your own code; declare engine = \"{TRANSFORMERS}\" for "
                                f"it, or remove [task] entry to measure {v.engine}")
        runs = ", ".join(k.name for k in KINDS.values() if k.runs_on(v.engine))
        raise ProtocolError(f"{refusal_name(path)}: variant {v.name} declares engine = \"{v.engine}\", which runs "
                            f"{runs + ' tasks' if runs else 'no task kind'} in this lab, not {kind.name}; declare "
                            f"engine = \"{TRANSFORMERS}\" for it" + ("" if runs else f" (or name {v.engine} in the "
                                                                      "kind's engines, lab/kinds/)"))
    if kind.fixed_padding is not None:  # generation: its job pads each batch on the left to its longest prompt
        for v in proto.variants:
            if v.padding != kind.fixed_padding:
                raise ProtocolError(f"{refusal_name(path)}: variant {v.name} declares padding = \"{v.padding}\"; "
                                    f"{kind.article} "
                                    f"task pads each batch on the left to its longest prompt, never to max_length; "
                                    f"declare padding = \"{kind.fixed_padding}\" (the default)")


# ---- lock and versions -------------------------------------------------------------

def lock_path(campaign_file: Path) -> Path:
    return Path(campaign_file).with_suffix(".lock.json")


def read_lock(campaign_file: Path) -> list[dict]:
    """The lock's versions, oldest first ([] when never locked)."""
    p = lock_path(campaign_file)
    return json.loads(p.read_text())["versions"] if p.exists() else []


def refuse_secrets(raw: dict, path: Path) -> None:
    """Raise ProtocolError when the campaign file holds a secret-looking value (a ``token`` key,
    an ``hf_...`` token, a password in a URL, ...): it would be copied into the lock, the campaign
    folder and the archive. Runs on the parsed TOML before the typed sections, so a secret is
    named as such even under an unknown key. The message names the place, never the value."""
    from lab.orchestration.identity import secret_looking

    places = secret_looking(raw)
    if places:
        raise ProtocolError(
            f"{refusal_name(path)}: {', '.join(places)} looks like a secret (token, key or password); remove it "
            "from the campaign file and give it through the environment (e.g. HF_TOKEN), which is never recorded")


def current_version(proto: Protocol, versions: list[dict]) -> tuple[dict | None, dict]:
    """(the lock entry whose identity equals the protocol's as it is now, or None; that identity)."""
    from lab.orchestration.identity import protocol_identity

    ident = protocol_identity(proto)
    return next((v for v in versions if v["sha256"] == ident["sha256"]), None), ident


def lock(proto: Protocol, check: bool = True, replays: dict | None = None,
         question_version: int | None = None) -> dict:
    """Record the protocol's identity as a new version (or return the current one if unchanged).

    The identity (``sha256``, which names the results folder) covers the campaign text, the
    corpus file's sha256 and the model files' sha256 (lab.orchestration.identity), so the same text over
    other content is another version. Returns {"version": n, "sha256", "protocol_sha256",
    "corpus_sha256", "model_sha256", "locked_at": ISO UTC, "protocol"}. With ``check`` (always,
    except to simulate a file locked on another host) the lock-time checks of
    :mod:`lab.orchestration.preflight` run first: corpus, model config and tokenizer, labels, limits, padding
    token, devices and GPU count. Raises ProtocolError (one line) when the corpus is missing, the
    file holds a secret-looking value, or on the first refusal.

    ``replays`` (lab.evidence.replay): the archive this version replays (name, sha256, the protocol version
    it came from, the change made, if any), recorded in the new entry with its ``question_version``.
    """
    refuse_secrets(proto.raw, proto.path)  # load_protocol refused them already; a Protocol built otherwise
    versions = read_lock(proto.path)
    if not proto.corpus_path.is_file():
        raise ProtocolError(f"{refusal_name(proto.path)}: corpus {proto.corpus_path} not found; check [corpus] "
                            "path (a relative path is read from the campaign file's folder) or build the corpus "
                            f"first (`{iteralab_command()} corpus build --source TEXTS.jsonl --out "
                            f"{proto.corpus_path.parent}`)")
    if check:
        from lab.orchestration.preflight import first_refusal, lock_checks

        refused = first_refusal(lock_checks(proto))
        if refused is not None:
            raise ProtocolError(f"{refusal_name(proto.path)}: {refused.detail}")
    found, ident = current_version(proto, versions)
    if found:
        return found
    refuse_past_deadline(proto, datetime.now(timezone.utc))
    entry = {"version": len(versions) + 1, **ident,
             "locked_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
             **({"replays": replays} if replays else {}),
             **({"question_version": question_version} if question_version else {}),
             "protocol": proto.raw}
    versions.append(entry)
    atomic_write_text(lock_path(proto.path), json.dumps({"campaign_file": proto.path.name,  # old lock kept whole
                                                         "versions": versions}, indent=1, default=str) + "\n")
    return entry


def refuse_past_deadline(proto: Protocol, now: datetime) -> None:
    """A new version whose [campaign] deadline is already past can never meet it: ProtocolError.
    (Checked at lock only: an archive compared after its deadline still parses.)"""
    deadline = proto.config.campaign.deadline
    if deadline is None:
        return
    from lab.cost.forfaits import parse_instant

    at = parse_instant(deadline, None, "[campaign] deadline")
    if at <= now:
        raise ProtocolError(f"{refusal_name(proto.path)}: [campaign] deadline {deadline} is already past (now "
                            f"{now.isoformat(timespec='minutes')}); give the date the load must be done by, "
                            "or remove deadline")


def lock_warnings(proto: Protocol, now: datetime | None = None) -> list[str]:
    """Values that lock but are unusual (one line each, for the user to read before running):
    repetitions above config.UNUSUAL_REPETITIONS, threads above this host's CPUs, a batch size
    above variants.UNUSUAL_BATCH_SIZE, a deadline more than a year ahead, compare's
    projection rule that this campaign cannot meet (lab.orchestration.preflight.check_projection_rule),
    a server rate whose pass lasts hours (check_server_rates), and a generation checkpoint's
    decoding settings the lab sets aside (lab.orchestration.preflight.check_generation_config)."""
    import os

    from lab.inputs.variants import UNUSUAL_BATCH_SIZE
    from lab.orchestration.config import UNUSUAL_REPETITIONS
    from lab.orchestration.preflight import check_generation_config, check_projection_rule, check_server_rates

    now = now or datetime.now(timezone.utc)
    t, out = proto.config.timing, []
    if t.repetitions > UNUSUAL_REPETITIONS:
        out.append(f"[timing] repetitions = {t.repetitions}: {t.repetitions * len(proto.variants)} passes; "
                   f"the rotation needs far fewer (default 5); lower it unless this many is meant")
    cpus = os.cpu_count() or 1
    if t.threads > cpus:
        out.append(f"[timing] threads = {t.threads} is more than this host's {cpus} CPUs; passes on a host "
                   "this size run slower than with threads <= CPUs")
    big = sorted({v.batch_size for v in proto.variants if v.batch_size > UNUSUAL_BATCH_SIZE})
    if big:
        out.append(f"batch_size {', '.join(map(str, big))}: above {UNUSUAL_BATCH_SIZE} items per batch, "
                   "unusual; check the value (an out-of-memory pass is a failure row)")
    deadline = proto.config.campaign.deadline
    if deadline is not None:
        from lab.cost.forfaits import parse_instant

        at = parse_instant(deadline, None, "[campaign] deadline")
        if (at - now).days > 366:
            out.append(f"[campaign] deadline {deadline} is more than a year ahead; check the year")
    checks = check_projection_rule(proto) + check_server_rates(proto)
    if proto.kind.generates_text:
        checks.append(check_generation_config(proto.model_ref, proto.config.model.revision, proto.config.task.rule()))
    out += [f"{c.name}: {c.detail.removeprefix('warning: ')}" for c in checks if c.ok is None]
    return out


def changed_task_files(files: dict[str, Path], entry: dict, now: dict[str, str]) -> list[Path]:
    """Of the user's ``files`` ({role: path}, Protocol.task_files), those whose sha256 in ``now``
    ({role: sha256}, lab.orchestration.identity.task_files_sha256) differs from the lock ``entry``'s
    ``task_files_sha256``; every file when the entry predates that map (it kept only their joint
    ``task_sha256``)."""
    locked = entry.get("task_files_sha256")
    if not isinstance(locked, dict):
        return list(files.values())
    return [files[role] for role in sorted(files) if locked.get(role) != now.get(role)] or list(files.values())


def locked_version(proto: Protocol) -> dict:
    """The lock entry matching the file, its corpus and its model files as they are now.

    Raises ProtocolError when never locked, when the file changed since its last lock, or
    when the corpus or model files changed since (lock again: a new version whose results
    are kept apart).
    """
    versions = read_lock(proto.path)
    if not versions:
        raise ProtocolError(
            f"{refusal_name(proto.path)}: protocol not locked; run `{iteralab_command()} protocol lock {proto.path}` "
            "before any pass")
    if not proto.corpus_path.is_file():
        raise ProtocolError(f"{refusal_name(proto.path)}: corpus {proto.corpus_path} not found; "
                            "restore it or fix [corpus] path")
    found, ident = current_version(proto, versions)
    if found:
        return found
    same = [v for v in versions if v.get("protocol_sha256") == ident["protocol_sha256"]]
    nxt = f"run `{iteralab_command()} protocol lock {proto.path}` to make version {len(versions) + 1}"
    if same:
        from lab.orchestration.identity import changed_model_files

        last = same[-1]
        code = changed_task_files(proto.task_files(), last, ident.get("task_files_sha256", {}))
        what = (f"corpus {proto.corpus_path.name}" if last.get("corpus_sha256") != ident["corpus_sha256"]
                else changed_model_files(last, ident.get("model_files_sha256"))
                if last.get("model_sha256") != ident["model_sha256"]
                else f"task code ({', '.join(map(str, code))})")
        raise ProtocolError(f"{refusal_name(proto.path)}: {what} changed since lock (version {last['version']}); "
                            "restore "
                            f"it, or {nxt} (results of versions never mix)")
    raise ProtocolError(
        f"{refusal_name(proto.path)}: edited after lock (version {versions[-1]['version']}), or locked by an older "
        f"IteraGPU Lab; {nxt} (results of versions never mix)")
