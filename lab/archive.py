"""The evidence archive: one tar.gz with everything needed to defend or re-run the decision.

``SHA256SUMS`` lists every file; ``verify`` re-checks it and that each raw-table row's
predictions file matches its recorded sha256; extraction refuses members outside the target
folder (absolute paths, ``..``, links).
"""

from __future__ import annotations

import csv
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from lab.diskfull import DiskFull, is_disk_full
from lab.files import sha256_bytes


class ArchiveError(ValueError):
    """A corrupt or unsafe archive; one line naming the member and the problem."""


_sha = sha256_bytes


def pack(campaign_dir: Path, out_path: Path, include: list[str]) -> Path:
    """Pack the files under ``campaign_dir`` whose relative path starts with one of ``include``.

    Members live under a top folder named after ``out_path``'s stem. Returns ``out_path``.
    """
    campaign_dir = Path(campaign_dir)
    files = sorted(p for p in campaign_dir.rglob("*") if p.is_file()
                   and any(str(p.relative_to(campaign_dir)).startswith(i) for i in include)
                   and p.name not in ("journal.sqlite-wal", "journal.sqlite-shm"))
    top = out_path.name.removesuffix(".tar.gz")
    sums = []
    tmp = out_path.with_suffix(".partial")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            for p in files:
                rel = str(p.relative_to(campaign_dir))
                sums.append(f"{_sha(p.read_bytes())}  {rel}")
                tar.add(p, arcname=f"{top}/{rel}", recursive=False)
            blob = ("\n".join(sums) + "\n").encode()
            info = tarfile.TarInfo(f"{top}/SHA256SUMS")
            info.size = len(blob)
            tar.addfile(info, io.BytesIO(blob))
        tmp.replace(out_path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)  # never a half-written archive
        if is_disk_full(exc):
            raise DiskFull(out_path.parent, f"packing {out_path.name}") from None
        raise
    return out_path


def _safe_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith("/") or ".." in parts:
            raise ArchiveError(f"unsafe member {m.name!r}: path outside the target folder; refusing to extract")
        if m.issym() or m.islnk() or m.isdev():
            raise ArchiveError(f"unsafe member {m.name!r}: links and devices are refused")
    return members


def extract(archive: Path, target: Path) -> Path:
    """Extract safely into ``target``; returns the top folder. Raises ArchiveError."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _safe_members(tar)
            tar.extractall(target, members=members, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise ArchiveError(f"{archive}: not a readable tar.gz ({type(exc).__name__}); download it again") from None
    tops = {Path(m.name).parts[0] for m in members}
    return Path(target) / sorted(tops)[0]


@dataclass(frozen=True)
class Verification:
    files_checked: int
    rows_checked: int
    problems: list

    @property
    def ok(self) -> bool:
        return not self.problems


def _read_all(archive: Path) -> dict[str, bytes]:
    """{path below the top folder: bytes}. Raises ArchiveError on a missing, truncated or
    non-gzip file, or an unsafe member."""
    if not Path(archive).is_file():
        raise ArchiveError(f"{archive}: no such file; give the path of an evidence archive (.tar.gz)")
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = _safe_members(tar)
            return {"/".join(Path(m.name).parts[1:]): _member_bytes(tar, m)
                    for m in members if m.isfile()}
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise ArchiveError(f"{archive}: not a readable tar.gz ({type(exc).__name__}: {exc}); "
                           "download it again (scp) and compare its sha256") from None


def _member_bytes(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    f = tar.extractfile(member)
    if f is None:  # not a regular file: callers pass regular files only
        raise ArchiveError(f"{member.name}: not a regular file")
    return f.read()


def verify(archive: Path) -> Verification:
    """Re-check SHA256SUMS, every raw-table row's predictions sha256, and that every pass
    folder in the archive has its row. Raises ArchiveError when the file cannot be read."""
    problems: list[str] = []
    data = _read_all(archive)
    if "SHA256SUMS" not in data:
        return Verification(0, 0, ["no SHA256SUMS in the archive"])
    listed = {}
    for line in data["SHA256SUMS"].decode().splitlines():
        digest, rel = line.split("  ", 1)
        listed[rel] = digest
        if rel not in data:
            problems.append(f"{rel}: listed in SHA256SUMS but missing")
        elif _sha(data[rel]) != digest:
            problems.append(f"{rel}: sha256 does not match SHA256SUMS")
    for rel in data:
        if rel != "SHA256SUMS" and rel not in listed:
            problems.append(f"{rel}: not listed in SHA256SUMS")
    rows = 0
    if "report/raw_table.csv" in data:
        row_ids = set()
        for row in csv.DictReader(io.StringIO(data["report/raw_table.csv"].decode())):
            rows += 1
            row_ids.add(row["pass_id"])
            p, row_digest = row.get("predictions_path"), row.get("predictions_sha256")
            if p:
                if p not in data:
                    problems.append(f"row {row['pass_id']}: predictions {p} missing from the archive")
                elif _sha(data[p]) != row_digest:
                    problems.append(f"row {row['pass_id']}: predictions sha256 differs from the raw table")
        folders = {rel.split("/")[1] for rel in data if rel.startswith("passes/") and rel.count("/") >= 2}
        for pid in sorted(folders - row_ids):
            problems.append(f"pass {pid}: its folder is in the archive but the raw table has no row for it")
    else:
        problems.append("report/raw_table.csv missing")
    return Verification(len(listed), rows, problems)
