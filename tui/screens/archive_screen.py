"""Screen 7, Archive: assemble and verify (``lab.campaigns.assemble_archive``)
the evidence archive; its path, size, sha256, and the exact `scp` line to run on one's own
machine, with user, host and port detected (SSH_CONNECTION, $USER, hostname) and editable."""

from __future__ import annotations

import getpass
import os
import shlex
import socket

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Static

from lab.campaigns import assemble_archive
from tui.messages import ArchiveReady
from tui.screens.lab_screen import LabScreen


def detect_remote(env: dict | None = None) -> dict:
    """{user, host, port} of this machine as seen from the SSH client.

    SSH_CONNECTION is "client_ip client_port server_ip server_port"; without it the
    host is this machine's name and the port 22.
    """
    env = os.environ if env is None else env
    parts = env.get("SSH_CONNECTION", "").split()
    user = env.get("USER") or env.get("LOGNAME")
    if not user:
        try:
            user = getpass.getuser()
        except Exception:
            user = "root"
    if len(parts) == 4:
        return {"user": user, "host": parts[2], "port": parts[3]}
    return {"user": user, "host": socket.gethostname(), "port": "22"}


def scp_command(user: str, host: str, port: str, path: str) -> str:
    """The line to run on one's own machine; IPv6 hosts are bracketed, -P only when not 22."""
    h = f"[{host}]" if ":" in host else host
    p = f"-P {port} " if port and port != "22" else ""
    return f"scp {p}{user}@{h}:{shlex.quote(path)} ."


class ArchiveScreen(LabScreen):
    """a assembles and verifies; the user/host/port fields rewrite the scp line as typed."""

    NAME = "archive"
    AUTO_FOCUS = "#archive-scroll"
    BINDINGS = [Binding("a", "assemble", "Assemble + verify"),
                Binding("p", "assemble_partial", "Partial archive")]

    def body(self) -> ComposeResult:
        remote = detect_remote()
        with VerticalScroll(id="archive-scroll"):
            yield Static("Press [b]a[/b] to assemble and verify the evidence archive.",
                         id="archive-info", markup=True)
            for key in ("user", "host", "port"):
                with Horizontal(classes="field"):
                    yield Label(key, classes="field-label")
                    yield Input(remote[key], id=f"scp-{key}", classes="field-input")
            yield Static("", id="scp-line", markup=False)
        self.archive: dict | None = None

    def action_assemble_partial(self) -> None:
        self.action_assemble(partial=True)

    def action_assemble(self, partial: bool = False) -> None:
        d = self.app.campaign_dir
        info = self.query_one("#archive-info", Static)
        if d is None:
            info.update(self.no_campaign_text())
            return
        info.update(f"assembling the archive of {escape(str(d))} ...")
        self.assemble(d, partial)

    @work(thread=True, exclusive=True, exit_on_error=False)
    def assemble(self, campaign_dir, partial: bool = False) -> None:
        try:
            self.post_message(ArchiveReady(assemble_archive(campaign_dir, partial)))
        except Exception as exc:  # one line; the campaign folder is untouched
            self.post_message(ArchiveReady(None, f"{type(exc).__name__}: {exc}"))

    def on_archive_ready(self, msg: ArchiveReady) -> None:
        info = self.query_one("#archive-info", Static)
        if msg.archive is None:
            hint = " Press [b]p[/b] for an archive labelled partial." if "--partial" in msg.error else ""
            info.update(f"[red]archive failed: {escape(msg.error)}[/red]{hint}")
            return
        a = self.archive = msg.archive
        verdict = (f"[green]verified[/green]: {a['files_checked']} files, {a['rows_checked']} rows"
                   if a["ok"] else "[red]verification FAILED[/red]: " + escape("; ".join(a["problems"][:3])))
        label = "[b]PARTIAL[/b] " if a.get("partial") else ""
        info.update(f"{label}[b]Archive[/b] {escape(a['path'])}\n[b]Size[/b]    {a['size_bytes']:,} bytes "
                    f"({a['size_bytes'] / 2**20:.2f} MiB)\n[b]sha256[/b]  {a['sha256']}\n{verdict}\n"
                    "Run on your own machine (edit user/host/port below if needed):")
        self.update_scp()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.update_scp()

    def update_scp(self) -> None:
        if not getattr(self, "archive", None):
            return
        v = {k: self.query_one(f"#scp-{k}", Input).value.strip() for k in ("user", "host", "port")}
        self.query_one("#scp-line", Static).update(
            scp_command(v["user"], v["host"], v["port"], self.archive["path"]))
