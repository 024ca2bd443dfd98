"""report.html: one self-contained file per campaign (in its archive); a comparison's page
(lab.compare.page) is built from the same parts (``page``, figures, tables).

No network and no CDN: plots are drawn by matplotlib (Agg backend) and embedded as base64
PNG; the style sheet is inline; the decision note's Markdown is rendered by markdown-it-py without raw HTML, images or
links, so the user's text in it (the question) never makes the page fetch anything.
The decision and its motivation come first, then the plots, then the raw table.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from markdown_it import MarkdownIt  # noqa: E402

from lab.passes.events import PassStatus  # noqa: E402

if TYPE_CHECKING:
    from lab.cost.hardware import HardwareCheck
    from lab.report.summary import VariantSummary

FAILED = "#c0392b"
CSS = """
body{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:1.5em auto;max-width:1100px;
color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:1.6em}
.decision{background:#eef6ee;border-left:5px solid #2e7d32;padding:.6em 1em}
.banner{background:#fdecea;border-left:5px solid #c0392b;padding:.6em 1em;font-weight:bold}
.none{background:#fbeeee;border-left-color:#c0392b}
figure{margin:1em 0}figcaption{color:#555;font-size:.9em}
img{max-width:100%}
table{border-collapse:collapse;font-size:.78em}td,th{border:1px solid #ccc;padding:2px 4px}
.scroll{overflow-x:auto}.scroll td,.scroll th{white-space:nowrap;vertical-align:top}
"""
# A raw table has dozens of columns and some long cells (notes, sha256, paths): squeezed to the
# page's width its rows grew hundreds of pixels tall. One line per row; the table scrolls sideways.


def figure_tag(fig, caption: str) -> str:
    """<figure> with ``fig`` as an embedded base64 PNG (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return (f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>")


def page(title: str, sections: list[str]) -> str:
    """A whole HTML document; ``sections`` are HTML fragments, already escaped."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body>"
            + "\n".join(sections) + "</body></html>\n")


def markdown_html(text: str) -> str:
    """``text`` rendered from Markdown with no raw HTML, no images and no links (the notes the
    product writes hold none; one typed by the user stays text): a report fetches nothing."""
    return (MarkdownIt("commonmark", {"html": False}).enable("table")
            .disable(["image", "link", "autolink", "reference"]).render(text))


def table_html(df: pd.DataFrame) -> str:
    return '<div class="scroll">' + df.to_html(index=False, na_rep="", escape=True) + "</div>"


def durations_figure(groups: list[tuple[str, list[float], int, list[str]]], title: str, note: str = "") -> str:
    """Strip plot: ``groups`` = [(label, durations_s of successful passes, failed passes,
    failure kinds)]. Every pass is a point, the median a bar, failures a red X at the top.
    ``note``: the legend of the labels' caveat marks (lab.report.caveats.chart_legend), after the caption."""
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(groups) + 2), 3.6))
    have_fail = have_pass = False  # each legend entry is labelled once, on the first group that has it
    for i, (_label, durations, failed, kinds) in enumerate(groups):
        if durations:
            ax.scatter([i] * len(durations), durations, s=28, color="#1f77b4", zorder=3,
                       label="_nolegend_" if have_pass else "pass (measured window)")
            med = sorted(durations)[len(durations) // 2] if len(durations) % 2 else \
                sum(sorted(durations)[len(durations) // 2 - 1: len(durations) // 2 + 1]) / 2
            ax.hlines(med, i - 0.3, i + 0.3, color="black", linewidth=2, zorder=4,
                      label="_nolegend_" if have_pass else "median")
            have_pass = True
        if failed:
            ax.scatter([i], [0.97], marker="X", s=80, color=FAILED, zorder=5,
                       transform=ax.get_xaxis_transform(), clip_on=False,
                       label=None if have_fail else "failed pass (no duration)")
            have_fail = True
            ax.annotate(f"{failed} {'/'.join(kinds) or 'failed'}", (i, 0.9), xycoords=("data", "axes fraction"),
                        ha="center", color=FAILED, fontsize=8)
    ax.set_xticks(range(len(groups)), [g[0] for g in groups], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("measured window (s)")
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    if have_pass or have_fail:  # a campaign with no pass ended yet has nothing to explain
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))  # never over a point
    caption = title + (": red X = failed passes (OOM, crash), which have no duration"
                       if have_fail else "")
    return figure_tag(fig, caption + (f". {note}" if note else ""))


def bars_figure(labels: list[str], values: list[float | None], ylabel: str, title: str,
                lows: list[float | None] | None = None, highs: list[float | None] | None = None,
                hline: list[float | None] | None = None, hline_label: str = "", note: str = "") -> str:
    """Bar chart; None values are left empty and labelled "not measured"/"not priced". ``note``: the
    legend of the labels' caveat marks (lab.report.caveats.chart_legend), after the caption."""
    fig, ax = plt.subplots(figsize=(max(5, 1.1 * len(labels) + 2), 3.6))
    xs = list(range(len(labels)))
    vals = [v if v is not None else 0 for v in values]
    ax.bar(xs, vals, color=["#4c72b0" if v is not None else "#ffffff" for v in values],
           edgecolor="#333")
    if lows is not None and highs is not None:
        for x, v, lo, hi in zip(xs, values, lows, highs, strict=True):
            if v is not None and lo is not None and hi is not None:
                # the median pass's items / median duration can pass a rate rounded to 4 decimals
                ax.errorbar([x], [v], yerr=[[max(0.0, v - lo)], [max(0.0, hi - v)]], color="black",
                            capsize=4)
    for x, v in zip(xs, values, strict=True):
        if v is None:
            ax.annotate("none", (x, 0), ha="center", va="bottom", color=FAILED, fontsize=8)
    if hline:
        for x, h in zip(xs, hline, strict=True):
            if h is not None:
                ax.hlines(h, x - 0.4, x + 0.4, color=FAILED, linewidth=2,
                          label=hline_label if x == next(i for i, y in enumerate(hline) if y is not None)
                          else "_nolegend_")
        if any(h is not None for h in hline):  # no labelled line: no legend (and no warning)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_xticks(xs, labels, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    return figure_tag(fig, title + (f". {note}" if note else ""))


def campaign_report(name: str, summary: list[VariantSummary], rows: list[dict], note_md: str,
                    hardware: Mapping[str, HardwareCheck | None] | None = None) -> str:
    """report.html of one campaign: the decision note's decision and motivation first, durations
    per variant, throughput, the rest of the note (configurations, exclusions), raw table. Each
    chart label carries its variant's caveat marks and each caption their legend
    (lab.report.caveats; ``hardware``: {variant_id: its passes' hardware checked against its package},
    lab.report.decision_note.hardware_checks, which marks a CPU or another GPU than priced)."""
    from lab.report.caveats import chart_legend, chart_mark
    from lab.report.raw_table import raw_table

    bases = [s.basis((hardware or {}).get(s.variant_id)) for s in summary]
    note = chart_legend(bases)
    groups = [(chart_mark(s.label, b)
               + ("\n(includes recompilation:\nnot steady-state)" if s.recompiled_passes else ""),
               list(s.durations_s), s.failures, list(s.failure_kinds)) for s, b in zip(summary, bases, strict=True)]
    rates: dict[str, list[float]] = {}
    for r in rows:
        if r.get("status") == PassStatus.OK and r.get("items_per_s"):
            rates.setdefault(r["variant_id"], []).append(float(r["items_per_s"]))
    labels = [chart_mark(s.label, b) for s, b in zip(summary, bases, strict=True)]
    med = [s.items_per_s_median for s in summary]
    lows = [min(rates[s.variant_id]) if s.variant_id in rates else None for s in summary]
    highs = [max(rates[s.variant_id]) if s.variant_id in rates else None for s in summary]
    details, sep, decision = note_md.partition("\n## Decision\n")
    # the note's own title repeats the page's; its sections (## Configurations, ...) follow
    # the question and pricing rule under their own headings
    details = details.split("\n", 1)[1] if details.startswith("# ") else details
    sections = [f"<h1>Campaign {html.escape(name)}</h1>",
                '<div class="decision">' + markdown_html("## Decision\n" + decision if sep else
                                                         "## Decision\n\nnot reached") + "</div>",
                "<h2>Durations per variant</h2>",
                durations_figure(groups, "Measured window per pass, median marked", note),
                "<h2>Throughput</h2>",
                bars_figure(labels, med, "items/s", "Median items/s per variant (bar: min to max pass)",
                            lows, highs, note=note),
                "<h2>Decision note</h2>", markdown_html(details),
                "<h2>Raw table (one row per attempted pass)</h2>", table_html(raw_table(rows))]
    return page(f"Campaign {name}", sections)
