"""The durations figure of report.html labels its legend whatever group has the first passes."""
from __future__ import annotations

import warnings

import pytest

from lab.report import html


@pytest.mark.parametrize("groups, labels", [
    ([("batch 1", [], 1, ["oom"]), ("batch 4", [2.0, 2.2], 0, [])],
     ["failed pass (no duration)", "pass (measured window)", "median"]),
    ([("batch 1", [], 0, []), ("batch 4", [2.0, 2.2, 2.1], 0, []), ("batch 8", [1.0], 0, [])],
     ["pass (measured window)", "median"]),
    ([("batch 1", [], 0, [])], []),  # nothing ended yet: no legend, no warning
])
def test_legend_entries_once_each_even_when_the_first_group_has_no_pass(monkeypatch, groups, labels):
    figs = []
    monkeypatch.setattr(html, "figure_tag", lambda fig, caption: figs.append(fig) or "")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns when legend() finds no labelled artist
        html.durations_figure(groups, "measured window per pass")
    legend = figs[0].axes[0].get_legend()
    got = [t.get_text() for t in legend.get_texts()] if legend else []
    assert sorted(got) == sorted(labels)
