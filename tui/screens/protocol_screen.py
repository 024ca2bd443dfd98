"""Screen 2, Protocol: the decision question, corpus card (counts per bucket and class),
quality rules (``lab.service.views.protocol_info``), and the lock (``lab.orchestration.protocol.lock``):
locking shows the hash; after a lock, an edited file is a new protocol version, and the screen says
so (SPEC 3.1)."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from lab.service.campaigns import ONE_LINE_ERRORS, campaign_dir_of
from lab.service.views import ProtocolInfo, lock_protocol, protocol_info
from tui.messages import ProtocolLoaded, ProtocolLocked
from tui.screens.lab_screen import LabScreen

BUCKETS = ("short", "medium", "long")


def render_rules(i: ProtocolInfo) -> str:
    """Question, quality rules, timing rules and lock state (Rich markup)."""
    q, t = i.quality, i.timing
    lines = [f"[b]{escape(i.name)}[/b]  (file {escape(Path(i.file).name)})",
             f"[b]Question[/b] {escape(i.question)}",
             f"[b]Quality[/b]  {escape(q.metric)} {'<=' if q.direction == 'lower' else '>='} "
             f"{q.threshold}, at most {q.tolerance} {'above' if q.direction == 'lower' else 'below'} "
             f"the reference {escape(q.reference_variant)}",
             f"[b]Timing[/b]   {t.repetitions} repetitions, rotated; warm-up {t.warmup_passes} pass(es) "
             f"over the first {t.warmup_items} items; process {t.process}; "
             f"seed {t.seed}"]
    if i.lock_state == "locked" and i.current is not None:
        c = i.current
        lines.append(f"[green b]Locked[/green b] version {c.version} at {c.locked_at}\n"
                     f"  sha256 {c.sha256}")
        r = c.replays
        if r:  # `iteralab campaign replay` (lab.evidence.replay): the archive whose question this puts again
            what = "a new question version (model changed)" if r.change else "the same question"
            lines.append(f"[b]Replays[/b] {escape(r.archive)} (sha256 {r.archive_sha256[:16]}...; its "
                         f"protocol version {'?' if r.protocol_version is None else r.protocol_version}): "
                         f"{what}, question version {c.question_version or 1}")
    elif i.lock_state == "edited":
        last = i.versions[-1]
        lines.append(f"[yellow b]Edited after lock[/yellow b] (last: version {last.version}, "
                     f"sha256 {last.sha256[:16]}...): press l to lock it as version "
                     f"{len(i.versions) + 1}; results of versions never mix")
    else:
        lines.append("[yellow b]Not locked[/yellow b]: press l to record the protocol's hash before "
                     "any measured pass")
    return "\n".join(lines)


class ProtocolScreen(LabScreen):
    """l locks (a new version when edited), r reloads the file."""

    NAME = "protocol"
    BINDINGS = [Binding("l", "lock", "Lock protocol"), Binding("r", "reload", "Reload file")]

    def body(self) -> ComposeResult:
        with VerticalScroll(id="protocol-scroll"):
            yield Static("reading the campaign file ...", id="protocol-rules", markup=True)
            yield Static("", id="lock-result", markup=True)
            yield DataTable(id="corpus-card", cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one("#corpus-card", DataTable)
        for c in ("class", *BUCKETS, "total"):
            table.add_column(c, key=c)

    def on_screen_resume(self) -> None:
        self.action_reload()

    def action_reload(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False, group="protocol")
    def load(self) -> None:
        try:
            self.post_message(ProtocolLoaded(protocol_info(self.app.campaign_file)))
        except ONE_LINE_ERRORS as exc:
            self.post_message(ProtocolLoaded(None, str(exc)))

    def on_protocol_loaded(self, msg: ProtocolLoaded) -> None:
        rules = self.query_one("#protocol-rules", Static)
        if msg.info is None:
            rules.update(f"[red]{escape(msg.error)}[/red]")
            return
        self.info = msg.info
        rules.update(render_rules(msg.info))
        table = self.query_one("#corpus-card", DataTable)
        table.clear()
        counts = msg.info.card_counts or {}
        classes = sorted({c for b in counts.values() for c in b})
        totals = {b: sum(counts.get(b, {}).values()) for b in BUCKETS}
        for c in classes:
            row = [counts.get(b, {}).get(c, 0) for b in BUCKETS]
            table.add_row(c, *map(str, row), str(sum(row)))
        table.add_row("all classes", *(str(totals[b]) for b in BUCKETS), str(sum(totals.values())))

    def action_lock(self) -> None:
        """Locking checks the corpus and the model and hashes their files (seconds, more for
        large weights): say so at once, in place of any earlier result or error."""
        out = self.query_one("#lock-result", Static)
        out.display = True
        out.update("[b]locking[/b] ... checking the corpus and the model, hashing their files "
                   "(seconds; longer for large weights)")
        self.do_lock()

    @work(thread=True, exclusive=True, exit_on_error=False, group="protocol-lock")
    def do_lock(self) -> None:
        try:
            self.post_message(ProtocolLocked(lock_protocol(self.app.campaign_file)))
        except ONE_LINE_ERRORS as exc:
            self.post_message(ProtocolLocked(None, str(exc)))

    def on_protocol_locked(self, msg: ProtocolLocked) -> None:
        out = self.query_one("#lock-result", Static)
        out.display = True
        if msg.result is None:
            out.update(f"[red]lock failed: {escape(msg.error)}[/red]\n"
                       f"Edit {escape(str(self.app.campaign_file))}, then press "
                       "[b]l[/b] to lock again ([b]r[/b] reloads the file)")
            return
        v = msg.result.entry
        if not msg.result.new:
            text = f"unchanged since version {v.version}: sha256 {v.sha256}"
        elif v.version > 1:
            text = (f"[b]new protocol version {v.version}[/b] (the file changed after version "
                    f"{v.version - 1}); its results go to their own folder\nsha256 {v.sha256}")
        else:
            text = f"[b]locked as version 1[/b]\nsha256 {v.sha256}"
        # what `protocol lock` prints as warnings: unusual values that lock, read before running
        out.update(text + "".join(f"\n[yellow]warning: {escape(w)}[/yellow]" for w in msg.result.warnings))
        self.app.attach(campaign_dir_of(self.app.campaign_file))
        self.load()
