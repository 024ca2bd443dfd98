"""The raw table read back: one typed ``RawRow`` per row of a report/raw_table.csv (an archive's,
or the one ``archive verify`` re-derives from the journal), parsed once, read by attribute.

A field is named after its column (lab.report.raw_table.COLUMNS; tests/unit/test_raw_row.py checks
each one is a column, a ``Count`` exactly when the column is in INT_COLUMNS) and typed by what the
report writes there: ``Count`` an int, ``Flag`` "True" or "False", ``Figure`` any other number,
``Text`` the cell's text. An empty number or flag cell reads as None. A cell that does not read
back as the report writes its kind ("abc", "0.990", "07", "true") keeps its text, a ``str``: it
is never equal to a figure, and a problem line quotes it as the table holds it, so a forged or
damaged cell is named, never read as a number it is not (lab.evidence.rederive). ``cells`` is the
row as the CSV holds it, for the checks that compare every column (lab.evidence.table_checks).
"""

from __future__ import annotations

import csv
import io
import math
import typing
from collections.abc import Callable
from typing import Any

import msgspec

Key = str
"""The pass id ("" when the row has none)."""
Text = str | None
"""A text cell ("" when empty); None when the row has no such cell (a short row, a missing column)."""
Count = int | str | None
"""An integer cell; None when empty; its text when it is not an integer as the report writes one."""
Figure = float | str | None
"""A number cell; None when empty; its text when it is not a number as the report writes one."""
Flag = bool | str | None
"""A "True"/"False" cell; None when empty; its text when it is neither."""


class RawRow(msgspec.Struct, frozen=True, kw_only=True):
    """One raw-table row, the columns that the verify, re-derive and compare code reads by name."""

    pass_id: Key
    variant_id: Text
    status: Text
    start_time: Text
    backend: Text
    cards: Count
    items_total: Count
    items_completed: Count
    items_per_s: Figure
    measured_s: Figure
    metric_name: Text
    metric: Figure
    threshold: Figure
    ids_match: Flag
    format_ok: Flag
    agreement_with_reference: Figure
    agreement_ok: Flag
    corpus_accepted: Flag
    predictions_path: Text
    predictions_sha256: Text
    cells: dict
    """{column: its text} as the CSV holds the row (None: no such cell; the key None: cells beyond
    the header), for the checks that compare every column."""

    def phase_s(self, phase: str) -> Figure:
        """Seconds of ``phase`` (lab.passes.records.PHASES), from its ``<phase>_s`` column."""
        return _figure(self.cells.get(f"{phase}_s"))

    @property
    def accepted(self) -> bool:
        """Marked accepted (``corpus_accepted`` True)."""
        return self.corpus_accepted is True


def _key(cell: str | None) -> Key:
    return cell or ""


def _text(cell: str | None) -> Text:
    return cell


def _count(cell: str | None) -> Count:
    if not cell:
        return None
    try:
        value = int(cell)
    except ValueError:
        return cell
    return value if str(value) == cell else cell


def _figure(cell: str | None) -> Figure:
    if not cell:
        return None
    try:
        value = float(cell)
    except ValueError:
        return cell
    return value if str(value) == cell and not math.isnan(value) else cell


def _flag(cell: str | None) -> Flag:
    return None if not cell else {"True": True, "False": False}.get(cell, cell)


_READERS: dict[object, Callable[[str | None], Any]] = {
    Key: _key, Text: _text, Count: _count, Figure: _figure, Flag: _flag}
FIELDS: dict[str, Callable[[str | None], Any]] = {
    name: _READERS[kind] for name, kind in typing.get_type_hints(RawRow).items() if name != "cells"}
"""{field (its column): the function reading its cell}."""


def raw_row(cells: dict) -> RawRow:
    """The typed row of ``cells`` ({column: text}, as csv.DictReader gives a raw-table row)."""
    return RawRow(**{name: read(cells.get(name)) for name, read in FIELDS.items()}, cells=cells)


def raw_rows_of(cells: list[dict]) -> list[RawRow]:
    """The typed rows of ``cells`` (one dict per row, as csv.DictReader gives them), in order."""
    return [raw_row(c) for c in cells]


def read_raw_table(text: str) -> tuple[list[str], list[RawRow]]:
    """(the header's columns, the typed rows) of a raw table's CSV ``text``; a cell never raises
    (module docstring: an unreadable cell keeps its text)."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = raw_rows_of(list(reader))
    return list(reader.fieldnames or []), rows
