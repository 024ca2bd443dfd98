"""The raw table and the summary re-derived for ``archive verify``, and compared with the
archive's copies field by field.

The archived journal's attempts (with the result and validation each holds) go through the
report's own functions (lab.report.raw_table.raw_rows, lab.report.summary.campaign_summary),
the predictions files named by the archive's members; the rows are rendered as the report
writes its CSV. Then every cell of ``report/raw_table.csv``, every field of
``report/summary.json`` and every cell of ``report/summary.csv`` must equal its re-derived
value (numbers within a relative 1e-9: the CSV and JSON round them), the raw table must hold
one row per attempt, and each ``passes/<id>/result.json`` must equal the journal's record of
that pass. A comparison reads the re-derived figures (``Rederived``), never the CSV's strings.
Every problem is one line naming the pass or the variant and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from collections import Counter
from pathlib import Path

from lab.evidence.format import JOURNAL, Rederived
from lab.evidence.rederive import JournalRead, member_object, member_text
from lab.passes.records import Attempt
from lab.report.raw_row import RawRow, raw_rows_of

RAW_TABLE = "report/raw_table.csv"
SUMMARY_JSON = "report/summary.json"
SUMMARY_CSV = "report/summary.csv"
PROTOCOL_VERSION = "protocol_version.json"
CAMPAIGN = "campaign.toml"
MEMBERS = (RAW_TABLE, SUMMARY_JSON, SUMMARY_CSV, PROTOCOL_VERSION, CAMPAIGN)
"""Members the table re-derivation reads (kept by the verify scan)."""
CHECKED_ELSEWHERE = ("status", "items_completed", "corpus_accepted", "metric", "predictions_sha256")
"""Raw-table columns lab.evidence.rederive already compares with the journal or the files
(one problem line per difference, not two)."""
PROSE = ("notes", "starved_reason", "quality_verdict", "infeasible_reason")
"""Raw-table and summary fields that say in words what the figures show, worded by the lab that
re-derives them. An archive written by another version of the lab's sources (ARCHIVE.json
``lab_sources_sha256``, lab.evidence.format.LAB_SOURCES) in this lab's format is compared on every
other field, and a difference in these is listed (``worded``), not a problem: a lab update that
words a note better must not make evidence of the same format fail. Every figure, status and flag
behind them (items, metric, ``corpus_accepted``, ``accepted_passes``) is still compared."""
REL_TOL = 1e-9
SHOWN = 60  # characters of a value shown in a problem line


def _identity(scan, problems: list[str]) -> tuple[str | None, int | None]:
    """(campaign name from campaign.toml, protocol version from protocol_version.json)."""
    name = version = None
    try:
        name = tomllib.loads(member_text(scan, CAMPAIGN))["campaign"]["name"]
    except (KeyError, TypeError, tomllib.TOMLDecodeError):
        problems.append(f"{CAMPAIGN}: missing or without a [campaign] name; the raw table's campaign column "
                        "is not re-derived")
    doc = member_object(scan, PROTOCOL_VERSION) if PROTOCOL_VERSION in scan.kept else None
    if doc is None or "version" not in doc:
        problems.append(f"{PROTOCOL_VERSION}: missing or without a version; the raw table's protocol_version "
                        "column is not re-derived")
    else:
        version = doc["version"]
    return name, version


def _csv_rows(df) -> list[dict]:
    """The rows of ``df`` as the report's CSV holds them (lab.report.csv_safe.write_csv)."""
    from lab.report.csv_safe import spreadsheet_safe

    buf = io.StringIO()
    spreadsheet_safe(df).to_csv(buf, index=False)
    return list(csv.DictReader(io.StringIO(buf.getvalue(), newline="")))


def rederive_tables(scan, info: dict, attempts: list[Attempt], problems: list[str]) -> Rederived:
    """The raw table and summary rebuilt from the archived journal's ``attempts`` and the pass
    records (see the module docstring); ``info``: ARCHIVE.json (its links skipped)."""
    from lab.report.raw_table import LINKED, NO_PREDICTIONS, raw_rows, raw_table
    from lab.report.summary import campaign_summary

    name, version = _identity(scan, problems)
    linked = {s.get("path") for s in info.get("skipped") or [] if isinstance(s, dict)
              and str(s.get("reason", "")).startswith("symbolic link")}

    def predictions(pass_id: str) -> tuple[str, str, str]:
        rel = f"passes/{pass_id}/predictions.jsonl"
        if rel in scan.sha:
            return rel, scan.sha[rel], ""
        return "", "", LINKED if rel in linked else NO_PREDICTIONS

    rows = raw_rows(attempts, name or "", version or 0, Path("."), predictions)
    summary = campaign_summary(rows, attempts)
    return Rederived(rows=raw_rows_of(_csv_rows(raw_table(rows))),
                     summary=json.loads(json.dumps([s.to_json() for s in summary], default=str)))


def _shown_pair(a, b) -> tuple[str, str]:
    """Two values of a mismatch line, each cut to SHOWN characters around where they first differ
    (two long notes cut at the same prefix would read the same: the difference is what to show)."""
    ta, tb = ("empty" if v in ("", None) else str(v) for v in (a, b))
    if len(ta) <= SHOWN and len(tb) <= SHOWN:
        return ta, tb
    k = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))
    start = max(0, k - 20)

    def cut(t: str) -> str:
        return ("..." if start else "") + t[start:start + SHOWN] + ("..." if len(t) > start + SHOWN else "")

    return cut(ta), cut(tb)


ABSENT = "absent"
"""How a mismatch line shows a key one side does not hold."""


def first_difference(a, b, path: str) -> tuple[str, object, object]:
    """(path, a's value, b's value) of the first place two JSON values differ by :func:`same`,
    descending through objects (keys in sorted order) and lists of one length, so a line names the
    leaf ("generation.stopped_by.stop") rather than two whole objects; a key one side lacks reads
    as ABSENT. ``path``: the name of ``a`` and ``b`` themselves."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b or not same(a[k], b[k]):
                return first_difference(a.get(k, ABSENT), b.get(k, ABSENT), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not same(x, y):
                return first_difference(x, y, f"{path}[{i}]")
    return path, a, b


def same(a, b) -> bool:
    """Equal, numbers within REL_TOL (a CSV cell "0.5" and 0.5 included), lists and objects
    element by element; True is not 1."""
    if isinstance(a, str) and isinstance(b, str) and a == b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return a == b
    return x == y or math.isclose(x, y, rel_tol=REL_TOL, abs_tol=1e-12)


def check_raw_table(rows: list[RawRow], derived: list[RawRow], problems: list[str],
                    worded: list[str] | None = None) -> None:
    """One row per attempt, and every cell (as the CSV holds it) equal to its re-derived value (a
    PROSE cell of an archive from another lab version: its pass named in ``worded`` instead, when
    that is a list)."""
    for pid, n in sorted(Counter(r.pass_id for r in rows).items()):
        if n > 1:
            problems.append(f"pass {pid}: {n} rows in the raw table; it holds one row per attempt")
    columns = list(derived[0].cells) if derived else []
    by_pass = {r.pass_id: r.cells for r in derived}
    if rows and columns and list(rows[0].cells) != columns:
        header = list(rows[0].cells)
        extra = [str(c) if c is not None else "cells beyond the header" for c in header if c not in columns]
        problems.append(f"{RAW_TABLE}: columns differ from the ones the report writes "
                        f"(missing: {', '.join(c for c in columns if c not in header) or 'none'}; extra: "
                        f"{', '.join(extra) or 'none'})")
    seen: set[str | None] = set()
    for row in rows:
        pid, cells = row.pass_id, row.cells
        if pid in seen or pid not in by_pass:
            continue  # a duplicate is named above; a pass the journal lacks by compare_journal
        seen.add(pid)
        for col in columns:
            if col in CHECKED_ELSEWHERE or col not in cells:
                continue
            if not same(cells[col], by_pass[pid][col]):
                if worded is not None and col in PROSE:
                    worded.append(f"pass {pid} {col}")
                    continue
                in_table, in_journal = _shown_pair(cells[col], by_pass[pid][col])
                problems.append(f"pass {pid}: {col} {in_table} in the raw table, "
                                f"{in_journal} re-derived from the journal and the pass records")


def check_summary(scan, derived: list[dict], problems: list[str], worded: list[str] | None = None) -> None:
    """Every field of summary.json and every cell of summary.csv equal to the re-derived summary
    (``worded``: as for check_raw_table)."""
    if SUMMARY_JSON not in scan.kept:
        problems.append(f"{SUMMARY_JSON} missing: the summary a comparison reads cannot be checked")
    else:
        try:
            claimed = json.loads(member_text(scan, SUMMARY_JSON))
        except json.JSONDecodeError:
            claimed = None
        if not (isinstance(claimed, list) and all(isinstance(v, dict) for v in claimed)):
            problems.append(f"{SUMMARY_JSON}: not a JSON list of variant objects")
        else:
            _compare_variants(SUMMARY_JSON, claimed, derived, problems, worded)
    if SUMMARY_CSV in scan.kept:
        from lab.report.summary import VariantSummary, summary_table

        table = summary_table([VariantSummary.from_json(d) for d in derived])
        claimed = list(csv.DictReader(io.StringIO(member_text(scan, SUMMARY_CSV), newline="")))
        _compare_variants(SUMMARY_CSV, claimed, _csv_rows(table), problems, worded)


def _compare_variants(rel: str, claimed: list[dict], derived: list[dict], problems: list[str],
                      worded: list[str] | None = None) -> None:
    ids = [v.get("variant_id") for v in claimed]
    by_id = {v["variant_id"]: v for v in derived}
    for twice, n in Counter(map(str, ids)).items():
        if n > 1:
            problems.append(f"{rel}: variant {twice} appears {n} times; it holds one entry per variant")
    for absent in [i for i in by_id if i not in ids]:
        problems.append(f"{rel}: variant {absent} missing, but the journal has passes of it")
    for v in claimed:
        vid = v.get("variant_id")
        if vid not in by_id:
            problems.append(f"{rel}: variant {vid} has no pass in the journal")
            continue
        d = by_id[vid]
        for key in [*d, *(k for k in v if k not in d)]:
            if key in v and key in d and worded is not None and key in PROSE and not same(v[key], d[key]):
                worded.append(f"variant {vid} {key} ({rel})")
                continue
            if key not in v or key not in d or not same(v[key], d[key]):
                in_file, in_journal = _shown_pair(v.get(key), d.get(key))
                problems.append(f"variant {vid}: {key} {in_file} in {rel}, {in_journal} "
                                "re-derived from the journal and the pass records")


def check_results(scan, attempts: list[Attempt], problems: list[str]) -> None:
    """Each pass's result.json equals the journal's record of it (the result the orchestrator
    read, less its ``launch`` record)."""
    for a in attempts:
        recorded = a.result.to_json() if a.result is not None else {}
        rel = f"passes/{a.pass_id}/result.json"
        if rel not in scan.kept:
            if recorded:
                problems.append(f"pass {a.pass_id}: the journal holds its result but {rel} is not in the archive")
            continue
        result = member_object(scan, rel)
        if result is None:
            continue  # lab.evidence.rederive.check_row names it
        for key in sorted(set(result) | set(recorded)):
            if key not in result or key not in recorded or not same(result[key], recorded[key]):
                where, x, y = first_difference(result.get(key, ABSENT), recorded.get(key, ABSENT), key)
                in_result, in_journal = _shown_pair(x, y)
                problems.append(f"pass {a.pass_id}: result.json {where} {in_result}, "
                                f"{in_journal} in the journal's record of the pass")


def check_tables(scan, info: dict, rows: list[RawRow], journal: JournalRead,
                 problems: list[str], worded: list[str] | None = None) -> Rederived | None:
    """Re-derive the raw table and summary from the archived journal as
    lab.evidence.rederive.read_journal read it (once, for both checks), compare them and the pass
    records with the archive's copies (module docstring); returns the re-derived figures (None
    when they cannot be: an attempt row that is no pass record, already named by read_journal).
    ``worded``: a list for an archive written by another lab version (PROSE)."""
    attempts, _, damaged = journal
    if damaged:
        problems.append(f"{JOURNAL}: its attempts do not give a raw table ({len(damaged)} attempt row(s) not a "
                        "pass record, named above); the raw table and the summary are not re-derived")
        return None
    try:
        rederived = rederive_tables(scan, info, attempts, problems)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # an odd or forged journal: a line
        problems.append(f"{JOURNAL}: its attempts do not give a raw table ({type(exc).__name__}: "
                        f"{str(exc)[:SHOWN]}); the raw table and the summary are not re-derived")
        return None
    check_raw_table(rows, rederived.rows, problems, worded)
    check_summary(scan, rederived.summary, problems, worded)
    check_results(scan, attempts, problems)
    return rederived

