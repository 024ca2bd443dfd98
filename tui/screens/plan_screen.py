"""Screen 3, Plan: series and variants, the rotated schedule, the number of passes, the
cards per pass, memory feasibility per variant from the memory lab (``lab.service.views.build_plan``
over ``lab.memory.feasibility.batch_fits``: largest batch per length bucket under the GPU's
memory, estimate with its margin; without a GPU the estimated peak of the variant's own batch
against host RAM, since a largest batch of thousands informs no choice; a vLLM variant: what
vLLM reserves up front, lab.memory.feasibility.reservation_fits), and the checks
`protocol lock` runs (``lab.orchestration.preflight.lock_checks``; "cards" refuses a campaign that asks for
more cards than the host has, in one line)."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from lab.service.campaigns import ONE_LINE_ERRORS
from lab.service.views import build_plan
from tui.messages import PlanReady
from tui.screens.lab_screen import LabScreen


class PlanScreen(LabScreen):
    """Computed in a thread worker on each visit (the file may have changed)."""

    NAME = "plan"

    def body(self) -> ComposeResult:
        with VerticalScroll(id="plan-scroll"):
            yield Static("planning ...", id="plan-head", markup=True)
            yield DataTable(id="plan-variants", cursor_type="row")
            yield Static("", id="plan-budget-note", markup=True)
            yield Static("", id="plan-schedule", markup=True)
            yield Static("", id="plan-checks", markup=True)

    COLUMNS = ("variant", "id", "batch", "largest batch s/m/l", "fits")
    # no GPU: the budget is host RAM, where the largest batch (thousands) informs no choice;
    # the estimated peak of the variant's own batch on the long bucket does
    CPU_COLUMNS = ("variant", "id", "batch", "est. peak, long", "fits")

    def on_mount(self) -> None:
        t = self.query_one("#plan-variants", DataTable)
        for c in self.COLUMNS:
            t.add_column(c, key=c)

    def on_screen_resume(self) -> None:
        self.compute()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def compute(self) -> None:
        try:
            facts = self.app.environment_facts()
            if facts is None:  # this worker was cancelled while the probe ran (the UI quits)
                return
            self.post_message(PlanReady(build_plan(self.app.campaign_file, facts)))
        except ONE_LINE_ERRORS as exc:
            self.post_message(PlanReady(None, str(exc)))

    def on_plan_ready(self, msg: PlanReady) -> None:
        head = self.query_one("#plan-head", Static)
        if msg.plan is None:
            head.update(f"[red]{escape(msg.error)}[/red]")
            return
        p = msg.plan
        self.plan = p
        budget = ("unknown" if p.budget_bytes is None
                  else f"{p.budget_bytes / 2**30:.1f} GiB {p.budget_what}")
        head.update(f"[b]Series[/b] {', '.join(p.series)}: {len(p.variants)} variants x "
                    f"{len(p.schedule)} repetitions = [b]{p.passes} passes[/b]\n"
                    f"[b]Memory budget[/b] {escape(budget)}"
                    + (f", margin {p.margin:.0%} kept for what the estimate leaves out"
                       if p.margin is not None else "")
                    + (f"\n[b]Cards per pass[/b] {', '.join(map(str, p.cards))}"
                       " (more than 1: workers under torchrun)"
                       if p.cards != (1,) else "")
                    + (f"\n[yellow]{escape(p.note)}[/yellow]" if p.note else ""))
        t = self.query_one("#plan-variants", DataTable)
        on_gpu = p.budget_what.startswith("GPU")
        rows = []
        for v in p.variants:
            fb = v.fits
            if v.reservation:  # vLLM: what it reserves up front, of the budget
                res = v.reservation
                cell = f"vLLM reserves {res.reserved_bytes / 2**20:,.0f} MiB ({res.fraction:g})"
            elif on_gpu:
                cell = "/".join(str(fb[b]) if b in fb else "-" for b in ("short", "medium", "long")) or "-"
            else:
                peak = v.peak_estimate_bytes.get("long")
                cell = "-" if peak is None else f"{peak / 2**20:,.0f} MiB"
            fits = {True: "yes", False: "NO", None: "not estimated"}[v.fits_all]
            rows.append((v.name, v.variant_id, str(v.batch_size), cell, fits))
        note = self.query_one("#plan-budget-note", Static)
        note.update("" if p.budget_bytes is None else
                    f"largest batch s/m/l: per length bucket, within {escape(budget)}" if on_gpu else
                    f"fits: estimated peak of the variant's own batch within {escape(budget)}; "
                    "a largest batch against host RAM would inform no choice")
        # columns made again with explicit widths from their cells: the header always matches
        t.clear(columns=True)
        for i, c in enumerate(self.COLUMNS if on_gpu else self.CPU_COLUMNS):
            t.add_column(c, key=c, width=max([len(c)] + [len(r[i]) for r in rows]))
        for r in rows:
            t.add_row(*r)
        lines = ["[b]Rotated schedule[/b] (no variant always first)"]
        lines += [f"  r{i}: " + " -> ".join(r) for i, r in enumerate(p.schedule, 1)]
        self.query_one("#plan-schedule", Static).update("\n".join(lines))
        mark = {True: "[green]ok[/green]  ", False: "[red]NO[/red]  ", None: "[yellow]--[/yellow]  "}
        checks = ["[b]Checks at lock[/b] (`protocol lock` refuses on NO)"]
        # every "[" escaped: rich's escape() leaves upper-case tags such as [PAD] as markup
        checks += ["  " + mark[c.ok] + f"{c.name}: {c.detail}".replace("[", "\\[") for c in p.checks]
        self.query_one("#plan-checks", Static).update("\n".join(checks))
