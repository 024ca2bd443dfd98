"""A campaign's current state, read from its journal (for the CLI and the UI)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from lab.orchestration.journal import Journal
from lab.passes.events import FILLS_SLOT, FINISHED
from lab.passes.records import Attempt


class CampaignState(StrEnum):
    """A campaign's state (journal control key ``state``); plain strings in SQLite and JSON."""

    NOT_STARTED = "not started"
    RUNNING = "running"          # an orchestrator runs it now
    PAUSED = "paused"            # after the current pass, on request; `campaign run` resumes
    STOPPED = "stopped"          # stopped now, on request; the running pass is an interrupted row
    FINISHED = "finished"        # every planned slot has a finished attempt
    BLOCKED = "blocked"          # a pass found no usable GPU for its declared device
    INTERRUPTED = "interrupted"  # the journal says running but its orchestrator is gone


def process_create_time(pid: int | None = None) -> float | None:
    """Start time of process ``pid`` (default: this one), seconds since the epoch (psutil)."""
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


START_TIME_TOLERANCE_S = 2.0
"""How far a live process's start time (psutil ``create_time``: clock ticks since boot plus
the boot time read from /proc/stat, whole seconds recomputed from the wall clock) may be
from the one recorded and still be that process. The wall clock moves under NTP or a manual
step during a days-long campaign, and the boot time read then moves with it, by whole
seconds; a recycled pid would have to be reused by a process started within the same two
seconds."""


def orchestrator_alive(info: dict | None) -> bool:
    """True when the journal's orchestrator is still that same process: its pid is live AND
    that process started when the recorded one did, within ``START_TIME_TOLERANCE_S`` (a
    recycled pid is another process).

    A journal without the start time (written before it was recorded) is not proven alive.
    """
    import psutil

    pid, created = (info or {}).get("pid"), (info or {}).get("process_create_time")
    if not pid or created is None:
        return False
    try:
        p = psutil.Process(pid)
        same = abs(p.create_time() - float(created)) <= START_TIME_TOLERANCE_S
        return same and p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def format_duration(seconds: float | None) -> str:
    """'42 s', '4 min 10 s', '2 h 05 min'; 'unknown' for None."""
    if seconds is None:
        return "unknown"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def typical_pass_s(attempts: list[Attempt]) -> float | None:
    """Median wall time (s) of the finished attempts (start to end), None when none finished."""
    import statistics
    from datetime import datetime

    walls = [(datetime.fromisoformat(a.end_time) - datetime.fromisoformat(a.start_time)).total_seconds()
             for a in attempts if a.status in FINISHED and a.start_time and a.end_time]
    return statistics.median(walls) if walls else None


def etas(done: int, total: int, rate: float | None, elapsed_s: float, later_passes: int,
         typical_s: float | None) -> tuple[float | None, float | None]:
    """(pass ETA, campaign ETA) in seconds, None while unknown (no items/s yet). The pass's ETA
    is its items left at its current items/s; the campaign's adds ``later_passes`` x
    ``typical_s`` (the median wall time of the finished passes; None: this pass's own projected
    wall time). The one rule for the headless progress line and the Runs screen."""
    pass_eta = (total - done) / rate if rate and rate > 0 and total else None
    typical = typical_s if typical_s is not None else \
        (elapsed_s + pass_eta if pass_eta is not None else None)
    campaign_eta = pass_eta + later_passes * typical if pass_eta is not None and typical is not None else None
    return pass_eta, campaign_eta


def running_eta_text(attempts: list[Attempt], planned: int, finished: int, now: float) -> str:
    """'pass ETA 21 s, campaign ETA 4 min 10 s' for the attempt now running ('' when none runs),
    from the journal's live progress (items done, items/s) and ``etas``; ``now``: epoch s."""
    from datetime import datetime

    from lab.passes.events import PassStatus

    running = [(a, a.start_time) for a in attempts if a.status == PassStatus.RUNNING and a.start_time]
    if not running:
        return ""
    a, start = running[-1]
    elapsed = max(0.0, now - datetime.fromisoformat(start).timestamp())
    later = max(0, planned - finished - 1)
    pass_eta, campaign_eta = etas(a.items_completed or 0, a.items_total or 0, a.items_per_s, elapsed, later,
                                  typical_pass_s(attempts))
    return f"pass ETA {format_duration(pass_eta)}, campaign ETA {format_duration(campaign_eta)}"


def campaign_status(campaign_dir: Path, journal: Journal | None = None) -> dict:
    """{dir, state, planned, finished, attempts, orchestrator, alive} for a campaign folder;
    ``attempts``: the journal's typed attempts (lab.passes.records.Attempt, each with its
    ``verdict``), in schedule order.

    ``state``: running (live orchestrator), paused, stopped, finished, interrupted (the
    journal says running but its orchestrator is gone) or not started.
    """
    own = journal is None
    path = Path(campaign_dir) / "journal.sqlite"
    if own and not path.is_file():  # nothing ran yet: read nothing, create nothing
        return {"dir": str(campaign_dir), "state": CampaignState.NOT_STARTED, "planned": 0, "finished": 0,
                "attempts": [], "orchestrator": {}, "alive": False}
    j = journal or Journal.open_read_only(path)
    try:
        plan = j.plan()
        attempts = j.attempts()
        info = j.get_control("orchestrator", {}) or {}
        state = j.get_control("state", CampaignState.NOT_STARTED)
    finally:
        if own:
            j.close()
    alive = orchestrator_alive(info)
    if state == CampaignState.RUNNING and not alive:
        state = CampaignState.INTERRUPTED
    finished_slots = {a.seq for a in attempts if a.status in FILLS_SLOT}
    return {"dir": str(campaign_dir), "state": state, "planned": len(plan),
            "finished": len(finished_slots), "attempts": attempts, "orchestrator": info,
            "alive": alive}


def pass_processes(campaign_dir: Path) -> list[dict]:
    """Live pass processes of this campaign folder on this host (``python -m lab.passes.*`` with a
    pass file under ``<campaign folder>/passes/``, a local launcher's pass or a multi-card worker,
    or any process whose environment names such a pass folder in lab.facts.constants.PASS_ENV:
    what the user's code started, a daemon that left the pass's session included):
    [{pid, pass_id, cmd}]. A pass process nothing watches (its orchestrator gone) shows here."""
    import psutil

    from lab.facts.constants import PASS_ENV

    prefixes = tuple({str(Path(campaign_dir) / "passes") + "/", str(Path(campaign_dir).resolve() / "passes") + "/"})
    marks = tuple(f"{PASS_ENV}={x}".encode() for x in prefixes)
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        arg = next((c for c in cmd if c.startswith(prefixes)), None)
        if arg and any(c.startswith("lab.passes.") for c in cmd):
            rest = next(arg[len(x):] for x in prefixes if arg.startswith(x))
            out.append({"pid": p.info["pid"], "pass_id": rest.split("/")[0], "cmd": " ".join(cmd)[:200]})
            continue
        try:
            with open(f"/proc/{p.info['pid']}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:  # another user's process, or gone
            continue
        mark = next((e for e in env if e.startswith(marks)), None)
        if mark is not None:
            rest = next(mark[len(m):] for m in marks if mark.startswith(m)).decode("utf-8", "replace")
            out.append({"pid": p.info["pid"], "pass_id": rest.split("/")[0], "cmd": " ".join(cmd)[:200]})
    return out


def stop_pass_processes(campaign_dir: Path) -> list[dict]:
    """Kill every pass process of ``pass_processes`` (and its children); returns those killed.
    Called by an orchestrator before its first pass: no other orchestrator watches them then."""
    import psutil

    found = pass_processes(campaign_dir)
    procs = []
    for f in found:
        try:
            p = psutil.Process(f["pid"])
            procs += [p, *p.children(recursive=True)]
        except psutil.Error:
            pass
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)
    return found
