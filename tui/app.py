"""IteraGPU Lab's terminal UI: launch, watch, decide, download (keyboard only, 80x24, SSH/tmux).

The campaign runs in a detached orchestrator (``lab.service.campaigns.start_campaign``), never in the
UI: the app reads the campaign folder's journal from a thread worker and writes only
control flags (pause, stop). Quitting the UI or losing SSH leaves the campaign running;
starting the UI again re-attaches to the journal of the current protocol version.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, ClassVar

from textual import events, work
from textual.binding import Binding, BindingType
from textual.keys import _character_to_key
from textual.widgets import Input
from textual.worker import NoActiveWorker, get_current_worker

from lab.service.campaigns import (
    ONE_LINE_ERRORS,
    campaign_dir_of,
    campaign_name_of,
    request_control,
    runs_root,
    start_campaign,
)
from lab.service.environment_facts import EnvironmentFacts
from lab.service.live import CampaignState, JournalFeed, PassStatus
from tui.messages import CampaignSnapshot, CampaignStarted, ControlSent, PassFailed, TelemetrySample
from tui.screens.archive_screen import ArchiveScreen
from tui.screens.compare_screen import CompareScreen
from tui.screens.cost_screen import CostScreen
from tui.screens.environment_screen import EnvironmentScreen
from tui.screens.lab_screen import LabApp
from tui.screens.plan_screen import PlanScreen
from tui.screens.protocol_screen import ProtocolScreen
from tui.screens.results_screen import ResultsScreen
from tui.screens.runs_screen import RunsScreen
from tui.widgets.screen_tabs import SCREENS
from tui.widgets.telemetry import HostSample, HostTelemetry, TelemetrySource
from tui.widgets.whole_cell_scrollbar import install as whole_cell_scrollbars


def _esc_characters() -> dict[str, str]:
    """{character: key} for the Esc+key sequences Textual turns into a character (macOS Option
    row, e.g. ESC 7 -> '¶'): under tmux, Esc then a digit typed quickly arrives as ESC 7."""
    try:
        from textual._ansi_sequences import ANSI_SEQUENCES_KEYS
    except ImportError:  # pragma: no cover - another Textual layout: alt+ keys still handled
        return {}
    return {v: k[1] for k, v in ANSI_SEQUENCES_KEYS.items()
            if isinstance(v, str) and len(k) == 2 and k[0] == "\x1b" and k[1].isprintable()}


ESC_CHARACTERS = _esc_characters()


def escaped_key(event: events.Key) -> str | None:
    """The key pressed after Esc when ``event`` is an Esc+key sequence ('alt+7' or the
    character a terminal table maps ESC 7 to), else None."""
    if event.key.startswith("alt+") and event.character and len(event.character) == 1:
        return event.character
    return ESC_CHARACTERS.get(event.character or "")


SCREEN_CLASSES = {"environment": EnvironmentScreen, "protocol": ProtocolScreen, "plan": PlanScreen,
                  "runs": RunsScreen, "results": ResultsScreen, "cost": CostScreen,
                  "archive": ArchiveScreen, "compare": CompareScreen}


def nap(worker, seconds: float) -> None:
    """Sleep up to ``seconds`` in short slices, returning early once ``worker`` is cancelled."""
    end = time.monotonic() + seconds
    while not worker.is_cancelled and time.monotonic() < end:
        time.sleep(min(0.1, max(0.0, end - time.monotonic())))


class BackgroundProbe:
    """``probe()`` run once in a daemon thread: nothing waits for it when the process exits."""

    def __init__(self, probe: Callable[[], EnvironmentFacts]) -> None:
        self.done = threading.Event()
        self.result: EnvironmentFacts | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, args=(probe,), name="environment-probe", daemon=True).start()

    def _run(self, probe: Callable[[], EnvironmentFacts]) -> None:
        try:
            self.result = probe()
        except BaseException as exc:  # raised again in the thread that waits for it
            self.error = exc
        finally:
            self.done.set()

    def wait(self, cancelled: Callable[[], bool]) -> EnvironmentFacts | None:
        """The facts, or None once ``cancelled()`` is true; raises what the probe raised."""
        while not self.done.wait(0.05):
            if cancelled():
                return None
        if self.error is not None:
            raise self.error
        return self.result


class IteraLabApp(LabApp):
    """The app. ``clock``, ``telemetry`` and ``environment_probe`` are injectable (tests).

    ``poll_interval_s`` / ``telemetry_interval_s``: seconds between journal reads / telemetry
    samples; None reads once and ends the worker (a still view: snapshot tests wait for the
    app's workers to complete instead of polling).
    """

    CSS_PATH = "app.tcss"
    TITLE = "IteraGPU Lab"
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(str(i), f"go('{name}')", title, show=False) for i, (name, title) in enumerate(SCREENS, 1)),
        Binding("escape", "leave_field", "Leave field", show=False),
        Binding("q", "quit", "Quit (campaign goes on)")]

    def __init__(self, campaign_file: Path, *, launcher: str = "auto", memory_limit: int | None = None,
                 clock: Callable[[], float] = time.time, telemetry: TelemetrySource | None = None,
                 environment_probe: Callable[[], EnvironmentFacts] | None = None,
                 poll_interval_s: float | None = 0.3, telemetry_interval_s: float | None = 1.0,
                 start_screen: str = "runs") -> None:
        super().__init__()
        self.campaign_file = Path(campaign_file).resolve()
        self.launcher = launcher
        self.memory_limit = memory_limit
        self.clock = clock
        self.telemetry_source = telemetry
        self.environment_probe = environment_probe
        self.poll_interval_s = poll_interval_s
        self.telemetry_interval_s = telemetry_interval_s
        self.start_screen = start_screen
        self.campaign_dir: Path | None = campaign_dir_of(self.campaign_file)
        self.campaign_name = campaign_name_of(self.campaign_file)
        self.selected_pass: str | None = None
        self.snapshot: CampaignSnapshot | None = None
        self.telemetry: HostSample | None = None
        self.telemetry_error = ""
        self.failures_seen: list[PassFailed] = []
        self._probe: BackgroundProbe | None = None
        self._facts_lock = threading.Lock()

    async def on_event(self, event: events.Event) -> None:
        """Esc then a key, arriving as one Esc+key sequence while a field has focus, leaves
        the field and then acts as that key: leaving a field never types a character."""
        if (isinstance(event, events.Key) and not event.is_forwarded
                and isinstance(self.focused, Input) and (key := escaped_key(event)) is not None):
            self.screen.set_focus(None)
            name = key if key.isalnum() else _character_to_key(key)
            await super().on_event(events.Key(name, key))
            return
        await super().on_event(event)

    def on_mount(self) -> None:
        whole_cell_scrollbars()
        for name, cls in SCREEN_CLASSES.items():
            self.install_screen(cls(), name)
        self.push_screen(self.start_screen)
        self.poll_journal()
        self.poll_telemetry()

    def environment_facts(self, refresh: bool = False) -> EnvironmentFacts | None:
        """Environment facts (cached; call from a thread worker: probing takes seconds, 30 s
        against a Docker engine that never answers).

        The probe runs in a daemon thread of its own (:class:`BackgroundProbe`), never in
        the calling worker's thread: Textual's thread workers run in asyncio's executor,
        which the interpreter waits for at exit, so quitting while a probe ran kept the
        process alive for the probe's length. The caller waits in short slices and gets None
        as soon as its worker is cancelled (the UI quits, or an exclusive rerun replaced it).
        """
        from lab.service.views import collect_environment

        with self._facts_lock:
            if self._probe is None or refresh:
                self._probe = BackgroundProbe(self.environment_probe or collect_environment)
            probe = self._probe
        try:
            worker = get_current_worker()
        except NoActiveWorker:  # called outside a worker: wait for the probe
            worker = None
        return probe.wait(lambda: worker is not None and worker.is_cancelled)

    # ---- navigation ------------------------------------------------------------------
    def action_go(self, name: str) -> None:
        if self.screen is not self.get_screen(name):
            self.switch_screen(name)

    def action_leave_field(self) -> None:
        self.screen.set_focus(None)

    def runs_root(self) -> Path:
        """Where campaign folders and archives live (for screens: no import of this module)."""
        return runs_root()

    def attach(self, campaign_dir: Path | None) -> None:
        """Follow another campaign folder (after a start or a new protocol version)."""
        self.campaign_dir = campaign_dir

    # ---- journal poller --------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="journal")
    def poll_journal(self) -> None:
        """Read the journal every ``poll_interval_s``; post a snapshot when it changed."""
        worker = get_current_worker()
        feed: JournalFeed | None = None
        last_sig, last_post, last_resolve = None, 0.0, 0.0
        while not worker.is_cancelled:
            d = self.campaign_dir
            if d is None and time.monotonic() - last_resolve > 2.0:
                last_resolve = time.monotonic()
                d = campaign_dir_of(self.campaign_file)
                if d is not None:
                    self.call_from_thread(self.attach, d)
            if feed is not None and (d is None or feed.dir != d):
                feed.close()
                feed = None
            if d is not None and feed is None and (d / "journal.sqlite").exists():
                feed = JournalFeed(d)
            if feed is None:
                snap = CampaignSnapshot(None, None, [], {}, [], ("", ""))
                sig = None
            else:
                r = feed.read(self.selected_pass)
                for f in r.new_failures:
                    self.post_message(PassFailed(f.pass_id, f.kind, f.items_done, f.detail))
                snap = CampaignSnapshot(d, r.status, r.plan, r.live_failures, list(r.events), r.log_tail,
                                        r.live_served)
                st = r.status
                sig = (st.state, st.alive, feed.last_event_id, r.log_tail,
                       tuple((a.pass_id, a.status, a.items_completed, a.validation is None)
                             for a in st.attempts))
            running = bool(snap.status and snap.status.state == CampaignState.RUNNING)
            if sig != last_sig or self.snapshot is None or (running and time.monotonic() - last_post > 1):
                last_sig, last_post = sig, time.monotonic()
                self.post_message(snap)
            if self.poll_interval_s is None:
                break
            nap(worker, self.poll_interval_s)
        if feed is not None:
            feed.close()

    def on_campaign_snapshot(self, msg: CampaignSnapshot) -> None:
        self.snapshot = msg
        if not self.screen_stack:  # a message that arrives while the app shuts down
            return
        for screen in (self.screen, self.get_screen("runs")):
            if hasattr(screen, "apply_snapshot") and screen.is_mounted:
                screen.apply_snapshot(msg)

    def on_pass_failed(self, msg: PassFailed) -> None:
        self.failures_seen.append(msg)
        words: dict[str, str] = {PassStatus.OOM: "out of memory", PassStatus.KILLED: "killed (host memory)"}
        what = words.get(msg.kind, msg.kind)
        self.notify(f"pass {msg.pass_id}: {what} after {msg.items_done} items",
                    title="pass failed", severity="error", timeout=8)

    # ---- telemetry -------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="telemetry")
    def poll_telemetry(self) -> None:
        worker = get_current_worker()
        source = self.telemetry_source or HostTelemetry()
        while not worker.is_cancelled:
            try:
                self.post_message(TelemetrySample(source()))
            except Exception as exc:  # a broken counter is shown, never fatal
                self.post_message(TelemetrySample(None, f"{type(exc).__name__}: {exc}"))
            if self.telemetry_interval_s is None:
                break
            nap(worker, self.telemetry_interval_s)

    def on_telemetry_sample(self, msg: TelemetrySample) -> None:
        self.telemetry, self.telemetry_error = msg.sample, msg.error
        if self.screen_stack and hasattr(self.screen, "apply_telemetry"):
            self.screen.apply_telemetry(msg.sample, msg.error)

    # ---- campaign control ------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="control")
    def start_campaign(self) -> None:
        """Lock when never locked, then spawn the detached orchestrator (resumes when paused)."""
        try:
            d, note = start_campaign(self.campaign_file, self.launcher, self.memory_limit)
            self.post_message(CampaignStarted(d, note))
        except (ONE_LINE_ERRORS + (OSError,)) as exc:
            self.post_message(CampaignStarted(None, "", f"cannot start: {exc}"))

    def on_campaign_started(self, msg: CampaignStarted) -> None:
        if msg.error:
            self.notify(msg.error, severity="error", timeout=10)
            return
        self.attach(msg.campaign_dir)
        self.notify(msg.detail, title="campaign started", timeout=6)

    @work(thread=True, exit_on_error=False, group="control-flag")
    def send_control(self, flag: str) -> None:
        """Write the pause or stop flag to the journal (the orchestrator reads it)."""
        d = self.campaign_dir
        if d is None:
            self.post_message(ControlSent(flag, "no campaign running for this protocol version"))
            return
        request_control(d, flag)
        self.post_message(ControlSent(flag))

    def on_control_sent(self, msg: ControlSent) -> None:
        if msg.error:
            self.notify(f"{msg.flag}: {msg.error}", severity="warning")
        else:
            self.notify("pause requested: the current pass finishes, then the campaign pauses"
                        if msg.flag == "pause" else "stop requested: the current pass is stopped now")


def run_app(campaign_file: Path, launcher: str = "auto", memory_limit: int | None = None) -> int:
    """Run the UI on ``campaign_file`` (``python -m tui``); returns the exit status.

    ``launcher``: auto, local or docker; ``memory_limit``: bytes per pass (None: no limit).
    """
    app = IteraLabApp(Path(campaign_file), launcher=launcher, memory_limit=memory_limit)
    app.run()
    return app.return_code or 0
