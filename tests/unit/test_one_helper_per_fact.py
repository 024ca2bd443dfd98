"""A fact lives once (issue 9, "One helper per fact"): sha256 digests are computed only in
lab/facts/files.py (``sha256_bytes``, ``sha256_file``, ``sha256_lines``, ``HashingReader``) and the
repository root is ``lab.facts.files.REPO_ROOT``, nowhere else in lab/ or tui/.

Outside lab/ and tui/ (not checked): scripts/ find the repository from their own path
before ``lab`` is importable, and scripts/bench_verify.py hashes with bare hashlib on
purpose (it is the baseline the lab's verification is compared with).
"""

from __future__ import annotations

import hashlib
import re

from conftest import REPO

from lab.facts.files import HashingReader, sha256_bytes, sha256_file, sha256_lines

HASH_CALL = re.compile(r"hashlib\.sha256\(|from hashlib import|sha256\(\)\.hexdigest")
# Path(__file__)'s levels up (``.parent`` chain or ``.parents[k]``), or a REPO / REPO_ROOT constant.
ROOT_FROM_FILE = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?(?:(?P<chain>(?:\.parent)+)|\.parents\[(?P<k>\d+)\])"
                            r"|^\s*REPO(_ROOT)?\s*=", re.MULTILINE)
ONLY_PLACE = "lab/facts/files.py"


def sources():
    for path in sorted([*(REPO / "lab").rglob("*.py"), *(REPO / "tui").rglob("*.py")]):
        rel = path.relative_to(REPO).as_posix()
        if rel != ONLY_PLACE:
            yield rel, path.read_text()


def test_sha256_is_computed_only_in_lab_files():
    found = [f"{rel}:{text[:m.start()].count(chr(10)) + 1}" for rel, text in sources()
             for m in HASH_CALL.finditer(text)]
    assert not found, f"sha256 written out (use lab.facts.files helpers): {found}"


def reaches_the_root(rel: str, m: re.Match[str]) -> bool:
    """A constant named REPO, or Path(__file__) walked up to the repository (lab/x.py: one level;
    lab/<layer>/x.py: two); walking up to lab/ itself (its package data) is not the root."""
    if m["chain"] is None and m["k"] is None:
        return True
    levels = m["chain"].count(".parent") if m["chain"] else int(m["k"]) + 1
    return levels >= rel.count("/")


def test_repository_root_is_defined_only_in_lab_files():
    found = [f"{rel}:{text[:m.start()].count(chr(10)) + 1}" for rel, text in sources()
             for m in ROOT_FROM_FILE.finditer(text) if reaches_the_root(rel, m)]
    assert not found, f"repository root derived again (use lab.facts.files.REPO_ROOT): {found}"


def test_the_helpers_agree_with_each_other(tmp_path):
    """The file, line and stream forms give the digest of the same bytes."""
    lines = ["{\"id\": \"a\", \"pred\": \"caf\u00e9\"}\n", "{\"id\": \"b\"}\n"]
    path = tmp_path / "p.jsonl"
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.writelines(lines)
    whole = sha256_bytes("".join(lines).encode("utf-8"))
    assert sha256_lines(lines) == sha256_file(path) == whole
    assert whole == hashlib.sha256(path.read_bytes()).hexdigest()  # the reference, outside lab/
    with open(path, "rb") as fh:
        reader = HashingReader(fh)
        first = reader.read(5)
        rest = reader.read()
    assert first + rest == path.read_bytes() and reader.hexdigest() == whole
