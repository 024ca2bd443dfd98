"""Screen 1, Environment: backend, GPUs with memory, driver and runtime, Docker engine and
image, disk and RAM; problems in plain words with the fix (``lab.service.views.collect_environment``
over ``lab.orchestration.doctor``)."""

from __future__ import annotations

from rich.markup import escape
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Static

from lab.service.campaigns import ONE_LINE_ERRORS
from lab.service.environment_facts import EnvironmentFacts
from tui.messages import EnvironmentReady
from tui.screens.lab_screen import LabScreen


def _gib(n) -> str:
    return "not measured" if n is None else f"{n / 2**30:.1f} GiB"


def render_environment(f: EnvironmentFacts) -> str:
    """Plain text, one fact per line, checks with their fix (Rich markup)."""
    g = f.gpu
    lines = [f"[b]Backend[/b]   {f.backend}" + ("  (no GPU visible: passes run on CPU)" if f.backend == "cpu" else "")]
    if g.devices:
        for d in g.devices:
            lines.append(f"[b]GPU {d.index}[/b]     {escape(d.name)}, {_gib(d.memory_bytes)}")
    else:
        lines.append("[b]GPUs[/b]      none detected")
    lines.append(f"[b]Driver[/b]    {g.driver}" + (f"  ({escape(g.driver_note)})" if g.driver_note else ""))
    lines.append(f"[b]Runtime[/b]   CUDA {g.cuda_runtime}, HIP {g.hip_runtime}")
    lines.append(f"[b]Host[/b]      {f.cpu_cores} CPU cores, RAM {_gib(f.ram_total_bytes)} "
                 f"({_gib(f.ram_available_bytes)} available)")
    lines.append(f"[b]Disk[/b]      {_gib(f.disk_free_bytes)} free at {escape(f.disk_path)}")
    lines.append("")
    lines.append("[b]Checks[/b] (lab.orchestration.doctor)")
    for c in f.checks:
        # as `iteralab doctor` marks them (lab.orchestration.doctor.Check.level): a failed check that does
        # not stop a campaign is a warning
        mark = "[green]ok  [/green]" if c.ok else "[red]FAIL[/red]" if c.blocking else "[yellow]WARN[/yellow]"
        lines.append(f" {mark} {escape(c.name)}: {escape(str(c.detail))}")
        if c.fix and not c.ok:
            lines.append(f"      fix: {escape(c.fix)}")
    return "\n".join(lines)


class EnvironmentScreen(LabScreen):
    """Probes once on mount (thread worker); r probes again."""

    NAME = "environment"
    BINDINGS = [Binding("r", "probe", "Re-probe")]

    def body(self) -> ComposeResult:
        with VerticalScroll(id="env-scroll"):
            yield Static("probing the environment ...", id="env-facts", markup=True)

    def on_mount(self) -> None:
        self.action_probe()

    def action_probe(self) -> None:
        self.query_one("#env-facts", Static).update("probing the environment ...")
        self.probe()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def probe(self) -> None:
        try:
            facts = self.app.environment_facts(refresh=True)
            if facts is not None:  # None: this worker was cancelled (the UI quits, or r again)
                self.post_message(EnvironmentReady(facts))
        except ONE_LINE_ERRORS as exc:
            self.post_message(EnvironmentReady(None, error=str(exc)))

    def on_environment_ready(self, msg: EnvironmentReady) -> None:
        text = (f"[red]probing failed: {escape(msg.error)}[/red]" if msg.facts is None
                else render_environment(msg.facts))
        self.query_one("#env-facts", Static).update(text)
