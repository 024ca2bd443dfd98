"""report.html of a comparison of rentals, built from the campaign report's parts
(``lab.report.html``: the page, the figures, the Markdown and the tables), so that
``lab.compare`` imports ``lab.report`` and never the other way round."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from lab.report.caveats import chart_legend, chart_mark
from lab.report.html import bars_figure, durations_figure, markdown_html, page, table_html

if TYPE_CHECKING:
    import pandas as pd

    from lab.compare.decision import Comparison


def comparison_report(c: Comparison, md: str, table: pd.DataFrame) -> str:
    """report.html of a comparison: decision first (``md``: its decision.md), durations per
    host x variant, throughput per host, cost per million items per host and package,
    projected vs package hours, the raw rows (``table``: its compare.csv). Every chart label carries
    its configuration's caveat marks and every caption their legend (lab.report.caveats)."""
    ps = list(c.projections)
    labels = [f"{chart_mark(p.host, p.basis)}\n{p.label}" for p in ps]  # 'B b200 (CPU)*\nbatch 8'
    note = chart_legend([p.basis for p in ps])
    head, _, rest = md.partition("## What would change the decision")
    cls = "decision" if c.decided else "decision none"
    currency = next((p.sizing.quote.currency for p in ps if p.sizing), "")
    title, _, head = head.partition("\n")  # decision.md's title line carries the banners
    banner = title.removeprefix("# Comparison of rentals").removeprefix(": ")
    sections = ["<h1>Comparison of rentals</h1>",
                f'<p class="banner">{html.escape(banner)}</p>' if banner else "",
                f'<div class="{cls}">' + markdown_html(head)
                + markdown_html("## What would change the decision" + rest.split("## Declared")[0])
                + "</div>",
                *(_projection_charts(c, ps, labels, note, currency) if ps else
                  ["<p>No offline configuration projected: no --load was given (server archives: the serving "
                   "decision above).</p>"]),
                "<h2>Details</h2>", markdown_html("## Declared" + md.split("## Declared", 1)[1]),
                "<h2>Raw table (one row per archive x variant)</h2>", table_html(table)]
    return page("Comparison of rentals", sections)


def _projection_charts(c: Comparison, ps: list, labels: list[str], note: str, currency: str) -> list[str]:
    """report.html's charts of the projected offline configurations ``ps`` (their chart ``labels``,
    the caveat legend ``note``, the decision's ``currency``): durations, throughput, cost per million
    items at the load, projected against package hours."""
    return [
        "<h2>Durations per host and variant</h2>",
        durations_figure([(lbl, list(p.durations_s), p.failures, list(p.failure_kinds))
                          for lbl, p in zip(labels, ps, strict=True)],
                         "Measured window per pass on the comparison corpus, median marked", note),
        "<h2>Throughput per host</h2>",
        bars_figure(labels, [p.items_per_s_median for p in ps], "items/s",
                    "Median pass items/s (bar: worst to best pass)",
                    [p.items_per_s_worst for p in ps], [p.items_per_s_best for p in ps], note=note),
        "<h2>Cost per million items</h2>",
        bars_figure(labels, [float(p.cost_per_million_items) if p.cost_per_million_items is not None
                             else None for p in ps], f"{currency} per million items",
                    f"Committed budget of the smallest covering package / {c.load_items} items "
                    "x 1,000,000", note=note),
        "<h2>Projected hours against package hours</h2>",
        bars_figure(labels, [p.sizing.hours_needed if p.sizing else p.hours_worst for p in ps],
                    "hours per lot", "Worst-pass hours per lot (bars) and hours the package "
                    "allows before the deadline (red)",
                    hline=[p.sizing.hours_allowed if p.sizing else None for p in ps],
                    hline_label="package hours allowed", note=note),
    ]
