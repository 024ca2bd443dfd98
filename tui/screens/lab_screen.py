"""LabScreen: the frame every screen shares (screen tabs on top, footer with the keys)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from tui.widgets.screen_tabs import ScreenTabs


class LabScreen(Screen):
    """Subclasses set ``NAME`` (a key of tui.widgets.screen_tabs.SCREENS) and ``body()``."""

    NAME = ""

    def compose(self) -> ComposeResult:
        yield ScreenTabs(self.NAME)
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    def no_campaign_text(self) -> str:
        return ("No campaign run yet for this protocol version.\n"
                "Press 4 (Runs), then s to start it; results appear here as passes finish.")
