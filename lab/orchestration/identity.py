"""A protocol version's identity: the campaign text AND the content it depends on.

Two campaign files with the same text but different corpora (or model files) are different
protocols: their lock hash, and so their results folder, must differ (SPEC 3.1: versions never
mix). Identity = sha256 of {protocol text digest, corpus file sha256, model fingerprint};
a model folder is fingerprinted by its weight/tokenizer/config files' sha256; for a hub model
that folder is the snapshot its pinned revision resolves to in the local cache (what every
load reads), and only a hub model the cache does not hold is named by 'hub:<id>@<revision>'
(protocol lock refuses it: lab.orchestration.preflight check "model").

Also here: secret-looking values, refused at lock so no campaign copy, lock, manifest or
archive ever carries them.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from lab.facts.errors import ProtocolError
from lab.facts.files import sha256_bytes, sha256_file


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=32)
def _sha256_cached(key: tuple) -> str:
    from lab.inputs.corpus import sha256_file

    return sha256_file(key[0])


def content_sha256(path: Path) -> str:
    """sha256 of a file, cached while its size and mtime are unchanged (weights are large)."""
    return _sha256_cached(_file_key(Path(path)))


def model_folder_or_none(model_ref: str, revision: str | None = None) -> Path | None:
    """The folder a model reference loads from (lab.inputs.models.model_folder), None for a hub model
    the local cache does not hold."""
    from lab.inputs.models import ModelFolderError, model_folder

    try:
        return model_folder(model_ref, revision)
    except ModelFolderError:
        return None


def model_file_hashes(folder: Path, cached: bool = True) -> dict[str, str]:
    """{file name: sha256} of the weight/tokenizer/config files the fingerprint covers
    (lab.inputs.models._HASHED) in ``folder``; ``cached`` False hashes every byte again."""
    from lab.inputs.models import _HASHED

    digest = content_sha256 if cached else sha256_file
    return {n: digest(folder / n) for n in _HASHED if (folder / n).is_file()}


def model_fingerprint(model_ref: str, revision: str | None = None) -> str:
    """sha256 over the JSON of {file name: sha256} of a local checkpoint, or of the hub
    snapshot ``model_ref`` at ``revision`` resolves to in the local cache (lab.inputs.models.hub_snapshot);
    over 'hub:<id>@<revision>' when the cache does not hold it. Shape: 64 hex characters."""
    p = model_folder_or_none(model_ref, revision)
    return fingerprint_of(model_file_hashes(p) if p is not None else None, model_ref, revision)


def fingerprint_of(files: dict[str, str] | None, model_ref: str, revision: str | None) -> str:
    """The model fingerprint from its files' sha256 (None: a hub model the cache does not hold)."""
    blob = (json.dumps(files, sort_keys=True) if files is not None
            else f"hub:{model_ref}@{revision or 'unpinned'}")
    return sha256_bytes(blob.encode("utf-8"))


def task_files_sha256(files: dict[str, Path]) -> dict[str, str]:
    """{role: sha256} of the user's files a protocol runs (lab.orchestration.protocol.Protocol.task_files);
    a file that is not there reads 'missing' (the lock check refuses it in one line)."""
    return {role: content_sha256(p) if Path(p).is_file() else "missing" for role, p in sorted(files.items())}


def task_fingerprint(files: dict[str, Path]) -> str | None:
    """sha256 over the JSON of task_files_sha256, None when the protocol runs no user file."""
    if not files:
        return None
    return digests_fingerprint(task_files_sha256(files))


def digests_fingerprint(digests: dict[str, str]) -> str:
    """The lock's ``task_sha256`` from the {role: sha256} of the user's files (task_files_sha256)."""
    return sha256_bytes(json.dumps(digests, sort_keys=True).encode("utf-8"))


def protocol_identity(proto) -> dict:
    """{"sha256": identity, "protocol_sha256", "corpus_sha256", "model_sha256"} of a Protocol
    whose corpus file exists (the caller checks), plus "task_sha256" (task_fingerprint) when it
    runs the user's own code ([task] entry and files, [quality] metric = "file.py:function"),
    with "task_files_sha256" ({role: sha256}, task_files_sha256) beside it: recorded in the lock
    and protocol_version.json so that `archive verify --metric-file` can check one file, but
    not a part of the identity (task_sha256 already covers the files)."""
    parts = {"protocol_sha256": proto.digest(), "corpus_sha256": content_sha256(proto.corpus_path),
             "model_sha256": model_fingerprint(proto.model_ref, proto.config.model.revision)}
    folder = model_folder_or_none(proto.model_ref, proto.config.model.revision)
    model_files = model_file_hashes(folder) if folder is not None else None  # cached: hashed once
    files = task_files_sha256(proto.task_files())
    if files:  # a custom entry or a user metric: its code is part of the protocol
        parts["task_sha256"] = digests_fingerprint(files)
    ident = {"sha256": identity_sha256(parts), **parts}
    if model_files is not None:  # per file, to name the one that changed (model_sha256 covers them)
        ident["model_files_sha256"] = model_files
    return {**ident, "task_files_sha256": files} if files else ident


IDENTITY_PARTS = ("protocol_sha256", "corpus_sha256", "model_sha256", "task_sha256")
"""The lock entry's fields its identity ``sha256`` covers (task_sha256 only when the protocol runs
the user's own code)."""


def identity_sha256(parts: dict) -> str:
    """The lock's identity ``sha256`` (it names the results folder) from ``parts``, {field of
    IDENTITY_PARTS: 64 hex} (a missing task_sha256: no user code)."""
    return sha256_bytes(json.dumps({k: parts[k] for k in IDENTITY_PARTS if k in parts},
                                   sort_keys=True).encode("utf-8"))


def changed_model_files(entry: dict, now: dict[str, str] | None) -> str:
    """"model files" followed by the names whose sha256 in ``now`` ({file name: sha256},
    model_file_hashes) differs from the lock ``entry``'s ``model_files_sha256`` (a file added or
    removed counts); plain "model files" when either map is absent (a lock written before the map,
    or a hub model the cache does not hold)."""
    locked = entry.get("model_files_sha256")
    if not isinstance(locked, dict) or now is None:
        return "model files"
    names = sorted(n for n in set(locked) | set(now) if locked.get(n) != now.get(n))
    return f"model files ({', '.join(names)})" if names else "model files"


# ---- secret-looking values -----------------------------------------------------------

SECRET_KEY_WORDS = {"token", "secret", "password", "passwd", "apikey", "credential", "credentials",
                    "auth", "bearer"}
SECRET_KEY_PAIRS = ("api_key", "api-key", "access_key", "private_key", "secret_key")
SPECIAL_TOKEN_KEYS = {"pad_token", "bos_token", "eos_token", "unk_token", "sep_token", "cls_token", "mask_token"}
SECRET_VALUES = (
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),                   # Hugging Face token
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),            # GitHub token
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}"),                 # API secret key
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),                    # AWS access key id
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),          # Slack token
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\bBearer\s+[A-Za-z0-9._~+/=-]{10,}", re.IGNORECASE),
    re.compile(r"://[^/\s:@]+:[^/\s@]+@"),                  # credentials inside a URL
)


def _secret_key(key: str) -> bool:
    k = key.lower()
    if k in SPECIAL_TOKEN_KEYS:  # a tokenizer's special token, e.g. [model] pad_token = "[PAD]"
        return False
    return bool(set(re.split(r"[_\-.\s]+", k)) & SECRET_KEY_WORDS) or any(p in k for p in SECRET_KEY_PAIRS)


def secret_looking(raw: dict, where: str = "") -> list[str]:
    """Places ('[model] token', '[corpus] path') in a parsed campaign whose key names a secret
    or whose value looks like a token, key or password. Values are never returned."""
    out: list[str] = []
    for key, value in raw.items():
        place = f"{where}.{key}" if where else str(key)
        if isinstance(value, dict):
            out += secret_looking(value, place)
            continue
        values = value if isinstance(value, list) else [value]
        if ((_secret_key(str(key)) and value not in ("", None, False))
                or any(isinstance(v, str) and any(p.search(v) for p in SECRET_VALUES) for v in values)):
            out.append(place)
        else:
            out += [p for v in values if isinstance(v, dict) for p in secret_looking(v, place)]
    return out


# ---- inputs watched while a campaign runs --------------------------------------------

class InputsChanged(ProtocolError):
    """A campaign input (the corpus file or a model file) changed while the campaign ran; one
    line naming the file. The passes that may have read it are never accepted."""


def _stat(path: Path) -> tuple | None:
    """(device, inode, size in bytes, mtime in ns) of ``path`` (links followed), None when gone."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class InputWatch:
    """The inputs a locked protocol version reads, watched while its campaign runs (issue 23):
    the corpus file, every file at the top of the model folder, and the user's code the
    protocol runs (Protocol.task_files: a custom entry, its declared files, a [quality] metric
    function's file; issue 20: a pass of one version never runs another code).

    - at the start: a stat fingerprint of each (device, inode, size, mtime_ns), and the sha256
      of the corpus and of the model's fingerprinted files, which must give the lock's digests;
    - before and after every pass (``stat_change``): the stat fingerprints again, cheap whatever
      the weights' size (a write, a replacement or a removal changes one of them);
    - after the last pass (``hash_change``): every byte hashed again, uncached, and compared
      file by file with the start (a change that restored size and mtime is found there).
    """

    def __init__(self, proto, version: dict):
        self.corpus = Path(proto.corpus_path)
        self.model_ref, self.revision = proto.model_ref, proto.config.model.revision
        self.model_dir = model_folder_or_none(self.model_ref, self.revision)
        self.task_files = {Path(p): role for role, p in proto.task_files().items()}  # path -> role
        self.model_paths: set[Path] = set()  # the model folder's fingerprinted files (set by _hashes)
        files = [self.corpus]
        if self.model_dir is not None:
            files += sorted(p for p in self.model_dir.iterdir() if p.is_file())
        files += [p for p in self.task_files if p not in files]
        self.stats = {p: _stat(p) for p in files}
        self.hashes = self._hashes(cached=True)
        model = fingerprint_of(self._model_hashes(self.hashes), self.model_ref, self.revision)
        if self.hashes.get(self.corpus) != version.get("corpus_sha256"):
            raise InputsChanged(self._line(self.corpus, "its sha256 differs from the lock's", "since lock"))
        if model != version.get("model_sha256"):
            raise InputsChanged(f"{changed_model_files(version, self._model_hashes(self.hashes))} in "
                                f"{self.model_dir or self.model_ref} changed since lock (their sha256 differ from "
                                "the lock's); restore them, or lock a new version")
        now = {role: self.hashes[path] for path, role in self.task_files.items()}
        locked = version.get("task_files_sha256")
        if not isinstance(locked, dict):  # a lock before the per-file map: every file against the joint sha256
            locked = now if digests_fingerprint(now) == version.get("task_sha256") else {}
        changed = next((p for p, role in self.task_files.items() if now[role] != locked.get(role)), None)
        if changed is not None:
            raise InputsChanged(self._line(changed, "its sha256 differs from the lock's", "since lock"))

    def _model_hashes(self, hashes: dict[Path, str]) -> dict[str, str] | None:
        """{file name: sha256} of the model folder's files among ``hashes``; None for a hub id."""
        if self.model_dir is None:
            return None
        return {p.name: h for p, h in hashes.items() if p in self.model_paths}

    def _hashes(self, cached: bool) -> dict[Path, str]:
        out = {self.corpus: content_sha256(self.corpus) if cached else sha256_file(self.corpus)}
        if self.model_dir is not None:
            model = {self.model_dir / n: h for n, h in model_file_hashes(self.model_dir, cached).items()}
            self.model_paths = set(model)
            out.update(model)
        for p in self.task_files:  # a missing file reads 'missing', as in task_files_sha256
            out[p] = (content_sha256(p) if cached else sha256_file(p)) if p.is_file() else "missing"
        return out

    def _line(self, path: Path, what: str, when: str = "while the campaign ran") -> str:
        kind = ("corpus" if path == self.corpus else f"task file ({self.task_files[path]})"
                if path in self.task_files else "model file")
        return (f"{kind} {path} changed {when} ({what}); campaign stopped, and the passes that may have read it "
                "are never accepted: restore the file and run the campaign again (those slots run again), or "
                "lock a new version for the new inputs")

    def stat_change(self) -> str:
        """'' when every watched file has its start stat fingerprint, else one line naming the first
        that changed."""
        for path, before in self.stats.items():
            now = _stat(path)
            if now == before:
                continue
            if now is None:
                return self._line(path, "removed")
            if before is None:
                return self._line(path, "it appeared")
            if now[:2] != before[:2]:
                return self._line(path, "replaced by another file")
            if now[2] != before[2]:
                return self._line(path, f"size {before[2]} -> {now[2]} bytes")
            return self._line(path, "written: its modification time changed")
        return ""

    def hash_change(self) -> str:
        """'' when every hashed file still has its start sha256 (every byte read again), else one
        line naming the first that differs."""
        try:
            now = self._hashes(cached=False)
        except OSError:
            return self.stat_change() or self._line(self.corpus, "unreadable")
        for path, digest in self.hashes.items():
            if now.get(path) != digest:
                return self._line(path, "its sha256 differs from the start's, found by the full hash after the "
                                        "last pass")
        return ""
