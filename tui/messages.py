"""Every message the UI's thread workers post (typed; nothing in a thread touches a widget).

High-rate messages (journal snapshots, telemetry, log tails) carry a whole state, not a
delta, so a newer one can replace an older one still in the queue (``can_replace``): the
UI stays responsive with hundreds of progress events per second.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from textual.message import Message

from lab.service.campaign_records import ArchiveMade
from lab.service.environment_facts import EnvironmentFacts
from lab.service.live import CampaignStatus, LiveFailure, LiveFigures, PlannedSlot
from lab.service.views import ComparisonView, CostView, LockResult, PlanView, ProtocolInfo, ReportBuilt
from tui.widgets.telemetry import HostSample


class CampaignSnapshot(Message):
    """The campaign as the journal says now (posted by the journal poller).

    ``status``: the campaign's status (lab.service.live.CampaignStatus: state, planned, finished,
    attempts, orchestrator, alive), or None when no campaign folder exists yet for this protocol
    version. ``plan``: planned slots. ``live_failures``: {pass_id: lab.service.live.LiveFailure}
    from oom/error events, known before the pass row is finished.
    ``events``: the last event lines (text). ``log_tail``: (pass_id, text) of the selected
    pass's log.txt. ``live_served``: {pass_id: a server pass's answers so far, its LiveFigures}
    (lab.service.live.JournalFeed.read).
    """

    def __init__(self, campaign_dir: Path | None, status: CampaignStatus | None, plan: Sequence[PlannedSlot],
                 live_failures: Mapping[str, LiveFailure], events: list[str], log_tail: tuple[str, str],
                 live_served: Mapping[str, LiveFigures] | None = None) -> None:
        super().__init__()
        self.campaign_dir = campaign_dir
        self.status = status
        self.plan = plan
        self.live_failures = live_failures
        self.live_served = live_served or {}
        self.events = events
        self.log_tail = log_tail

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CampaignSnapshot)


class PassFailed(Message):
    """An oom/error event or a failed pass row, seen for the first time (never coalesced)."""

    def __init__(self, pass_id: str, kind: str, items_done: int | None, detail: str) -> None:
        super().__init__()
        self.pass_id = pass_id
        self.kind = kind
        self.items_done = items_done
        self.detail = detail


class TelemetrySample(Message):
    """One host reading: ``sample`` from a telemetry source (see tui.widgets.telemetry), or None
    with ``error`` (one line) when the source failed."""

    def __init__(self, sample: HostSample | None, error: str = "") -> None:
        super().__init__()
        self.sample = sample
        self.error = error

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, TelemetrySample)


class EnvironmentReady(Message):
    """Environment facts and checks (screen 1); ``facts`` None when probing failed, with the
    one-line ``error``."""

    def __init__(self, facts: EnvironmentFacts | None, error: str = "") -> None:
        super().__init__()
        self.facts = facts
        self.error = error


class ProtocolLoaded(Message):
    """The campaign file parsed, with its lock state; ``error`` is one line when it failed."""

    def __init__(self, info: ProtocolInfo | None, error: str = "") -> None:
        super().__init__()
        self.info = info
        self.error = error


class ProtocolLocked(Message):
    """A lock was recorded (or found unchanged): ``result`` says which version and whether it is
    new; None with ``error``, one line, when the lock was refused."""

    def __init__(self, result: LockResult | None, error: str = "") -> None:
        super().__init__()
        self.result = result
        self.error = error


class PlanReady(Message):
    """Variants, rotated schedule and memory feasibility per variant (screen 3)."""

    def __init__(self, plan: PlanView | None, error: str = "") -> None:
        super().__init__()
        self.plan = plan
        self.error = error


class CampaignStarted(Message):
    """The detached orchestrator was spawned (or refused, with ``error``)."""

    def __init__(self, campaign_dir: Path | None, detail: str, error: str = "") -> None:
        super().__init__()
        self.campaign_dir = campaign_dir
        self.detail = detail
        self.error = error


class ControlSent(Message):
    """A pause or stop flag was written to the journal."""

    def __init__(self, flag: str, error: str = "") -> None:
        super().__init__()
        self.flag = flag
        self.error = error


class ResultsReady(Message):
    """``build_report`` output (lab.service.views.ReportBuilt: rows, one ``VariantSummary`` per
    variant, the report folder), or None with ``error`` (one line)."""

    def __init__(self, report: ReportBuilt | None, error: str = "") -> None:
        super().__init__()
        self.report = report
        self.error = error


class CostReady(Message):
    """Quote text, cost per validated corpus and decision note (screen 6)."""

    def __init__(self, cost: CostView | None, error: str = "") -> None:
        super().__init__()
        self.cost = cost
        self.error = error


class ArchiveReady(Message):
    """An assembled and verified archive: path, size_bytes, sha256, verification; or None with
    ``error`` (one line) and ``unfinished`` (the campaign is not finished: a partial archive is
    the way on)."""

    def __init__(self, archive: ArchiveMade | None, error: str = "", unfinished: bool = False) -> None:
        super().__init__()
        self.archive = archive
        self.error = error
        self.unfinished = unfinished


class CompareReady(Message):
    """A comparison of rentals (screen 8): ``result`` (lab.service.views.ComparisonView), or None
    with ``error`` (one line)."""

    def __init__(self, result: ComparisonView | None, error: str = "") -> None:
        super().__init__()
        self.result = result
        self.error = error
