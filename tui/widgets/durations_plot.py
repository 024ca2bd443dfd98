"""DurationsPlot: measured-window durations of each pass, one series per variant (plotext)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual_plotext import PlotextPlot

if TYPE_CHECKING:  # lab.report imports pandas; the records arrive built
    from lab.service.views import VariantSummary


class DurationsPlot(PlotextPlot):
    """``show(summary)`` plots each variant's raw durations (s) against the repetition index and
    returns the legend, which the screen shows under the plot: plotext draws labels over the
    plot's upper-left corner (where they hid the first passes' points) and drops an axis label
    wider than the plot."""

    def show(self, summary: list[VariantSummary]) -> str:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("measured window per successful pass (s)")
        plt.xlabel("pass of the variant")
        shown = [(v, MARKERS[i % len(MARKERS)]) for i, v in enumerate(summary) if v.durations_s]
        for v, (marker, _) in shown:
            d = list(v.durations_s)
            plt.scatter(list(range(1, len(d) + 1)), d, marker=marker)
        self.refresh()
        return legend(shown)


MARKERS = (("dot", "•"), ("x", "x"), ("+", "+"), ("o", "o"), ("*", "*"))  # plotext name, glyph drawn


def legend(shown: list) -> str:
    """'• batch_size=1  x batch_size=4': the glyph each variant's points are drawn with."""
    return "  ".join(f"{glyph} {v.short_name}" for v, (_, glyph) in shown)
