"""``archive verify``: re-derive what an evidence archive claims, not only its checksums.

One forward pass over the gzip stream (members are hashed in chunks, so memory stays
bounded whatever the members' sizes; only the small structured members are kept, each
up to ``PARSED_MAX_BYTES``; members, their sizes and the bytes read are bounded by
``lab.evidence.format.MemberBounds``, checked on each header before its bytes), then the
gzip trailer (CRC and length) is read, so an archive cut short is refused. Checks:

- exactly one top folder, no duplicate member names, no links, devices or '..';
- nothing but zeros after the tar's last member (its end-of-archive blocks and padding), to the
  end of the gzip stream, whatever gzip members it is made of: what ``tar --ignore-zeros`` would
  unpack past the end is never left unchecked;
- then, before anything the archive's members claim, its format (ARCHIVE.json ``format``,
  lab.evidence.format.check_format): an archive of another format than this lab writes, or of
  none, is refused in one line (the format names the layout the checks below expect; it vouches
  for nothing);
- ``SHA256SUMS`` well formed ("<64 hex>  <path>" per line, UTF-8) and equal to every member;
- the journal's attempts against the raw table: same passes, statuses, items completed and
  metric; a final archive has a finished attempt for every planned slot and none running;
- each row's predictions sha256 against the file, and each ``result.json``'s too;
- a multi-card pass's merged predictions (an embedding's vectors too) against its cards'
  predictions, vector shards and records;
- each row's metric (and per-bucket metrics) recomputed from the predictions and the gold
  labels the archive carries (``report/gold_labels.jsonl``); a user's own metric function only
  with ``metric_file`` (the user's opt-in, checked against the lock's sha256, run in a fresh
  process);
- the raw table (one row per attempt, every cell) and the summary (summary.json and summary.csv,
  every field) re-derived from the journal and the pass records, and each ``result.json``
  against the journal's record (lab.evidence.table_checks); the Verification carries the re-derived
  figures, which a comparison reads instead of the archive's CSV;
- every fact two members state (campaign file and lock, the lock re-hashed, protocol_version.json,
  the manifest and the catalog copy, the journal's plan, each pass's spec) against the others
  (lab.evidence.cross_check).

It cannot detect a forger who rewrites every file consistently (predictions, labels,
journal, raw table, lock, checksums): that makes a new archive, which only a signature
(lab.evidence.signature, checked by lab.evidence.archive.verify before this) or the archive's
own sha256, recorded elsewhere, tells from the original.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import re
import shlex
import tarfile
import tempfile
import zlib
from pathlib import Path

from lab.evidence.cross_check import MEMBERS as CROSS_CHECKED
from lab.evidence.cross_check import check_members_agree, pass_spec
from lab.evidence.format import (
    ARCHIVE_INFO,
    JOURNAL,
    LAB_SOURCES,
    SUMS,
    ArchiveError,
    MemberBounds,
    Verification,
    check_format,
    check_member,
)
from lab.evidence.members import CardComparison, CorpusCard, LockedFacts, as_record, parse_record
from lab.evidence.rederive import (
    GOLD_LABELS,
    check_reference_pass,
    check_row,
    compare_journal,
    member_text,
    read_gold,
    read_journal,
)
from lab.evidence.table_checks import CAMPAIGN, MEMBERS, RAW_TABLE, check_tables
from lab.evidence.user_metric import user_metric_ref, user_metric_scores
from lab.facts.constants import AGREEMENT, SERVED_FILE
from lab.facts.files import HashingReader, lab_sources_sha256
from lab.facts.host import iteralab_command
from lab.report.raw_row import RawRow, read_raw_table

PARSED_MAX_BYTES = 64 * 2**20
CHUNK_BYTES = 1 << 17
SUMS_LINE = re.compile(r"([0-9a-f]{64})  ([^\s*][^\t\r]*)")
RAW_REQUIRED = ("pass_id", "status", "items_completed", "predictions_path", "predictions_sha256",
                "metric_name", "metric")


CARD = "corpus_card.json"
"""The corpus card a campaign declared ([corpus] card), archived with it; cross-checked against the
locked corpus and the gold labels (check_corpus_card) unless larger than PARSED_MAX_BYTES (its
per-item hashes grow with the corpus; no figure is derived from it)."""


def _parsed(rel: str) -> bool:
    return (rel in (SUMS, GOLD_LABELS, ARCHIVE_INFO, CARD, *MEMBERS, *CROSS_CHECKED) or pass_spec(rel)
            or (rel.startswith("passes/") and rel.endswith(("/result.json", "/predictions.jsonl", "/vectors.npy",
                                                            f"/{SERVED_FILE}")))
            or (rel.startswith("passes/") and "/cards/card" in rel
                and rel.endswith((".json", ".predictions.jsonl", ".vectors.npy"))))


class _Scan:
    """Everything one forward pass over the archive keeps: hashes, small members, the journal."""

    def __init__(self, work: Path):
        self.sha: dict[str, str] = {}
        self.kept: dict[str, bytes] = {}
        self.too_large: list[str] = []
        self.journal: Path | None = None
        self.work = work
        self.derived: dict = {}  # figures read from kept members once (the reference pass's predictions)

    def add(self, rel: str, fh) -> None:
        reader = HashingReader(fh)
        buf = io.BytesIO() if _parsed(rel) else None
        with contextlib.ExitStack() as stack:
            spool = stack.enter_context(open(self.work / JOURNAL, "wb")) if rel == JOURNAL else None
            for chunk in iter(lambda: reader.read(CHUNK_BYTES), b""):
                if spool:
                    spool.write(chunk)
                if buf is not None:
                    if buf.tell() + len(chunk) > PARSED_MAX_BYTES:
                        self.too_large.append(rel)
                        buf = None
                    else:
                        buf.write(chunk)
        if rel == JOURNAL:
            self.journal = self.work / JOURNAL
        self.sha[rel] = reader.hexdigest()
        if buf is not None:
            self.kept[rel] = buf.getvalue()


class _RecentReads:
    """Read-only file-like over ``fh`` that counts the bytes handed out (``pos``) and keeps the
    last three reads, so the bytes a reader took past a point but never used (tarfile's stream
    read-ahead, at most one ``bufsize`` read) can still be checked."""

    def __init__(self, fh):
        self.fh, self.pos = fh, 0
        self.recent: list[bytes] = []

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(n)
        self.pos += len(data)
        self.recent = [*self.recent[-2:], data]
        return data

    def since(self, offset: int) -> bytes:
        """The bytes handed out from ``offset`` on (ValueError when no longer kept)."""
        kept = b"".join(self.recent)
        if self.pos - offset > len(kept):
            raise ValueError(f"bytes from {offset} are no longer kept")
        return kept[len(kept) - (self.pos - offset):] if self.pos > offset else b""


def _not_padding(archive: Path, at: int) -> ArchiveError:
    return ArchiveError(f"{archive}: bytes other than zeros after the end of the tar (from byte {at:,} of "
                        "the unpacked stream): `tar --ignore-zeros` would unpack what verify never checked; "
                        "refusing the archive")


def _scan(archive: Path, work: Path) -> _Scan:
    scan = _Scan(work)
    tops: set[str] = set()
    bounds = MemberBounds(archive)
    try:
        with open(archive, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            stream = _RecentReads(gz)
            with tarfile.open(fileobj=stream, mode="r|", bufsize=CHUNK_BYTES) as tar:  # type: ignore[call-overload]
                for m in tar:
                    rel = check_member(m, tops)
                    bounds.check(m, rel)
                    tar.members.clear()  # streamed: keep no TarInfo per member
                    if not m.isfile():
                        continue
                    if rel in scan.sha:
                        raise ArchiveError(f"member {rel!r} appears twice: unpacking keeps the last copy "
                                           "while a check may read the first; refusing the archive")
                    scan.add(rel, tar.extractfile(m))
                end = tar.offset  # the block that ended the tar: its end-of-archive blocks, or not a header
            # everything after the last member is zeros (tar pads with them); the part tarfile read
            # ahead, then the rest of the gzip stream, to its trailer (CRC and length checked)
            ahead = stream.since(end)
            if ahead.strip(b"\0"):
                raise _not_padding(archive, end + len(ahead) - len(ahead.lstrip(b"\0")))
            trailer = len(ahead)
            bounds.check_trailer(trailer)
            while chunk := gz.read(CHUNK_BYTES):
                trailer += len(chunk)
                bounds.check_trailer(trailer)
                if chunk.strip(b"\0"):
                    raise _not_padding(archive, end + trailer - len(chunk.lstrip(b"\0")))
    except ArchiveError:
        raise
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise ArchiveError(f"{archive}: not a readable tar.gz, or cut short ({type(exc).__name__}: {exc}); "
                           "download it again (scp) and compare its sha256") from None
    if not tops:
        raise ArchiveError(f"{archive}: an empty archive; give the path of an evidence archive")
    return scan


def _sums(scan: _Scan) -> dict[str, str]:
    """{path: digest} from SHA256SUMS; ArchiveError on any malformed line."""
    text = member_text(scan, SUMS)
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


def _raw_rows(scan: _Scan) -> list[RawRow]:
    """The archive's raw table, typed (lab.report.raw_row: a cell that does not read as its kind keeps
    its text, so the checks name it); ArchiveError when a column every check needs is missing."""
    columns, rows = read_raw_table(member_text(scan, RAW_TABLE))
    missing = [c for c in RAW_REQUIRED if c not in columns]
    if missing:
        raise ArchiveError(f"{RAW_TABLE}: no {', '.join(missing)} column(s); the raw table was altered or "
                           "damaged, so its rows cannot be checked")
    return rows


def _locked_threshold(scan: _Scan, problems: list[str]) -> tuple[float | None, bool]:
    """([quality] threshold, higher is better) of the archived campaign file (threshold None,
    with a problem, when unreadable; direction "lower" only for a user's own metric)."""
    import tomllib

    try:
        quality = tomllib.loads(member_text(scan, CAMPAIGN).removeprefix("\ufeff"))["quality"]
        return float(quality["threshold"]), quality.get("direction") in (None, "higher")
    except (KeyError, TypeError, ValueError, tomllib.TOMLDecodeError):
        problems.append(f"{CAMPAIGN}: missing or without a [quality] threshold; acceptance not re-derived")
        return None, True


def _locked_reference(scan: _Scan) -> str | None:
    """The archived campaign file's [quality] reference_variant (None when unreadable: the
    threshold's problem line already says the campaign file is)."""
    import tomllib

    try:
        ref = tomllib.loads(member_text(scan, CAMPAIGN).removeprefix("\ufeff"))["quality"]["reference_variant"]
    except (KeyError, TypeError, tomllib.TOMLDecodeError):
        return None
    return ref if isinstance(ref, str) else None


def _check_bundled_corpus(scan: _Scan, rel: str, problems: list[str]) -> None:
    """The corpus of an archive packed ``--with-corpus`` (ARCHIVE.json ``corpus``) is there and
    is the locked one (protocol_version.json ``corpus_sha256``); its SHA256SUMS line is checked
    like every other member's."""
    from lab.evidence.table_checks import PROTOCOL_VERSION

    if rel not in scan.sha:
        problems.append(f"{ARCHIVE_INFO} names the corpus {rel}, which the archive lacks")
        return
    try:
        version = parse_record(member_text(scan, PROTOCOL_VERSION), LockedFacts)
    except (KeyError, ValueError):
        version = None
    if version is None:
        problems.append(f"{rel}: no locked corpus sha256 to check it against ({PROTOCOL_VERSION} unreadable)")
        return
    locked = version.corpus_sha256
    if scan.sha[rel] != locked:
        problems.append(f"{rel}: sha256 {scan.sha[rel]} is not the locked corpus sha256 {locked}")


def check_corpus_card(scan: _Scan, gold: dict | None, problems: list[str]) -> None:
    """The archived corpus card (when the campaign declared one) against what it describes: the
    locked corpus (protocol_version.json ``corpus_sha256`` is the card's ``comparison.sha256``),
    and the gold labels (``report/gold_labels.jsonl``: its items per bucket and class are the
    card's ``counts``, lab.inputs.corpus.counts_by_bucket_class; labelled or not as the card's
    ``labels`` says). A card or gold labels edited apart from the other fail here."""
    from lab.evidence.table_checks import PROTOCOL_VERSION
    from lab.inputs.corpus import counts_by_bucket_class

    if CARD not in scan.kept:
        return
    card = parse_record(member_text(scan, CARD), CorpusCard)
    comparison = as_record(card.comparison, CardComparison) if card is not None else None
    if comparison is None:
        problems.append(f"{CARD}: not a corpus card (no comparison object)")
        return
    version = parse_record(member_text(scan, PROTOCOL_VERSION), LockedFacts) if PROTOCOL_VERSION in scan.kept else None
    locked = version.corpus_sha256 if version is not None else None
    if locked and comparison.sha256 != locked:
        problems.append(f"{CARD}: describes the corpus file sha256 {str(comparison.sha256)[:12]}..., not the "
                        f"locked corpus {str(locked)[:12]}...")
    if gold is None:
        return
    counts = counts_by_bucket_class([{"label": label, "bucket": bucket} for label, bucket in gold.values()])
    claimed = comparison.counts
    if isinstance(claimed, dict) and {b: c for b, c in counts.items() if c} != {b: c for b, c in claimed.items() if c}:
        problems.append(f"{GOLD_LABELS}: its items per bucket and class differ from {CARD}'s counts (the labels "
                        "or buckets of the corpus were edited)")
    with_labels = any(label is not None for label, _ in gold.values())
    if isinstance(comparison.labels, bool) and comparison.labels != with_labels:
        problems.append(f"{GOLD_LABELS}: {'has' if with_labels else 'has no'} labels, while {CARD} says the corpus "
                        f"{'has none' if with_labels else 'is labelled'}")


def verify_archive(archive: Path, metric_file: Path | None = None) -> Verification:
    """Verify ``archive`` (see the module docstring). Returns a Verification whose
    ``problems`` are one line each (a content problem: the archive is not evidence as it stands).
    Raises ArchiveError (one line) when the file is missing, unreadable, cut short, unsafe,
    or its SHA256SUMS or raw table is malformed; ArchiveFormatError (an ArchiveError) when it is
    not of this lab's format (lab.evidence.format.check_format), before any other content check.

    ``metric_file``: the user's opt-in to re-derive a ``[quality] metric = "file.py:function"``:
    a local copy of that file, run (in a fresh process) only once its sha256 is the lock's;
    MetricFileRefused (an ArchiveError) otherwise (lab.evidence.user_metric.user_metric_ref).
    Without it, such a metric is one problem line per pass saying how to opt in."""
    if archive.is_dir():
        raise ArchiveError(f"{archive}: a folder, not an archive; give the path of an evidence archive (.tar.gz), "
                           f"or pack the campaign folder with "
                           f"`{iteralab_command()} archive {shlex.quote(str(archive))}`")
    if not archive.is_file():
        raise ArchiveError(f"{archive}: no such file; give the path of an evidence archive (.tar.gz)")
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as work:
        scan = _scan(archive, Path(work))
        info = check_format(archive.name, scan.kept.get(ARCHIVE_INFO))
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
        problems += [f"{rel}: larger than {PARSED_MAX_BYTES} bytes, not re-derived" for rel in scan.too_large
                     if rel != CARD]
        partial = str(info.get("partial_reason") or "unfinished campaign") if info.get("partial") else ""
        bundled = info.get("corpus")
        if bundled:
            _check_bundled_corpus(scan, str(bundled), problems)
        if RAW_TABLE not in scan.kept:
            problems.append(f"{RAW_TABLE} missing")
            return Verification(len(listed), 0, problems)
        rows = _raw_rows(scan)
        journal = read_journal(scan, problems)
        if journal is not None:
            compare_journal(*journal, rows, bool(partial), problems)
        check_members_agree(scan, journal, problems)
        gold = read_gold(scan, problems)
        check_corpus_card(scan, gold, problems)
        threshold, higher = _locked_threshold(scan, problems)
        scores = user_metric_scores(scan, rows, gold, user_metric_ref(scan, metric_file), problems)
        refs = None if journal is None else {a.pass_id: a.validation for a in journal[0] if a.validation is not None}
        if journal is not None and any(r.metric_name == AGREEMENT or r.agreement_ok is not None for r in rows):
            check_reference_pass(journal[0], rows, _locked_reference(scan), problems)
        opted_out: dict[str, list[str]] = {}
        for row in rows:
            check_row(row, scan, gold, threshold, problems, scores, higher, opted_out, refs)
        not_rederived = [f"metric {name} is your own function: not re-derived for {len(pids)} pass(es), nor "
                         "their acceptance (archive verify runs no code from an archive); give a local copy of "
                         "that file with --metric-file FILE (its sha256 is checked against the lock's, then it "
                         "runs in a fresh process)" for name, pids in sorted(opted_out.items())]
        written_by, here = info.get(LAB_SOURCES), lab_sources_sha256()
        if not isinstance(written_by, str):
            problems.append(f"{ARCHIVE_INFO}: no {LAB_SOURCES} (the sources of the lab that wrote the archive); "
                            "its prose is compared as this lab words it")
            written_by = here
        worded: list[str] | None = None if written_by == here else []
        rederived = check_tables(scan, info, rows, journal, problems, worded) if journal is not None else None
        lab_apart = [] if worded is None else [lab_apart_line(written_by, here, worded)]
        row_ids = {r.pass_id for r in rows}
        folders = {rel.split("/")[1] for rel in scan.sha if rel.startswith("passes/") and rel.count("/") >= 2}
        for pid in sorted(folders - row_ids):
            problems.append(f"pass {pid}: its folder is in the archive but the raw table has no row for it")
    return Verification(len(listed), len(rows), problems, rederived, not_rederived, lab_apart, partial=partial)


def lab_apart_line(written_by: str, here: str, worded: list[str]) -> str:
    """One line: the lab sources that wrote the archive (ARCHIVE.json ``lab_sources_sha256``) and
    this lab's, and the prose fields worded differently (lab.evidence.table_checks.PROSE), not compared."""
    who = f"lab sources {written_by[:12]}"
    shown = "; ".join(worded[:4]) + (f"; and {len(worded) - 4} more" if len(worded) > 4 else "")
    return (f"written by {who}, re-derived by this lab ({here[:12]}): every figure, status and flag is compared; "
            + (f"prose worded differently, not compared: {shown}" if worded
               else "its notes and verdicts read the same"))
