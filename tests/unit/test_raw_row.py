"""The raw table read back typed (lab.report.raw_row): each field is a column the report writes,
the report's own cells read back as their kind, and a cell that does not keeps its text, so that
verify names a forged cell as the table holds it."""

from __future__ import annotations

import typing

import pytest
from test_raw_table_pinned import PINNED

from lab.passes.records import PHASES
from lab.report.raw_row import FIELDS, Count, Key, RawRow, Text, raw_row, read_raw_table
from lab.report.raw_table import COLUMNS, INT_COLUMNS


def test_every_field_is_a_raw_table_column_and_a_count_exactly_when_the_column_is_one():
    hints = typing.get_type_hints(RawRow)
    assert set(FIELDS) == set(hints) - {"cells"}
    assert [f for f in FIELDS if f not in COLUMNS] == []
    assert {f for f in FIELDS if hints[f] == Count} == {f for f in FIELDS if f in INT_COLUMNS}
    assert [p for p in PHASES if f"{p}_s" not in COLUMNS] == []  # RawRow.phase_s reads <phase>_s


def test_the_reports_own_cells_read_back_as_their_kind():
    hints = typing.get_type_hints(RawRow)
    columns, rows = read_raw_table(PINNED.read_text(encoding="utf-8"))
    assert columns == list(COLUMNS) and len(rows) == 8
    for r in rows:
        for f in FIELDS:
            value, cell = getattr(r, f), r.cells[f]
            if hints[f] not in (Key, Text):
                assert not isinstance(value, str), (r.pass_id, f, cell)  # typed, never the text
            assert ("" if value is None else str(value)) == cell, (r.pass_id, f)  # quoted as written
    ok = rows[0]
    assert (ok.items_completed, ok.corpus_accepted, ok.metric, ok.phase_s("measured")) == (40, True, 0.86, 4.0)
    assert rows[-1].metric is None and rows[-1].corpus_accepted is None  # empty cells


@pytest.mark.parametrize(("field", "cell", "value"), [
    ("metric", "0.5", 0.5), ("metric", "", None), ("metric", "abc", "abc"), ("metric", "0.50", "0.50"),
    ("metric", "1", "1"), ("metric", "nan", "nan"), ("items_completed", "7", 7), ("items_completed", "07", "07"),
    ("items_completed", "7.0", "7.0"), ("corpus_accepted", "True", True), ("corpus_accepted", "False", False),
    ("corpus_accepted", "true", "true"), ("corpus_accepted", "", None), ("status", "", ""), ("status", None, None),
])
def test_a_cell_that_does_not_read_back_as_its_kind_keeps_its_text(field, cell, value):
    row = raw_row({field: cell})
    assert getattr(row, field) == value and type(getattr(row, field)) is type(value)
