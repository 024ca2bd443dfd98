"""Screen 3, Plan: series and variants, the rotated schedule, the number of passes, the
cards per pass, memory feasibility per variant from the memory lab
(``lab.memory.feasibility.batch_fits``: largest batch per length bucket under the GPU's
memory, estimate with its margin; without a GPU the estimated peak of the variant's own
batch against host RAM, since a largest batch of thousands informs no choice), and the
checks `protocol lock` runs (``lab.preflight.lock_checks``; "cards" refuses a campaign
that asks for more cards than the host has, in one line)."""

from __future__ import annotations

import threading

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from tui.messages import PlanReady
from tui.screens.lab_screen import LabScreen
from tui.widgets.pass_table import variant_short


_SHAPES: dict = {}
_SHAPE_LOCK = threading.Lock()  # transformers' lazy imports are not thread-safe


def model_shape(model_ref: str):
    """EncoderShape of a checkpoint (meta device; cached: building it takes seconds)."""
    from lab.memory.estimate import EncoderShape

    with _SHAPE_LOCK:
        if model_ref not in _SHAPES:
            _SHAPES[model_ref] = EncoderShape.from_pretrained(model_ref)
        return _SHAPES[model_ref]


def budget_of(facts: dict) -> tuple[int | None, str]:
    """(bytes, what): the first GPU's memory, else host RAM (no GPU: host memory is the limit)."""
    devices = (facts.get("gpu") or {}).get("devices") or []
    if devices:
        return int(devices[0]["memory_bytes"]), f"GPU 0 memory ({devices[0]['name']})"
    if facts.get("ram_total_bytes"):
        return int(facts["ram_total_bytes"]), "host RAM (no GPU)"
    return None, "no memory budget known"


def build_plan(campaign_file, facts: dict) -> dict:
    """{variants: [{name, variant_id, label, batch_size, fits: {bucket: max batch}, fits_long}],
    schedule: [[short names per repetition]], passes, budget_bytes, budget_what, margin, note,
    cards: [cards per pass], checks: [(name, ok, detail)] of lab.preflight.lock_checks}.
    Raises ProtocolError on an unusable campaign file."""
    from lab.protocol import load_protocol
    from lab.schedule import rotated_schedule

    proto = load_protocol(campaign_file)
    sched = rotated_schedule(list(proto.variants), proto.timing["repetitions"])
    reps: dict[int, list[str]] = {}
    for p in sched:
        reps.setdefault(p.repetition, []).append(variant_short(p.variant.to_json()))
    out = {"variants": [], "schedule": [reps[r] for r in sorted(reps)], "passes": len(sched),
           "series": sorted({v.series for v in proto.variants}), "note": ""}
    out["cards"] = sorted({v.cards for v in proto.variants})  # refusal: lock check "cards"
    budget, what = budget_of(facts)
    out.update(budget_bytes=budget, budget_what=what, margin=None)
    fits: dict = {}
    try:
        from lab.corpus import read_corpus
        from lab.memory.feasibility import DEFAULT_MARGIN_FRACTION, batch_fits

        longest: dict[str, int] = {}
        for r in read_corpus(proto.corpus_path):
            b, n = r.get("bucket"), r.get("n_tokens")
            if b and n:
                longest[b] = max(longest.get(b, 0), int(n))
        shape = model_shape(proto.model_ref)
        out["margin"] = DEFAULT_MARGIN_FRACTION
        for v in proto.variants:
            if budget and longest:
                fits[v.variant_id] = batch_fits(shape, v.precision, longest, budget, v.max_length,
                                                v.batch_size)
    except Exception as exc:  # no model/corpus yet: say why, keep the plan
        out["note"] = f"memory estimate not available: {type(exc).__name__}: {exc}"[:200]
    try:
        from lab.preflight import lock_checks

        out["checks"] = [(c.name, c.ok, c.detail) for c in lock_checks(proto)]
    except Exception as exc:  # say why, keep the plan
        out["checks"] = [("lock checks", False, f"{type(exc).__name__}: {exc}"[:200])]
    for v in proto.variants:
        f = fits.get(v.variant_id) or {}
        out["variants"].append({
            "name": variant_short(v.to_json()), "variant_id": v.variant_id, "label": v.label,
            "series": v.series, "batch_size": v.batch_size,
            "fits": {b: x.max_batch_size for b, x in f.items()},
            "peak_estimate_bytes": {b: x.weights_bytes + v.batch_size * x.activation_bytes_per_item
                                    for b, x in f.items()},
            "fits_all": all(x.variant_fits for x in f.values()) if f else None})
    return out


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
        from lab.protocol import ProtocolError

        try:
            self.post_message(PlanReady(build_plan(self.app.campaign_file, self.app.environment_facts())))
        except (ProtocolError, ValueError) as exc:
            self.post_message(PlanReady(None, str(exc)))

    def on_plan_ready(self, msg: PlanReady) -> None:
        head = self.query_one("#plan-head", Static)
        if msg.plan is None:
            head.update(f"[red]{escape(msg.error)}[/red]")
            return
        p = msg.plan
        self.plan = p
        budget = ("unknown" if p["budget_bytes"] is None
                  else f"{p['budget_bytes'] / 2**30:.1f} GiB {p['budget_what']}")
        head.update(f"[b]Series[/b] {', '.join(p['series'])}: {len(p['variants'])} variants x "
                    f"{len(p['schedule'])} repetitions = [b]{p['passes']} passes[/b]\n"
                    f"[b]Memory budget[/b] {escape(budget)}"
                    + (f", margin {p['margin']:.0%} kept for what the estimate leaves out"
                       if p["margin"] is not None else "")
                    + (f"\n[b]Cards per pass[/b] {', '.join(map(str, p['cards']))} (more than 1: workers under torchrun)"
                       if p["cards"] != [1] else "")
                    + (f"\n[yellow]{escape(p['note'])}[/yellow]" if p["note"] else ""))
        t = self.query_one("#plan-variants", DataTable)
        on_gpu = p["budget_what"].startswith("GPU")
        rows = []
        for v in p["variants"]:
            fb = v["fits"]
            if on_gpu:
                cell = "/".join(str(fb[b]) if b in fb else "-" for b in ("short", "medium", "long")) or "-"
            else:
                peak = (v.get("peak_estimate_bytes") or {}).get("long")
                cell = "-" if peak is None else f"{peak / 2**20:,.0f} MiB"
            fits = {True: "yes", False: "NO", None: "not estimated"}[v["fits_all"]]
            rows.append((v["name"], v["variant_id"], str(v["batch_size"]), cell, fits))
        note = self.query_one("#plan-budget-note", Static)
        note.update("" if p["budget_bytes"] is None else
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
        lines += [f"  r{i}: " + " -> ".join(r) for i, r in enumerate(p["schedule"], 1)]
        self.query_one("#plan-schedule", Static).update("\n".join(lines))
        mark = {True: "[green]ok[/green]  ", False: "[red]NO[/red]  ", None: "[yellow]--[/yellow]  "}
        checks = ["[b]Checks at lock[/b] (`protocol lock` refuses on NO)"]
        # every "[" escaped: rich's escape() leaves upper-case tags such as [PAD] as markup
        checks += ["  " + mark[ok] + f"{name}: {detail}".replace("[", "\\[") for name, ok, detail in p.get("checks", [])]
        self.query_one("#plan-checks", Static).update("\n".join(checks))
