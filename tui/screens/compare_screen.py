"""Screen 8, Compare: the evidence archives under runs/ (and any the user adds by path),
the declared load, deadline and window start; builds the same comparison as
`iteralab compare` (``lab.views.run_comparison`` over ``lab.compare.compare_to_folder``) in a
thread worker and shows the decision path and the decision; the files land in
runs/compare/<UTC time>/."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Checkbox, Input, Label, SelectionList, Static

from lab.views import run_comparison
from tui.messages import CompareReady
from tui.screens.lab_screen import LabScreen

FIELDS = (("add", "add archive", "path of another .tar.gz, Enter"),
          ("load", "load (items)", "production load, e.g. 2000000"),
          ("deadline", "deadline", "ISO, e.g. 2026-12-04T09:00+01:00"),
          ("window_start", "window start", "ISO (default: now)"))
# Overrides of compare's refusals (lab.compare.decision.compare_evidence); every output names them.
ALLOW = (("allow_partial", "allow partial evidence (--allow-partial)"),
         ("allow_short", "allow passes too short to project (--allow-short)"))


class CompareScreen(LabScreen):
    """Space selects archives; Enter in a field (or c outside the fields) compares."""

    NAME = "compare"
    AUTO_FOCUS = "#compare-archives"
    BINDINGS = [Binding("c", "compare", "Compare"), Binding("f", "refresh", "Find archives")]

    def body(self) -> ComposeResult:
        with VerticalScroll(id="compare-scroll"):
            yield Static("Archives under runs/ (space selects):", id="compare-head")
            yield SelectionList(id="compare-archives")
            for key, label, hint in FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    yield Input(placeholder=hint, id=f"c-{key}", classes="field-input")
            for key, label in ALLOW:
                yield Checkbox(label, id=f"c-{key}")
            yield Static("", id="compare-result", markup=True)

    def on_screen_resume(self) -> None:
        self.action_refresh()

    def action_refresh(self) -> None:
        from lab.compare import list_archives

        sl = self.query_one("#compare-archives", SelectionList)
        chosen = set(sl.selected)
        known = {str(o.value) for o in (sl.get_option_at_index(i) for i in range(sl.option_count))}
        for p in list_archives(self.app.runs_root()):
            if str(p) not in known:
                sl.add_option((self._label(p), str(p), str(p) in chosen))
        if sl.highlighted is None and sl.option_count:
            sl.highlighted = 0
        self.query_one("#compare-head", Static).update(
            f"Archives under runs/ and added ({sl.option_count}); space selects, c compares:")

    @staticmethod
    def _label(p: Path) -> str:
        return f"{p.parent.name}/{p.name}"[:70]

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "c-add":
            p = Path(event.value.strip()).expanduser()
            out = self.query_one("#compare-result", Static)
            if not p.is_file():
                out.update(f"[red]{escape(str(p))}: no such archive; give the path of a .tar.gz[/red]")
                return
            self.query_one("#compare-archives", SelectionList).add_option(
                (self._label(p), str(p.resolve()), True))
            event.input.value = ""
            return
        self.action_compare()

    def fields(self) -> dict:
        typed: dict = {key: self.query_one(f"#c-{key}", Input).value.strip() for key, _, _ in FIELDS}
        return typed | {key: self.query_one(f"#c-{key}", Checkbox).value for key, _ in ALLOW}

    def action_compare(self) -> None:
        archives = list(self.query_one("#compare-archives", SelectionList).selected)
        self.query_one("#compare-result", Static).update(f"comparing {len(archives)} archive(s) ...")
        self.compare(archives, self.fields(), self.app.runs_root())

    @work(thread=True, exclusive=True, exit_on_error=False)
    def compare(self, archives: list[str], fields: dict, root: Path) -> None:
        from lab.archive import ArchiveError
        from lab.compare import CompareError
        from lab.cost.forfaits import PricingError

        try:
            self.post_message(CompareReady(run_comparison(archives, fields, root)))
        except (CompareError, ArchiveError, PricingError) as exc:
            self.post_message(CompareReady(None, str(exc)))

    def on_compare_ready(self, msg: CompareReady) -> None:
        out = self.query_one("#compare-result", Static)
        if msg.result is None:
            out.update(f"[red]{escape(msg.error)}[/red]")
            return
        self.result = msg.result
        # decision.md's headline: the decision, then its quality (each host's result) paragraph
        head = [x for x in msg.result["decision"].split("\n\n")[1:3]
                if x.startswith(("**Decision", "**Quality"))]
        lines = ["[b]Decision path[/b]"] + [f"{i}. {escape(x)}" for i, x in enumerate(msg.result["path"], 1)]
        for para in head:
            lines += ["", escape(para.replace("**", ""))]
        lines += ["", "[b]Written[/b] (open report.html in a browser)"]
        lines += [f"  {escape(p)}" for p in msg.result["files"].values()]
        out.update("\n".join(lines))
