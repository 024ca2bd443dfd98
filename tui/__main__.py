"""`python -m tui` (`make up`, `iteralab up`): the terminal UI on a terminal, else the demo
campaign headless (its archive path is the last line printed).

    python -m tui [--launcher auto|local|docker] [--memory-limit BYTES] [--headless] [CAMPAIGN.toml]

Without CAMPAIGN.toml: ./campaign.toml (or $ITERALAB_CAMPAIGN) when the user wrote one,
else the embedded demo campaign. Errors print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lab.campaigns import (LAUNCHERS, USER_ERRORS, CampaignError, default_campaign_file, memory_limit_bytes,
                           run_demo)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tui", description=__doc__.split("\n\n")[0])
    p.add_argument("campaign", nargs="?", help="campaign file (TOML); default: ./campaign.toml or the demo")
    limit = os.environ.get("ITERALAB_MEMORY_LIMIT")
    p.add_argument("--launcher", choices=LAUNCHERS, default=os.environ.get("ITERALAB_LAUNCHER", "auto"),
                   help="how passes run (default: $ITERALAB_LAUNCHER, else auto)")
    p.add_argument("--memory-limit", default=limit or None,
                   help="bytes per pass, host memory (default: $ITERALAB_MEMORY_LIMIT)")
    p.add_argument("--headless", action="store_true", help="run the demo campaign without the UI")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    try:
        a.memory_limit = memory_limit_bytes(a.memory_limit)
        if sys.stdin.isatty() and sys.stdout.isatty() and not a.headless:
            from tui.app import run_app

            return run_app(Path(a.campaign) if a.campaign else default_campaign_file(),
                           launcher=a.launcher, memory_limit=a.memory_limit)
        if a.campaign:
            raise CampaignError("headless mode runs the demo campaign only; for a campaign file use "
                                "`iteralab campaign run FILE`")
        print(run_demo(a.launcher, echo=lambda line: print(line, flush=True), memory_limit=a.memory_limit))
        return 0
    except USER_ERRORS as exc:
        print(f"iteralab: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
