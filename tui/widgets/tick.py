"""Tick: a one-line check box drawn ``[x] label`` / ``[ ] label`` (Textual's Checkbox draws
``X`` in both states, told apart by colour alone; app.tcss drops its border)."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Checkbox

from tui.widgets.archive_picker import SELECTED, UNSELECTED


class Tick(Checkbox):
    """A Checkbox drawn ``[x] label`` / ``[ ] label`` (one line: app.tcss drops the border)."""

    @property
    def _button(self) -> Content:
        return Content.styled(SELECTED if self.value else UNSELECTED, self.get_visual_style("toggle--label"))
