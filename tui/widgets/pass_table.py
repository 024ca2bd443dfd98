"""PassTable: one line per pass (attempts, then planned slots not yet attempted).

Columns: slot (seq, attempt), repetition, variant, status, progress bar with items,
items/s, elapsed (a running server pass: its TTFT percentiles so far in the status cell, its
achieved request rate as it/s). OOMs and failures are shown in red the moment the journal's oom/error
event arrives (before the pass row is finished), with the items completed. A pass that ran
ok and was validated shows its verdict instead of "ok" (``Attempt.verdict_short``, the
engine's words: "accepted", "rejected: accuracy"), so a pass rejected on quality never reads ok.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist

from lab.passes.records import Attempt
from lab.service.live import FAILED, LiveFailure, LiveFigures, PassStatus, PlannedSlot, served_text, variant_short

COLUMNS = ("slot", "rep", "variant", "status", "progress", "it/s", "elapsed")
FAIL_STYLE = "bold white on red"
PENDING = "pending"  # a planned slot with no attempt yet: a display label, not a PassStatus
STYLES = {PassStatus.OK: "green", PassStatus.RUNNING: "bold yellow", PassStatus.INTERRUPTED: "magenta",
          PENDING: "dim"}
VERDICT_STYLES = {True: "bold green", False: "bold red"}  # a validated pass: accepted / rejected


@dataclass(frozen=True)
class PassRow:
    """One row of the pass table (pass_rows): ``key`` the row's key (the pass id, or
    "slot-<seq>" for a planned slot with no attempt yet), ``failed`` True for a failure (oom,
    error, killed, or one seen live), ``cells`` one per COLUMNS entry (text, or styled Text)."""

    key: str
    failed: bool
    cells: tuple[str | Text, ...]


def _ts(iso: str | None) -> float | None:
    try:
        return datetime.fromisoformat(iso).timestamp() if iso else None
    except ValueError:
        return None


def elapsed_s(attempt: Attempt, now: float) -> float | None:
    """Seconds since start (running) or start to end (finished); None when never started."""
    t0 = _ts(attempt.start_time)
    if t0 is None:
        return None
    t1 = _ts(attempt.end_time) if attempt.status != PassStatus.RUNNING else now
    return max(0.0, (t1 if t1 is not None else now) - t0)


def fmt_elapsed(s: float | None) -> str:
    if s is None:
        return ""
    m, sec = divmod(int(s), 60)
    return f"{m // 60}:{m % 60:02d}:{sec:02d}" if m >= 60 else f"{m}:{sec:02d}"


def progress_bar(done: int, total: int, width: int = 8) -> str:
    """'█████░░░ 12/20' (done/total items)."""
    frac = 0.0 if not total else min(1.0, done / total)
    full = round(frac * width)
    return "█" * full + "░" * (width - full) + f" {done}/{total}"


def pass_rows(attempts: list[Attempt], plan: Sequence[PlannedSlot], live_failures: Mapping[str, LiveFailure],
              now: float, live_served: Mapping[str, LiveFigures] | None = None) -> list[PassRow]:
    """Rows to display (PassRow), in schedule order. The
    status cell: a failure's kind and items done, a validated ok pass's verdict
    (``Attempt.verdict_short``), a running server pass's TTFT percentiles so far
    (``live_served``: {pass_id: its LiveFigures}, lab.service.live.JournalFeed, served_text;
    its it/s cell is then the achieved request rate), else the status word."""
    import json

    rows: list[PassRow] = []
    attempted = {a.seq for a in attempts}
    for a in attempts:
        live = live_failures.get(a.pass_id)
        status = a.status
        done, total = a.items_completed or 0, a.items_total or 0
        failed = status in FAILED or (status == PassStatus.RUNNING and live is not None)
        if failed:
            kind = live.kind if status == PassStatus.RUNNING and live is not None else status
            if live and live.items_done is not None and status == PassStatus.RUNNING:
                done = live.items_done
            st = Text(f"{str(kind).upper()} @{done}", style=FAIL_STYLE)
        elif status == PassStatus.OK and a.validation is not None:
            st = Text(a.verdict_short, style=VERDICT_STYLES[a.validation.corpus_accepted],
                      no_wrap=True, overflow="ellipsis")  # cut with "…" where the table's room ends
        else:
            st = Text(status, style=STYLES.get(status, ""))
        rate = a.items_per_s
        served = (live_served or {}).get(a.pass_id) if status == PassStatus.RUNNING and not failed else None
        if served is not None:
            st = Text(served_text(served), style=STYLES[PassStatus.RUNNING], no_wrap=True, overflow="ellipsis")
            rate = served.achieved_rate or rate
        slot = f"{a.seq}" + (f"a{a.attempt}" if a.attempt > 1 else "")
        rows.append(PassRow(a.pass_id, failed, (
            slot, str(a.repetition), variant_short(a.variant), st,
            progress_bar(done, total), f"{rate:.1f}" if rate else "", fmt_elapsed(elapsed_s(a, now)))))
    for p in plan:
        if p.seq in attempted:
            continue
        v = json.loads(p.variant_json) if isinstance(p.variant_json, str) else None
        rows.append(PassRow(f"slot-{p.seq}", False, (
            str(p.seq), str(p.repetition), variant_short(v), Text(PENDING, style=STYLES[PENDING]),
            "", "", "")))
    rows.sort(key=lambda r: int("".join(ch for ch in str(r.cells[0]).split("a")[0]) or 0))
    return rows


class PassTable(DataTable):
    """DataTable of passes; ``show`` updates cells in place so the cursor stays put.

    ``user_moved`` turns true once the user moves the cursor: until then the log pane
    follows the running pass.
    """

    user_moved = False
    _widths: tuple[int, ...] = ()  # the columns' widths as last given (column_widths)
    _rows: list[PassRow] = []  # the rows as last shown (shown again when the table is resized)

    def action_cursor_up(self) -> None:
        self.user_moved = True
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        self.user_moved = True
        super().action_cursor_down()

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = False

    @staticmethod
    def column_widths(rows: list[PassRow], room: int | None = None) -> tuple[int, ...]:
        """Each column's width in cells: its widest value or its label. Given explicitly to the
        table, so the layout follows the rows only (DataTable's own auto widths are updated on
        idle and could be drawn half-updated). ``room``: the cells the columns may use side by
        side (None: unbounded); when they need more, the status column gives up the excess
        (down to its label's width), its verdicts cut with "…", so the row never scrolls sideways
        for a verdict."""
        from rich.cells import cell_len

        widths = [max([cell_len(c)] + [cell_len(str(r.cells[i])) for r in rows]) for i, c in enumerate(COLUMNS)]
        k = COLUMNS.index("status")
        if room is not None and sum(widths) > room:
            widths[k] = max(cell_len(COLUMNS[k]), widths[k] - (sum(widths) - room))
        return tuple(widths)

    def room(self) -> int | None:
        """Cells the columns' contents may use without scrolling sideways: the table's width less
        the vertical scrollbar and each column's padding; None before the table is laid out."""
        if not self.size.width:
            return None
        return self.size.width - self.styles.scrollbar_size_vertical - 2 * self.cell_padding * len(COLUMNS)

    def on_resize(self) -> None:
        if self._rows:
            self.show(self._rows)

    def show(self, rows: list[PassRow]) -> None:
        self._rows = rows
        keys = [r.key for r in rows]
        current = [k.value for k in self.rows]
        cursor = self.cursor_row
        widths = self.column_widths(rows, self.room())
        if widths != self._widths:
            self.clear(columns=True)
            for c, w in zip(COLUMNS, widths, strict=True):
                self.add_column(c, key=c, width=w)
            self._widths = widths
            current = []
        elif current != keys[:len(current)]:
            self.clear()
            current = []
        for r in rows:
            if r.key in current:
                for col, cell in zip(COLUMNS, r.cells, strict=True):
                    self.update_cell(r.key, col, cell)
            else:
                self.add_row(*r.cells, key=r.key)
        if self.row_count and self.cursor_row != cursor:
            self.move_cursor(row=min(cursor, self.row_count - 1))

    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        try:
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value
        except CellDoesNotExist:
            return None
        return None if key is None or key.startswith("slot-") else key
