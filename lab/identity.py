"""A protocol version's identity: the campaign text AND the content it depends on.

Two campaign files with the same text but different corpora (or model files) are different
protocols: their lock hash, and so their results folder, must differ (SPEC 3.1: versions never
mix). Identity = sha256 of {protocol text digest, corpus file sha256, model fingerprint};
a model folder is fingerprinted by its weight/tokenizer/config files' sha256; for a hub model
that folder is the snapshot its pinned revision resolves to in the local cache (what every
load reads), and only a hub model the cache does not hold is named by 'hub:<id>@<revision>'
(protocol lock refuses it: lab.preflight check "model").

Also here: secret-looking values, refused at lock so no campaign copy, lock, manifest or
archive ever carries them.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

from lab.files import sha256_bytes


def _file_key(path: Path) -> tuple:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=32)
def _sha256_cached(key: tuple) -> str:
    from lab.corpus import sha256_file

    return sha256_file(key[0])


def content_sha256(path: Path) -> str:
    """sha256 of a file, cached while its size and mtime are unchanged (weights are large)."""
    return _sha256_cached(_file_key(Path(path)))


def model_fingerprint(model_ref: str, revision: str | None = None) -> str:
    """sha256 over the JSON of {file name: sha256} of a local checkpoint, or of the hub
    snapshot ``model_ref`` at ``revision`` resolves to in the local cache (lab.models.hub_snapshot);
    over 'hub:<id>@<revision>' when the cache does not hold it. Shape: 64 hex characters."""
    from lab.models import _HASHED, ModelFolderError, model_folder

    try:
        p: Path | None = model_folder(model_ref, revision)
    except ModelFolderError:
        p = None
    if p is not None:
        files = {n: content_sha256(p / n) for n in _HASHED if (p / n).is_file()}
        blob = json.dumps(files, sort_keys=True)
    else:
        blob = f"hub:{model_ref}@{revision or 'unpinned'}"
    return sha256_bytes(blob.encode("utf-8"))


def protocol_identity(proto) -> dict:
    """{"sha256": identity, "protocol_sha256", "corpus_sha256", "model_sha256"} of a Protocol
    whose corpus file exists (the caller checks)."""
    parts = {"protocol_sha256": proto.digest(), "corpus_sha256": content_sha256(proto.corpus_path),
             "model_sha256": model_fingerprint(proto.model_ref, proto.config.model.revision)}
    return {"sha256": sha256_bytes(json.dumps(parts, sort_keys=True).encode("utf-8")), **parts}


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
