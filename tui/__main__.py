"""`python -m tui` (`make up`, `iteralab up`): the terminal UI on a terminal, else the same
campaign headless: ./campaign.toml (or $ITERALAB_CAMPAIGN) when the user wrote one, else the
demo campaign (the archive path is the last line printed when it finishes).

    python -m tui [--launcher auto|local|docker] [--memory-limit BYTES] [--headless] [CAMPAIGN.toml]

Headless: one line per pass start and end, a progress line at least every 30 s of a pass
(items, items/s, ETA of the pass and of the campaign); exit 0 when finished with an accepted
pass, 6 when finished with none (lab.service.campaigns.run_exit_status), 3 paused, 4
stopped, 5 blocked (with a line "paused: N of M passes ..."), 130 on Ctrl-C and 128 + N on
signal N (SIGTERM, SIGHUP): the running pass is killed and recorded interrupted, never left
running. Errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lab.facts.errors import EXIT_USER
from lab.service.campaigns import (
    LAUNCHERS,
    ONE_LINE_ERRORS,
    CampaignInterrupted,
    default_campaign_file,
    interrupt_on_signals,
    memory_limit_bytes,
    run_demo,
    run_headless,
    runs_root,
)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tui", description=__doc__.split("\n\n")[0])
    p.add_argument("campaign", nargs="?", help="campaign file (TOML); default: ./campaign.toml or the demo")
    limit = os.environ.get("ITERALAB_MEMORY_LIMIT")
    p.add_argument("--launcher", choices=LAUNCHERS, default=os.environ.get("ITERALAB_LAUNCHER", "auto"),
                   help="how passes run (default: $ITERALAB_LAUNCHER, else auto)")
    p.add_argument("--memory-limit", default=limit or None,
                   help="bytes per pass, host memory (default: $ITERALAB_MEMORY_LIMIT)")
    p.add_argument("--headless", action="store_true",
                   help="run the campaign (./campaign.toml, else the demo) without the UI")
    return p


def _echo(line: str, stream=None) -> None:
    try:
        print(line, flush=True, file=stream or sys.stdout)
    except OSError:  # the terminal went away (SSH drop): the campaign goes on, its journal records it
        pass


def headless(campaign: Path, launcher: str, memory_limit: int | None, demo: bool = False) -> int:
    """Run ``campaign`` (``demo``: the demo campaign's copy) in this process; the exit status of
    the module docstring."""
    try:
        with interrupt_on_signals():
            if demo:
                r = run_demo(launcher, echo=_echo, memory_limit=memory_limit)
            else:
                r = run_headless(campaign, launcher, echo=_echo, memory_limit=memory_limit)
    except CampaignInterrupted as exc:
        _echo(f"iteralab: {exc.reason}: the running pass was killed and recorded interrupted; "
              "`make up` (or the same command) resumes", sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        _echo("iteralab: interrupted (SIGINT): the running pass was killed and recorded interrupted; "
              "`make up` (or the same command) resumes", sys.stderr)
        return 130
    _echo(r.line)
    return r.exit


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        a.memory_limit = memory_limit_bytes(a.memory_limit)
        campaign = Path(a.campaign) if a.campaign else default_campaign_file()
        if sys.stdin.isatty() and sys.stdout.isatty() and not a.headless:
            from tui.app import run_app

            return run_app(campaign, launcher=a.launcher, memory_limit=a.memory_limit)
        demo = a.campaign is None and campaign.resolve() == (runs_root() / "demo" / "demo.toml").resolve()
        return headless(campaign, a.launcher, a.memory_limit, demo)
    except ONE_LINE_ERRORS as exc:  # lab.facts.errors.LabError and below
        print(f"iteralab: error: {exc}", file=sys.stderr)
        return EXIT_USER


if __name__ == "__main__":
    sys.exit(main())
