"""Screen 6, Cost and decision: catalog, GPU, package days, lots, campaign window; accepted
deliverables taken from validated results (editable only downward); the quote and cost per
validated corpus (``lab.cost.forfaits``) and the decision note (``lab.report.decision``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Label, Markdown, Static

from tui.messages import CostReady
from tui.screens.lab_screen import LabScreen

FIELDS = (("catalog", "catalog CSV", "shipped catalog"), ("gpu", "GPU", "from [cost], e.g. rtx-4090"),
          ("days", "days (3/7/30)", "7"), ("lots", "lots", "1"),
          ("window_start", "window start", "ISO, e.g. 2026-11-30T09:00+01:00"),
          ("window_end", "window end", "ISO, e.g. 2026-12-04T09:00+01:00"),
          ("tz", "time zone", "IANA, for naive times"),
          ("accepted", "accepted corpora", "from validated results"))


def load_summary(campaign_dir: Path | None) -> list[dict]:
    """The report's per-variant summary (report/summary.json, built when missing); [] without a campaign."""
    if campaign_dir is None:
        return []
    p = Path(campaign_dir) / "report" / "summary.json"
    if not p.is_file():
        from lab.report.build import build_report

        return build_report(campaign_dir)["summary"]
    return json.loads(p.read_text())


def validated_corpora(summary: list[dict]) -> int:
    """Distinct useful corpora validated: the campaign's corpus counts once when any pass of
    any variant was accepted (SPEC 3.11: 5 repetitions are not 5 corpora)."""
    return 1 if any(v.get("accepted_passes", 0) >= 1 for v in summary) else 0


def compute_cost(campaign_file: Path, campaign_dir: Path | None, fields: dict) -> dict:
    """{quote_text, validated, accepted, warning, note_md}. Raises PricingError/ProtocolError."""
    from lab.cost.forfaits import load_catalog, parse_window, quote, render_quote
    from lab.protocol import load_protocol
    from lab.report.decision import decision_note

    proto = load_protocol(campaign_file)
    summary = load_summary(campaign_dir)
    validated = validated_corpora(summary)
    warning = ""
    wanted = fields.get("accepted", "").strip()
    accepted = validated
    if wanted:
        if not wanted.isdigit():
            warning = f"accepted corpora {wanted!r} is not an integer >= 0; using {validated}"
        elif int(wanted) > validated:
            warning = (f"accepted corpora cannot exceed the {validated} validated by this campaign; "
                       f"using {validated}")
        else:
            accepted = int(wanted)
    catalog = load_catalog(fields.get("catalog") or None)
    window = None
    if fields.get("window_start") or fields.get("window_end"):
        window = parse_window(fields.get("window_start", ""), fields.get("window_end", ""),
                              fields.get("tz") or None)
    declared = asdict(proto.cost) if proto.cost is not None else {}  # no [cost]: no package declared

    def pick(key: str):
        return fields.get(key) or declared.get(key)

    if pick("gpu") and pick("days"):
        q = quote(catalog, pick("gpu"), pick("days"), pick("lots") or "1", accepted if accepted >= 1 else None)
        text = render_quote(q, window)
        if accepted == 0:
            text += "\nCost per validated corpus: undefined (no accepted corpus)"
    else:
        text = ("No package declared: the campaign file has no [cost] section; enter a GPU and days "
                "above to price one")
    c = proto.config.campaign
    camp = {"name": proto.name, "question": c.question, "deadline": c.deadline,
            "deliverables": c.deliverables}
    pricing = {"catalog_path": fields.get("catalog") or declared.get("catalog"), "gpu": pick("gpu"),
               "days": pick("days"), "lots": pick("lots") or 1,
               "window_start": fields.get("window_start") or None,
               "window_end": fields.get("window_end") or None, "tz": fields.get("tz") or None}
    note = decision_note(summary, camp, pricing) if summary else \
        "_No results yet: the decision note needs at least one finished pass._"
    return {"quote_text": text, "validated": validated, "accepted": accepted, "warning": warning,
            "note_md": note}


class CostScreen(LabScreen):
    """Enter in a field (or c outside the fields) recomputes; Esc leaves a field."""

    NAME = "cost"
    AUTO_FOCUS = "#cost-scroll"
    BINDINGS = [Binding("c", "compute", "Recompute")]

    def body(self) -> ComposeResult:
        with VerticalScroll(id="cost-scroll"):
            for key, label, hint in FIELDS:
                with Horizontal(classes="field"):
                    yield Label(label, classes="field-label")
                    yield Input(placeholder=hint, id=f"f-{key}", classes="field-input")
            yield Static("", id="cost-quote", markup=True)
            yield Markdown("", id="decision-note")

    def on_mount(self) -> None:
        from lab.protocol import ProtocolError, load_protocol

        try:
            cost = load_protocol(self.app.campaign_file).raw.get("cost", {})
        except ProtocolError:
            cost = {}
        for key, _, _ in FIELDS:
            if key in cost:
                self.query_one(f"#f-{key}", Input).value = str(cost[key])

    def on_screen_resume(self) -> None:
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
        from lab.cost.forfaits import PricingError
        from lab.protocol import ProtocolError

        try:
            self.post_message(CostReady(compute_cost(self.app.campaign_file, campaign_dir, fields)))
        except (PricingError, ProtocolError) as exc:
            self.post_message(CostReady(None, str(exc)))

    def on_cost_ready(self, msg: CostReady) -> None:
        out = self.query_one("#cost-quote", Static)
        if msg.cost is None:
            out.update(f"[red]{escape(msg.error)}[/red]")
            return
        c = msg.cost
        self.cost = c
        acc = self.query_one("#f-accepted", Input)
        if acc.value.strip() != str(c["accepted"]):
            acc.value = str(c["accepted"])
        head = (f"[b]Validated corpora[/b] {c['validated']} (accepted used: {c['accepted']}; "
                "editable only downward)\n")
        warn = f"[yellow]{escape(c['warning'])}[/yellow]\n" if c["warning"] else ""
        out.update(head + warn + escape(c["quote_text"]))
        self.query_one("#decision-note", Markdown).update(c["note_md"])
