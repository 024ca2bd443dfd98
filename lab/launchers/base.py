"""What every launcher does: run one pass (process or container) and hand back its stdout lines.

A launcher starts ``python -m lab.passes.runner <pass.json>`` somewhere, calls ``on_line``
with each whole decoded stdout line as it arrives (chunks are not lines), writes stderr to
the pass's log, waits, and reports how the pass ended. The orchestrator turns lines into
journal events the same way for every launcher, so a UI cannot tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from lab.passes.spec import PassSpec

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class LaunchOutcome:
    """How a pass process ended.

    ``exit_code``: process/container exit code (negative = killed by that signal; None if
    unknown). ``killed_host_memory``: the kernel or the engine killed it for host memory
    (container State.OOMKilled, or SIGKILL under a memory limit). ``isolation``: e.g.
    "container <image digest>" or "no container isolation (local process)".
    """

    exit_code: int | None
    killed_host_memory: bool = False
    container_id: str = ""
    isolation: str = ""
    note: str = ""
    extra: dict = field(default_factory=dict)


class Launcher(Protocol):
    """Runs passes. ``name`` is recorded in the raw table and manifest."""

    name: str

    def launch(self, spec: PassSpec, pass_dir: Path, on_line: LineSink,
               should_stop: Callable[[], bool] = lambda: False) -> LaunchOutcome:
        """Run the pass described by ``pass_dir/pass.json`` (``spec``); block until it ends.

        ``should_stop()`` is polled; when True the launcher kills the pass (the row
        becomes "interrupted"). Never raises for a failed pass: failures are outcomes.
        """
        ...

    def describe(self) -> dict:
        """Facts for the manifest (engine version, image digest, runtime, or 'local')."""
        ...


def limit_reason(started: float, last_line: float, timeout_s: float | None, stall_s: float | None,
                 now: float | None = None) -> str:
    """Why a running pass must be killed now ("" = it may go on). Times are time.monotonic().

    ``timeout_s``: whole pass; ``stall_s``: since the last event line ([timing] pass_timeout_s
    and stall_s of the campaign file).
    """
    import time

    now = time.monotonic() if now is None else now
    if timeout_s is not None and now - started > timeout_s:
        return f"killed after the {timeout_s:.0f} s pass timeout ([timing] pass_timeout_s)"
    if stall_s is not None and now - last_line > stall_s:
        return (f"stalled: no event for {stall_s:.0f} s ([timing] stall_s); the pass process was stopped "
                "or hung, killed")
    return ""
