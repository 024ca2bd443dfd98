"""Screen 6, Cost and decision: catalog, GPU, package days, lots, campaign window; accepted
deliverables taken from validated results (editable only downward); the quote and cost per
validated corpus and the decision note, computed by ``lab.service.views.cost_view`` (pricing from
``lab.cost.forfaits``, note from ``lab.report.decision_note``)."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Markdown, Static

from lab.facts.constants import DEFAULT_LOTS
from lab.service.campaigns import ONE_LINE_ERRORS
from lab.service.views import PricingError, cost_view, declared_cost
from tui.messages import CostReady
from tui.screens.lab_screen import LabScreen

FIELDS = (("catalog", "catalog CSV", "shipped catalog"), ("gpu", "GPU", "from [cost], e.g. rtx-4090"),
          ("days", "days (3/7/30)", "from [cost], e.g. 7"), ("lots", "lots", str(DEFAULT_LOTS)),
          ("window_start", "window start", "ISO, e.g. 2026-11-30T09:00+01:00"),
          ("window_end", "window end", "ISO, e.g. 2026-12-04T09:00+01:00"),
          ("tz", "time zone", "IANA, for naive times"),
          ("accepted", "accepted corpora", "from validated results"))


class CostScreen(LabScreen):
    """Enter in a field (or c outside the fields) recomputes; Esc leaves a field.

    The fields follow the campaign the app shows: when its folder (a new protocol version run)
    or its file's [cost] changes, they are filled again from that version and the accepted
    count is cleared, so nothing typed for, or derived from, one version prices another. The
    accepted field holds only what the user typed; the validated count is its placeholder."""

    NAME = "cost"
    AUTO_FOCUS = "#cost-scroll"
    BINDINGS = [Binding("c", "compute", "Recompute")]
    filled_for: tuple | None = None
    """(campaign folder, the file's [cost] items) the fields were last filled from."""

    def body(self) -> ComposeResult:
        with VerticalScroll(id="cost-scroll"):
            for key, label, hint in FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    yield Input(placeholder=hint, id=f"f-{key}", classes="field-input")
            yield Static("", id="cost-quote", markup=True)
            yield Markdown("", id="decision-note")

    def on_mount(self) -> None:
        self.follow_campaign()

    def follow_campaign(self) -> None:
        """Fill the fields from the current version's [cost] (accepted cleared) unless they were
        filled for this campaign folder and this [cost] already."""
        try:
            cost = declared_cost(self.app.campaign_file)
        except ONE_LINE_ERRORS:  # an unusable file: the fields start empty, Recompute says why
            cost = {}
        source = (self.app.campaign_dir, tuple(sorted((k, str(v)) for k, v in cost.items())))
        if source == self.filled_for:
            return
        self.filled_for = source
        for key, _, _ in FIELDS:
            self.query_one(f"#f-{key}", Input).value = str(cost[key]) if key in cost else ""

    def on_screen_resume(self) -> None:
        self.follow_campaign()
        self.action_compute()

    def fields(self) -> dict:
        return {key: self.query_one(f"#f-{key}", Input).value.strip() for key, _, _ in FIELDS}

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_compute()

    def action_compute(self) -> None:
        self.query_one("#cost-quote", Static).update("computing ...")
        self.compute(self.fields(), self.app.campaign_dir)

    @work(thread=True, exclusive=True, exit_on_error=False)
    def compute(self, fields: dict, campaign_dir) -> None:
        try:
            self.post_message(CostReady(cost_view(self.app.campaign_file, campaign_dir, fields)))
        except PricingError as exc:  # in this screen's terms: the catalog CSV field, not --catalog
            self.post_message(CostReady(None, exc.reworded("give a catalog's path in the catalog CSV field")))
        except ONE_LINE_ERRORS as exc:
            self.post_message(CostReady(None, str(exc)))

    def on_cost_ready(self, msg: CostReady) -> None:
        out = self.query_one("#cost-quote", Static)
        if msg.cost is None:
            out.update(f"[red]{escape(msg.error)}[/red]")
            return
        c = msg.cost
        self.cost = c
        acc = self.query_one("#f-accepted", Input)
        acc.placeholder = f"{c.validated} validated; type fewer to price fewer"
        if acc.value.strip() and acc.value.strip() != str(c.accepted):  # typed above the count: capped
            acc.value = str(c.accepted)
        head = (f"[b]Validated corpora[/b] {c.validated} (accepted used: {c.accepted}; "
                "editable only downward)\n")
        warn = f"[yellow]{escape(c.warning)}[/yellow]\n" if c.warning else ""
        out.update(head + warn + escape(c.quote_text))
        self.query_one("#decision-note", Markdown).update(c.note_md)
