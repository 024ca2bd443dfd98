"""The evidence archive: one tar.gz with everything needed to defend or re-run the decision.

Packing takes a consistent, final snapshot: the SQLite journal is copied with SQLite's
backup API (never the main file without its write-ahead log), symbolic links and special
files inside the campaign folder are never followed (each one skipped is listed with its
reason in ``ARCHIVE.json``), and every file is hashed from the same bytes the tar receives.
A campaign that has not finished is refused unless a partial archive is asked for, and a
partial archive says so in ``ARCHIVE.json`` and the decision note.

``verify`` (lab.evidence.verify) re-derives what the archive claims; ``extract`` refuses
members outside the target folder, links, devices and more than one top folder.
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
import tarfile
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from lab.evidence.format import (
    ARCHIVE_FORMAT,
    ARCHIVE_INFO,
    FORMAT_KEY,
    JOURNAL,
    LAB_SOURCES,
    SUMS,
    ArchiveError,
    MemberBounds,
    Verification,
    check_member,
)
from lab.facts.diskfull import DiskFull, is_disk_full
from lab.facts.files import HashingReader, lab_sources_sha256, sha256_bytes

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".tar.partial")  # an archive, or one being packed


def snapshot_journal(src: Path, dst: Path) -> Path:
    """Copy the SQLite journal ``src`` into ``dst`` with SQLite's online backup API.

    The copy holds every committed transaction, write-ahead log included, even while the
    orchestrator or a UI holds a connection (a plain file copy would not). Returns ``dst``.
    Raises ArchiveError when ``src`` is not a readable SQLite database.
    """
    try:
        source = sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=30)
        target = sqlite3.connect(str(dst))
        try:
            source.backup(target)
            target.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
        finally:
            target.close()
            source.close()
    except sqlite3.Error as exc:
        raise ArchiveError(f"{src}: journal cannot be read ({exc}); the campaign folder is damaged") from None
    return dst


def _walk(campaign_dir: Path, include: list[str]) -> tuple[list[str], list[dict]]:
    """(regular files to pack, relative paths sorted; [{path, reason}] skipped), links never followed."""
    files, skipped = [], []

    def wanted(rel: str) -> bool:
        return any(rel.startswith(i) or i.startswith(rel + "/") for i in include)

    for root, dirs, names in os.walk(campaign_dir, followlinks=False):
        for name in sorted(dirs + names):
            p = Path(root) / name
            rel = p.relative_to(campaign_dir).as_posix()
            if not wanted(rel) or name in (JOURNAL + "-wal", JOURNAL + "-shm"):
                continue
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode) and name.endswith(ARCHIVE_SUFFIXES):
                skipped.append({"path": rel, "reason": "an archive: never packed into an archive"})
            elif stat.S_ISLNK(st.st_mode):
                skipped.append({"path": rel, "reason": f"symbolic link (to {os.readlink(p)!r}) not followed"})
            elif stat.S_ISREG(st.st_mode):
                if any(rel.startswith(i) for i in include):
                    files.append(rel)
            elif not stat.S_ISDIR(st.st_mode):
                skipped.append({"path": rel, "reason": "not a regular file (fifo, socket or device)"})
        dirs[:] = [d for d in dirs if wanted((Path(root) / d).relative_to(campaign_dir).as_posix())
                   and not (Path(root) / d).is_symlink()]
    return sorted(files), skipped


def pack(campaign_dir: Path, out_path: Path, include: list[str], partial: str = "",
         extra: dict[str, Path] | None = None, check: Callable[[Path], None] | None = None) -> Path:
    """Pack the files under ``campaign_dir`` whose relative path starts with one of ``include``,
    and ``extra`` ({member path: file outside the folder}, e.g. the corpus of ``archive
    --with-corpus``, named in ``ARCHIVE.json`` ``corpus``), hashed into ``SHA256SUMS`` like the rest.

    Members live under one top folder named after ``out_path``'s stem; ``SHA256SUMS`` lists
    every member, ``ARCHIVE.json`` says how the archive was made (its ``format``,
    lab.evidence.format.ARCHIVE_FORMAT; journal snapshot, links skipped, ``partial``: "" for a final
    archive, else why it is partial). ``check``: called with
    the packed file before it takes ``out_path``'s name (lab.evidence.assemble verifies it there);
    what it raises leaves nothing written. Returns ``out_path``. Raises ArchiveError when the
    journal cannot be read.
    """
    campaign_dir = Path(campaign_dir)
    files, skipped = _walk(campaign_dir, include)
    top = out_path.name.removesuffix(".tar.gz")
    tmp = out_path.with_suffix(".partial")
    info_doc = {FORMAT_KEY: ARCHIVE_FORMAT, "made_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "campaign_dir": campaign_dir.name, "partial": bool(partial), "partial_reason": partial,
                "journal": "snapshot taken with SQLite's backup API (write-ahead log included)",
                "skipped": skipped,
                # which lab wrote the report it packs: archive verify compares prose only with the same
                LAB_SOURCES: lab_sources_sha256()}
    sources = {rel: campaign_dir / rel for rel in files}
    for rel, src in (extra or {}).items():
        sources[rel] = Path(src)
        if rel.startswith("corpus/"):
            info_doc["corpus"] = rel
    try:
        _write_tar(sources, skipped, tmp, top, info_doc)
        if check is not None:
            check(tmp)
        tmp.replace(out_path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # never a half-written archive
        if is_disk_full(exc):
            raise DiskFull(out_path.parent, f"packing {out_path.name}") from None
        raise
    return out_path


def _write_tar(sources: dict[str, Path], skipped: list[dict], tmp: Path, top: str, info_doc: dict) -> None:
    sums: list[str] = []
    with tempfile.TemporaryDirectory() as work, tarfile.open(tmp, "w:gz") as tar:
        for rel, origin in sources.items():
            src = snapshot_journal(origin, Path(work) / JOURNAL) if rel == JOURNAL else origin
            try:
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
            except OSError as exc:  # swapped for a link, or removed, since the walk
                skipped.append({"path": rel, "reason": f"not readable as a regular file ({exc.strerror})"})
                continue
            with os.fdopen(fd, "rb") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode):
                    skipped.append({"path": rel, "reason": "not a regular file"})
                    continue
                info = tarfile.TarInfo(f"{top}/{rel}")
                info.size, info.mtime, info.mode = st.st_size, int(st.st_mtime), 0o644
                reader = HashingReader(fh)  # hashes exactly the bytes handed to the tar writer
                tar.addfile(info, reader)
            sums.append(f"{reader.hexdigest()}  {rel}")
        for name, blob in ((ARCHIVE_INFO, (json.dumps(info_doc, indent=1) + "\n").encode()),):
            sums.append(f"{sha256_bytes(blob)}  {name}")
            _add_bytes(tar, f"{top}/{name}", blob)
        _add_bytes(tar, f"{top}/{SUMS}", ("\n".join(sums) + "\n").encode())


def _add_bytes(tar: tarfile.TarFile, name: str, blob: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(blob), int(datetime.now().timestamp()), 0o644
    tar.addfile(info, io.BytesIO(blob))


def extract(archive: Path, target: Path, only: tuple[str, ...] | None = None) -> Path:
    """Extract safely into ``target``; returns the top folder. ``only``: the paths below the top
    folder to write (None: all). Every member is checked and bounded (MemberBounds) from its
    header before anything is written. Raises ArchiveError."""
    tops: set[str] = set()
    bounds = MemberBounds(archive)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for m in tar:
                rel = check_member(m, tops)
                bounds.check(m, rel)
                if only is None or rel in only:
                    members.append(m)
            tar.extractall(target, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{archive}: not a readable tar.gz ({type(exc).__name__}); download it again") from None
    if not tops:
        raise ArchiveError(f"{archive}: an empty archive; give the path of an evidence archive")
    return Path(target) / min(tops)


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    if f is None:  # not a regular file: callers pass regular files only
        raise ArchiveError(f"{member.name}: not a regular file")
    return f.read()


def verify(archive: Path, metric_file: Path | None = None, allowed_signers: Path | None = None) -> Verification:
    """Check who signed the archive, then re-derive and check everything it claims: the
    Verification of lab.evidence.verify.verify_archive (``metric_file``: the opt-in that re-derives
    a user's own [quality] metric) with its ``signature`` (lab.evidence.signature.check_signature
    against ``allowed_signers``, None: the default location's file when there is one). Raises
    SignatureError (an ArchiveError) for a signature that does not verify, before reading the
    archive's contents; ArchiveError as verify_archive does."""
    from dataclasses import replace

    from lab.evidence.signature import check_signature
    from lab.evidence.verify import verify_archive

    archive = Path(archive)
    signature = check_signature(archive, allowed_signers) if archive.is_file() else None
    v = verify_archive(archive, None if metric_file is None else Path(metric_file))
    return replace(v, signature=signature)
