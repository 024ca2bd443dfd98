"""One raw-table row as the summary and the feasibility rule read it: ``PassRow``, decoded once from a
row of lab.report.raw_table.raw_rows (a dict of Python values, not the CSV's text: the CSV read back
is lab.report.raw_row.RawRow) and read by attribute.

Only the columns lab.report.summary.summarize and lab.report.long_items.campaign_feasibility read
are fields; the others are ignored. A missing column reads as its default (None, or "" for a
text), as the dict's ``.get`` did. Units are the raw table's: seconds, bytes, items, requests per
second, shares 0-1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

Number = int | float
"""A figure as the raw row holds it: an int stays an int and a float a float, so a median or a
value copied into summary.json is written as the row gave it."""


class BucketCoverage(msgspec.Struct, frozen=True):
    """One length bucket's coverage of a pass (lab.passes.records.Validation ``coverage``):
    items of the corpus expected in the bucket and items observed in the predictions."""

    expected: int
    observed: int


class PassRow(msgspec.Struct, frozen=True, kw_only=True):
    """One attempted pass's raw-table row (lab.report.raw_table.COLUMNS, same names and units), the
    columns that the summary (lab.report.summary) and the memory feasibility rule
    (lab.report.long_items) read. ``coverage`` is no column: the pass's validation coverage by
    bucket, added by lab.report.summary.campaign_summary (None: not validated)."""

    variant_id: str
    status: str
    pass_id: str | None = None
    """None only for a row that names no pass (a hand-made row in a test)."""
    variant_label: str | None = None
    variant_name: str | None = None
    series: str | None = None
    batch_size: int | None = None
    precision: str | None = None
    bucketing: bool | None = None
    cards: int | None = None
    cards_observed: int | None = None
    max_length: int | None = None
    request_rate: Number | None = None
    """Declared requests per second of a server variant; None offline."""
    measured_s: Number | None = None
    items_total: int | None = None
    items_completed: int | None = None
    metric: Number | None = None
    corpus_accepted: bool | None = None
    process_peak_rss_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    truncated_short: Number | None = None
    truncated_medium: Number | None = None
    truncated_long: Number | None = None
    output_tokens: int | None = None
    output_tokens_per_s: Number | None = None
    served_achieved_rate: Number | None = None
    served_goodput: Number | None = None
    served_ttft_p99_s: Number | None = None
    served_tpot_p99_s: Number | None = None
    served_e2el_p99_s: Number | None = None
    served_lag_p99_s: Number | None = None
    served_objective_holds: bool | None = None
    """The server pass's figures (lab.report.served_cells.SERVED)."""
    achieved_flop_per_s: Number | None = None
    ceiling_flop_per_s: Number | None = None
    utilization: Number | None = None
    recompiles_measured: int | None = None
    starved: bool | None = None
    starved_reason: str | None = None
    coverage: dict[str, BucketCoverage] | None = None


def pass_rows(rows: Sequence[Mapping]) -> list[PassRow]:
    """The typed rows of ``rows`` (raw_rows' dicts), in order. Raises msgspec.ValidationError
    naming the column when a row lacks ``variant_id`` or ``status`` or holds a value of another type."""
    return msgspec.convert(list(rows), list[PassRow])
