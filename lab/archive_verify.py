"""``archive verify``: re-derive what an evidence archive claims, not only its checksums.

One forward pass over the gzip stream (members are hashed in chunks, so memory stays
bounded whatever the members' sizes; only the small structured members are kept, each
up to ``PARSED_MAX_BYTES``), then the gzip trailer (CRC and length) is read, so an
archive cut short is refused. Checks:

- exactly one top folder, no duplicate member names, no links, devices or '..';
- ``SHA256SUMS`` well formed ("<64 hex>  <path>" per line, UTF-8) and equal to every member;
- the journal's attempts against the raw table: same passes, statuses, items completed and
  metric; a final archive has a finished attempt for every planned slot and none running;
- each row's predictions sha256 against the file, and each ``result.json``'s too;
- each row's metric (and per-bucket metrics) recomputed from the predictions and the gold
  labels the archive carries (``report/gold_labels.jsonl``).

It cannot detect a forger who rewrites every file consistently (predictions, labels,
journal, raw table, checksums): only the archive's own sha256, recorded elsewhere, can.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import sqlite3
import tarfile
import tempfile
import zlib
from pathlib import Path

from lab.archive import ARCHIVE_INFO, JOURNAL, SUMS, ArchiveError, Verification, check_member

RAW_TABLE = "report/raw_table.csv"
GOLD_LABELS = "report/gold_labels.jsonl"
PARSED_MAX_BYTES = 64 * 2**20
CHUNK_BYTES = 1 << 20
SUMS_LINE = re.compile(r"([0-9a-f]{64})  ([^\s*][^\t\r]*)")
RAW_REQUIRED = ("pass_id", "status", "items_completed", "predictions_path", "predictions_sha256",
                "metric_name", "metric")
BUCKETS = ("short", "medium", "long")
DONE = ("ok", "oom", "error", "killed")
TOLERANCE = 1e-6  # metrics are stored rounded to 6 decimals


def _parsed(rel: str) -> bool:
    return (rel in (SUMS, RAW_TABLE, GOLD_LABELS, ARCHIVE_INFO)
            or rel.startswith("passes/") and rel.endswith(("/result.json", "/predictions.jsonl")))


class _Scan:
    """Everything one forward pass over the archive keeps: hashes, small members, the journal."""

    def __init__(self, work: Path):
        self.sha: dict[str, str] = {}
        self.kept: dict[str, bytes] = {}
        self.too_large: list[str] = []
        self.journal: Path | None = None
        self.work = work

    def add(self, rel: str, fh) -> None:
        h = hashlib.sha256()
        keep = _parsed(rel)
        buf = io.BytesIO() if keep else None
        spool = open(self.work / JOURNAL, "wb") if rel == JOURNAL else None
        try:
            for chunk in iter(lambda: fh.read(CHUNK_BYTES), b""):
                h.update(chunk)
                if spool:
                    spool.write(chunk)
                if buf is not None:
                    if buf.tell() + len(chunk) > PARSED_MAX_BYTES:
                        self.too_large.append(rel)
                        buf = None
                    else:
                        buf.write(chunk)
        finally:
            if spool:
                spool.close()
                self.journal = self.work / JOURNAL
        self.sha[rel] = h.hexdigest()
        if buf is not None:
            self.kept[rel] = buf.getvalue()


def _scan(archive: Path, work: Path) -> _Scan:
    scan = _Scan(work)
    tops: set[str] = set()
    try:
        with open(archive, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            with tarfile.open(fileobj=gz, mode="r|") as tar:
                for m in tar:
                    rel = check_member(m, tops)
                    if not m.isfile():
                        continue
                    if rel in scan.sha:
                        raise ArchiveError(f"member {rel!r} appears twice: unpacking keeps the last copy "
                                           "while a check may read the first; refusing the archive")
                    scan.add(rel, tar.extractfile(m))
            while gz.read(CHUNK_BYTES):  # to the gzip trailer: its CRC and length are checked
                pass
    except ArchiveError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"{archive}: not a readable tar.gz, or cut short ({type(exc).__name__}: {exc}); "
                           "download it again (scp) and compare its sha256") from None
    if not tops:
        raise ArchiveError(f"{archive}: an empty archive; give the path of an evidence archive")
    return scan


def _text(scan: _Scan, rel: str) -> str:
    try:
        return scan.kept[rel].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArchiveError(f"{rel}: not UTF-8 (byte {exc.start}); the archive was altered or damaged") from None


def _sums(scan: _Scan) -> dict[str, str]:
    """{path: digest} from SHA256SUMS; ArchiveError on any malformed line."""
    text = _text(scan, SUMS)
    if not text.endswith("\n"):
        raise ArchiveError(f"{SUMS}: does not end with a newline (cut or edited); refusing it")
    listed: dict[str, str] = {}
    for n, line in enumerate(text[:-1].split("\n"), start=1):
        m = SUMS_LINE.fullmatch(line)
        if not m:
            what = ("a blank line" if not line.strip() else "a tab" if "\t" in line
                    else "a '*name' binary marker" if " *" in line[:67] else "not '<64 hex>  <path>'")
            raise ArchiveError(f"{SUMS} line {n}: malformed ({what}); the archive was altered or damaged")
        if m.group(2) in listed:
            raise ArchiveError(f"{SUMS} line {n}: {m.group(2)} listed twice; refusing it")
        listed[m.group(2)] = m.group(1)
    return listed


def _raw_rows(scan: _Scan) -> list[dict]:
    reader = csv.DictReader(io.StringIO(_text(scan, RAW_TABLE), newline=""))
    missing = [c for c in RAW_REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise ArchiveError(f"{RAW_TABLE}: no {', '.join(missing)} column(s); the raw table was altered or "
                           "damaged, so its rows cannot be checked")
    return list(reader)


def _journal(scan: _Scan, problems: list[str]) -> tuple[list[dict], list[dict]] | None:
    if scan.journal is None:
        problems.append(f"{JOURNAL} missing: the journal's attempts cannot be compared with the raw table")
        return None
    try:
        db = sqlite3.connect(f"file:{scan.journal}?mode=ro", uri=True)
        try:
            db.row_factory = sqlite3.Row
            attempts = [dict(r) for r in db.execute(
                "SELECT pass_id, seq, status, items_completed, validation_json FROM attempts ORDER BY seq, attempt")]
            plan = [dict(r) for r in db.execute("SELECT seq FROM plan ORDER BY seq")]
        finally:
            db.close()
    except sqlite3.Error as exc:
        problems.append(f"{JOURNAL}: not a readable campaign journal ({exc}); empty or damaged")
        return None
    return attempts, plan


def _compare_journal(attempts: list[dict], plan: list[dict], rows: list[dict], partial: bool,
                     problems: list[str]) -> None:
    by_row = {r["pass_id"]: r for r in rows}
    by_att = {a["pass_id"]: a for a in attempts}
    for pid in sorted(set(by_att) - set(by_row)):
        problems.append(f"pass {pid}: in the journal but not in the raw table")
    for pid in sorted(set(by_row) - set(by_att)):
        problems.append(f"pass {pid}: in the raw table but not in the journal")
    for pid in sorted(set(by_row) & set(by_att)):
        a, r = by_att[pid], by_row[pid]
        if a["status"] != r["status"]:
            problems.append(f"pass {pid}: status {r['status']!r} in the raw table, {a['status']!r} in the journal")
        if str(a["items_completed"]) != r["items_completed"]:
            problems.append(f"pass {pid}: {r['items_completed']} items completed in the raw table, "
                            f"{a['items_completed']} in the journal")
        val = json.loads(a["validation_json"]) if a["validation_json"] else {}
        if not _same_metric(val.get("metric"), r.get("metric")):
            problems.append(f"pass {pid}: metric {r.get('metric') or 'empty'} in the raw table, "
                            f"{val.get('metric')} in the journal")
    if partial:
        return
    done = {a["seq"] for a in attempts if a["status"] in DONE}
    for a in attempts:
        if a["status"] == "running":
            problems.append(f"pass {a['pass_id']}: still 'running' in the journal of an archive not marked partial")
    missing = [p["seq"] for p in plan if p["seq"] not in done]
    if missing:
        problems.append(f"{len(missing)} planned slot(s) without a finished attempt (first seq {missing[0]}) in an "
                        "archive not marked partial")


def _number(v) -> float | str | None:
    if v in (None, ""):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return str(v)  # not a number: never equal to a recomputed metric


def _same_metric(a, b) -> bool:
    a, b = _number(a), _number(b)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= TOLERANCE
    return a is None and b is None


def _predictions(scan: _Scan, rel: str) -> dict[str, str] | None:
    """{id: pred} of a predictions file; None when a line is not a JSON object with id and
    pred, or an id repeats."""
    out: dict[str, str] = {}
    for line in _text(scan, rel).splitlines():
        try:
            rec = json.loads(line)
            if rec["id"] in out:
                return None
            out[rec["id"]] = rec["pred"]
        except (json.JSONDecodeError, KeyError, TypeError):
            return None
    return out


def _gold(scan: _Scan, problems: list[str]) -> dict[str, tuple[str, str]] | None:
    if GOLD_LABELS not in scan.kept:
        problems.append(f"{GOLD_LABELS} missing: metrics cannot be recomputed from the predictions")
        return None
    gold = {}
    for n, line in enumerate(_text(scan, GOLD_LABELS).splitlines(), start=1):
        try:
            rec = json.loads(line)
            gold[rec["id"]] = (rec["label"], rec.get("bucket", ""))
        except (json.JSONDecodeError, KeyError, TypeError):
            problems.append(f"{GOLD_LABELS} line {n}: not a JSON object with id and label")
            return None
    return gold


def _check_metric(pid: str, row: dict, preds: dict[str, str], gold: dict, problems: list[str]) -> None:
    from lab.validate import METRICS

    claimed = row.get("metric")
    if set(preds) != set(gold):
        if claimed not in (None, ""):
            problems.append(f"pass {pid}: metric {claimed} given, but its predictions do not cover exactly the "
                            "corpus's ids")
        return
    if claimed in (None, "") and not (row.get("ids_match") == "True" and row.get("format_ok") == "True"):
        return  # no metric claimed for predictions the validation refused
    fn = METRICS.get(row.get("metric_name", ""))
    if fn is None:
        if claimed not in (None, ""):
            problems.append(f"pass {pid}: unknown metric name {row.get('metric_name')!r}")
        return
    ids = sorted(gold)
    checks = [("metric", ids)] + [(f"metric_{b}", [i for i in ids if gold[i][1] == b]) for b in BUCKETS]
    for col, sub in checks:
        value = round(fn([gold[i][0] for i in sub], [preds[i] for i in sub]), 6) if sub else None
        if col in row and not _same_metric(value, row[col]):
            problems.append(f"pass {pid}: {col} {row[col] or 'empty'} in the raw table, {value} recomputed "
                            "from its predictions and the gold labels")


def verify_archive(archive: Path) -> Verification:
    """Verify ``archive`` (see the module docstring). Returns a Verification whose
    ``problems`` are one line each (a content problem: the archive is not evidence as it stands).
    Raises ArchiveError (one line) when the file is missing, unreadable, cut short, unsafe,
    or its SHA256SUMS or raw table is malformed."""
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such file; give the path of an evidence archive (.tar.gz)")
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        scan = _scan(archive, Path(work))
        if SUMS not in scan.sha:
            return Verification(0, 0, [f"no {SUMS} in the archive"])
        if SUMS in scan.too_large:
            raise ArchiveError(f"{SUMS}: larger than {PARSED_MAX_BYTES} bytes; not an evidence archive")
        listed = _sums(scan)
        for rel, digest in listed.items():
            if rel not in scan.sha:
                problems.append(f"{rel}: listed in {SUMS} but missing")
            elif scan.sha[rel] != digest:
                problems.append(f"{rel}: sha256 does not match {SUMS}")
        problems += [f"{rel}: not listed in {SUMS}" for rel in scan.sha if rel != SUMS and rel not in listed]
        problems += [f"{rel}: larger than {PARSED_MAX_BYTES} bytes, not re-derived" for rel in scan.too_large]
        info = {}
        if ARCHIVE_INFO in scan.kept:
            try:
                info = json.loads(_text(scan, ARCHIVE_INFO))
            except json.JSONDecodeError:
                problems.append(f"{ARCHIVE_INFO}: not JSON")
        else:
            problems.append(f"{ARCHIVE_INFO} missing: cannot tell whether the archive is final or partial")
        if RAW_TABLE not in scan.kept:
            problems.append(f"{RAW_TABLE} missing")
            return Verification(len(listed), 0, problems)
        rows = _raw_rows(scan)
        journal = _journal(scan, problems)
        if journal is not None:
            _compare_journal(*journal, rows, bool(info.get("partial")), problems)
        gold = _gold(scan, problems)
        for row in rows:
            _check_row(row, scan, gold, problems)
        row_ids = {r["pass_id"] for r in rows}
        folders = {rel.split("/")[1] for rel in scan.sha if rel.startswith("passes/") and rel.count("/") >= 2}
        for pid in sorted(folders - row_ids):
            problems.append(f"pass {pid}: its folder is in the archive but the raw table has no row for it")
    return Verification(len(listed), len(rows), problems)


def _check_row(row: dict, scan: _Scan, gold: dict | None, problems: list[str]) -> None:
    pid, p, digest = row["pass_id"], row.get("predictions_path"), row.get("predictions_sha256")
    result_rel = f"passes/{pid}/result.json"
    if result_rel in scan.kept:
        try:
            result = json.loads(_text(scan, result_rel))
        except json.JSONDecodeError:
            problems.append(f"pass {pid}: result.json is not JSON")
            result = {}
        pred_rel = f"passes/{pid}/{result.get('predictions_path') or 'predictions.jsonl'}"
        if result.get("predictions_sha256") and scan.sha.get(pred_rel) != result["predictions_sha256"]:
            problems.append(f"pass {pid}: predictions sha256 differs from the one its result.json recorded")
    if not p:
        if row.get("metric") not in (None, ""):
            problems.append(f"pass {pid}: a metric without a predictions file")
        return
    if p not in scan.sha:
        problems.append(f"row {pid}: predictions {p} missing from the archive")
        return
    if scan.sha[p] != digest:
        problems.append(f"row {pid}: predictions sha256 differs from the raw table")
    if gold is None or p not in scan.kept:
        return
    preds = _predictions(scan, p)
    if preds is None:
        if row.get("metric") not in (None, ""):
            problems.append(f"pass {pid}: metric {row['metric']} given, but its predictions file is malformed")
        return
    _check_metric(pid, row, preds, gold, problems)
