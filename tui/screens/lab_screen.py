"""LabScreen: the frame every screen shares (screen tabs on top, footer with the keys), and
``LabApp``, what a screen may read from the app, typed.

``LabApp`` lives here, below the screens, so that a screen reads ``self.app.snapshot`` with its
type without importing ``tui.app`` (which imports every screen); ``tui.app.IteraLabApp`` is the
one subclass and sets each attribute in its ``__init__``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Footer
from textual.worker import Worker, WorkerState

from lab.facts.errors import one_line
from lab.service.environment_facts import EnvironmentFacts
from tui.messages import CampaignSnapshot
from tui.widgets.screen_tabs import ScreenTabs
from tui.widgets.telemetry import HostSample


class LabApp(App):
    """The app as its screens see it: the campaign followed, the last journal snapshot and
    telemetry sample, and the actions a screen may ask for (workers of the app)."""

    campaign_file: Path
    campaign_dir: Path | None
    campaign_name: str
    clock: Callable[[], float]
    selected_pass: str | None
    snapshot: CampaignSnapshot | None
    telemetry: HostSample | None
    telemetry_error: str

    def environment_facts(self, refresh: bool = False) -> EnvironmentFacts | None:
        """Environment facts (cached); None when the calling worker was cancelled."""
        raise NotImplementedError

    def runs_root(self) -> Path:
        """Where campaign folders and archives live."""
        raise NotImplementedError

    def attach(self, campaign_dir: Path | None) -> None:
        """Follow another campaign folder."""
        raise NotImplementedError

    def start_campaign(self) -> Any:
        """Start (or resume) the campaign in a detached orchestrator (a thread worker)."""
        raise NotImplementedError

    def send_control(self, flag: str) -> Any:
        """Write the pause or stop flag (a thread worker)."""
        raise NotImplementedError


class LabScreen(Screen):
    """Subclasses set ``NAME`` (a key of tui.widgets.screen_tabs.SCREENS) and ``body()``.

    A screen's workers catch ``lab.service.campaigns.ONE_LINE_ERRORS`` (the lab's errors) and show the
    line in place; anything else a worker raises is a defect, and ``on_worker_state_changed``
    is the one last resort that says so (``lab.facts.errors.one_line``) instead of leaving the screen
    waiting."""

    NAME = ""

    if TYPE_CHECKING:  # the type only: Textual sets the attribute (the running app, an IteraLabApp)
        app: LabApp

    def compose(self) -> ComposeResult:
        yield ScreenTabs(self.NAME)
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        yield from ()

    def no_campaign_text(self) -> str:
        return ("No campaign run yet for this protocol version.\n"
                "Press 4 (Runs), then s to start it; results appear here as passes finish.")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A worker of this screen that raised (a defect: the lab's own errors are caught in the
        worker): one line in a notification, the UI goes on."""
        error = event.worker.error
        if event.state == WorkerState.ERROR and error is not None:
            self.notify(f"{event.worker.name or 'worker'}: {one_line(error)}", severity="error", timeout=15)
