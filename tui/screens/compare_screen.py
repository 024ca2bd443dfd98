"""Screen 8, Compare: the evidence archives under runs/ (and any the user adds by path),
the declared load, deadline and window start, and the local copy of the archives' own
[quality] metric file when they are judged by one (``--metric-file``); builds the same comparison as
`iteralab compare` (``lab.service.views.run_comparison`` over ``lab.compare.compare_to_folder``) in a
thread worker and shows the decision path and the decision; the files land in
runs/compare/<UTC time>/."""

from __future__ import annotations

import re
from pathlib import Path

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Static

from lab.service.campaigns import ONE_LINE_ERRORS
from lab.service.views import archives_under, run_comparison
from tui.messages import CompareReady
from tui.screens.lab_screen import LabScreen
from tui.widgets.archive_picker import ArchivePicker
from tui.widgets.tick import Tick

FIELDS = (("add", "add archive", "path of another .tar.gz, Enter"),
          ("load", "load (items)", "production load, e.g. 2000000"),
          ("deadline", "deadline", "ISO, e.g. 2026-12-04T09:00+01:00"),
          ("window_start", "window start", "ISO (default: now)"),
          # the opt-in of `iteralab compare --metric-file`: the service checks its sha256 against
          # each archive's lock and says, in one line, when it is missing or differs
          ("metric_file", "metric file", "your [quality] metric's .py (--metric-file)"))
# Overrides of compare's refusals (lab.compare.decision.compare_evidence); every output names them.
ALLOW = (("allow_partial", "allow partial evidence (--allow-partial)"),
         ("allow_short", "allow passes too short to project (--allow-short)"))


class CompareScreen(LabScreen):
    """Space selects archives (wherever the focus is, outside a text field); Enter in a field
    (or c outside the fields) compares. The result then comes first, above the archives, and a
    status line above the scrolling part says so."""

    NAME = "compare"
    AUTO_FOCUS = "#compare-archives"
    BINDINGS = [Binding("c", "compare", "Compare"), Binding("f", "refresh", "Find archives"),
                Binding("space", "toggle_archive", "Select", show=False)]

    def body(self) -> ComposeResult:
        yield Static("", id="compare-status")
        with VerticalScroll(id="compare-scroll"):
            yield Static("", id="compare-result", markup=True)  # shown once compare ran
            yield Static("Archives under runs/ (space selects):", id="compare-head")
            yield ArchivePicker(id="compare-archives")
            for key, label, hint in FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    yield Input(placeholder=hint, id=f"c-{key}", classes="field-input")
            for key, label in ALLOW:
                yield Tick(label, id=f"c-{key}", classes="allow")

    def on_screen_resume(self) -> None:
        self.action_refresh()
        if self.focused is None:  # space selects at once, without a Tab first
            self.query_one("#compare-archives", ArchivePicker).focus()

    def action_toggle_archive(self) -> None:
        """Space with the focus outside the list (the scroll area, after a comparison) toggles
        the highlighted archive too; a text field or a check box with the focus takes its own."""
        sl = self.query_one("#compare-archives", ArchivePicker)
        if sl.highlighted is not None:
            sl.toggle(sl.get_option_at_index(sl.highlighted))
            sl.focus()

    def on_selection_list_selected_changed(self, event: ArchivePicker.SelectedChanged) -> None:
        self._head()

    def action_refresh(self) -> None:
        sl = self.query_one("#compare-archives", ArchivePicker)
        chosen = set(sl.selected)
        known = {str(o.value) for o in (sl.get_option_at_index(i) for i in range(sl.option_count))}
        for p in archives_under(self.app.runs_root()):
            if str(p) not in known:
                sl.add_option((self._label(p), str(p), str(p) in chosen))
        if sl.highlighted is None and sl.option_count:
            sl.highlighted = 0
        self._head()

    def _head(self) -> None:
        sl = self.query_one("#compare-archives", ArchivePicker)
        self.query_one("#compare-head", Static).update(
            f"Archives under runs/ and added: {sl.option_count}, {len(sl.selected)} selected \\[x]; "
            "space selects, c compares:")

    @staticmethod
    def _label(p: Path) -> str:
        """The archive's folder and whole file name (a long one wraps, never cut: its end is
        the time it was made, what tells two archives of one campaign apart)."""
        return f"{p.parent.name}/{p.name}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "c-add":
            p = Path(event.value.strip()).expanduser()
            if not p.is_file():
                self._status(f"[red]{escape(str(p))}: no such archive; give the path of a .tar.gz[/red]")
                return
            self.query_one("#compare-archives", ArchivePicker).add_option(
                (self._label(p), str(p.resolve()), True))
            self._head()
            event.input.value = ""
            return
        self.action_compare()

    def fields(self) -> dict:
        typed: dict = {key: self.query_one(f"#c-{key}", Input).value.strip() for key, _, _ in FIELDS}
        return typed | {key: self.query_one(f"#c-{key}", Tick).value for key, _ in ALLOW}

    def action_compare(self) -> None:
        archives = list(self.query_one("#compare-archives", ArchivePicker).selected)
        self._status(f"comparing {len(archives)} archive(s) ...")
        self.query_one("#compare-result", Static).update(f"comparing {len(archives)} archive(s) ...")
        self._show()
        self.compare(archives, self.fields(), self.app.runs_root())

    @work(thread=True, exclusive=True, exit_on_error=False)
    def compare(self, archives: list[str], fields: dict, root: Path) -> None:
        try:
            self.post_message(CompareReady(run_comparison(archives, fields, root)))
        except ONE_LINE_ERRORS as exc:
            self.post_message(CompareReady(None, str(exc)))

    def on_compare_ready(self, msg: CompareReady) -> None:
        out = self.query_one("#compare-result", Static)
        if msg.result is None:
            out.update(f"[red]{escape(msg.error)}[/red]")
            self._status("[red]not compared[/red]: the reason is at the top; the archives and options "
                         "follow it")
            self._show()
            return
        self.result = msg.result
        # the banners (first line of every output), decision.md's decision, where the files are,
        # its quality paragraph (each host's result), a server campaign's serving decision, then the
        # decision path
        paras = {m.group(1): escape(x.replace("**", "")) for x in msg.result.decision.split("\n\n")
                 if (m := re.match(r"\*\*(\w+)", x))}
        lines = [f"[b yellow]{escape(b)}[/b yellow]" for b in msg.result.banners]
        lines += [paras.get("Decision", "Decision: see decision.md")]
        files = [Path(p) for p in msg.result.files.values()]
        if files:
            lines += ["", f"[b]Written[/b] to {escape(str(files[0].parent))}/: "
                      f"{', '.join(escape(p.name) for p in files)} (open report.html in a browser)"]
        # a server campaign's archives: the serving decision (lab.compare.serving) after the quality
        lines += [x for key in ("Quality", "Serving") if key in paras for x in ("", paras[key])]
        lines += ["", "[b]Decision path[/b]"]
        lines += [f"{i}. {escape(x)}" for i, x in enumerate(msg.result.path, 1)]
        out.update("\n".join(lines))
        self._status("[b]compared[/b]: the decision, the files written and the decision path are at "
                     "the top; up/down/PgDn scroll, Tab goes back to the archives")
        self._show()

    def _status(self, text: str) -> None:
        """The line above the scrolling part: what happened and where to look."""
        status = self.query_one("#compare-status", Static)
        status.update(text)
        status.display = True

    def _show(self) -> None:
        """The result, at the top of the scrolling part, in view; the scroll area takes the
        focus, so the arrow and page keys read on and Tab goes back to the archives."""
        self.query_one("#compare-result", Static).display = True
        scroll = self.query_one("#compare-scroll", VerticalScroll)
        scroll.focus(scroll_visible=False)
        scroll.scroll_home(animate=False)
