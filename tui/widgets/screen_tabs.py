"""ScreenTabs: the one-line list of screens (number keys 1-8) with the current one marked."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

SCREENS = (("environment", "Env"), ("protocol", "Protocol"), ("plan", "Plan"), ("runs", "Runs"),
           ("results", "Results"), ("cost", "Cost"), ("archive", "Archive"), ("compare", "Compare"))


def tabs_text(current: str) -> Text:
    """'1 Env 2 Protocol ...' with ``current`` in reverse video."""
    t = Text()
    for i, (name, title) in enumerate(SCREENS, 1):
        t.append(f" {i} {title} ", style="reverse bold" if name == current else "")
    return t


class ScreenTabs(Static):
    """Top line of every screen."""

    DEFAULT_CSS = "ScreenTabs { height: 1; background: $panel; }"

    def __init__(self, current: str) -> None:
        super().__init__(tabs_text(current))
