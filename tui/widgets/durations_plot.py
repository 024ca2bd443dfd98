"""DurationsPlot: measured-window durations of each pass, one series per variant (plotext)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual_plotext import PlotextPlot

if TYPE_CHECKING:  # lab.report imports pandas; the records arrive built
    from lab.report.summary import VariantSummary


class DurationsPlot(PlotextPlot):
    """``show(summary)`` plots each variant's raw durations (s) against the repetition index."""

    def show(self, summary: list[VariantSummary]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("measured window per successful pass (s)")
        plt.xlabel("pass of the variant")
        markers = ("dot", "x", "+", "o", "*")
        for i, v in enumerate(summary):
            d = list(v.durations_s)
            if d:
                plt.scatter(list(range(1, len(d) + 1)), d, label=v.short_name, marker=markers[i % len(markers)])
        self.refresh()
