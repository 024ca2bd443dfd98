"""Screen 5, Results: per variant the raw durations, median/min/max, successes/failures,
quality verdicts, peaks, utilization, the "does not distinguish" flag and memory feasibility, from
``lab.service.views.rebuild_report`` (lab.report.build.build_report: also rewrites the report
folder), and a durations plot."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from lab.service.campaigns import ONE_LINE_ERRORS
from lab.service.views import rebuild_report
from tui.messages import ResultsReady
from tui.screens.lab_screen import LabScreen
from tui.widgets.durations_plot import DurationsPlot

if TYPE_CHECKING:  # lab.report imports pandas; the records arrive built
    from lab.service.views import VariantSummary


def _s(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _mib(n, why: str) -> str:
    return f"not measured ({why})" if n is None else f"{n / 2**20:.1f} MiB"


def render_summary(summary: list[VariantSummary]) -> str:
    """Six lines per variant (Rich markup): durations (and, when a measured window recompiled,
    why they are not steady-state), stats, verdict, peaks, flags."""
    names = {v.variant_id: v.short_name for v in summary}
    out = []
    for v in summary:
        d = " ".join(f"{x:.3f}" for x in v.durations_s) or "none"
        out.append(f"[b]{escape(v.short_name)}[/b] ({v.variant_id}, {escape(v.label)})")
        out.append(f"  durations s: {d}")
        if v.recompiled_passes:
            out.append(f"  [yellow]not steady-state:[/yellow] {escape(v.durations_caveat())}")
        if v.starved_passes:
            out.append(f"  [red]starved:[/red] {escape(v.starved_caveat())}")
        out.append(f"  median {_s(v.median_s)}  min {_s(v.min_s)}  max {_s(v.max_s)}  "
                   f"successes {v.successes}  failures {v.failures}"
                   + (f" ({', '.join(v.failure_kinds)})" if v.failure_kinds else ""))
        color = "green" if v.accepted_passes else "red"
        out.append(f"  quality: [{color}]{escape(v.quality_verdict)}[/{color}]")
        out.append("  " + escape(v.quality_text()))
        out.append(f"  peaks: process RSS {_mib(v.peak_rss_bytes_max, 'no pass reached it')}; "
                   f"allocated {_mib(v.peak_allocated_bytes_max, 'no GPU')}; "
                   f"reserved {_mib(v.peak_reserved_bytes_max, 'no GPU')}")
        out.append("  " + escape(v.utilization_text()))
        mem = {"infeasible": "[red]NOT feasible[/red]", "not shown": "[yellow]not shown[/yellow]"}.get(
            v.memory_verdict(), v.memory_verdict())
        out.append(f"  memory: {mem}: {escape(v.infeasible_reason)}")
        if v.does_not_distinguish:
            others = ", ".join(names.get(o, o) for o in v.does_not_distinguish_from)
            out.append(f"  [yellow]does not distinguish[/yellow] from {escape(others)} "
                       "(ranges overlap, exact rank test p > 0.05)")
    return "\n".join(out)


class ResultsScreen(LabScreen):
    """Rebuilt in a thread worker on each visit and with r."""

    NAME = "results"
    BINDINGS = [Binding("r", "rebuild", "Rebuild report")]

    def body(self) -> ComposeResult:
        with VerticalScroll(id="results-scroll"):
            yield Static("", id="results-text", markup=True)
        yield DurationsPlot(id="durations-plot")
        yield Static("", id="plot-legend", markup=False)

    def on_screen_resume(self) -> None:
        self.action_rebuild()

    def action_rebuild(self) -> None:
        d = self.app.campaign_dir
        if d is None:
            self.query_one("#results-text", Static).update(self.no_campaign_text())
            return
        self.query_one("#results-text", Static).update(f"building the report of {escape(str(d))} ...")
        self.build(d)

    @work(thread=True, exclusive=True, exit_on_error=False)
    def build(self, campaign_dir) -> None:
        try:
            self.post_message(ResultsReady(rebuild_report(campaign_dir)))
        except ONE_LINE_ERRORS as exc:  # shown in one line; the journal is untouched
            self.post_message(ResultsReady(None, str(exc)))

    def on_results_ready(self, msg: ResultsReady) -> None:
        text = self.query_one("#results-text", Static)
        if msg.report is None:
            text.update(f"[red]report failed: {escape(msg.error)}[/red]")
            return
        self.summary = msg.report.summary
        head = f"{msg.report.rows} pass rows; report in {escape(str(msg.report.report_dir))}\n"
        text.update(head + render_summary(self.summary))
        self.query_one("#plot-legend", Static).update(self.query_one(DurationsPlot).show(self.summary))
