"""Screen 4, Runs (live): one line per pass, failures highlighted as they happen, the log of
the selected pass (or the campaign's events), host telemetry; start, pause, stop.

The screen only displays what the app's journal poller posts (``CampaignSnapshot``) and
asks the app to start the detached orchestrator or write a control flag.
"""

from __future__ import annotations

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, RichLog, Static

from lab.service.live import CampaignState, PassStatus, running_eta_text, served_line
from tui.messages import CampaignSnapshot
from tui.screens.lab_screen import LabScreen
from tui.widgets.pass_table import PassTable, pass_rows
from tui.widgets.telemetry import HostSample, Telemetry


def status_line(snap: CampaignSnapshot | None, campaign_name: str, now: float | None = None) -> str:
    """Two lines (the status pane is always two rows high, so the table below never moves):
    campaign folder, state, passes finished/planned; then the running pass's and the campaign's
    ETA (lab.service.live.running_eta_text, the headless progress line's rule), the orchestrator and
    the next key; while a server pass runs, its answers so far instead of the ETA and the key
    (lab.service.live.served_line). ``now``: epoch s (the app's clock)."""
    if snap is None or snap.status is None or snap.campaign_dir is None:
        return (f"[b]{escape(campaign_name)}[/b]: not started.\nPress [b]s[/b] to start "
                "(locks the protocol if it never was).")
    st = snap.status
    d = snap.campaign_dir
    alive = f"pid {st.orchestrator.pid}" if st.alive else "no orchestrator"
    hint = {CampaignState.RUNNING: "p pause, x stop", CampaignState.PAUSED: "s resumes",
            CampaignState.STOPPED: "s resumes", CampaignState.INTERRUPTED: "s resumes",
            CampaignState.NOT_STARTED: "s starts", CampaignState.FINISHED: "see 5 Results",
            CampaignState.BLOCKED: "see the log; `make doctor`"}.get(st.state, "")
    attempts = st.attempts
    eta = running_eta_text(list(attempts), st.planned, st.finished, now) if now is not None else ""
    head = (f"[b]{escape(d.parent.name)}/{escape(d.name)}[/b] [b]{st.state}[/b] "
            f"{st.finished}/{st.planned} passes\n")
    served = next((snap.live_served[a.pass_id] for a in attempts
                   if a.status == PassStatus.RUNNING and a.pass_id in snap.live_served), None)
    if served is not None:  # a server pass: its answers so far, in place of the ETA and the key hint
        return head + f"{escape(served_line(served))}; {alive}"
    return head + (f"{eta}; " if eta else "") + f"{alive}; {hint}"


class RunsScreen(LabScreen):
    """s start/resume, p pause after the current pass, x stop now, v log/events."""

    NAME = "runs"
    BINDINGS = [Binding("s", "start", "Start"), Binding("p", "pause", "Pause"),
                Binding("x", "stop", "Stop"), Binding("v", "toggle_view", "Log/events")]

    def __init__(self) -> None:
        super().__init__()
        self.view = "log"
        self._shown_log: tuple = ()

    def body(self) -> ComposeResult:
        yield Static("", id="runs-status", markup=True)
        yield PassTable(id="pass-table")
        log = RichLog(id="pass-log", wrap=False, max_lines=200, markup=False)
        log.border_title = "log"
        yield log
        yield Telemetry(id="telemetry")

    def on_mount(self) -> None:
        self.apply_snapshot(self.app.snapshot)
        self.apply_telemetry(self.app.telemetry, self.app.telemetry_error)
        self.query_one(PassTable).focus()

    def on_screen_resume(self) -> None:
        self.apply_snapshot(self.app.snapshot)
        self.apply_telemetry(self.app.telemetry, self.app.telemetry_error)

    def apply_telemetry(self, sample: HostSample | None, error: str = "") -> None:
        self.query_one(Telemetry).show(sample, error)

    def apply_snapshot(self, snap: CampaignSnapshot | None) -> None:
        """Render the latest journal snapshot (called by the app on each new snapshot)."""
        name = self.app.campaign_name
        self.query_one("#runs-status", Static).update(status_line(snap, name, self.app.clock()))
        if snap is None or snap.status is None:
            return
        rows = pass_rows(list(snap.status.attempts), snap.plan, snap.live_failures, self.app.clock(), snap.live_served)
        self.query_one(PassTable).show(rows)
        log = self.query_one("#pass-log", RichLog)
        if self.view == "log":
            pid, text = snap.log_tail
            shown: tuple = ("log", pid, text)
            log.border_title = f"log.txt of {pid}" if pid else "log (no pass yet)"
            lines = text.splitlines()
        else:
            shown = ("events", tuple(snap.events))
            log.border_title = "campaign events (UTC)"
            lines = snap.events
        if shown != self._shown_log:
            self._shown_log = shown
            log.clear()
            for line in lines:
                log.write(line)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        table = self.query_one(PassTable)
        key = table.selected_key()
        if key and table.user_moved:
            self.app.selected_pass = key

    def action_toggle_view(self) -> None:
        self.view = "events" if self.view == "log" else "log"
        self.apply_snapshot(self.app.snapshot)

    def action_start(self) -> None:
        self.app.start_campaign()

    def action_pause(self) -> None:
        self.app.send_control("pause")

    def action_stop(self) -> None:
        self.app.send_control("stop")
