"""Screen 7, Archive: assemble and verify (``lab.service.campaigns.assemble_archive``)
the evidence archive; its path, size, sha256, and the exact `scp` line to run on one's own
machine, with user, host and port detected (SSH_CONNECTION, $USER, hostname) and editable."""

from __future__ import annotations

import getpass
import os
import re
import shlex
import socket
from collections.abc import Mapping
from pathlib import Path

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Static

from lab.service.campaign_records import ArchiveMade
from lab.service.campaigns import ONE_LINE_ERRORS, CampaignUnfinished, assemble_archive, replay_here
from tui.messages import ArchiveReady
from tui.screens.lab_screen import LabScreen


def detect_remote(env: Mapping[str, str] | None = None) -> dict:
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
        except (OSError, KeyError):  # no user name in the environment or the password database
            user = "root"
    if len(parts) == 4:
        return {"user": user, "host": parts[2], "port": parts[3]}
    return {"user": user, "host": socket.gethostname(), "port": "22"}


def scp_command(user: str, host: str, port: str, path: str) -> str:
    """The line to run on one's own machine; IPv6 hosts are bracketed, -P only when not 22."""
    return f"scp {_scp_options(port)}{_remote(user, host)}:{shlex.quote(path)} ."


def _remote(user: str, host: str) -> str:
    return f"{user}@[{host}]" if ":" in host else f"{user}@{host}"


def _scp_options(port: str) -> str:
    return f"-P {port} " if port and port != "22" else ""


def remote_path(path: str, home: str | None) -> str:
    """``path`` as scp reads it on the remote side: relative to the login folder when it lies
    under ``home`` (scp and sftp resolve a relative remote path from there), else as given."""
    if home:
        home_dir = home.rstrip("/") + "/"
        if path.startswith(home_dir) and len(path) > len(home_dir):
            return path[len(home_dir):]
    return path


def scp_lines(user: str, host: str, port: str, path: str, width: int = 76) -> list[str]:
    """The scp command as lines of at most ``width`` characters, each a whole shell command,
    so that a terminal never wraps one (a line copied from tmux then runs as it was shown).

    One line when it fits; otherwise the path is built in a variable ``a``, a piece per
    line, cut preferably after a ``/``, then ``scp ... user@host:"$a" .`` (POSIX shells:
    paste the lines together). A line longer than ``width`` happens only when the ``scp``
    line itself is (a user@host of about 60 characters).
    """
    one = scp_command(user, host, port, path)
    if len(one) <= width:
        return [one]
    first, more = "a=", 'a="$a"'
    lines: list[str] = []

    def start() -> str:  # the first line sets the variable, the others append to it
        return more if lines else first

    def fits(text: str) -> bool:
        return len(start()) + len(shlex.quote(text)) <= width

    chunk = ""
    for whole in re.findall(r"[^/]*/|[^/]+", path):
        rest = whole
        while rest:
            if fits(chunk + rest):
                chunk, rest = chunk + rest, ""
            elif chunk:  # this line is full: the piece starts the next one
                lines.append(start() + shlex.quote(chunk))
                chunk = ""
            else:  # one piece longer than a line: cut it
                cut = len(rest) - 1
                while cut > 1 and not fits(rest[:cut]):
                    cut -= 1
                lines.append(start() + shlex.quote(rest[:cut]))
                rest = rest[cut:]
    if chunk:
        lines.append(start() + shlex.quote(chunk))
    return lines + [f'scp {_scp_options(port)}{_remote(user, host)}:"$a" .']


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
            yield Static("", id="scp-head")
            yield Static("", id="scp-line", markup=False)
            with Horizontal(classes="field"):  # the next rental: the same question from this archive
                yield Label("replay", classes="field-label")
                yield Input(placeholder="another rental's .tar.gz, Enter: campaign.toml", id="replay-archive",
                            classes="field-input")
            yield Static("", id="replay-result", markup=True)
        self.archive: ArchiveMade | None = None
        self.local_user = remote["user"]

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
        except ONE_LINE_ERRORS as exc:  # one line that says what to do; the campaign folder is untouched
            self.post_message(ArchiveReady(None, str(exc), unfinished=isinstance(exc, CampaignUnfinished)))

    def on_archive_ready(self, msg: ArchiveReady) -> None:
        info = self.query_one("#archive-info", Static)
        if msg.archive is None:
            end = "" if msg.error.endswith(".") else "."  # one sentence ends before the screen's own
            hint = " Press [b]p[/b] for an archive labelled partial." if msg.unfinished else ""
            info.update(f"[red]archive failed: {escape(msg.error)}{end}[/red]{hint}")
            return
        a = self.archive = msg.archive
        v = a.verification
        verdict = (f"[green]verified[/green]: {v.files_checked} files, {v.rows_checked} rows" if v.ok
                   else "[yellow]not fully verified[/yellow]: " + escape("; ".join(v.not_rederived[:3]))
                   if v.incomplete else "[red]verification FAILED[/red]: " + escape("; ".join(v.problems[:3])))
        label = "[b]PARTIAL[/b] " if a.partial else ""
        info.update(f"{label}[b]Archive[/b] {escape(a.path)}\n[b]Size[/b]    {a.size_bytes:,} bytes "
                    f"({a.size_bytes / 2**20:.2f} MiB)\n[b]sha256[/b]  {a.sha256}\n{verdict}")
        self.update_scp()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.update_scp()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "replay-archive" or not event.value.strip():
            return
        self.query_one("#replay-result", Static).update("replaying (verifying the archive) ...")
        self.replay(Path(event.value.strip()).expanduser())

    @work(thread=True, exclusive=True, exit_on_error=False, group="replay")
    def replay(self, archive: Path) -> None:
        """`iteralab campaign replay ARCHIVE` into the bundle's campaign.toml (lab.service.campaigns.replay_here)."""
        out = self.query_one("#replay-result", Static)
        try:
            r = replay_here(archive)
        except ONE_LINE_ERRORS as exc:
            self.app.call_from_thread(out.update, f"[red]{escape(str(exc))}[/red]")
            return
        self.app.call_from_thread(out.update, (
            f"[green]replayed[/green] {escape(archive.name)}: wrote and locked {escape(r.campaign_file)} "
            f"(version {r.version}, question version {r.question_version}); quit (q) and run "
            "[b]make up[/b] to open it, or `iteralab campaign replay` for other [cost] or --out"))

    def on_resize(self) -> None:
        self.update_scp()

    def update_scp(self) -> None:
        """The scp command in lines that fit the screen's width (none wraps, so each copies
        whole from tmux); the path relative to the login folder when it lies under it."""
        archive = getattr(self, "archive", None)
        if not archive:
            return
        user, host, port = (self.query_one(f"#scp-{k}", Input).value.strip() for k in ("user", "host", "port"))
        home = str(Path.home()) if user == self.local_user else None
        width = self.query_one("#archive-scroll").scrollable_content_region.width or 78
        lines = scp_lines(user, host, port, remote_path(archive.path, home), width)
        self.query_one("#scp-head", Static).update(
            "Run on your own machine (edit user/host/port above if needed):" if len(lines) == 1 else
            f"Run these {len(lines)} lines on your own machine, pasted together (each is a whole "
            "command; edit user/host/port above if needed):")
        self.query_one("#scp-line", Static).update("\n".join(lines))
