"""DurationsPlot: measured-window durations of each pass, one series per variant (plotext)."""

from __future__ import annotations

from textual_plotext import PlotextPlot


class DurationsPlot(PlotextPlot):
    """``show(summary)`` plots each variant's raw durations (s) against the repetition index."""

    def show(self, summary: list[dict]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("measured window per successful pass (s)")
        plt.xlabel("pass of the variant")
        markers = ("dot", "x", "+", "o", "*")
        for i, v in enumerate(summary):
            d = v.get("durations_s") or []
            if d:
                name = (v.get("variant_name") or v["variant_id"]).split("/", 1)[-1]
                plt.scatter(list(range(1, len(d) + 1)), d, label=name, marker=markers[i % len(markers)])
        self.refresh()
